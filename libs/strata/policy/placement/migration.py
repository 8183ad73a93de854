"""Make-before-break migration and the drain of a replica that leaves: one state machine on an
injected clock, driven by the placement planner (wall clock, replica phases from the
scheduler) and by the simulator (virtual clock, phases from its heartbeats).

A plan that unloads replicas of a model while it loads the same model elsewhere (a move, or
replicas leaving a cordoned node) is a migration:

    LOADING   the new replicas load; the old ones keep serving
      |  every new replica READY in the scheduler's view (a worker warms up before it reports
      |  READY and the scheduler routes only to READY replicas, so routing has shifted)
      v
    DRAINING  the old replicas unload (each drains as `DrainRule` says)
      v
    DONE

    LOADING --a new replica FAILED, or none READY by the deadline--> ABANDONED: the old
    replicas keep serving and the next round decides again.

While a migration runs its old replicas are `leaving`: a planning round hides them from the
policy (their memory still counted), so a round in between neither counts them as replicas nor
unloads the new ones as surplus. Other unloads (surplus, undesired models) drain at once.
"""

from __future__ import annotations

import enum
import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from strata.policy.clock import Clock
from strata.policy.placement.ffd import Assignment, PlacementPlan, Unload
from strata.policy.registry import ReplicaPhase

ReplicaKey = tuple[str, str]  # (node id, replica id)


def routing_grace_s(heartbeat_interval_s: float) -> float:
    """How long a draining replica still takes requests: the scheduler may route by a
    heartbeat sent before the drain began for up to two heartbeat intervals."""
    return 2 * heartbeat_interval_s


@dataclass(slots=True, frozen=True)
class DrainRule:
    """When a draining replica may stop: once it has no request in flight and its routing grace
    has passed, or at the drain timeout whatever it holds (infinite: it waits for its work)."""

    routing_grace_s: float
    timeout_s: float = math.inf

    def settles_at(self, start: float) -> float:
        return start + min(self.routing_grace_s, self.timeout_s)

    def done(self, start: float, now: float, in_flight: int) -> bool:
        if now >= start + self.timeout_s:
            return True
        return in_flight == 0 and now >= self.settles_at(start)


class MigrationPhase(enum.StrEnum):
    LOADING = "loading"
    DRAINING = "draining"
    DONE = "done"
    ABANDONED = "abandoned"


@dataclass(slots=True, frozen=True)
class Retiring:
    """An old replica a migration unloads once its successors serve."""

    model: str
    node_id: str
    replica_id: str
    address: str
    reason: str


@dataclass(slots=True)
class Migration:
    model: str
    new: list[ReplicaKey]  # READY before any drain
    old: list[Retiring]
    deadline: float  # on the book's clock: not READY by then, abandoned
    phase: MigrationPhase = MigrationPhase.LOADING
    detail: str = ""
    version: int = 0  # the plan version that started it
    to_replica: dict[str, str] = field(default_factory=dict)  # old replica id -> its successor


@dataclass(slots=True, frozen=True)
class UnloadSplit:
    """A plan's unloads as a round applies them."""

    replaced: list[Unload]  # their model loads this round: migrations
    at_once: list[Unload]  # surplus or undesired: drain now


def split_unloads(
    plan: PlacementPlan, leaving: Iterable[ReplicaKey], also_replaced: Sequence[Unload] = ()
) -> UnloadSplit:
    """The unloads whose model also loads this round (and `also_replaced`, e.g. replicas on a
    cordoned node) wait for their successors; the rest drain at once, except replicas that a
    running migration already retires."""
    loading = {a.model for a in plan.loads}
    gone = set(leaving)
    replaced = [u for u in plan.unloads if u.model in loading] + list(also_replaced)
    at_once = [
        u for u in plan.unloads if u not in replaced and (u.node_id, u.replica_id) not in gone
    ]
    return UnloadSplit(replaced, at_once)


@dataclass(slots=True)
class Progress:
    """What one `MigrationBook.advance` decided."""

    drain: list[Migration] = field(default_factory=list)  # now DRAINING: unload their old ones
    abandoned: list[Migration] = field(default_factory=list)


