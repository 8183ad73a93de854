"""The level-1 scheduler: admission, then routing, then the SLA feasibility check.

    request --the tenant's request rate (a token bucket per tenant, at the rate the gateway
             sent: one limit across every gateway routing here)--> refusal "rate" | on
            --admit (quotas: burst share, pool full above the guarantee)--> refusal | on
            --Router.route (prefix overlap, load ahead, pending work, node safety margin,
                            randomized ties, sampled candidates)--> replica, the best of the
                   tenant's home nodes while it costs the request little (strata.policy.
                   scheduling.homes), else the best anywhere
            --SLA: the estimate to first token passes the class's TTFT target, and only because
                   of the work queued ahead (alone on the replica it would meet it)?--> the
                   next best replica on another node is judged the same way, and the request
                   goes there if it passes, else refusal
                   (a prompt too long for the target anywhere, even on an idle machine and
                   past the step line's error, is refused as infeasible, or served as well as
                   it can be with `refuse_infeasible` off; interference now is the SLA
                   check's; one whose first token alone comes so near the target that a retry
                   could not meet the margin goes whenever its estimate meets the target
                   within the line's error). The work queued
                   ahead counts as the engine serves prefill, by class (strata.policy.
                   scheduling.prefill_ahead): the request's own class and above, and one step of
                   the lower classes, less what the engine has prefilled since its node's
                   report (strata.policy.scheduling.backlog). Alone and beside the
                   running decodes, the prompt's prefill is priced by the replica's step line
                   in its engine's chunks, each over the chunks before it. The estimate includes
                   the wait for an engine slot: the node hands a request to its engine only
                   while the running decodes keep their TPOT targets with it
                   (strata.policy.scheduling.slo, priced with the worker's learned step line);
                   when they would not, or requests wait ahead of it, it waits for running
                   requests to finish. A best-effort request is refused when that wait passes
                   `best_effort_wait_s`: it may queue, boundedly, and never slows a class.
                   The estimate is never below what the replica's latest requests waited
                   beyond their own prefill (its node's report, strata.policy.scheduling.
                   delays) plus this prompt's own prefill: feedback for when the estimate's
                   inputs lag a burst.
            --ledger.routed: the work counts against the tenant, and the request in the
                   replica's slots and queue, until a report of the node lists the decision's
                   route id as received (strata.policy.scheduling.arrivals)

Coarse and cheap on purpose: which node, not when (the node manager's fair queue and the
engine's priorities decide that), so one scheduler keeps up with 1,000 nodes. The services and
the simulator build the same object; `mode` selects the baselines the isolation benchmark
compares against:

    two-level   everything above
    fcfs        route by load only: no quotas, no priorities, no SLA check (pooled first come
                first served; the nodes run fcfs queues too)
    static      every tenant routed only within its own partition of nodes, no quotas
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from strata.core.tenant_policy import TenantPolicy
from strata.policy.kv_index import PrefixIndex
from strata.policy.ratelimit import TokenBuckets
from strata.policy.registry import NodeRegistry, ReplicaState, TenantLoad
from strata.policy.routing import RouteDecision, RouteMiss, Router
from strata.policy.scheduling.admission import (
    MIN_RETRY_S,
    AdmissionSettings,
    Refusal,
    TtftEstimate,
    admit,
    retry_after,
)
from strata.policy.scheduling.backlog import backlog_tokens
from strata.policy.scheduling.delays import class_delay_s
from strata.policy.scheduling.fair_queue import URGENT_FRACTION
from strata.policy.scheduling.homes import Homes, HomeSettings
from strata.policy.scheduling.ledger import PendingRoute, PoolLedger
from strata.policy.scheduling.prefill_ahead import class_tokens, tokens_ahead
from strata.policy.scheduling.slo import (
    HEADROOM,
    DecodeLoad,
    chunk_budget,
    engine_share,
    prefill_s,
    slot_wait_s,
    solo_prefill_s,
    step_limit_ms,
    step_ms,
)
from strata.policy.scheduling.step_cap import STEP_TTFT_SHARE

SLA_SLACK = 0.85
# The estimate's error is mostly queueing it cannot see, an absolute spread of a few hundred ms
# whatever the target (docs/design/scheduling.md): a short target keeps at least this margin.
MIN_TTFT_MARGIN_MS = 150.0
INFEASIBLE = "infeasible"  # a Refusal's reason: the class's targets cannot hold even when idle
# The step line's error on a long prompt: the line is linear where an engine's prefill is not
# (the shipped SmolLM2 profile's line is 6% off on average at its measured shapes, up to 16%,
# and prices large chunks high; docs/design/scheduling.md). An infeasible refusal is final, so
# it is made only past the target by more than this; and a request a retry cannot help goes
# while its estimate is within this of its target.
LINE_TOLERANCE = 0.1
RATE = "rate"  # a Refusal's reason: the tenant is over its request rate


def queued_ahead(tenants: Sequence[TenantLoad], policy: TenantPolicy) -> int:
    """The requests a node queues that one of `policy`'s arriving now waits behind: every one
    of a higher class (strict priority), and of its own class its tenant's own and, of each
    other tenant's, as many as the fair queue serves of them before it (start-time fair
    queueing interleaves the tenants of a class: with equal weights, one of each other
    tenant's per one of its own; the other tenants' weights are not known here)."""
    own = sum(t.queued for t in tenants if t.tenant == policy.tenant)
    ahead = 0
    for t in tenants:
        if t.priority > policy.priority or t.tenant == policy.tenant:
            ahead += t.queued
        elif t.priority == policy.priority:
            ahead += min(t.queued, own + 1)
    return ahead


@dataclass(slots=True, frozen=True)
class RateLimit:
    """A tenant's request rate: `rps` sustained, `burst` at once (>= 1)."""

    rps: float
    burst: float

    @classmethod
    def of(cls, rps: float, burst: float = 0.0) -> RateLimit:
        """The limit a Route request states (burst 0: one second of the rate, at least one);
        ValueError naming the fields when they are not a limit."""
        burst = burst or max(1.0, rps)
        if not (math.isfinite(rps) and rps > 0 and math.isfinite(burst) and burst >= 1):
            raise ValueError(
                f"rate_limit_rps must be a positive number and rate_limit_burst at least 1 "
                f"(or 0: one second of the rate), got {rps} and {burst}"
            )
        return cls(rps, burst)


