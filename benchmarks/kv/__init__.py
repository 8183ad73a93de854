"""The KV tier benchmark (`make bench-kv`): the Mooncake trace scaled to the default model,
replayed device-only, tiered over a real KV tier store, and recomputing; docs/benchmarks/kv.md."""
