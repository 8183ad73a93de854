"""Metrics collector: OTLP trace receiver, SQL span store, per-tenant reports over gRPC."""
