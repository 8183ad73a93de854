"""The decode engine benchmark (`make bench-engine`): offline, online and baseline phases.

Modules here import only the standard library at package level, so the vLLM runner can import
the shared result types from a separate virtual environment that has no strata installed.
"""
