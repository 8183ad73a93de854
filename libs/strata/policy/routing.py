"""Level-1 routing: which READY replica in the cluster takes a request.

Each READY replica of the model gets a score; the lowest wins:

    key = (kv_short, load_tokens + prefill_tokens, -kv_blocks_free)

    kv_short        1 if the replica reports a KV pool whose free blocks cannot hold the prompt
                    (free_blocks * kv_block_tokens < prompt_tokens_estimate), or requests held
                    back because every KV tier of its node is full (waiting_for_memory > 0): it
                    would have to queue or preempt before prefill, so any replica with room goes
                    first.
    load_tokens     queued_tokens + running_requests * request_weight_tokens, in tokens of work
                    still ahead of the replica. Queued tokens are prompt tokens not yet
                    prefilled; a running request is counted as `request_weight_tokens` tokens, the
                    decode it still has to do (a typical chat answer), so one long prompt and many
                    short decodes compare.
    prefill_tokens  the prompt tokens this replica would still have to compute:
                    prompt_tokens_estimate - cached_blocks * kv_block_tokens, floored at 0, where
                    cached_blocks is how many leading blocks of the prompt's hash chain the
                    replica's node holds (strata.policy.kv_index). A node holding the prefix wins
                    unless its queue is longer than the prefill it saves.
    free blocks     more free KV blocks = more room for this request's prefix and decode.

Replicas with equal keys are drawn uniformly with the injected RNG: several scheduler replicas
routing from the same heartbeats would otherwise all send the next burst to the same node.

When another live node holds at least `min_source_gain_blocks` more leading blocks than the
chosen one, the decision names that node's KV tier store as a source: the chosen node pulls the
longer prefix from it instead of recomputing it.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Sequence
from dataclasses import dataclass

from strata.policy.kv_index import KVSource, PrefixIndex
from strata.policy.registry import NodeRegistry, ReplicaPhase, ReplicaState

REQUEST_WEIGHT_TOKENS = 128   # decode tokens a running request still costs, on average
KV_BLOCK_TOKENS = 16          # tokens per KV block in the engine's paged pool
# One block is a few tokens of prefill, less than a pull's fixed cost (a round trip to the peer's
# store before the first byte, then the copy into this node's tiers); two or more are worth it.
MIN_SOURCE_GAIN_BLOCKS = 2


@dataclass(slots=True, frozen=True)
class RouteDecision:
    node_id: str
    address: str        # node manager address: where the caller submits the request
    replica_id: str
    cached_blocks: int = 0              # leading prompt blocks the chosen node holds
    kv_source: KVSource | None = None   # another node's store holding a longer prefix


class MissKind(enum.Enum):
    UNKNOWN_MODEL = "unknown_model"          # no node ever advertised it: NOT_FOUND
    NO_READY_REPLICA = "no_ready_replica"    # known, but nothing READY now: UNAVAILABLE, retry


@dataclass(slots=True, frozen=True)
class RouteMiss:
    kind: MissKind
    message: str        # a sentence the caller can act on


@dataclass(slots=True)
class Router:
    rng: random.Random
    request_weight_tokens: int = REQUEST_WEIGHT_TOKENS
    kv_block_tokens: int = KV_BLOCK_TOKENS
    min_source_gain_blocks: int = MIN_SOURCE_GAIN_BLOCKS

    def __post_init__(self) -> None:
        if self.request_weight_tokens < 0:
            raise ValueError(f"request_weight_tokens must be >= 0, got {self.request_weight_tokens}")
        if self.kv_block_tokens <= 0:
            raise ValueError(f"kv_block_tokens must be positive, got {self.kv_block_tokens}")
        if self.min_source_gain_blocks < 1:
            raise ValueError(f"min_source_gain_blocks must be positive, got "
                             f"{self.min_source_gain_blocks}")

    def load_tokens(self, replica: ReplicaState) -> int:
        return replica.queued_tokens + replica.running_requests * self.request_weight_tokens

    def score(self, replica: ReplicaState, prompt_tokens_estimate: int,
              cached_blocks: int = 0) -> tuple[int, int, int]:
        # A replica reporting no pool (total 0) has not measured it yet: do not penalise it.
        # Cached blocks do not relieve kv_short: the index counts every tier, and a block on
        # disk still needs a free device block to be loaded into.
        kv_short = int(replica.waiting_for_memory > 0
                       or (replica.kv_blocks_total > 0
                           and replica.kv_blocks_free * self.kv_block_tokens
                           < prompt_tokens_estimate))
        prefill = max(0, prompt_tokens_estimate - cached_blocks * self.kv_block_tokens)
        return kv_short, self.load_tokens(replica) + prefill, -replica.kv_blocks_free

    def route(self, model: str, tenant: str, prompt_tokens_estimate: int,
              registry: NodeRegistry, prefix_hashes: Sequence[int] = (),
              index: PrefixIndex | None = None) -> RouteDecision | None:
        """The best READY replica of `model`, or None when there is none (see explain_miss).

        `prefix_hashes` is the prompt's block hash chain (empty when the caller cannot compute
        it); with an `index` it credits each node with the blocks it already holds. `tenant`
        does not change the load score: every tenant's request costs a replica the same (the
        tenant is already in the hashes). Tenant quotas and SLA slack are applied around this
        call by the scheduling policy.
        """
        candidates = registry.ready_replicas(model)
        if not candidates:
            return None
        depths = index.prefix_depths(prefix_hashes) if index is not None and prefix_hashes else {}
        keys = [self.score(loc.replica, prompt_tokens_estimate, depths.get(loc.node.node_id, 0))
                for loc in candidates]
        best_key = min(keys)
        # candidates are sorted by (node id, replica id), so a seeded RNG picks reproducibly.
        tied = [loc for loc, key in zip(candidates, keys) if key == best_key]
        chosen = tied[0] if len(tied) == 1 else self.rng.choice(tied)
        cached = depths.get(chosen.node.node_id, 0)
        source = None
        if depths and max(depths.values()) >= cached + self.min_source_gain_blocks:
            live = {n.node_id for n in registry.nodes()}
            found = index.best_source(prefix_hashes, exclude_node=chosen.node.node_id, among=live)
            if found is not None and found.blocks >= cached + self.min_source_gain_blocks:
                source = found
        return RouteDecision(node_id=chosen.node.node_id, address=chosen.node.address,
                             replica_id=chosen.replica.replica_id, cached_blocks=cached,
                             kv_source=source)

    @staticmethod
    def explain_miss(model: str, registry: NodeRegistry) -> RouteMiss:
        """Why route() returned None for `model`: unknown to the cluster, or not ready now."""
        if not registry.knows_model(model):
            known = registry.known_models()
            listing = ", ".join(known) if known else "none yet (no node has advertised a model)"
            return RouteMiss(MissKind.UNKNOWN_MODEL,
                             f"model '{model}' is not served by this cluster; known models: {listing}")
        phases = [loc.replica.phase for loc in registry.replicas(model)]
        if not phases:
            return RouteMiss(MissKind.NO_READY_REPLICA,
                             f"model '{model}' has no replica on any live node right now; retry "
                             f"once the placement planner has loaded one")
        counts = ", ".join(f"{phases.count(p)} {p.value}" for p in ReplicaPhase
                           if p is not ReplicaPhase.READY and phases.count(p))
        return RouteMiss(MissKind.NO_READY_REPLICA,
                         f"model '{model}' has no ready replica right now ({counts}); retry in a "
                         f"few seconds")
