"""Decode worker settings, read from the environment once at start (the node manager sets them)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from strata import defaults
from strata.engine.engine import EngineConfig
from strata.engine.sparse.config import SparseConfig, parse_budget
from strata.engine.step_meter import PROFILES_DIR, find_profile
from strata.envconfig import ConfigError, env_bool, env_float, env_int, env_str, security
from strata.security.settings import UNSECURED, SecuritySettings


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    bind: str
    model: str
    replica_id: str
    kvstore_addr: str            # empty = no KV tier store
    otlp_endpoint: str
    torch_threads: int
    engine: EngineConfig
    # The served model's solo step profile, priced against each step to estimate interference
    # (strata.engine.step_meter); empty: none, and the interference counters stay at zero.
    profile_path: str = ""
    security: SecuritySettings = UNSECURED

    @classmethod
    def from_env(cls) -> WorkerConfig:
        threads = env_int("STRATA_TORCH_THREADS", max(1, (os.cpu_count() or 2) - 1), minimum=1)
        sparse = sparse_from_env()
        try:
            engine = EngineConfig(
                block_size=env_int("STRATA_BLOCK_SIZE", 16, minimum=1),
                kv_cache_bytes=env_int("STRATA_KV_CACHE_BYTES", 256 << 20, minimum=1),
                num_blocks=env_int("STRATA_KV_BLOCKS", 0, minimum=0),
                max_batched_tokens=env_int("STRATA_MAX_BATCHED_TOKENS", 2048, minimum=1),
                max_seqs=env_int("STRATA_MAX_SEQS", 32, minimum=1),
                device=env_str("STRATA_DEVICE", "cpu"),
                dtype=env_str("STRATA_DTYPE", "float32"),
                attention_kernel=env_str("STRATA_ATTENTION_KERNEL", "cpp"),
                sparse=sparse,
            )
        except ValueError as err:
            raise ConfigError(f"engine settings: {err}") from None
        model = env_str("STRATA_MODEL", defaults.DEFAULT_MODEL)
        # A folder (<model>-<device type>.json in it) suits a node's environment, which every
        # worker inherits whatever model it serves; a file names one model's profile.
        profile = env_str("STRATA_PROFILE_PATH", PROFILES_DIR)
        if os.path.isdir(profile):
            profile = find_profile(model, engine.device, profile)
        elif not os.path.isfile(profile):
            raise ConfigError(f"STRATA_PROFILE_PATH {profile!r} is neither a file nor a folder; "
                              f"point it at an engine profile written by `strata profile` or a "
                              f"folder of them named <model>-<device>.json, or leave it unset")
        return cls(
            bind=env_str("STRATA_WORKER_BIND"),
            model=model,
            replica_id=env_str("STRATA_REPLICA_ID", "r0"),
            kvstore_addr=env_str("STRATA_KVSTORE_ADDR", ""),
            otlp_endpoint=env_str("STRATA_OTLP_ENDPOINT", ""),
            torch_threads=threads,
            engine=engine,
            profile_path=profile,
            security=security(),
        )


def sparse_from_env() -> SparseConfig:
    """The sparse decode path's settings. STRATA_SPARSE sets the default for requests that leave
    GenerationSpec.sparse unset; it is off, because dense attention is exact and the sparse path
    pays only where a model's attention is concentrated: on SmolLM2-135M (the default model, 8k
    context) a 12.5% budget leaves out about a quarter of the attention mass on average, so the
    trust check sends most layers back to full attention. A request may still ask for it: the
    context index is kept either way."""
    try:
        blocks, fraction = parse_budget(env_str("STRATA_SPARSE_BUDGET", "0.125"))
    except ValueError as err:
        raise ConfigError(f"STRATA_SPARSE_BUDGET: {err}") from None
    try:
        return SparseConfig(
            enabled=env_bool("STRATA_SPARSE", False),
            min_context=env_int("STRATA_SPARSE_MIN_CONTEXT", 4096, minimum=1),
            budget_blocks=blocks, budget_fraction=fraction,
            sink_blocks=env_int("STRATA_SPARSE_SINK_BLOCKS", 1, minimum=0),
            window_blocks=env_int("STRATA_SPARSE_WINDOW_BLOCKS", 4, minimum=1),
            threshold=env_float("STRATA_SPARSE_THRESHOLD", 0.1),
            estimate=env_str("STRATA_SPARSE_ESTIMATE", "moment"),
            compensate=env_bool("STRATA_SPARSE_COMPENSATE", True))
    except ValueError as err:
        raise ConfigError(f"sparse decode settings (STRATA_SPARSE_*): {err}") from None
