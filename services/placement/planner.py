"""The replan loop: read the cluster, plan with the configured policy, apply make-before-break.

One round: ListNodes + ListModels from the scheduler, the arrival curves from the metrics
collector (batch-aware), the policy over the live, uncordoned nodes, then the plan applied
through the node managers:

    loads        LoadModel at once, unless the node has no room until its own unloads finish
    replacements the unloads of a model that also loads this round (moves, replicas leaving a
                 cordoned node) drain only once the new replicas are READY (the migration state
                 machine of strata.policy.placement.migration, driven by services.placement
                 .migrate), so a model never goes without a serving replica
    other unloads (surplus, undesired models) drain at once, then the loads that waited for room

A node that fails a call is logged with its id and simply shows up again as a difference next
round (services.placement.actions). The planner remembers which replicas it placed, so it
unloads only those and surplus replicas of its own models, never replicas someone else loaded.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import grpc
from opentelemetry import trace

from services.placement import convert
from services.placement.actions import NodeActions, NodeClients
from services.placement.curves_source import MetricsCurves
from services.placement.lease import NotHolder, PlannerLease
from services.placement.migrate import Migrations
from services.placement.policies import FfdPolicy, Outcome, PlacementPolicy
from strata.core.defaults import NODE_TTL_S
from strata.policy.clock import Clock
from strata.policy.model_sizes import model_memory_bytes
from strata.policy.placement import (
    Assignment,
    ModelDemand,
    NodeCapacity,
    PlacedReplica,
    PlacementPlan,
    Unload,
)
from strata.policy.placement.migration import Migration, MigrationBook, Retiring, split_unloads
from strata.policy.placement.profiles import device_kind
from strata.policy.registry import ReplicaPhase
from strata.rpc.convert import phase_from_pb
from strata.telemetry import names
from strata.v1 import common_pb2, scheduler_pb2, scheduler_pb2_grpc

log = logging.getLogger(__name__)


class SchedulerUnavailable(Exception):
    """The scheduler did not answer, so there is no cluster view to plan from."""


class UnknownNode(ValueError):
    """A cordon named a node the scheduler does not know."""


@dataclass(slots=True, frozen=True)
class PlanSnapshot:
    version: int  # bumps when the assignments, unplaced models or verdict change
    created_unix_ms: int  # when this version first appeared
    plan: PlacementPlan
    outcome: Outcome
    policy: str
    cordoned: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    migrations: tuple[Migration, ...] = field(default_factory=tuple)


@dataclass(slots=True, frozen=True)
class SchedulerLink:
    stub: scheduler_pb2_grpc.SchedulerStub
    address: str  # named in the error when it does not answer


@dataclass(slots=True, frozen=True)
class PlannerSettings:
    """What the planner places, and how long it gives node managers and new replicas."""

    models: tuple[str, ...]
    replicas: Mapping[str, int] = field(default_factory=dict)  # per model; absent: 1
    memory_overrides: Mapping[str, int] = field(default_factory=dict)
    rpc_timeout_s: float = 5.0
    load_timeout_s: float = 300.0  # LoadModel's deadline, and a migration's wait for READY
    drain_timeout_ms: int = 30_000
    pending_grace_s: float = NODE_TTL_S  # a load no heartbeat shows is forgotten after this
    ready_poll_s: float = 0.25


class Planner:
    """The replan loop (module docstring). `clock` times pending loads and migrations;
    `wall_ms` stamps plan versions."""

    def __init__(
        self,
        scheduler: SchedulerLink,
        nodes: NodeClients,
        settings: PlannerSettings,
        clock: Clock,
        *,
        policy: PlacementPolicy | None = None,
        curves: MetricsCurves | None = None,
        tracer: trace.Tracer | None = None,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        lease: PlannerLease | None = None,
    ) -> None:
        self._scheduler = scheduler.stub
        self._scheduler_addr = scheduler.address
        self._nodes = nodes
        self._models = tuple(settings.models)
        self._replicas = {m: settings.replicas.get(m, 1) for m in self._models}
        self._overrides = dict(settings.memory_overrides)
        self._clock = clock
        self._rpc_timeout_s = settings.rpc_timeout_s
        self._tracer = tracer or trace.get_tracer(__name__)
        self._wall_ms = wall_ms
        self._policy = policy or FfdPolicy()
        self._curves = curves
        self._lock = asyncio.Lock()
        self.lease = lease  # None: the only planner, no lease asked for
        self._actions = NodeActions(
            nodes,
            clock,
            rpc_timeout_s=settings.rpc_timeout_s,
            load_timeout_s=settings.load_timeout_s,
            drain_timeout_ms=settings.drain_timeout_ms,
            pending_grace_s=settings.pending_grace_s,
        )
        self._cordoned: set[str] = set()
        self.migrations = Migrations(
            MigrationBook(clock, settings.load_timeout_s),
            self._replica_phases,
            self._actions.retire,
            poll_s=settings.ready_poll_s,
        )
        self.latest: PlanSnapshot | None = None
        # Why the last round of run_until did not run (None: it ran, or none tried yet).
        self.problem: str | None = None

    def memory_need(self, model: str, advertised: Mapping[str, int]) -> int | None:
        """Override or table first (known before loading), then what a node measured."""
        return model_memory_bytes(model, self._overrides) or advertised.get(model)

    async def replan(
        self, cordon: Iterable[str] = (), uncordon: Iterable[str] = ()
    ) -> PlanSnapshot:
        """One round; raises SchedulerUnavailable when there is no cluster view, UnknownNode
        when `cordon` names a node the scheduler does not list, and NotHolder when another
        planner holds the lease (checked right before anything is applied)."""
        async with self._lock:
            with self._tracer.start_as_current_span(names.SPAN_PLACEMENT_REPLAN):
                nodes, advertised = await self._read_cluster()
                known = {n.node_id for n in nodes} | self._cordoned
                unknown = sorted(set(cordon) - known)
                if unknown:
                    raise UnknownNode(
                        f"cannot cordon {', '.join(unknown)}: the scheduler lists "
                        f"no such node (known: {', '.join(sorted(known))})"
                    )
                self._cordoned = (self._cordoned | set(cordon)) - set(uncordon)
                self._actions.forget_settled(nodes)
                notes: list[str] = []
                curves = None
                if self._policy.needs_curves and self._curves is not None:
                    curves = await self._curves.fetch(self._models)
                    if curves is None:
                        notes.append(self._curves.problem)
                open_nodes = [n for n in nodes if n.node_id not in self._cordoned]
                outcome = self._policy.plan(
                    [self._capacity(n, advertised) for n in open_nodes],
                    [
                        ModelDemand(m, self.memory_need(m, advertised), self._replicas[m])
                        for m in self._models
                    ],
                    {n.node_id: device_kind(n.device) for n in open_nodes},
                    curves,
                )
                if outcome.rejected:
                    notes.append(
                        "the red line rejected the plan: nothing moves or unloads; "
                        "models without any replica are still loaded"
                    )
                if self.lease is not None:
                    await self.lease.hold()
                version = self._next_version(outcome)
                notes += await self._apply(outcome.plan, nodes, advertised, version)
                return self._publish(outcome, version, advertised, notes)

    async def run_until(self, stop: asyncio.Event, every_s: float) -> None:
        """Replan every `every_s` seconds until `stop` is set; a silent scheduler is logged."""
        while not stop.is_set():
            try:
                await self.replan()
                self.problem = None
            except SchedulerUnavailable as err:
                self.problem = str(err)
                log.warning("replan skipped: %s", err)
            except NotHolder as err:
                if str(err) != self.problem:
                    log.info("replan skipped: %s", err)
                self.problem = str(err)
            try:
                await asyncio.wait_for(stop.wait(), timeout=every_s)
            except TimeoutError:
                pass

    async def close(self) -> None:
        await self.migrations.close()
        if self.lease is not None:
            await self.lease.release()

    async def _read_cluster(self) -> tuple[list[common_pb2.NodeInfo], dict[str, int]]:
        try:
            listed = await self._scheduler.ListNodes(
                scheduler_pb2.ListNodesRequest(), timeout=self._rpc_timeout_s
            )
            served = await self._scheduler.ListModels(
                common_pb2.ListModelsRequest(), timeout=self._rpc_timeout_s
            )
        except grpc.aio.AioRpcError as err:
            raise SchedulerUnavailable(
                f"the scheduler at {self._scheduler_addr} did not answer ({err.code().name}: "
                f"{err.details()}); check STRATA_SCHEDULER_ADDR and that the scheduler runs"
            ) from None
        advertised = {m.name: m.memory_bytes for m in served.models if m.memory_bytes > 0}
        return list(listed.nodes), advertised

    async def _replica_phases(self) -> dict[tuple[str, str], ReplicaPhase]:
        listed = await self._scheduler.ListNodes(
            scheduler_pb2.ListNodesRequest(), timeout=self._rpc_timeout_s
        )
        return {
            (n.node_id, r.replica_id): phase_from_pb(r.state)
            for n in listed.nodes
            for r in n.replicas
        }

    def _capacity(self, node: common_pb2.NodeInfo, advertised: Mapping[str, int]) -> NodeCapacity:
        extra = tuple(
            PlacedReplica(model, rid, self.memory_need(model, advertised) or 0, managed=True)
            for rid, model in self._actions.pending_on(node.node_id)
        )
        capacity = convert.node_capacity(
            node, lambda m: self.memory_need(m, advertised) or 0, self._actions.managed, extra
        )
        # Replicas a migration is retiring: not the policy's to count, but their memory is held.
        leaving = self.migrations.book.leaving()
        gone = [r for r in capacity.replicas if (node.node_id, r.replica_id) in leaving]
        return NodeCapacity(
            capacity.node_id,
            capacity.memory_bytes - sum(r.memory_bytes for r in gone),
            tuple(r for r in capacity.replicas if r not in gone),
        )

    async def _apply(
        self,
        plan: PlacementPlan,
        nodes: Sequence[common_pb2.NodeInfo],
        advertised: Mapping[str, int],
        version: int,
    ) -> list[str]:
        addresses = {n.node_id: n.address for n in nodes}
        free = {
            n.node_id: c.memory_bytes - sum(r.memory_bytes for r in c.replicas)
            for n in nodes
            for c in [self._capacity(n, advertised)]
        }
        leaving = self.migrations.book.leaving()
        split = split_unloads(plan, leaving, self._cordon_unloads(plan, nodes, leaving))
        at_once = split.at_once
        notes = [
            f"{u.model} stays on cordoned {u.node_id}: no replacement could be placed"
            for u in self._stranded(plan, nodes, leaving)
        ]
        now, later = [], []
        for a in plan.loads:
            need = self.memory_need(a.model, advertised) or 0
            (now if free.get(a.node_id, 0) >= need else later).append(a)
            free[a.node_id] = free.get(a.node_id, 0) - need
        loaded = await asyncio.gather(*(self._actions.load(a, addresses[a.node_id]) for a in now))
        self.migrations.start(
            [a for a, ok in zip(now, loaded) if ok],
            [
                Retiring(u.model, u.node_id, u.replica_id, addresses[u.node_id], u.reason)
                for u in split.replaced
            ],
            version,
        )
        unloaded = await asyncio.gather(
            *(self._actions.unload(u, addresses[u.node_id]) for u in at_once)
        )
        for u, ok in zip(at_once, unloaded):
            if ok:
                free[u.node_id] = free.get(u.node_id, 0) + (
                    self.memory_need(u.model, advertised) or 0
                )
        room = [a for a in later if free.get(a.node_id, 0) >= 0]
        notes += [
            f"{a.model} waits for room on {a.node_id} (replicas still draining there)"
            for a in later
            if a not in room
        ]
        await asyncio.gather(*(self._actions.load(a, addresses[a.node_id]) for a in room))
        return notes

    @staticmethod
    def _loads_of(plan: PlacementPlan, model: str) -> list[Assignment]:
        return [a for a in plan.loads if a.model == model]

    def _cordon_unloads(
        self, plan: PlacementPlan, nodes: Sequence[common_pb2.NodeInfo], leaving: Mapping
    ) -> list[Unload]:
        """Replicas of desired models on cordoned nodes whose model loads elsewhere now."""
        return [u for u in self._on_cordoned(nodes, leaving) if self._loads_of(plan, u.model)]

    def _stranded(
        self, plan: PlacementPlan, nodes: Sequence[common_pb2.NodeInfo], leaving: Mapping
    ) -> list[Unload]:
        return [
            u
            for u in self._on_cordoned(nodes, leaving)
            if not self._loads_of(plan, u.model) and not self.migrations.book.in_flight(u.model)
        ]

    def _on_cordoned(self, nodes: Sequence[common_pb2.NodeInfo], leaving: Mapping) -> list[Unload]:
        return [
            Unload(r.model, n.node_id, r.replica_id, f"{n.node_id} is cordoned")
            for n in nodes
            if n.node_id in self._cordoned
            for r in n.replicas
            if r.model in self._replicas
            and r.state in convert.OCCUPYING
            and (n.node_id, r.replica_id) not in leaving
        ]

    def _next_version(self, outcome: Outcome) -> int:
        previous = self.latest
        if previous is not None and _shape(previous.outcome) == _shape(outcome):
            return previous.version
        return (previous.version if previous else 0) + 1

    def _publish(
        self, outcome: Outcome, version: int, advertised: Mapping[str, int], notes: list[str]
    ) -> PlanSnapshot:
        previous = self.latest
        same = previous is not None and previous.version == version
        created = previous.created_unix_ms if same else self._wall_ms()
        plan = outcome.plan
        self.latest = PlanSnapshot(
            version,
            created,
            plan,
            outcome,
            self._policy.name,
            tuple(sorted(self._cordoned)),
            tuple(notes),
            tuple(m for m in self.migrations.book.recent if m.version == version),
        )
        if same:
            return self.latest
        log.info(
            "plan v%d (%s%s): %s",
            version,
            self._policy.name,
            ", rejected by the red line" if outcome.rejected else "",
            ", ".join(f"{a.model}@{a.node_id}" for a in plan.assignments) or "empty",
        )
        for u in outcome.plan.unplaced:
            hint = (
                "; set STRATA_MODEL_MEMORY_BYTES=<name>=<bytes>"
                if self.memory_need(u.model, advertised) is None
                else ""
            )
            log.warning(
                "cannot place %d replica(s) of %s: %s%s", u.missing, u.model, u.reason, hint
            )
        for v in outcome.explanation.violations:
            log.warning("red line: %s on %s", v.describe(), v.node_id)
        return self.latest


def _shape(outcome: Outcome) -> tuple:
    """What a plan decides, without the reasons (which change from 'placed' to 'kept')."""
    plan = outcome.plan
    return (
        tuple((a.model, a.node_id, a.replica_id) for a in plan.assignments),
        tuple((u.model, u.missing) for u in plan.unplaced),
        outcome.rejected,
    )
