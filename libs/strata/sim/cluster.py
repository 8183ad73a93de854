"""The discrete-event cluster simulator: the services' policy objects on a virtual clock.

    arrival --Router.route over the NodeRegistry--> replica (after the inbound overhead); with
            a Tenancy (strata.sim.tenancy), the global scheduler's admission and routing, a
            client retry after a refusal, and the node's fair queue in front of the engines
    node (one GPU): one engine step at a time, round-robin over its replicas with work; when
                    no busy replica's batch can change, they fast-forward together
                    (strata.sim.replica), and an arrival cuts the stretch
    heartbeat       every node, every heartbeat_s: its replicas' states into the NodeRegistry
                    (routing sees them as stale as the scheduler does)
    node sample     every sample_s: the NodeSampleRecord a node manager would send
    replan          at 0 and every replan_s: the placement function, loads and drains applied
    KV report       with prefix routing, every kv_events_s: each node's block set changes into
                    the scheduler's prefix index (strata.sim.kv_tiers), which routing reads
                    with each request's prompt block hashes

Off by default (evicted blocks vanish, routing is by load): SimConfig.kv_tiers gives every node
host and disk tiers below its replicas' device pools (evicted blocks go there, prefixes load back
from there), SimConfig.prefix_routing the prefix index and hashes.

A replan applies its plan as the placement planner does, through the same state machine
(strata.policy.placement.migration): the unloads of a model that also loads this round wait
until the scheduler's view (the heartbeats) shows every new replica READY; a draining replica
still takes what routing sends it for the routing grace and leaves once it has no work.

Events are typed (strata.sim.events), and at one instant they run in priority order.
"""

from __future__ import annotations

import heapq
import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from strata.core.defaults import HEARTBEAT_INTERVAL_S
from strata.core.records import NodeSampleRecord, RequestRecord
from strata.node.energy import PowerModel
from strata.policy.clock import ManualClock
from strata.policy.kv_index import PrefixIndex
from strata.policy.placement import (
    Assignment,
    ModelDemand,
    NodeCapacity,
    PlacedReplica,
    PlacementPlan,
    plan_placement,
)
from strata.policy.placement.migration import (
    DrainRule,
    MigrationBook,
    Retiring,
    routing_grace_s,
    split_unloads,
)
from strata.policy.registry import NodeRegistry, ReplicaPhase
from strata.policy.routing import RouteDecision, Router
from strata.policy.scheduling.admission import Refusal
from strata.policy.scheduling.fair_queue import QueueItem
from strata.policy.scheduling.global_scheduler import INFEASIBLE, GlobalScheduler
from strata.policy.scheduling.ledger import PoolLedger
from strata.policy.scheduling.slo import solo_prefill_s
from strata.sim.events import (
    Admit,
    Event,
    Heartbeat,
    KVReport,
    Loaded,
    Replan,
    Retry,
    RunNext,
    Sample,
    Settled,
    StepEnd,
)
from strata.sim.kv_tiers import KVTierSpec, NodeKV
from strata.sim.node import NodeMode, SimNode
from strata.sim.replica import Active, SimReplica, shared_factor
from strata.sim.spec import ModelSpec, model_spec
from strata.sim.tenancy import Limits, NodeFront, Tenancy
from strata.sim.workload import SimRequest

__all__ = ["ModelSpec", "SimConfig", "SimResult", "Simulator", "model_spec", "params_json"]

PlacementFn = Callable[[Sequence[NodeCapacity], Sequence[ModelDemand]], PlacementPlan]


@dataclass(slots=True, frozen=True)
class SimConfig:
    heartbeat_s: float = HEARTBEAT_INTERVAL_S
    sample_s: float = 2.0
    replan_s: float = 0.0  # 0: place once, at the start
    load_s: float = 0.0  # load and warm-up of a replica placed by a replan
    fast_forward: bool = True
    seed: int = 0
    epoch_unix_ms: int = 1_700_000_000_000  # virtual time 0 in reports
    power: PowerModel = PowerModel(idle_watts=60.0, tdp_watts=700.0)
    horizon_s: float | None = None  # stop there; unfinished requests fail DEADLINE_EXCEEDED
    kv_tiers: KVTierSpec | None = None  # every node's host/disk tiers; None: evicted blocks vanish
    prefix_routing: bool = False  # route by the prefix index, fed by nodes' KV reports
    kv_events_s: float = 0.5  # KV report interval (the KV tier store's default)

    def __post_init__(self) -> None:
        if self.heartbeat_s <= 0 or self.sample_s <= 0 or self.replan_s < 0 or self.load_s < 0:
            raise ValueError(
                f"heartbeat_s and sample_s must be positive, replan_s and load_s "
                f"non-negative, got {self}"
            )
        if self.horizon_s is not None and self.horizon_s <= 0:
            raise ValueError(f"horizon_s must be positive, got {self.horizon_s}")
        if not self.kv_events_s > 0:
            raise ValueError(f"kv_events_s must be positive, got {self.kv_events_s}")


