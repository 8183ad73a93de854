"""Evaluation: metrics math (percentiles), trace readers, replay, layered reports."""
