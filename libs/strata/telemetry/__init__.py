"""OpenTelemetry setup, span/attribute names, OTLP decoding."""
