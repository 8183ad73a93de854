"""Gateway settings, read from the environment once at start."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from strata import defaults
from strata.envconfig import ConfigError, data_dir, db_url, env_float, env_int, env_str
from strata.eval.sla import SlaTable, parse_classes


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    bind: str
    scheduler_addr: str
    db_url: str
    otlp_endpoint: str
    rate_limit_rps: float        # per tenant, sustained, unless the tenant has its own rate
    rate_limit_burst: float
    request_timeout_s: float     # applied when the caller sets no deadline
    block_size: int = 16         # the workers' KV block size: prompts are hashed in these blocks
    data_dir: str = ""           # STRATA_DATA_DIR: holds the admin key file
    # STRATA_TENANT_POLICY_TTL_S: how long a tenant's policy is cached; a change made through
    # another gateway holds here within it (through this one, at once)
    tenant_policy_ttl_s: float = 2.0
    # STRATA_SLA_CLASSES (strata.eval.sla spec): the classes stored when the SQL table is empty
    sla_seed: SlaTable = field(default_factory=SlaTable)

    @property
    def admin_key_file(self) -> str:
        return os.path.join(self.data_dir, defaults.ADMIN_KEY_FILE)

    @classmethod
    def from_env(cls) -> GatewayConfig:
        ttl = env_float("STRATA_TENANT_POLICY_TTL_S", 2.0)
        if not ttl >= 0:
            raise ConfigError(f"STRATA_TENANT_POLICY_TTL_S must be 0 or more seconds, got {ttl}")
        try:
            seed = parse_classes(env_str("STRATA_SLA_CLASSES", " "))
        except ValueError as err:
            raise ConfigError(f"STRATA_SLA_CLASSES: {err}") from None
        return cls(
            bind=env_str("STRATA_GATEWAY_BIND", defaults.GATEWAY_ADDR),
            scheduler_addr=env_str("STRATA_SCHEDULER_ADDR", defaults.SCHEDULER_ADDR),
            db_url=db_url(),
            otlp_endpoint=env_str("STRATA_OTLP_ENDPOINT", ""),
            rate_limit_rps=env_float("STRATA_RATE_LIMIT_RPS", 50.0),
            rate_limit_burst=env_float("STRATA_RATE_LIMIT_BURST", 100.0),
            request_timeout_s=env_float("STRATA_REQUEST_TIMEOUT_S", 300.0),
            block_size=env_int("STRATA_BLOCK_SIZE", 16, minimum=1),
            data_dir=data_dir(),
            tenant_policy_ttl_s=ttl,
            sla_seed=seed,
        )
