"""Placement planner settings: flags, STRATA_* variables, defaults (strata.core.settings)."""

from __future__ import annotations

import enum
import os

from pydantic import Field, field_validator, model_validator

from strata.core import defaults
from strata.core.settings import CommaList
from strata.security.settings import SecurityFields

PROG = "python -m services.placement"
# Engine profiles shipped with the code (`strata profile` writes more): CPU ones for the models
# the stack runs by default.
BUNDLED_PROFILES = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "libs",
    "strata",
    "core",
    "profiles",
)


class PolicyName(enum.StrEnum):
    BATCH_AWARE = "batch-aware"  # packs by arrival curves and engine profiles, red line
    FFD = "ffd"  # first-fit-decreasing by memory (the baseline)


def _divides(whole: float, part: float) -> bool:
    return abs(whole / part - round(whole / part)) <= 1e-9


class PlacementConfig(SecurityFields):
    """The placement planner: which models run where and how many replicas, replanned on a
    period and on demand, applied make-before-break. --print-config prints the resolved
    settings and exits."""

    placement_bind: str = Field(defaults.PLACEMENT_ADDR, description="host:port to listen on")
    placement_prometheus_bind: str = Field(
        "",
        description="host:port of the Prometheus /metrics endpoint (empty: none; compose and "
        f"make run use {defaults.PLACEMENT_PROMETHEUS_ADDR.rsplit(':', 1)[1]})",
    )
    scheduler_addr: CommaList = Field(
        (defaults.SCHEDULER_ADDR,),
        min_length=1,
        description=(
            "the schedulers (comma-separated); the planner reads the first, each knows every node"
        ),
    )
    metrics_addr: str = Field(
        defaults.METRICS_ADDR, description="the metrics collector, for arrival curves (batch-aware)"
    )
    otlp_endpoint: str = Field(
        "", description="OTLP/gRPC receiver for this service's spans; empty: none"
    )
    models: CommaList = Field(
        (defaults.DEFAULT_MODEL,), min_length=1, description="the models to place, comma-separated"
    )
    replicas: str = Field(
        "1",
        description="replicas per model: one count for all ('2') or "
        "per model ('a=2,b=1', others 1)",
    )
    model_memory_bytes: str = Field(
        "",
        description="'name=bytes,...': memory a replica needs, "
        "for models the built-in table does not know",
    )
    replan_interval_s: float = Field(10.0, gt=0, description="seconds between replanning rounds")
    placement_rpc_timeout_s: float = Field(
        5.0, gt=0, description="deadline of ListNodes, ListModels and UnloadModel calls"
    )
    placement_load_timeout_s: float = Field(
        300.0, gt=0, description="deadline of LoadModel (it may read weights before answering)"
    )
    placement_drain_timeout_ms: int = Field(
        30_000, ge=0, description="running requests get this long when a replica unloads"
    )
    placement_policy: PolicyName = Field(
        PolicyName.BATCH_AWARE, description="batch-aware | ffd (the baseline, by memory only)"
    )
    placement_window_s: float = Field(300.0, gt=0, description="arrival curve window")
    placement_windows: int = Field(
        12, ge=1, description="the last this many windows (when STRATA_PLACEMENT_CURVE_DAYS is 0)"
    )
    placement_curve_days: int = Field(
        0,
        ge=0,
        description="> 0: the UTC day cut into "
        "windows, requests of this many days folded by time "
        "of day",
    )
    placement_burst_s: float = Field(
        30.0,
        ge=0,
        description="replicas are sized for each "
        "window's busiest slice of this long (divides the "
        "window; 0: means only)",
    )
    placement_profiles: str = Field(
        BUNDLED_PROFILES,
        description="engine profiles: a JSON file or a folder of them ('none': none)",
    )
    placement_load_bytes_per_s: float = Field(
        2e9, gt=0, description="migration cost: weights loaded onto a new node at this rate ..."
    )
    placement_warmup_s: float = Field(
        30.0, ge=0, description="... plus this warm-up and a cold prefix cache ..."
    )
    placement_horizon_s: float = Field(
        0.0, ge=0, description="... over this horizon (0: the curves' span)"
    )
    placement_max_moves: int = Field(8, ge=0, description="optional moves per round")
    placement_lookahead_windows: int = Field(
        0, ge=0, description="> 0 (daily curves): judge only the coming windows"
    )

    @field_validator("models")
    @classmethod
    def _unique(cls, models: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(models))

    @field_validator("model_memory_bytes")
    @classmethod
    def _memory(cls, raw: str) -> str:
        parse_memory_overrides(raw)
        return raw

    @model_validator(mode="after")
    def _consistent(self) -> PlacementConfig:
        parse_replicas(self.replicas, self.models)
        window, burst = self.placement_window_s, self.placement_burst_s
        if self.placement_curve_days and not _divides(86_400, window):
            raise ValueError(
                f"STRATA_PLACEMENT_WINDOW_S must divide a day (86400 s) when "
                f"STRATA_PLACEMENT_CURVE_DAYS > 0, got {window}"
            )
        if burst > window or (burst and not _divides(window, burst)):
            raise ValueError(
                f"STRATA_PLACEMENT_BURST_S must be 0 (window means only) or "
                f"divide STRATA_PLACEMENT_WINDOW_S ({window:g} s), got {burst:g}"
            )
        if self.placement_lookahead_windows and not self.placement_curve_days:
            raise ValueError(
                "STRATA_PLACEMENT_LOOKAHEAD_WINDOWS needs daily arrival curves "
                "(STRATA_PLACEMENT_CURVE_DAYS > 0): only a time-of-day window "
                "says which windows come next"
            )
        if self.placement_lookahead_windows > round(86_400 / window):
            raise ValueError(
                f"STRATA_PLACEMENT_LOOKAHEAD_WINDOWS must be at most the windows "
                f"in a day ({round(86_400 / window)}), got "
                f"{self.placement_lookahead_windows}"
            )
        return self

    @property
    def replica_counts(self) -> dict[str, int]:
        return parse_replicas(self.replicas, self.models)

    @property
    def memory_overrides(self) -> dict[str, int]:
        return parse_memory_overrides(self.model_memory_bytes)

    @property
    def planning_horizon_s(self) -> float:
        """How long a plan is expected to hold: the configured horizon, else the curve's span."""
        if self.placement_horizon_s:
            return self.placement_horizon_s
        if self.placement_lookahead_windows:
            return self.placement_window_s * self.placement_lookahead_windows
        return (
            86_400.0
            if self.placement_curve_days
            else self.placement_window_s * self.placement_windows
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
            raise ValueError(
                f"STRATA_REPLICAS names {name}, which is not in STRATA_MODELS ({', '.join(models)})"
            )
        counts[name] = _count("STRATA_REPLICAS", value, minimum=0)
    return counts


def parse_memory_overrides(raw: str) -> dict[str, int]:
    """STRATA_MODEL_MEMORY_BYTES: "name=bytes,..."; empty = use the built-in table only."""
    return {
        name: _count("STRATA_MODEL_MEMORY_BYTES", value, minimum=1)
        for name, value in _pairs("STRATA_MODEL_MEMORY_BYTES", raw)
    }


def _pairs(var: str, raw: str) -> list[tuple[str, str]]:
    pairs = []
    for item in (i.strip() for i in raw.split(",")):
        if not item:
            continue
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"{var} entries must look like name=number, got {item!r}")
        pairs.append((name.strip(), value.strip()))
    return pairs


def _count(var: str, value: str, minimum: int) -> int:
    try:
        count = int(value)
    except ValueError:
        raise ValueError(f"{var} needs an integer, got {value!r}") from None
    if count < minimum:
        raise ValueError(f"{var} values must be at least {minimum}, got {count}")
    return count
