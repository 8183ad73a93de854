"""The gateway's library: request validation and API-key authentication."""
