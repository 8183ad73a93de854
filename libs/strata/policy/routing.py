"""Level-1 routing: which READY replica in the cluster takes a request.

Each READY replica of the model gets a score; the lowest wins:

    key = (kv_short, est_s, -kv_blocks_free)

    kv_short        1 if the replica reports a KV pool whose free blocks cannot hold the prompt
                    (free_blocks * block_size < prompt_tokens_estimate), or requests held
                    back because every KV tier of its node is full (waiting_for_memory > 0): it
                    would have to queue or preempt before prefill, so any replica with room goes
                    first.
    est_s           the time until this request's first token there:
                    (ahead + prefill_tokens) / rate * (1 + safety_margin)
    ahead           the work tokens in front of the request: queued_tokens + running_requests *
                    request_weight_tokens + what this scheduler routed there that no report
                    of the node includes yet (its prompt tokens, and request_weight_tokens
                    for each such request: it will decode there too), whatever their class:
                    routing places load, and
                    every class's prompts slow the steps of everything on the replica
                    (measurements: docs/design/scheduling.md). The TTFT estimate the SLA check
                    judges counts them as the engine serves prefill, by class (strata.policy.
                    scheduling.prefill_ahead, in the global scheduler). Queued
                    tokens are prompt tokens not yet prefilled; a running request counts as
                    `request_weight_tokens` tokens, the decode it still has to do (a typical
                    chat answer), so one long prompt and many short decodes compare.
    prefill_tokens  the prompt tokens this replica would still have to compute:
                    prompt_tokens_estimate - cached_blocks * block_size, floored at 0, where
                    cached_blocks is how many leading blocks of the prompt's hash chain the
                    replica's node holds (strata.policy.kv_index). A node holding the prefix wins
                    unless its queue is longer than the prefill it saves.
    rate            the replica's prefill throughput (tokens per second of full prefill steps,
                    measured by its worker); the mean of the candidates' known rates for one
                    that has none yet (1 when none has: est_s is then in tokens, and no latency
                    estimate is claimed)
    safety_margin   the node's interference margin (strata.policy.scheduling.interference): a
                    node whose steps run slower than its solo profile looks that much further
    free blocks     more free KV blocks = more room for this request's prefix and decode.

With a request class (`priority`), est_s also carries the interference the request would cause
there: its own prefill runs in the steps of every sequence decoding on that replica, stalling
each of them for about the prefill's time (chunked prefill shares the step). Sequences of other
tenants with an SLA (priority >= 1) at or above the request's class count:

    est_s += interference_weight * prefill_s * (their running sequences on the node)

so a best-effort or aggressive tenant's prompts go where they stall the fewest protected
decodes, and tenants segregate by class across the pool as far as load allows: a soft,
load-following partition instead of a static one.

The decision carries the chosen replica's estimated time to first token: the same formula
without the running requests' decode (chunked prefill runs a new prompt next to the decodes, so
they slow each step a little but do not queue ahead of it); the global scheduler checks it
against the class's TTFT target.

Replicas with equal keys are drawn uniformly with the injected RNG; with `tie_tolerance` > 0,
every replica whose est_s exceeds the best's by at most that fraction of the best's wait (its
est_s less the request's own prefill there) is drawn from: several scheduler replicas routing
from the same heartbeats would otherwise all send the next burst to one node. The tolerance is
a share of the wait, not of est_s, so a long prompt is not sent behind a queue of a tenth of its
own prefill when a replica is idle: an idle best has no wait, and only its equals tie with it.

With `sample_size` > 0 and more READY replicas than that, the router scores the replicas of the
nodes holding the prompt's prefix plus `sample_size` others drawn at random (the power of d
choices): a decision over 1,000 nodes then costs what one over a hundred does, and two routers
rarely draw the same sample. Restricted to a set of nodes (a partition, a home), it draws
`sample_size` of those nodes and scores their replicas.

When another live node holds at least `min_source_gain_blocks` more leading blocks than the
chosen one, the decision names that node's KV tier store as a source: the chosen node pulls the
longer prefix from it instead of recomputing it.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from strata.core.blocks import DEFAULT_BLOCK_SIZE, block_tokens
from strata.policy.kv_index import KVSource, PrefixIndex
from strata.policy.registry import NodeRegistry, ReplicaLocation, ReplicaPhase
from strata.policy.scheduling.admission import TtftEstimate

REQUEST_WEIGHT_TOKENS = 128  # decode tokens a running request still costs, on average
# One block is a few tokens of prefill, less than a pull's fixed cost (a round trip to the peer's
# store before the first byte, then the copy into this node's tiers); two or more are worth it.
MIN_SOURCE_GAIN_BLOCKS = 2
ORDERS_KEPT = 64  # node sets whose id order a Router keeps


@dataclass(slots=True, frozen=True)
class RouteDecision:
    node_id: str
    address: str  # node manager address: where the caller submits the request
    replica_id: str
    cached_blocks: int = 0  # leading prompt blocks the chosen node holds
    kv_source: KVSource | None = None  # another node's store holding a longer prefix
    estimated_ttft_ms: float = 0.0  # 0 when no candidate has a measured rate yet
    solo_ttft_ms: float = 0.0  # the same with nothing queued ahead (its own prefill)
    block_size: int = DEFAULT_BLOCK_SIZE  # tokens per KV block on the chosen replica
    # The scheduler's name for this decision (GlobalScheduler.route); the caller passes it to
    # the node with the request. Empty from the Router alone.
    route_id: str = ""
    # The SLA check's terms when it admitted the request (GlobalScheduler.route; None: not
    # judged), so a trace of an admitted request can be read against its actual first token.
    admitted_by: TtftEstimate | None = None


class MissKind(enum.Enum):
    UNKNOWN_MODEL = "unknown_model"  # no node ever advertised it: NOT_FOUND
    NO_READY_REPLICA = "no_ready_replica"  # known, but nothing READY now: UNAVAILABLE, retry


@dataclass(slots=True, frozen=True)
class RouteMiss:
    kind: MissKind
    message: str  # a sentence the caller can act on


@dataclass(slots=True)
class Router:
    rng: random.Random
    request_weight_tokens: int = REQUEST_WEIGHT_TOKENS
    min_source_gain_blocks: int = MIN_SOURCE_GAIN_BLOCKS
    sample_size: int = 0  # 0: score every READY replica
    tie_tolerance: float = 0.0  # draw among replicas within this fraction of the best's wait
    interference_weight: float = 1.0
    _orders: dict[frozenset[str], tuple[str, ...]] = field(
        default_factory=dict, init=False, repr=False
    )

    def __post_init__(self) -> None:
        if self.sample_size < 0 or not 0.0 <= self.tie_tolerance < 1.0:
            raise ValueError(
                f"sample_size must be >= 0 and tie_tolerance in [0, 1), got "
                f"{self.sample_size}, {self.tie_tolerance}"
            )
        if self.request_weight_tokens < 0:
            raise ValueError(
                f"request_weight_tokens must be >= 0, got {self.request_weight_tokens}"
            )
        if self.min_source_gain_blocks < 1:
            raise ValueError(
                f"min_source_gain_blocks must be positive, got {self.min_source_gain_blocks}"
            )

    def route(
        self,
        model: str,
        tenant: str,
        prompt_tokens_estimate: int,
        registry: NodeRegistry,
        prefix_hashes: Sequence[int] = (),
        index: PrefixIndex | None = None,
        priority: int | None = None,
        pending: Callable[[str, str], tuple[int, int]] | None = None,
        nodes: Collection[str] | None = None,
        sample_size: int | None = None,
    ) -> RouteDecision | None:
        """The best READY replica of `model`, or None when there is none (see explain_miss).

        `prefix_hashes` is the prompt's block hash chain (empty when the caller cannot compute
        it); with an `index` it credits each node with the blocks it already holds. `priority`
        (the tenant's class) adds the interference term; `pending(node_id, replica_id)` is
        (prompt tokens, requests) routed there that no report of the node includes yet;
        `nodes` restricts the choice (a static partition, a home); `sample_size` overrides the
        router's for this decision. `tenant` does not change the score:
        it is already in the hashes. Quotas and SLA admission are the caller's (strata.policy.
        scheduling.global_scheduler).
        """
        sample = self.sample_size if sample_size is None else sample_size
        candidates = self._candidates(model, registry, prefix_hashes, index, nodes, sample)
        if not candidates:
            return None
        depths = index.prefix_depths(prefix_hashes) if index is not None and prefix_hashes else {}
        known_sum, known_n = 0.0, 0
        for loc in candidates:
            if loc.replica.tokens_per_s > 0:
                known_sum += loc.replica.tokens_per_s
                known_n += 1
        known = known_n > 0
        fallback = known_sum / known_n if known else 1.0
        # The hot loop of every decision: locals, no calls but the pending lookup.
        weight = self.request_weight_tokens
        interference = self.interference_weight if priority is not None else 0.0
        floor = max(1, priority or 0)
        keys = []
        own = []  # the request's own prefill on each candidate, in est_s's units
        for loc in candidates:
            node, replica = loc.node, loc.replica
            ahead = replica.queued_tokens + replica.running_requests * weight
            if pending is not None:
                tokens, requests = pending(node.node_id, replica.replica_id)
                ahead += tokens + requests * weight
            block = replica.block_size or DEFAULT_BLOCK_SIZE
            prefill = prompt_tokens_estimate - depths.get(node.node_id, 0) * block
            if prefill < 0:
                prefill = 0
            rate = replica.tokens_per_s if replica.tokens_per_s > 0 else fallback
            margin = node.safety_margin
            slow = 1.0 + margin if margin > 0 else 1.0
            est = (ahead + prefill) / rate * slow
            own.append(prefill / rate * slow)
            if interference and node.tenants:
                victims = 0
                for t in node.tenants:
                    if t.priority >= floor and t.tenant != tenant:
                        victims += t.running
                est += interference * prefill / rate * victims
            free = replica.kv_blocks_free
            short = replica.waiting_for_memory > 0 or (
                replica.kv_blocks_total > 0 and free * block < prompt_tokens_estimate
            )
            keys.append((1 if short else 0, est, -free))
        best = min(range(len(keys)), key=keys.__getitem__)
        best_key = keys[best]
        if self.tie_tolerance > 0:
            bound = best_key[1] + self.tie_tolerance * (best_key[1] - own[best])
            tied = [
                loc
                for loc, key in zip(candidates, keys)
                if key[0] == best_key[0] and key[1] <= bound
            ]
        else:
            tied = [loc for loc, key in zip(candidates, keys) if key == best_key]
        if len(tied) == 1:
            chosen = tied[0]
        else:
            # Sorted by (node id, replica id), so a seeded RNG picks reproducibly.
            tied.sort(key=lambda loc: (loc.node.node_id, loc.replica.replica_id))
            chosen = self.rng.choice(tied)
        cached = depths.get(chosen.node.node_id, 0)
        ttft_ms = solo_ms = 0.0
        if known:
            node, replica = chosen.node, chosen.replica
            queued = replica.queued_tokens + (
                pending(node.node_id, replica.replica_id)[0] if pending is not None else 0
            )
            prefill = max(0, prompt_tokens_estimate - cached * block_tokens(replica.block_size))
            rate = replica.tokens_per_s if replica.tokens_per_s > 0 else fallback
            slowdown = 1.0 + max(0.0, node.safety_margin)
            ttft_ms = (queued + prefill) / rate * 1000.0 * slowdown
            solo_ms = prefill / rate * 1000.0 * slowdown
        source = None
        # depths come from the index: never without one
        if (
            index is not None
            and depths
            and max(depths.values()) >= cached + self.min_source_gain_blocks
        ):
            found = index.best_source(
                prefix_hashes, exclude_node=chosen.node.node_id, among=_LiveNodes(registry)
            )
            if found is not None and found.blocks >= cached + self.min_source_gain_blocks:
                source = found
        return RouteDecision(
            node_id=chosen.node.node_id,
            address=chosen.node.address,
            replica_id=chosen.replica.replica_id,
            cached_blocks=cached,
            block_size=block_tokens(chosen.replica.block_size),
            kv_source=source,
            estimated_ttft_ms=ttft_ms,
            solo_ttft_ms=solo_ms,
        )

    def _candidates(
        self,
        model: str,
        registry: NodeRegistry,
        prefix_hashes: Sequence[int],
        index: PrefixIndex | None,
        nodes: Collection[str] | None,
        sample_size: int,
    ) -> list[ReplicaLocation]:
        items, by_node = registry.ready_index(model)
        sampled = False
        if nodes is not None:
            if len(nodes) < len(by_node):
                # In node-id order, so a seeded RNG samples from the same order every time;
                # sampled by node (a node's replicas of the model come together), so a
                # decision costs the sample, not the size of `nodes`.
                ids = self._ordered(nodes)
                if sample_size and len(ids) > sample_size:
                    ids = self.rng.sample(ids, sample_size)
                    sampled = True
                items = [loc for n in ids for loc in by_node.get(n, ())]
            else:
                items = [loc for loc in items if loc.node.node_id in nodes]
        if not sampled and sample_size and len(items) > sample_size:
            items = self.rng.sample(items, sample_size)
            sampled = True
        if sampled and index is not None and prefix_hashes:
            picked = {id(loc): loc for loc in items}
            for node_id in index.prefix_depths(prefix_hashes[:1]):
                for loc in by_node.get(node_id, ()):
                    if nodes is None or node_id in nodes:
                        picked[id(loc)] = loc
            items = list(picked.values())
        oldest = registry.clock.now() - registry.ttl_s
        return [loc for loc in items if loc.node.last_seen >= oldest]

    def _ordered(self, nodes: Collection[str]) -> Sequence[str]:
        """`nodes` in node-id order; kept per frozenset (the partitions and homes the
        scheduler passes again and again), a few dozen at most."""
        if not isinstance(nodes, frozenset):
            return sorted(nodes)
        found = self._orders.get(nodes)
        if found is None:
            if len(self._orders) >= ORDERS_KEPT:
                self._orders.clear()
            found = self._orders[nodes] = tuple(sorted(nodes))
        return found

    @staticmethod
    def explain_miss(model: str, registry: NodeRegistry) -> RouteMiss:
        """Why route() returned None for `model`: unknown to the cluster, or not ready now."""
        if not registry.knows_model(model):
            known = registry.known_models()
            listing = ", ".join(known) if known else "none yet (no node has advertised a model)"
            return RouteMiss(
                MissKind.UNKNOWN_MODEL,
                f"model '{model}' is not served by this cluster; known models: {listing}",
            )
        phases = [loc.replica.phase for loc in registry.replicas(model)]
        if not phases:
            return RouteMiss(
                MissKind.NO_READY_REPLICA,
                f"model '{model}' has no replica on any live node right now; retry "
                f"once the placement planner has loaded one",
            )
        counts = ", ".join(
            f"{phases.count(p)} {p.value}"
            for p in ReplicaPhase
            if p is not ReplicaPhase.READY and phases.count(p)
        )
        return RouteMiss(
            MissKind.NO_READY_REPLICA,
            f"model '{model}' has no ready replica right now ({counts}); retry in a few seconds",
        )


class _LiveNodes:
    """`node_id in live` for the registry's live nodes, without building the set per request."""

    __slots__ = ("_registry",)

    def __init__(self, registry: NodeRegistry) -> None:
        self._registry = registry

    def __contains__(self, node_id: object) -> bool:
        return isinstance(node_id, str) and self._registry.get(node_id) is not None
