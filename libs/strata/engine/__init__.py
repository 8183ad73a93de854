"""The decode engine: model, loaders, paged KV block pool, batch scheduler, sampler, runner."""
