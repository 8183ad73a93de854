"""Placement planner settings, read from the environment once at start."""

from __future__ import annotations

from dataclasses import dataclass, field

from strata import defaults
from strata.envconfig import ConfigError, env_float, env_int, env_list, env_str


@dataclass(frozen=True, slots=True)
class PlacementConfig:
    bind: str = defaults.PLACEMENT_ADDR
    scheduler_addr: str = defaults.SCHEDULER_ADDR
    otlp_endpoint: str = ""
    models: tuple[str, ...] = (defaults.DEFAULT_MODEL,)
    replicas: dict[str, int] = field(default_factory=dict)         # model -> desired replicas
    memory_overrides: dict[str, int] = field(default_factory=dict)  # model -> bytes per replica
    replan_interval_s: float = 10.0
    rpc_timeout_s: float = 5.0           # ListNodes, ListModels, UnloadModel
    load_timeout_s: float = 300.0        # LoadModel may read weights from disk before answering
    drain_timeout_ms: int = 30_000       # running requests get this long when a replica unloads

    def __post_init__(self) -> None:
        if not self.models:
            raise ConfigError("STRATA_MODELS must name at least one model")
        if self.replan_interval_s <= 0:
            raise ConfigError(f"STRATA_REPLAN_INTERVAL_S must be positive, got "
                              f"{self.replan_interval_s}")

    @classmethod
    def from_env(cls) -> PlacementConfig:
        models = tuple(dict.fromkeys(env_list("STRATA_MODELS", defaults.DEFAULT_MODEL)))
        return cls(
            bind=env_str("STRATA_PLACEMENT_BIND", defaults.PLACEMENT_ADDR),
            scheduler_addr=env_str("STRATA_SCHEDULER_ADDR", defaults.SCHEDULER_ADDR),
            otlp_endpoint=env_str("STRATA_OTLP_ENDPOINT", ""),
            models=models,
            replicas=parse_replicas(env_str("STRATA_REPLICAS", "1"), models),
            memory_overrides=parse_memory_overrides(env_str("STRATA_MODEL_MEMORY_BYTES", "")),
            replan_interval_s=env_float("STRATA_REPLAN_INTERVAL_S", 10.0),
            load_timeout_s=env_float("STRATA_PLACEMENT_LOAD_TIMEOUT_S", 300.0),
            drain_timeout_ms=env_int("STRATA_PLACEMENT_DRAIN_TIMEOUT_MS", 30_000, minimum=0),
        )


def parse_replicas(raw: str, models: tuple[str, ...]) -> dict[str, int]:
    """STRATA_REPLICAS: one count for every model ("2") or per model ("a=2,b=1", others 1)."""
    raw = raw.strip()
    if "=" not in raw:
        count = _count("STRATA_REPLICAS", raw or "1", minimum=0)
        return {m: count for m in models}
    counts = dict.fromkeys(models, 1)
    for name, value in _pairs("STRATA_REPLICAS", raw):
        if name not in counts:
            raise ConfigError(f"STRATA_REPLICAS names {name}, which is not in STRATA_MODELS "
                              f"({', '.join(models)})")
        counts[name] = _count("STRATA_REPLICAS", value, minimum=0)
    return counts


def parse_memory_overrides(raw: str) -> dict[str, int]:
    """STRATA_MODEL_MEMORY_BYTES: "name=bytes,..."; empty = use the built-in table only."""
    return {name: _count("STRATA_MODEL_MEMORY_BYTES", value, minimum=1)
            for name, value in _pairs("STRATA_MODEL_MEMORY_BYTES", raw)}


def _pairs(var: str, raw: str) -> list[tuple[str, str]]:
    pairs = []
    for item in (i.strip() for i in raw.split(",")):
        if not item:
            continue
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"{var} entries must look like name=number, got {item!r}")
        pairs.append((name.strip(), value.strip()))
    return pairs


def _count(var: str, value: str, minimum: int) -> int:
    try:
        count = int(value)
    except ValueError:
        raise ConfigError(f"{var} needs an integer, got {value!r}") from None
    if count < minimum:
        raise ConfigError(f"{var} values must be at least {minimum}, got {count}")
    return count
