"""Global scheduler (level 1): node registry kept alive by heartbeats, and request routing."""