class MigrationBook:
    """The migrations in flight and the recent ones (for the plan's report).

    Invariant: a migration is in `running` exactly while LOADING or DRAINING; its old replicas
    are `leaving()` for that long.
    """

    def __init__(self, clock: Clock, ready_timeout_s: float, history: int = 64) -> None:
        if not ready_timeout_s > 0:
            raise ValueError(f"ready_timeout_s must be positive, got {ready_timeout_s}")
        self._clock = clock
        self._ready_timeout_s = ready_timeout_s
        self.running: list[Migration] = []
        self.recent: deque[Migration] = deque(maxlen=history)
        self.started_total = 0  # migrations started in this process's life
        self.abandoned_total = 0  # of them, abandoned

    def leaving(self) -> dict[ReplicaKey, Retiring]:
        """Old replicas of migrations still running, by (node id, replica id)."""
        return {(r.node_id, r.replica_id): r for m in self.running for r in m.old}

    def in_flight(self, model: str) -> bool:
        return any(m.model == model for m in self.running)

    def start(
        self, loaded: Sequence[Assignment], replaced: Sequence[Retiring], version: int = 0
    ) -> list[Migration]:
        """One migration per model of `replaced` that has a successor among `loaded` (the loads
        that went through); a model without one keeps its old replicas and starts nothing."""
        started = []
        for model in sorted({r.model for r in replaced}):
            new = [(a.node_id, a.replica_id) for a in loaded if a.model == model]
            if not new:
                continue
            old = [r for r in replaced if r.model == model]
            successors = {r.replica_id: new[min(i, len(new) - 1)][1] for i, r in enumerate(old)}
            m = Migration(
                model,
                new,
                old,
                deadline=self._clock.now() + self._ready_timeout_s,
                version=version,
                to_replica=successors,
            )
            self.running.append(m)
            self.recent.append(m)
            started.append(m)
            self.started_total += 1
        return started

    def advance(self, phases: Mapping[ReplicaKey, ReplicaPhase] | None) -> Progress:
        """Judge every LOADING migration against the replica phases the scheduler sees (None:
        no view this time, only deadlines are judged). Migrations whose new replicas are all
        READY become DRAINING: unloading their old replicas is the caller's, who then calls
        `finish`. A FAILED new replica or a passed deadline abandons a migration."""
        now = self._clock.now()
        progress = Progress()
        for m in [m for m in self.running if m.phase is MigrationPhase.LOADING]:
            if phases is not None:
                waiting = [k for k in m.new if phases.get(k) is not ReplicaPhase.READY]
                if not waiting:
                    m.phase = MigrationPhase.DRAINING
                    progress.drain.append(m)
                    continue
                failed = [k for k in waiting if phases.get(k) is ReplicaPhase.FAILED]
                if failed:
                    self._abandon(
                        m, f"new replica {failed[0][1]} on {failed[0][0]} failed to start"
                    )
                    progress.abandoned.append(m)
                    continue
            if now >= m.deadline:
                self._abandon(m, f"new replica(s) not READY after {self._ready_timeout_s:g} s")
                progress.abandoned.append(m)
        return progress

    def loading(self) -> bool:
        """Some migration still waits for its new replicas."""
        return any(m.phase is MigrationPhase.LOADING for m in self.running)

    def finish(self, m: Migration, all_unloaded: bool = True) -> None:
        """The old replicas of a DRAINING migration were unloaded (`all_unloaded` False: some
        call failed, and the next round retries it)."""
        if m.phase is not MigrationPhase.DRAINING:
            raise ValueError(f"migration of {m.model} is {m.phase}, not draining")
        m.phase = MigrationPhase.DONE
        if not all_unloaded:
            m.detail = "an old replica did not unload; the next round retries it"
        self.running.remove(m)

    def cancel_all(self, why: str) -> None:
        """Every running migration ends as ABANDONED (shutdown)."""
        for m in list(self.running):
            self._abandon(m, why)

    def _abandon(self, m: Migration, why: str) -> None:
        m.phase, m.detail = MigrationPhase.ABANDONED, f"{why}; the old replica keeps serving"
        self.running.remove(m)
        self.abandoned_total += 1
