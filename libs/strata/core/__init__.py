"""What every layer shares, and nothing else: it imports no other strata package."""