def admission_allowance_ms(target_ms: float, slack: float, min_margin_ms: float) -> float:
    """The TTFT estimate admission allows under a target of `target_ms`: target x slack, and at
    least `min_margin_ms` below the target, but never below half of target x slack (a target
    near the margin itself keeps a margin of its own size)."""
    return max(0.5 * target_ms * slack, min(target_ms * slack, target_ms - min_margin_ms))


class Mode(enum.StrEnum):
    TWO_LEVEL = "two-level"
    FCFS = "fcfs"
    STATIC = "static"


@dataclass(slots=True, frozen=True)
class SchedulerSettings:
    mode: Mode = Mode.TWO_LEVEL
    admission: AdmissionSettings = AdmissionSettings()
    sla_check: bool = True
    # An estimate above target x this is refused: below 1 it keeps a margin for what an
    # estimate of the queue cannot see (the tail, a burst's own load on the machine, noise).
    sla_slack: float = SLA_SLACK
    # ... and at least this far below the target, never below half the target x slack.
    min_margin_ms: float = MIN_TTFT_MARGIN_MS
    partitions: Mapping[str, frozenset[str]] = field(default_factory=dict)  # static mode
    best_effort_wait_s: float = 30.0  # the longest engine-slot wait a best-effort request takes
    # A request its class's targets cannot hold for even alone on the best replica (its own
    # prefill past the TTFT target, one decode step past the TPOT target) is refused as
    # infeasible (FAILED_PRECONDITION: a looser class serves it); False admits it anyway.
    refuse_infeasible: bool = True
    homes: HomeSettings | None = HomeSettings()  # two-level mode; None: route to the best only

    def __post_init__(self) -> None:
        if self.sla_slack <= 0:
            raise ValueError(f"sla_slack must be positive, got {self.sla_slack}")
        if not self.min_margin_ms >= 0:
            raise ValueError(f"min_margin_ms must be at least 0, got {self.min_margin_ms}")
        if not self.best_effort_wait_s > 0:
            raise ValueError(f"best_effort_wait_s must be positive, got {self.best_effort_wait_s}")
        if self.mode is Mode.STATIC and not self.partitions:
            raise ValueError("static mode needs partitions: tenant -> node ids")


