"""The KV cache as a tiered store: block identity (hash chain), tiers, and the tier-store client."""
