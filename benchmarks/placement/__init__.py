"""make bench-placement: batch-aware placement against the batch-unaware baseline (strata.sim)."""
