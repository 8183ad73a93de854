"""Benchmarks: each writes JSON plus a short table to docs/benchmarks/, beside its baseline."""
