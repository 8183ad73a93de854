"""The simulator's events: one frozen dataclass per kind, each with its priority among the
events of one instant.

Events at one instant run in priority order: arrivals and admissions (ADMIT), then step ends
and starts (STEP), then heartbeats, samples, replans, loads and drains (PERIODIC); so requests
admitted at the instant a step ends join the next step, as the engine takes adds in between
steps. Events of one priority at one instant run in the order they were scheduled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from strata.sim.workload import SimRequest

if TYPE_CHECKING:
    from strata.sim.node import SimNode
    from strata.sim.replica import SimReplica

ADMIT, STEP, PERIODIC = 0, 1, 2


@dataclass(slots=True, frozen=True)
class Admit:
    """A routed request reaches its replica's node (after the inbound overheads)."""

    priority: ClassVar[int] = ADMIT
    replica: SimReplica
    request: SimRequest
    first_s: float  # its first attempt's arrival at the gateway
    route_id: str = ""  # the scheduler's decision (strata.policy.scheduling.arrivals)


@dataclass(slots=True, frozen=True)
class Retry:
    """A refused request tries again after the scheduler's retry-after."""

    priority: ClassVar[int] = ADMIT
    request: SimRequest
    first_s: float


@dataclass(slots=True, frozen=True)
class RunNext:
    """The node's GPU is free: pick the next step."""

    priority: ClassVar[int] = STEP
    node: SimNode


@dataclass(slots=True, frozen=True)
class StepEnd:
    """The node's step (or stretch, or wait) ends; stale when the node moved on (`gen`)."""

    priority: ClassVar[int] = STEP
    node: SimNode
    gen: int


@dataclass(slots=True, frozen=True)
class Heartbeat:
    priority: ClassVar[int] = PERIODIC
    node: SimNode


@dataclass(slots=True, frozen=True)
class Sample:
    priority: ClassVar[int] = PERIODIC
    node: SimNode


@dataclass(slots=True, frozen=True)
class KVReport:
    priority: ClassVar[int] = PERIODIC
    node: SimNode


@dataclass(slots=True, frozen=True)
class Replan:
    priority: ClassVar[int] = PERIODIC


@dataclass(slots=True, frozen=True)
class Loaded:
    """A replica placed by a replan has loaded and warmed up."""

    priority: ClassVar[int] = PERIODIC
    node: SimNode
    replica: SimReplica


@dataclass(slots=True, frozen=True)
class Settled:
    """A draining replica's routing grace has passed: the node may retire it."""

    priority: ClassVar[int] = PERIODIC
    node: SimNode


Event = (
    Admit | Retry | RunNext | StepEnd | Heartbeat | Sample | KVReport | Replan | Loaded | Settled
)
