"""`make bench-sparse`: the long-context sparse decode path against dense attention (issue 8)."""
