"""Placement planner settings, read from the environment once at start."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from strata import defaults
from strata.envconfig import ConfigError, env_float, env_int, env_list, env_str, security
from strata.security.settings import UNSECURED, SecuritySettings

POLICIES = ("batch-aware", "ffd")
# Engine profiles shipped with the code (`strata profile` writes more): CPU ones for the models
# the stack runs by default.
BUNDLED_PROFILES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "libs", "strata", "sim", "profiles")


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
    policy: str = "batch-aware"          # batch-aware | ffd (the baseline, by memory only)
    metrics_addr: str = defaults.METRICS_ADDR     # arrival curves (batch-aware)
    window_s: float = 300.0              # arrival curve window
    windows: int = 12                    # curve_days = 0: the last `windows` windows
    curve_days: int = 0                  # > 0: the UTC day cut into windows, over these days
    burst_s: float = 30.0                # replicas are sized for each window's busiest slice
                                         # of this many seconds (divides window_s; 0: means)
    profiles: str = BUNDLED_PROFILES     # engine profiles: a JSON file or a folder of them
    load_bytes_per_s: float = 2e9        # migration cost: weights onto a new node ...
    warmup_s: float = 30.0               # ... plus warm-up and a cold prefix cache ...
    horizon_s: float = 0.0               # ... over this horizon (0: window_s x windows)
    max_moves: int = 8                   # optional moves per round
    lookahead_windows: int = 0           # > 0 (daily curves): judge only the coming windows
    security: SecuritySettings = UNSECURED

    def __post_init__(self) -> None:
        if not self.models:
            raise ConfigError("STRATA_MODELS must name at least one model")
        if self.replan_interval_s <= 0:
            raise ConfigError(f"STRATA_REPLAN_INTERVAL_S must be positive, got "
                              f"{self.replan_interval_s}")
        if self.policy not in POLICIES:
            raise ConfigError(f"STRATA_PLACEMENT_POLICY must be one of {', '.join(POLICIES)}, "
                              f"got {self.policy!r}")
        for var, value in (("STRATA_PLACEMENT_WINDOW_S", self.window_s),
                           ("STRATA_PLACEMENT_LOAD_BYTES_PER_S", self.load_bytes_per_s)):
            if not value > 0:
                raise ConfigError(f"{var} must be positive, got {value}")
        if self.curve_days and abs(86_400 / self.window_s - round(86_400 / self.window_s)) > 1e-9:
            raise ConfigError(f"STRATA_PLACEMENT_WINDOW_S must divide a day (86400 s) when "
                              f"STRATA_PLACEMENT_CURVE_DAYS > 0, got {self.window_s}")
        if self.burst_s < 0 or self.burst_s > self.window_s or (self.burst_s and abs(
                self.window_s / self.burst_s - round(self.window_s / self.burst_s)) > 1e-9):
            raise ConfigError(f"STRATA_PLACEMENT_BURST_S must be 0 (window means only) or "
                              f"divide STRATA_PLACEMENT_WINDOW_S ({self.window_s:g} s), got "
                              f"{self.burst_s:g}")
        if self.lookahead_windows and not self.curve_days:
            raise ConfigError("STRATA_PLACEMENT_LOOKAHEAD_WINDOWS needs daily arrival curves "
                              "(STRATA_PLACEMENT_CURVE_DAYS > 0): only a time-of-day window "
                              "says which windows come next")
        if self.lookahead_windows > round(86_400 / self.window_s):
            raise ConfigError(f"STRATA_PLACEMENT_LOOKAHEAD_WINDOWS must be at most the windows "
                              f"in a day ({round(86_400 / self.window_s)}), got "
                              f"{self.lookahead_windows}")
        if self.warmup_s < 0 or self.horizon_s < 0:
            raise ConfigError(f"STRATA_PLACEMENT_WARMUP_S and STRATA_PLACEMENT_HORIZON_S must "
                              f"not be negative, got {self.warmup_s} and {self.horizon_s}")

    @property
    def planning_horizon_s(self) -> float:
        """How long a plan is expected to hold: the configured horizon, else the curve's span."""
        if self.horizon_s:
            return self.horizon_s
        if self.lookahead_windows:
            return self.window_s * self.lookahead_windows
        return 86_400.0 if self.curve_days else self.window_s * self.windows

    @classmethod
    def from_env(cls) -> PlacementConfig:
        models = tuple(dict.fromkeys(env_list("STRATA_MODELS", defaults.DEFAULT_MODEL)))
        return cls(
            bind=env_str("STRATA_PLACEMENT_BIND", defaults.PLACEMENT_ADDR),
            # the first of several side by side: each knows every node
            scheduler_addr=env_list("STRATA_SCHEDULER_ADDR", defaults.SCHEDULER_ADDR)[0],
            otlp_endpoint=env_str("STRATA_OTLP_ENDPOINT", ""),
            models=models,
            replicas=parse_replicas(env_str("STRATA_REPLICAS", "1"), models),
            memory_overrides=parse_memory_overrides(env_str("STRATA_MODEL_MEMORY_BYTES", "")),
            replan_interval_s=env_float("STRATA_REPLAN_INTERVAL_S", 10.0),
            load_timeout_s=env_float("STRATA_PLACEMENT_LOAD_TIMEOUT_S", 300.0),
            drain_timeout_ms=env_int("STRATA_PLACEMENT_DRAIN_TIMEOUT_MS", 30_000, minimum=0),
            policy=env_str("STRATA_PLACEMENT_POLICY", "batch-aware"),
            metrics_addr=env_str("STRATA_METRICS_ADDR", defaults.METRICS_ADDR),
            window_s=env_float("STRATA_PLACEMENT_WINDOW_S", 300.0),
            windows=env_int("STRATA_PLACEMENT_WINDOWS", 12, minimum=1),
            curve_days=env_int("STRATA_PLACEMENT_CURVE_DAYS", 0, minimum=0),
            burst_s=env_float("STRATA_PLACEMENT_BURST_S", 30.0),
            profiles=env_str("STRATA_PLACEMENT_PROFILES", BUNDLED_PROFILES),
            load_bytes_per_s=env_float("STRATA_PLACEMENT_LOAD_BYTES_PER_S", 2e9),
            warmup_s=env_float("STRATA_PLACEMENT_WARMUP_S", 30.0),
            horizon_s=env_float("STRATA_PLACEMENT_HORIZON_S", 0.0),
            max_moves=env_int("STRATA_PLACEMENT_MAX_MOVES", 8, minimum=0),
            lookahead_windows=env_int("STRATA_PLACEMENT_LOOKAHEAD_WINDOWS", 0, minimum=0),
            security=security(),
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