@dataclass(slots=True)
class GlobalScheduler:
    registry: NodeRegistry
    router: Router
    ledger: PoolLedger
    index: PrefixIndex | None = None
    settings: SchedulerSettings = SchedulerSettings()
    # Route ids are this prefix and a count: a prefix of its own for each scheduler process
    # keeps ids apart where nodes report to several.
    route_prefix: str = ""
    rates: TokenBuckets = field(init=False)
    homes: Homes | None = field(init=False, default=None)
    _routes: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.ledger.horizon_s = self.settings.admission.horizon_s
        self.registry.listener = self.ledger
        self.rates = TokenBuckets(self.registry.clock)
        if self.settings.homes is not None:
            self.homes = Homes(self.settings.homes)

    def route(
        self,
        model: str,
        policy: TenantPolicy,
        prompt_tokens: int,
        max_tokens: int,
        prefix_hashes: Sequence[int] = (),
        rate: RateLimit | None = None,
    ) -> RouteDecision | Refusal | None:
        """A decision, a refusal, or None when the model has no READY replica here (ask
        explain_miss why). `rate`: the tenant's request rate limit (None: none)."""
        if rate is not None:
            wait_s = self.rates.take(policy.tenant, rate.rps, rate.burst)
            if wait_s > 0:
                return Refusal(
                    RATE,
                    f"tenant {policy.tenant!r} is over its request rate of {rate.rps:g}/s "
                    f"(across every gateway); retry in {wait_s * 1000:.0f} ms",
                    wait_s,
                )
        mode = self.settings.mode
        work = prompt_tokens + max_tokens
        if mode is Mode.TWO_LEVEL:
            refusal = admit(policy, work, self.ledger, self.settings.admission)
            if refusal is not None:
                return refusal
        nodes = None
        if mode is Mode.STATIC:
            nodes = self.settings.partitions.get(policy.tenant)
            if nodes is None:
                return Refusal(
                    "partition",
                    f"tenant {policy.tenant!r} has no partition of "
                    f"nodes in this static-partitioning scheduler; add it to "
                    f"the partitions setting",
                    1.0,
                )
        two_level = mode is Mode.TWO_LEVEL
        decision = self._choose(model, policy, prompt_tokens, prefix_hashes, two_level, nodes)
        if decision is None:
            return None
        compute = max(0, prompt_tokens - decision.cached_blocks * decision.block_size)
        terms: TtftEstimate | None = None
        if two_level and self.settings.sla_check:
            judged = self._sla_judgement(model, policy, work, compute, decision)
            if isinstance(judged, Refusal) and judged.reason == "sla":
                # The router ranks by queued work; the check also prices the decodes the prompt
                # would be chunked beside. The next best replica elsewhere may meet the target.
                other = self._choose(
                    model,
                    policy,
                    prompt_tokens,
                    prefix_hashes,
                    two_level,
                    nodes,
                    exclude=decision.node_id,
                )
                if other is not None:
                    other_compute = max(0, prompt_tokens - other.cached_blocks * other.block_size)
                    second = self._sla_judgement(model, policy, work, other_compute, other)
                    if not isinstance(second, Refusal):
                        decision, compute, judged = other, other_compute, second
            if isinstance(judged, Refusal):
                return judged
            terms = judged
        self._routes += 1
        route_id = f"{self.route_prefix}{self._routes:x}"
        self.ledger.routed(
            decision.node_id,
            route_id,
            PendingRoute(
                decision.replica_id,
                policy.tenant,
                work,
                compute,
                policy.tpot_ms,
                policy.priority,
                self.registry.clock.now(),
            ),
        )
        return replace(decision, route_id=route_id, admitted_by=terms)

    def _choose(
        self,
        model: str,
        policy: TenantPolicy,
        prompt_tokens: int,
        prefix_hashes: Sequence[int],
        two_level: bool,
        nodes: frozenset[str] | None,
        exclude: str | None = None,
    ) -> RouteDecision | None:
        """The router's pick: within `nodes` (static mode); in two-level mode the best of the
        tenant's home while Homes.prefer says so, else the best anywhere; never on the node
        `exclude` (None: any)."""

        def pick(within: frozenset[str] | None, sample: int | None = None) -> RouteDecision | None:
            return self.router.route(
                model,
                policy.tenant,
                prompt_tokens,
                self.registry,
                prefix_hashes=prefix_hashes,
                index=self.index,
                priority=policy.priority if two_level else None,
                pending=self.ledger.pending_routes,
                nodes=within,
                sample_size=sample,
            )

        homes = self.homes
        by_node = self.registry.ready_index(model)[1]

        def without(within: frozenset[str] | None) -> frozenset[str] | None:
            if exclude is None:
                return within
            return (frozenset(by_node) if within is None else within) - {exclude}

        if not two_level or homes is None:
            return pick(without(nodes))
        now = self.registry.clock.now()
        homes.observe(policy.tenant, policy.guaranteed_share, now)
        members = self.registry.ready_members(model)
        home = homes.home(policy.tenant, model, by_node, members)
        reach = without(homes.reach(policy.tenant, model, by_node, members))
        if home is not None:
            home = without(home) or None

        def density(within: frozenset[str]) -> int | None:
            """A pass over `within` samples it as densely as the router samples the pool."""
            sample = self.router.sample_size
            return (
                max(1, math.ceil(sample * len(within) / max(1, len(by_node)))) if sample else None
            )

        best = pick(reach, None if reach is None else density(reach))
        if home is None or best is None or best.node_id in home:
            return best
        there = pick(home, density(home))
        if there is not None and homes.prefer(
            there.estimated_ttft_ms, best.estimated_ttft_ms, policy.ttft_ms
        ):
            return there
        return best

    def _sla_judgement(
        self, model: str, policy: TenantPolicy, work: int, compute: int, decision: RouteDecision
    ) -> Refusal | TtftEstimate | None:
        """The SLA check on the chosen replica: a Refusal, or the terms it admitted on (None
        when nothing was judged: no TTFT target within the best-effort wait, or nothing
        measured yet)."""
        slack = self.settings.sla_slack
        held = self._held(decision)
        wait_s = self._slot_wait_s(decision, work, policy, held)
        target = policy.ttft_ms
        if not target:
            if wait_s <= self.settings.best_effort_wait_s:
                return None
            return Refusal(
                "sla",
                f"the replicas of {model!r} are busy with requests of SLA classes: a "
                f"best-effort request would wait about {wait_s:.0f} s for an engine slot; "
                f"retry later",
                retry_after(wait_s - self.settings.best_effort_wait_s, 1.0),
            )
        if not decision.estimated_ttft_ms and not wait_s:
            return None  # nothing measured yet: no latency claim to judge
        # Once in the engine, the prompt's prefill goes in chunks beside the decodes there,
        # after the prompts queued ahead (at the replica's measured token rate).
        # While this class is about, a lower class's step on its replica is capped at a share of
        # its target (strata.policy.scheduling.step_cap); its own prompt's steps are not.
        cap_ms = STEP_TTFT_SHARE * target
        idle_ms, solo_ms, own_ms, lent_ms = self._own_prefill_ms(decision, compute, held)
        infeasible = self._infeasible(model, policy, work, decision, idle_ms)
        if infeasible is not None:
            return infeasible if self.settings.refuse_infeasible else None
        # Within the margin, or no worse than alone (a request near its target even when the
        # replica is idle goes when it is idle), as long as alone now meets the target: while
        # the node's interference says it would miss, it waits for a retry. A refused request
        # comes back no sooner than MIN_RETRY_S: when even then, alone, it would miss the
        # margin, a refusal cannot help it, and it goes whenever its estimate meets the target
        # within the step line's error (LINE_TOLERANCE: the line prices long prompts
        # high). Not where the retry's wait alone is past the margin (a class whose target is
        # within MIN_RETRY_S of it): every request of that class would then go with no margin.
        allowed = admission_allowance_ms(target, slack, self.settings.min_margin_ms)
        retry_ms = 1000.0 * MIN_RETRY_S
        if solo_ms + retry_ms > allowed and (retry_ms < allowed or solo_ms > allowed):
            allowed = target * (1.0 + LINE_TOLERANCE)
        node = self.registry.get(decision.node_id)
        terms = TtftEstimate(
            node_id=decision.node_id,
            slot_wait_ms=1000.0 * wait_s,
            ahead_ms=self._ahead_ms(decision, policy.priority, held, cap_ms),
            own_prefill_ms=own_ms,
            lent_ms=lent_ms,
            observed_ms=1000.0 * self._observed_s(decision, compute, policy.priority),
            solo_ms=solo_ms,
            allowed_ms=allowed,
            held_seqs=held.seqs,
            queued_ahead=0 if node is None else queued_ahead(node.tenants, policy),
        )
        estimate = terms.estimate_ms
        # A prompt past its target even alone (within LINE_TOLERANCE) is one a retry cannot
        # help: it goes while its estimate is within the line's error of the target (above).
        if estimate <= max(allowed, min(solo_ms, target)):
            return terms
        return Refusal(
            "sla",
            f"no replica of {model!r} can meet the {policy.sla_class} class's TTFT "
            f"target of {target:.0f} ms now (the best is estimated at {estimate:.0f} ms, "
            f"over the {allowed:.0f} ms admission allows); retry shortly or use a "
            f"class with a looser target",
            retry_after(max(wait_s, (estimate - target) / 1000.0), 1.0),
            terms,
        )

    def _ahead_ms(
        self, decision: RouteDecision, priority: int, held: DecodeLoad, cap_ms: float
    ) -> float:
        """The prompts queued ahead on the chosen replica, in ms: the router's estimate (every
        queued token, reported and routed since, at the replica's rate) scaled to the tokens a
        request of `priority` waits behind, as the engine serves prefill by class
        (strata.policy.scheduling.prefill_ahead), the lower classes' step under way as large
        as a step beside the decodes of `held` carries within the step cap `cap_ms`. A report
        that does not split its queued tokens by class keeps the router's estimate."""
        every_ms = max(0.0, decision.estimated_ttft_ms - decision.solo_ttft_ms)
        state = self._replica(decision)
        if every_ms and state is not None:
            every_ms *= self._still_queued(decision, state)
        if not every_ms or state is None or (state.queued_tokens and not state.queued_by_class):
            return every_ms
        pending = self.ledger.pending_by_class(decision.node_id, decision.replica_id)
        by_class = class_tokens(state.queued_by_class + pending)
        total = sum(n for _, n in by_class)
        if total <= 0:
            return every_ms
        step = state.max_batched_tokens
        if step > 0 and state.step_line is not None:
            beside = engine_share(state.step_line, held, state.max_seqs or None)
            limit = step_limit_ms(beside, cap_ms)
            step = chunk_budget(state.step_line, beside, step, decision.block_size, limit_ms=limit)
        return every_ms * tokens_ahead(by_class, priority, step) / total

    def _still_queued(self, decision: RouteDecision, state: ReplicaState) -> float:
        """The share of the chosen replica's queued prompt tokens, as reported and routed since,
        that its engine has not prefilled by now (strata.policy.scheduling.backlog: worked off
        from the report on at its measured rate, slowed by its node's safety margin); 1 where
        no rate is measured."""
        node = self.registry.get(decision.node_id)
        raw = state.queued_tokens + self.ledger.pending(decision.node_id, decision.replica_id)
        if node is None or raw <= 0 or state.tokens_per_s <= 0:
            return 1.0
        routed = self.ledger.routed_since(decision.node_id, decision.replica_id)
        rate = state.tokens_per_s / (1.0 + max(0.0, node.safety_margin))
        now = self.registry.clock.now()
        return backlog_tokens(state.queued_tokens, node.last_seen, routed, rate, now) / raw

    def _own_prefill_ms(
        self, decision: RouteDecision, compute: int, held: DecodeLoad
    ) -> tuple[float, float, float, float]:
        """This prompt's own prefill of `compute` tokens on the chosen replica, in ms: (alone on
        an idle machine, alone now, beside what its engine runs of `held` now, the slack its
        decodes lend it: _lent_ms). With the replica's step line, in its engine's chunks
        (beside decodes, as large as their TPOT targets and the slack they lend now allow);
        now is slowed by the node's safety margin (the interference it measures lately), idle
        is not. Without a line, the first three are the router's estimate at the replica's
        measured token rate (measured beside other requests' decodes, slower than a prefill
        alone), and nothing is lent."""
        state = self._replica(decision)
        node = self.registry.get(decision.node_id)
        if state is None or node is None or state.step_line is None:
            return decision.solo_ttft_ms, decision.solo_ttft_ms, decision.solo_ttft_ms, 0.0
        line, chunk, block = state.step_line, state.max_batched_tokens, decision.block_size
        beside = engine_share(line, held, state.max_seqs or None)
        slowdown = 1.0 + max(0.0, node.safety_margin)
        idle_ms = 1000.0 * solo_prefill_s(line, compute, block, chunk)
        lent = self._lent_ms(decision, state, held, beside)
        return (
            idle_ms,
            slowdown * idle_ms,
            1000.0
            * slowdown
            * prefill_s(line, beside, compute, block, max_chunk=chunk, lent_ms=lent),
            lent,
        )

    def _lent_ms(
        self, decision: RouteDecision, state: ReplicaState, held: DecodeLoad, beside: DecodeLoad
    ) -> float:
        """What the chosen replica's running decodes lend this prompt's first chunk, in ms
        beyond their tightest TPOT target x headroom, as its node last reported
        (ReplicaState.step_allowance_ms). None where anything comes before the prompt: prompt
        tokens queued or waiting in its engine (beyond the one token each running request's
        decode has pending), requests routed there since (their prompts spend the slack first,
        and they decode with none), or requests its node queues for a slot or holds beyond
        what its engine runs (`held` past `beside`)."""
        tightest = beside.tightest_tpot_ms
        node = self.registry.get(decision.node_id)
        if (
            state.step_allowance_ms <= 0
            or tightest is None
            or state.waiting_requests > 0
            or state.queued_tokens > state.running_requests
            or held.seqs > beside.seqs
            or node is None
            or any(t.queued for t in node.tenants)
            or self.ledger.pending_load(decision.node_id, decision.replica_id).seqs > 0
        ):
            return 0.0
        return max(0.0, state.step_allowance_ms - tightest * HEADROOM)

    def _infeasible(
        self, model: str, policy: TenantPolicy, work: int, decision: RouteDecision, idle_ms: float
    ) -> Refusal | None:
        """A refusal when the class's targets cannot hold for this request even alone on the
        chosen (best) replica of an idle machine (its first token there in `idle_ms` past the
        TTFT target by more than LINE_TOLERANCE of it), else None. Interference that
        slows it now is the SLA check's to judge: it passes, and a retry may then be served."""
        target = policy.ttft_ms
        if target and idle_ms > target * (1.0 + LINE_TOLERANCE):
            return Refusal(
                INFEASIBLE,
                f"this request's own prefill takes about {idle_ms:.0f} ms to its "
                f"first token on the fastest replica of {model!r}, past the {policy.sla_class} "
                f"class's TTFT target of {target:.0f} ms even when idle; shorten the prompt or "
                f"use a class with a looser target",
                0.0,
            )
        state = self._replica(decision)
        if policy.tpot_ms and state is not None and state.step_line is not None:
            alone = step_ms(state.step_line, DecodeLoad.of([(work, policy.tpot_ms)]))
            if alone > policy.tpot_ms:
                return Refusal(
                    INFEASIBLE,
                    f"one decode step of this request alone takes about {alone:.0f} ms on the "
                    f"replicas of {model!r}, past the {policy.sla_class} class's TPOT target "
                    f"of {policy.tpot_ms:.0f} ms; use a class with a looser target",
                    0.0,
                )
        return None

    def _replica(self, decision: RouteDecision) -> ReplicaState | None:
        node = self.registry.get(decision.node_id)
        if node is None:
            return None
        return next((r for r in node.replicas if r.replica_id == decision.replica_id), None)

    def _held(self, decision: RouteDecision) -> DecodeLoad:
        """What the chosen replica's node holds for it: its slots as reported, and the requests
        routed there since (in its slots or queue by now)."""
        state = self._replica(decision)
        reported = state.slots if state is not None else DecodeLoad()
        return reported.merged(self.ledger.pending_load(decision.node_id, decision.replica_id))

    def _slot_wait_s(
        self, decision: RouteDecision, work: int, policy: TenantPolicy, load: DecodeLoad
    ) -> float:
        """The wait for an engine slot on the chosen replica, which holds `load` (module
        docstring): behind the requests its node queues of the policy's class or above (its
        queue serves classes in strict priority). Where the node would displace a lower class
        for it (its engine runs one, and fewer of the class or above, running and queued ahead,
        than its slots: strata.policy.scheduling.slots; running as the node counts them over
        its replicas), no wait when what it displaces is best effort and no longer than
        URGENT_FRACTION of the class's TTFT target otherwise (strata.node.dispatcher)."""
        node = self.registry.get(decision.node_id)
        state = self._replica(decision)
        if node is None or state is None:
            return 0.0
        ahead = queued_ahead(node.tenants, policy)
        wait_s = self._turnover_wait_s(decision, work, policy, load, state, ahead)
        if policy.ttft_ms and state.max_seqs:
            above = sum(t.running for t in node.tenants if t.priority >= policy.priority)
            lower = [t for t in node.tenants if t.priority < policy.priority]
            if any(t.running for t in lower) and above + ahead < state.max_seqs:
                at_once = any(t.running_best_effort for t in lower)
                wait_s = 0.0 if at_once else min(wait_s, URGENT_FRACTION * policy.ttft_ms / 1e3)
        return wait_s

    def _turnover_wait_s(
        self,
        decision: RouteDecision,
        work: int,
        policy: TenantPolicy,
        load: DecodeLoad,
        state: ReplicaState,
        ahead: int,
    ) -> float:
        """_slot_wait_s by the replica's slot turnover alone: `ahead` queued before it."""
        turnover_s = state.slot_turnover_s
        if turnover_s <= 0 and state.step_line is not None and load.seqs:
            # No request has left a slot there yet: a typical request's decode at the step
            # time its line prices for what the engine will hold, over the requests it holds.
            cap = min(load.seqs, state.max_seqs or load.seqs)
            share = DecodeLoad(cap, load.context_tokens * cap // load.seqs)
            step_s = step_ms(state.step_line, share) / 1000.0
            turnover_s = step_s * self.router.request_weight_tokens / cap
        return slot_wait_s(
            state.step_line,
            load,
            state.max_seqs or None,
            ahead,
            work,
            policy.tpot_ms,
            turnover_s,
            passes=self.ledger.pending_below(
                decision.node_id, decision.replica_id, policy.priority
            ),
        )

    def _observed_s(self, decision: RouteDecision, compute: int, priority: int) -> float:
        """The first token as the chosen replica's latest requests of the class `priority`
        (or the nearest below it) say it comes: what they waited beyond their own prefill (its
        node's recent delay, strata.policy.scheduling.delays) plus this prompt's own prefill of
        `compute` tokens; 0 with no delay lately."""
        state = self._replica(decision)
        delay_s = 0.0 if state is None else class_delay_s(state.class_delays, priority)
        if state is None or delay_s <= 0:
            return 0.0
        own_s = solo_prefill_s(
            state.step_line, compute, decision.block_size, state.max_batched_tokens
        )
        return delay_s + own_s

    def explain_miss(self, model: str) -> RouteMiss:
        return self.router.explain_miss(model, self.registry)
