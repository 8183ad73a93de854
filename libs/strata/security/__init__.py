"""The cluster's credentials: generating them (secrets) and who may call what."""