@dataclass(slots=True)
class SimResult:
    rows: list[RequestRecord]
    samples: list[NodeSampleRecord]
    end_s: float  # virtual seconds simulated
    wall_s: float
    events: int
    steps: int  # engine steps simulated (exact and fast-forwarded)
    stretches: int
    placements: list[PlacementPlan]


class Simulator:
    def __init__(
        self,
        nodes: Sequence[tuple[str, int]],
        models: Sequence[ModelSpec],
        demands: Callable[[float], Sequence[ModelDemand]],
        config: SimConfig = SimConfig(),
        placement: PlacementFn = plan_placement,
        tenancy: Tenancy | None = None,
    ) -> None:
        self.cfg = config
        self.models = {m.name: m for m in models}
        self.nodes = {nid: SimNode(nid, mem) for nid, mem in sorted(nodes)}
        self.demands = demands
        self.placement = placement
        self.clock = ManualClock()
        self.registry = NodeRegistry(self.clock, ttl_s=max(5.0, 5 * config.heartbeat_s))
        self.tenancy = tenancy
        self.refusals: dict[tuple[str, str], int] = {}  # (tenant, reason) -> refused attempts
        self.kv_index = PrefixIndex() if config.prefix_routing else None
        for m in models if config.kv_tiers is not None else ():
            if m.kv_block_bytes <= 0:
                raise ValueError(
                    f"model {m.name!r} has no kv_block_bytes, which prices its tier "
                    f"loads; build its ModelSpec with model_spec() from a profile "
                    f"or set kv_block_bytes"
                )
        if config.kv_tiers is not None or config.prefix_routing:
            for node in self.nodes.values():
                node.kv = NodeKV(config.kv_tiers)
        if tenancy is None:
            self.router = Router(random.Random(config.seed))
            self.scheduler = None
        else:
            self.router = Router(
                random.Random(config.seed),
                sample_size=tenancy.sample_size,
                tie_tolerance=tenancy.tie_tolerance,
                interference_weight=tenancy.interference_weight,
            )
            self.scheduler = GlobalScheduler(
                self.registry, self.router, PoolLedger(), self.kv_index, tenancy.settings
            )
            for node in self.nodes.values():
                node.front = NodeFront.build(tenancy.queue, self.clock)
        self.replicas: dict[str, SimReplica] = {}
        self._heap: list[tuple[float, int, int, Event]] = []
        self._n = 0
        self.rows: list[RequestRecord] = []
        self.samples: list[NodeSampleRecord] = []
        self.plans: list[PlacementPlan] = []
        self.stretches = 0
        self.routed: dict[int, str] = {}  # request index -> replica id
        self._outstanding = 0
        self._retired_steps = 0
        # Make before break, as the planner service migrates (no load fails here, so no
        # migration times out); a drain waits for its work, however long.
        self.migrations = MigrationBook(self.clock, ready_timeout_s=math.inf)
        self.drain = DrainRule(routing_grace_s(config.heartbeat_s))
        # Each handler takes the events of its key's type.
        self._handlers: dict[type[Event], Callable[[Any, float], None]] = {
            Admit: self._on_admit,
            Retry: self._on_retry,
            RunNext: self._on_run_next,
            StepEnd: self._on_step_end,
            Heartbeat: self._on_heartbeat,
            Sample: self._on_sample,
            KVReport: self._on_kv_report,
            Replan: self._on_replan,
            Loaded: self._on_loaded,
            Settled: self._on_settled,
        }

    # -- event queue ---------------------------------------------------------------------------
    def _push(self, t: float, event: Event) -> None:
        self._n += 1
        heapq.heappush(self._heap, (t, event.priority, self._n, event))

    def run(self, requests: Sequence[SimRequest]) -> SimResult:
        started = time.perf_counter()
        self._replan(0.0)
        for i, node in enumerate(self.nodes.values()):
            self._heartbeat(node, 0.0)
            self._sample(node, 0.0)  # the node layer covers the window from its first sample
            # Staggered as real nodes are: each on its own phase of the interval.
            offset = (i + 1) / (len(self.nodes) + 1)
            self._push(self.cfg.heartbeat_s * offset, Heartbeat(node))
            self._push(self.cfg.sample_s * offset, Sample(node))
            if self.kv_index is not None:
                self._push(self.cfg.kv_events_s * offset, KVReport(node))
        if self.cfg.replan_s:
            self._push(self.cfg.replan_s, Replan())
        ordered = sorted(requests, key=lambda r: r.arrival_s)
        self._outstanding = len(ordered)
        events = i = 0
        now = 0.0
        heap = self._heap
        horizon = self.cfg.horizon_s if self.cfg.horizon_s is not None else float("inf")
        while i < len(ordered) or self._outstanding:
            if (
                min(
                    ordered[i].arrival_s if i < len(ordered) else horizon,
                    heap[0][0] if heap else horizon,
                )
                > horizon
            ):
                now = horizon
                self._give_up(ordered[i:], now)
                break
            if i < len(ordered) and (not heap or ordered[i].arrival_s <= heap[0][0]):
                now = ordered[i].arrival_s
                self.clock.set(now)
                self._arrive(ordered[i], now)
                i += 1
                events += 1
                continue
            if not heap:
                break
            now, _, _, event = heapq.heappop(heap)
            self.clock.set(now)
            events += 1
            self._handlers[type(event)](event, now)
        for node in self.nodes.values():
            if node.last_sample_s < now:
                self._sample(node, now)
        steps = self._retired_steps + sum(r.counters.steps for r in self.replicas.values())
        return SimResult(
            self.rows,
            self.samples,
            now,
            time.perf_counter() - started,
            events,
            steps,
            self.stretches,
            self.plans,
        )

    # -- events --------------------------------------------------------------------------------
    def _on_admit(self, e: Admit, now: float) -> None:
        front = self.nodes[e.replica.node_id].front
        if front is not None:
            front.arrivals.received(e.route_id, now)
        self._admit(e.replica, e.request, e.first_s, now)

    def _on_retry(self, e: Retry, now: float) -> None:
        self._arrive(e.request, now, first_s=e.first_s)

    def _on_run_next(self, e: RunNext, now: float) -> None:
        e.node.run_pending = False
        if e.node.current is None:
            self._start_next(e.node, now)

    def _on_step_end(self, e: StepEnd, now: float) -> None:
        if e.gen == e.node.gen:
            self._step_end(e.node, now)

    def _on_heartbeat(self, e: Heartbeat, now: float) -> None:
        self._heartbeat(e.node, now)
        self._push(now + self.cfg.heartbeat_s, e)

    def _on_sample(self, e: Sample, now: float) -> None:
        self._sample(e.node, now)
        self._push(now + self.cfg.sample_s, e)

    def _on_kv_report(self, e: KVReport, now: float) -> None:
        kv, index = e.node.kv, self.kv_index
        assert kv is not None and index is not None  # KV reports run with prefix routing only
        for r in e.node.stretching:
            r.sync(now)
        kv.report(e.node.node_id, index)
        self._push(now + self.cfg.kv_events_s, e)

    def _on_replan(self, e: Replan, now: float) -> None:
        self._replan(now)
        self._push(now + self.cfg.replan_s, e)

    def _on_loaded(self, e: Loaded, now: float) -> None:
        if e.node.phases.get(e.replica.replica_id) is ReplicaPhase.LOADING:
            e.node.phases[e.replica.replica_id] = ReplicaPhase.READY

    def _on_settled(self, e: Settled, now: float) -> None:
        self._retire_drained(e.node)

    # -- requests ------------------------------------------------------------------------------
    def _arrive(self, req: SimRequest, now: float, first_s: float | None = None) -> None:
        """A request reaches the gateway at `now` (`first_s`: its first attempt, for a retry)."""
        first = now if first_s is None else first_s
        spec = self.models.get(req.model)
        problem = (
            None if spec is None else spec.limits.problem(req.prompt_tokens, req.output_tokens)
        )
        if problem is not None:
            self._fail(req, first, "INVALID_ARGUMENT")
            return
        hashes = (
            req.prefix_hashes(spec.limits.block_size)
            if self.kv_index is not None and spec is not None
            else ()
        )
        decision: RouteDecision | Refusal | None
        if self.scheduler is None:
            decision = self.router.route(
                req.model,
                req.tenant,
                req.prompt_tokens,
                self.registry,
                prefix_hashes=hashes,
                index=self.kv_index,
            )
        else:
            tenancy = self.tenancy
            assert tenancy is not None  # the scheduler comes with a Tenancy
            decision = self.scheduler.route(
                req.model,
                tenancy.policy(req.tenant),
                req.prompt_tokens,
                req.output_tokens,
                hashes,
            )
            if isinstance(decision, Refusal):
                key = (req.tenant, decision.reason)
                self.refusals[key] = self.refusals.get(key, 0) + 1
                again = now + decision.retry_after_s
                if decision.reason == INFEASIBLE:  # waiting does not help: final, as the stack
                    self._fail(req, first, "FAILED_PRECONDITION", e2e_ms=(now - first) * 1000)
                elif tenancy.retry and again - first <= tenancy.give_up_s:
                    self._push(again, Retry(req, first))
                else:
                    self._fail(req, first, "RESOURCE_EXHAUSTED", e2e_ms=(now - first) * 1000)
                return
        if decision is None:
            self._fail(req, first, "UNAVAILABLE")
            return
        replica = self.replicas.get(decision.replica_id)
        if replica is None:  # unloaded since the node's last heartbeat: the node refuses it
            front = self.nodes[decision.node_id].front
            if front is not None:
                front.arrivals.received(decision.route_id, now)
            self._fail(req, now, "UNAVAILABLE")
            return
        self.routed[req.index] = replica.replica_id
        assert spec is not None  # a replica of the model was placed from its spec
        o = spec.overheads
        self._push(now + o.inbound_s + o.add_s, Admit(replica, req, first, decision.route_id))

    def _admit(self, replica: SimReplica, req: SimRequest, arrival: float, now: float) -> None:
        node = self.nodes[replica.node_id]
        front = node.front
        if front is None:
            replica.add(req, arrival, now)
            self._wake(node, now)
            return
        tenancy = self.tenancy
        assert tenancy is not None  # a node has a front only with a Tenancy
        policy = tenancy.policy(req.tenant)
        classes = front.queue.classes
        front.push(
            QueueItem(
                request_id=str(req.index),
                tenant=req.tenant,
                model=req.model,
                priority=policy.priority if classes else 0,
                prompt_tokens=req.prompt_tokens,
                max_tokens=req.output_tokens,
                weight=policy.weight,
                ttft_ms=policy.ttft_ms if classes else None,
                replica_id=replica.replica_id,
                tpot_ms=policy.tpot_ms if classes else None,
            ),
            (req, arrival),
        )
        self._dispatch(node, now)

    def _dispatch(self, node: SimNode, now: float, wake: bool = True) -> None:
        """Hand the node's queued requests to their engines where a slot is free (or they are
        urgent), as the node manager's dispatcher does. `wake=False` at a step end, where the
        node picks its next step right after."""

        def limits(replica_id: str) -> Limits | None:
            r = self.replicas.get(replica_id)
            return (r.limits.max_seqs, r.line) if r is not None else None

        front = node.front
        assert front is not None  # only a node with a front dispatches
        handed = False
        for item, (req, arrival) in front.ready(limits):
            replica = self.replicas.get(item.replica_id)
            if replica is None:  # unloaded while the request waited: the node refuses it
                front.left_engine(item.replica_id, item.request_id)
                self._fail(req, arrival, "UNAVAILABLE", e2e_ms=(now - arrival) * 1000)
                continue
            replica.add(
                req, arrival, now, item.priority, tpot_ms=item.tpot_ms, ttft_ms=item.ttft_ms
            )
            handed = True
        if handed and wake:
            self._wake(node, now)

    def _wake(self, node: SimNode, now: float) -> None:
        if node.current is None:
            if not node.run_pending:
                node.run_pending = True
                self._push(now, RunNext(node))
        elif node.mode is NodeMode.STRETCH:
            self._cut(node, now)

    def _give_up(self, unsent: Sequence[SimRequest], now: float) -> None:
        """At the horizon: requests not yet arrived are not sent; those in flight fail."""
        self._outstanding -= len(unsent)
        for replica in self.replicas.values():
            for active in list(replica.active.values()):
                self._fail(
                    active.request,
                    active.arrival_s,
                    "DEADLINE_EXCEEDED",
                    e2e_ms=(now - active.arrival_s) * 1000,
                )
        # Requests between the gateway and a replica (their admission still queued), waiting
        # for a retry after a refusal, or in a node's queue.
        for *_, event in self._heap:
            if isinstance(event, Admit):
                e2e_ms = (now - event.first_s) * 1000
                self._fail(event.request, event.first_s, "DEADLINE_EXCEEDED", e2e_ms=e2e_ms)
            elif isinstance(event, Retry):
                e2e_ms = (now - event.first_s) * 1000
                self._fail(event.request, event.first_s, "RESOURCE_EXHAUSTED", e2e_ms=e2e_ms)
        for node in self.nodes.values():
            if node.front is not None:
                for req, arrival in node.front.drain():
                    self._fail(req, arrival, "DEADLINE_EXCEEDED", e2e_ms=(now - arrival) * 1000)

    def _fail(self, req: SimRequest, now: float, code: str, e2e_ms: float = 0.0) -> None:
        self._outstanding -= 1
        self.rows.append(
            RequestRecord(
                request_id=str(req.index),
                trace_id="",
                tenant=req.tenant,
                model=req.model,
                start_unix_ms=self.cfg.epoch_unix_ms + round(now * 1000),
                ttft_ms=None,
                tpot_ms=None,
                e2e_ms=e2e_ms,
                queue_ms=None,
                prompt_tokens=req.prompt_tokens,
                completion_tokens=0,
                cached_tokens=0,
                finish_reason="",
                error_code=code,
                status_code=0,
            )
        )

    def _finish(self, a: Active) -> None:
        self._outstanding -= 1
        front = self.nodes[self.routed_node(a)].front if self.tenancy is not None else None
        if front is not None:
            r = a.request
            front.left_engine(self.routed[r.index], str(r.index))
        out = self.models[a.request.model].overheads.outbound_s
        seq = a.seq
        first_token_s, first_scheduled = a.first_token_s, seq.first_scheduled
        assert first_token_s is not None and first_scheduled is not None  # it finished
        ttft = (first_token_s + out - a.arrival_s) * 1000
        e2e = (a.end_s + out - a.arrival_s) * 1000
        n = seq.num_output
        self.rows.append(
            RequestRecord(
                request_id=str(a.request.index),
                trace_id="",
                tenant=a.request.tenant,
                model=a.request.model,
                start_unix_ms=self.cfg.epoch_unix_ms + round(a.arrival_s * 1000),
                ttft_ms=ttft,
                tpot_ms=(e2e - ttft) / (n - 1) if n > 1 else None,
                e2e_ms=e2e,
                queue_ms=(first_scheduled - seq.arrival) * 1000,
                prompt_tokens=seq.num_prompt,
                completion_tokens=n,
                cached_tokens=seq.num_cached_prompt,
                finish_reason="length",
                error_code="",
                status_code=0,
            )
        )

    def routed_node(self, a: Active) -> str:
        return self.replicas[self.routed[a.request.index]].node_id

    # -- one GPU per node ----------------------------------------------------------------------
    def _start_next(self, node: SimNode, now: float) -> None:
        node.current = None
        n = len(node.replicas)
        busy = [
            r for r in (node.replicas[(node.next_rr + k) % n] for k in range(n)) if r.has_work()
        ]
        if not busy:
            self._retire_drained(node)
            return
        ready = [r for r in busy if r.ready_at <= now]
        if not ready:  # each busy replica is still in a step that no longer holds the GPU
            self._occupy(node, None, NodeMode.FREE, min(r.ready_at for r in busy))
            return
        if self.cfg.fast_forward and len(ready) == len(busy) and self._stretch(node, busy, now):
            return
        for replica in ready:
            before = replica.scheduler.preemptions
            # A step that only preempted schedules nothing; the engine loops straight on.
            hold = replica.begin_step(now, len(busy)) or replica.begin_step(now, len(busy))
            node.preemptions += replica.scheduler.preemptions - before
            if hold is not None:
                node.next_rr = (node.replicas.index(replica) + 1) % n
                node.stretching = []
                self._occupy(node, replica, NodeMode.STEP, now + hold)
                return

    def _stretch(self, node: SimNode, busy: list[SimReplica], now: float) -> bool:
        """Fast-forward every busy replica of the node together, if each can: they take turns,
        one step each per round in round-robin order, until the first step (in time) after
        which a batch would change. Each step holds the GPU for its shared_factor of itself, and
        a round lasts the sum of the holds; a replica whose own step outlasts a round (unequal
        steps at a share below 1) would make exact stepping leave the round-robin, so then the
        node steps exactly."""
        plans = []
        for replica in busy:
            plan = replica.plan_stretch()
            if plan is None:
                return False
            plans.append(plan)
        rounds = min(p.steps for p in plans)
        last = next(i for i, p in enumerate(plans) if p.steps == rounds)
        factors = [shared_factor(r.share, len(busy)) for r in busy]
        per_round = sum(p.first_s * f for p, f in zip(plans, factors))
        growth = sum(p.growth_s * f for p, f in zip(plans, factors))
        late = per_round + growth * (rounds - 1)
        if any(
            p.first_s > per_round or p.first_s + p.growth_s * (rounds - 1) > late for p in plans
        ):
            return False
        before = before_growth = 0.0
        for i, (replica, plan, f) in enumerate(zip(busy, plans, factors)):
            replica.start_stretch(
                plan,
                rounds if i <= last else rounds - 1,
                now + before + plan.first_s,
                per_round + before_growth + plan.growth_s,
                growth,
            )
            before += plan.first_s * f
            before_growth += plan.growth_s * f
        node.stretching = busy
        node.next_rr = (node.replicas.index(busy[last]) + 1) % len(node.replicas)
        self.stretches += 1
        end = max(p.end_of(p.steps) for p in plans if p.steps)  # plans: the stretches started
        self._occupy(node, busy[0], NodeMode.STRETCH, end)
        return True

    def _cut(self, node: SimNode, now: float) -> None:
        """An arrival at `now` ends the node's stretch after the step in progress (if that is
        not the stretch's last step anyway): every replica applies the steps it started, and
        exact stepping resumes after that step, with the replica after its owner."""
        in_progress = None  # (start, end, replica, is its last step)
        all_last = True  # every replica has started its last step
        for replica in node.stretching:
            st = replica.stretch
            assert st is not None  # node.stretching holds the replicas of its stretch
            m = st.count_before(now, inclusive=False)
            if m != st.steps:
                all_last = False
            if m and (in_progress is None or st.start_of(m) > in_progress[0]):
                in_progress = (st.start_of(m), st.end_of(m), replica, m == st.steps)
        assert in_progress is not None, "a stretch is cut after its first step started"
        _, end, owner, owners_last = in_progress
        if owners_last and all_last:
            return
        for replica in node.stretching:
            replica.apply_started(now)
        node.stretching = []
        node.next_rr = (node.replicas.index(owner) + 1) % len(node.replicas)
        node.gen += 1
        node.mode = NodeMode.FREE
        self._push(end, StepEnd(node, node.gen))

    def _occupy(
        self, node: SimNode, replica: SimReplica | None, mode: NodeMode, end: float
    ) -> None:
        node.current, node.mode = replica, mode
        node.gen += 1
        self._push(end, StepEnd(node, node.gen))

    def _step_end(self, node: SimNode, now: float) -> None:
        finished: list[Active] = []
        if node.mode is NodeMode.STEP:
            current = node.current
            assert current is not None  # a STEP's replica
            finished = current.end_step(now)
        elif node.mode is NodeMode.STRETCH:
            for replica in node.stretching:
                finished += replica.finish_stretch()
            node.stretching = []
        for active in finished:
            self._finish(active)
        if node.front is not None and (finished or len(node.front.queue)):
            self._dispatch(node, now, wake=False)
        self._start_next(node, now)

    # -- heartbeats, samples -------------------------------------------------------------------
    def _heartbeat(self, node: SimNode, now: float) -> None:
        self.registry.heartbeat(node.report(self.models, now))
        if self.migrations.loading():
            self._advance_migrations(now)

    def _sample(self, node: SimNode, now: float) -> None:
        self.samples.append(node.sample(now, self.cfg.power, self.cfg.epoch_unix_ms))

    # -- placement -----------------------------------------------------------------------------
    def _replan(self, now: float) -> None:
        leaving = self.migrations.leaving()
        capacities = [
            NodeCapacity(
                n.node_id,
                n.memory_bytes,
                tuple(
                    PlacedReplica(
                        r.model, r.replica_id, self.models[r.model].memory_bytes, managed=True
                    )
                    for r in n.replicas
                    if n.phases[r.replica_id] is not ReplicaPhase.DRAINING
                    and (n.node_id, r.replica_id) not in leaving
                ),
            )
            for n in self.nodes.values()
        ]
        plan = self.placement(capacities, list(self.demands(now)))
        self.plans.append(plan)
        split = split_unloads(plan, leaving)
        for load in plan.loads:
            self._load(load, now)
        self.migrations.start(
            plan.loads,
            [
                Retiring(u.model, u.node_id, u.replica_id, "", u.reason)
                for u in split.replaced
                if u.replica_id in self.nodes[u.node_id].phases
            ],
            version=len(self.plans),
        )
        for unload in split.at_once:
            if unload.replica_id in self.nodes[unload.node_id].phases:
                self._drain(self.nodes[unload.node_id], unload.replica_id, now)

    def _advance_migrations(self, now: float) -> None:
        """Migrations whose new replicas the heartbeats show READY (the scheduler routes to
        them) drain the replicas they replace."""
        phases = {
            key: phase
            for m in self.migrations.running
            for key in m.new
            if (phase := self.nodes[key[0]].announced(key[1])) is not None
        }
        for m in self.migrations.advance(phases).drain:
            for r in m.old:
                node = self.nodes[r.node_id]
                if node.phases.get(r.replica_id) is ReplicaPhase.READY:
                    self._drain(node, r.replica_id, now)
            self.migrations.finish(m)

    def _drain(self, node: SimNode, replica_id: str, now: float) -> None:
        """DRAINING, as the node manager's unload (strata.policy.placement.migration.DrainRule):
        it still takes what routing sends it during the routing grace and leaves once that has
        passed and it has no work."""
        node.phases[replica_id] = ReplicaPhase.DRAINING
        node.draining_since[replica_id] = now
        self._push(self.drain.settles_at(now), Settled(node))

    def _load(self, a: Assignment, now: float) -> None:
        node = self.nodes[a.node_id]
        spec = self.models[a.model]
        costs = spec.costs
        o = spec.overheads
        if o.token_send_s or o.step_extra_s:
            costs = replace(
                costs,
                step_s=costs.step_s + o.step_extra_s,
                sample_s=costs.sample_s + o.token_send_s,
            )
        replica = SimReplica(
            a.replica_id,
            a.model,
            a.node_id,
            spec.limits,
            costs,
            spec.colocation_share,
            spec.prefill_colocation_share,
        )
        if node.kv is not None:  # a worker starts with its tier link
            replica.connect(node.kv, spec.kv_block_bytes)
        front = node.front
        if front is not None:
            limits = spec.limits

            def first_token(active: Active, at: float, rid: str = a.replica_id) -> None:
                own_s = solo_prefill_s(
                    replica.line,
                    active.request.prompt_tokens,
                    limits.block_size,
                    limits.max_batched_tokens,
                )
                front.first_token(rid, str(active.request.index), own_s, at)

            replica.on_first_token = first_token
        node.replicas.append(replica)
        self.replicas[a.replica_id] = replica
        if now > 0 and self.cfg.load_s > 0:
            node.phases[a.replica_id] = ReplicaPhase.LOADING
            self._push(now + self.cfg.load_s, Loaded(node, replica))
        else:
            node.phases[a.replica_id] = ReplicaPhase.READY

    def _retire_drained(self, node: SimNode) -> None:
        now = self.clock.now()
        for r in list(node.replicas):
            if (
                node.phases[r.replica_id] is ReplicaPhase.DRAINING
                and node.current is not r
                and r.stretch is None
                and self.drain.done(node.draining_since[r.replica_id], now, int(r.has_work()))
            ):
                node.replicas.remove(r)
                del node.phases[r.replica_id]
                del node.draining_since[r.replica_id]
                del self.replicas[r.replica_id]
                self._retired_steps += r.counters.steps
                node.next_rr = 0
        if node.kv is not None:
            node.kv.disconnect_others({r.replica_id for r in node.replicas})


def params_json(**params) -> str:
    """A run's parameters as the JSON its RunRecord carries."""
    return json.dumps(params, sort_keys=True, default=str)
