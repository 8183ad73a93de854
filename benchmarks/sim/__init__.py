"""Cluster simulator benchmark (`make bench-sim`): speed at 1,000 GPUs, exact-stepping
baseline, fidelity against the real stack."""
