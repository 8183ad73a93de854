"""Metrics collector: OTLP trace receiver, node samples, SQL store, evaluation runs and layered
(request/node/cluster) reports over gRPC."""
