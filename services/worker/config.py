"""Decode worker settings, read from the environment once at start (the node manager sets them)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from strata import defaults
from strata.engine.engine import EngineConfig
from strata.engine.step_meter import PROFILES_DIR, find_profile
from strata.envconfig import ConfigError, env_int, env_str


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

    @classmethod
    def from_env(cls) -> WorkerConfig:
        threads = env_int("STRATA_TORCH_THREADS", max(1, (os.cpu_count() or 2) - 1), minimum=1)
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
        )
