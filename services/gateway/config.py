"""Gateway settings, read from the environment once at start."""

from __future__ import annotations

from dataclasses import dataclass

from strata import defaults
from strata.envconfig import db_url, env_float, env_int, env_str


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    bind: str
    scheduler_addr: str
    db_url: str
    otlp_endpoint: str
    rate_limit_rps: float        # per tenant, sustained
    rate_limit_burst: float
    request_timeout_s: float     # applied when the caller sets no deadline
    block_size: int = 16         # the workers' KV block size: prompts are hashed in these blocks

    @classmethod
    def from_env(cls) -> GatewayConfig:
        return cls(
            bind=env_str("STRATA_GATEWAY_BIND", defaults.GATEWAY_ADDR),
            scheduler_addr=env_str("STRATA_SCHEDULER_ADDR", defaults.SCHEDULER_ADDR),
            db_url=db_url(),
            otlp_endpoint=env_str("STRATA_OTLP_ENDPOINT", ""),
            rate_limit_rps=env_float("STRATA_RATE_LIMIT_RPS", 50.0),
            rate_limit_burst=env_float("STRATA_RATE_LIMIT_BURST", 100.0),
            request_timeout_s=env_float("STRATA_REQUEST_TIMEOUT_S", 300.0),
            block_size=env_int("STRATA_BLOCK_SIZE", 16, minimum=1),
        )
