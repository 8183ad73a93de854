"""Strata: a multi-tenant LLM-serving system. The library holds all logic; services are thin."""

__version__ = "0.1.0"
