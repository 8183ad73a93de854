"""Level-1 decision latency at 1,000 nodes: the global scheduler's route() per request, with the
registry taking every node's heartbeat once a second in between, as the service does.

    full scan   Router with sample_size 0: scores every READY replica (the router before issue
                7 also rebuilt and sorted the candidate list per request; it is measured too)
    sampled     the service's settings: 64 random replicas + the prefix holders, ties within 10%

Each decision goes through GlobalScheduler.route (admission, routing, SLA check, ledger), with
4 tenants' loads on every node and a prefix index holding one shared prefix on 8 nodes.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from strata.core.stats import percentiles
from strata.core.tenant_policy import TenantPolicy
from strata.policy.clock import ManualClock
from strata.policy.kv_index import PrefixIndex
from strata.policy.registry import (
    NodeRegistry,
    NodeState,
    ReplicaPhase,
    ReplicaState,
    TenantLoad,
)
from strata.policy.routing import Router
from strata.policy.scheduling.global_scheduler import GlobalScheduler
from strata.policy.scheduling.ledger import PoolLedger

TENANTS = ("chat", "api", "batch", "agg")
PRIORITIES = {"chat": 2, "api": 1, "batch": 0, "agg": 1}


@dataclass(slots=True)
class LatencyResult:
    name: str
    nodes: int
    decisions: int
    p50_us: float
    p99_us: float
    max_us: float
    heartbeat_us: float  # mean cost of one heartbeat (index + ledger update)


def _node(i: int, rng: random.Random) -> NodeState:
    replica = ReplicaState(
        model="m",
        replica_id=f"r{i}",
        phase=ReplicaPhase.READY,
        queued_tokens=rng.randrange(0, 4000),
        running_requests=rng.randrange(0, 32),
        kv_blocks_total=4096,
        kv_blocks_free=rng.randrange(0, 4096),
        max_seqs=32,
        tokens_per_s=rng.uniform(2000, 4000),
    )
    tenants = tuple(
        TenantLoad(
            t, PRIORITIES[t], rng.randrange(0, 8), rng.randrange(0, 8), rng.randrange(0, 20000)
        )
        for t in TENANTS
    )
    return NodeState(
        node_id=f"node-{i:04d}",
        address=f"10.0.{i // 250}.{i % 250}:50053",
        replicas=(replica,),
        tenants=tenants,
        safety_margin=rng.choice((0.0, 0.0, 0.1, 0.3)),
    )


def measure(
    name: str, router: Router, nodes: int = 1000, decisions: int = 20000, seed: int = 0
) -> LatencyResult:
    rng = random.Random(seed)
    clock = ManualClock()
    registry = NodeRegistry(clock=clock, ttl_s=5.0)
    index = PrefixIndex()
    gs = GlobalScheduler(registry, router, PoolLedger(), index)
    for i in range(nodes):
        registry.heartbeat(_node(i, rng))
    shared = [rng.getrandbits(63) for _ in range(32)]
    for i in range(0, 8 * (nodes // 8), nodes // 8):
        index.apply(f"node-{i:04d}", f"kv-{i}:50057", 1, True, shared, ())
    policies = [
        TenantPolicy(t, "c", PRIORITIES[t], 2000.0 if t == "chat" else None, None, 1.0, 0.1, 1.0)
        for t in TENANTS
    ]
    # One heartbeat per node per second; at 1,000 nodes and ~20,000 decisions per second of
    # simulated traffic, one heartbeat every 20 decisions keeps both rates.
    per_heartbeat = max(1, decisions // (nodes * 1))
    samples: list[float] = []
    hb_total = 0.0
    hb_count = 0
    counter = time.perf_counter_ns
    for k in range(decisions):
        if k % max(1, per_heartbeat // 20 or 1) == 0:
            node = _node(rng.randrange(nodes), rng)
            t0 = counter()
            registry.heartbeat(node)
            hb_total += counter() - t0
            hb_count += 1
        p = policies[k % len(policies)]
        prefix = shared if k % 4 == 0 else ()
        clock.advance(0.00005)
        t0 = counter()
        gs.route("m", p, 512, 128, prefix_hashes=prefix)
        samples.append((counter() - t0) / 1000.0)
    p50, p99 = percentiles(samples, (50.0, 99.0))
    return LatencyResult(
        name, nodes, decisions, p50, p99, max(samples), hb_total / max(1, hb_count) / 1000.0
    )


def run(nodes: int = 1000, decisions: int = 20000) -> list[LatencyResult]:
    full = Router(rng=random.Random(1))
    sampled = Router(rng=random.Random(1), sample_size=64, tie_tolerance=0.1)
    return [
        measure("full scan (every replica scored)", full, nodes, decisions // 4),
        measure("sampled (64 + prefix holders)", sampled, nodes, decisions),
    ]


if __name__ == "__main__":
    for r in run():
        print(r)
