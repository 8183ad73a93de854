"""The gateway's library: request validation, API-key authentication, prompt block hashes."""
