"""Multi-tenant scheduling in the simulator: the node's fair queue in front of engine slots,
class priorities, client retries after a refusal, static partitions; exact times from a flat
cost line."""

import pytest

from strata.core.profile import StepCosts
from strata.core.tenant_policy import TenantPolicy
from strata.policy.clock import ManualClock
from strata.policy.placement import ModelDemand
from strata.policy.scheduling.admission import MIN_RETRY_S, AdmissionSettings
from strata.policy.scheduling.fair_queue import QueueItem
from strata.policy.scheduling.global_scheduler import Mode, SchedulerSettings
from strata.sim.cluster import ModelSpec, SimConfig, Simulator
from strata.sim.replica import EngineLimits
from strata.sim.tenancy import NodeFront, Tenancy
from strata.sim.workload import SimRequest

# 1 ms per step + 0.1 ms per token: a prefill of 20 tokens takes 3 ms, a decode 1.1 ms.
FLAT = StepCosts(step_s=1e-3, token_s=1e-4, sample_s=0.0, prefill_attend_s=0.0, decode_attend_s=0.0)
MB = 10**6
POLICIES = {
    "chat": TenantPolicy("chat", "interactive", 2, 500.0, None),
    "bulk": TenantPolicy("bulk", "batch", 0),
}


def simulator(tenancy, nodes=1, max_seqs=1):
    limits = EngineLimits(
        num_blocks=64, block_size=16, max_batched_tokens=256, max_seqs=max_seqs, max_context=1024
    )
    spec = ModelSpec("a", FLAT, limits, memory_bytes=10 * MB)
    return Simulator(
        [(f"node-{i}", 10 * MB) for i in range(nodes)],
        [spec],
        lambda now: [ModelDemand("a", 10 * MB, nodes)],
        SimConfig(),
        tenancy=tenancy,
    )


def req(index, at, tenant, output=10):
    return SimRequest(index, at, 20, output, "a", tenant=tenant)


def by_id(result):
    return {int(r.request_id): r for r in result.rows}


def test_the_fair_queue_lets_a_higher_class_take_a_best_effort_slot_at_once():
    # One slot; bulk 0 runs (3 + 9 x 1.1 = 12.9 ms), bulk 1 and 2 wait, chat arrives at 1 ms.
    work = [
        req(0, 0.0, "bulk"),
        req(1, 0.0005, "bulk"),
        req(2, 0.0006, "bulk"),
        req(3, 0.001, "chat"),
    ]
    wfq = by_id(simulator(Tenancy(SchedulerSettings(), POLICIES, queue="wfq")).run(work))
    fcfs = by_id(
        simulator(Tenancy(SchedulerSettings(mode=Mode.FCFS), POLICIES, queue="fcfs")).run(work)
    )
    # wfq: chat displaces the best-effort bulk 0 at once, in the engine's next step
    assert wfq[3].ttft_ms < 12.9
    assert wfq[0].ttft_ms == pytest.approx(3.0)  # bulk 0's first token came before
    # fcfs: behind all three bulk requests
    assert fcfs[3].ttft_ms == pytest.approx(3 * 12.9 + 3.0 - 1.0)
    assert wfq[2].ttft_ms > fcfs[2].ttft_ms


def test_a_refused_client_retries_and_its_latency_counts_from_the_first_attempt():
    # The pool admits 1 x (64 blocks x 16 tokens) = 1024 work tokens (its compute in the 1 s
    # horizon is more); bulk may hold 10% of it, 102 tokens: three requests of 30 tokens fit,
    # the fourth and fifth are refused. Before a step the replica's rate is its step line's,
    # at which bulk's share drains the 18 tokens over its cap in less than the shortest hint.
    policies = {"bulk": TenantPolicy("bulk", "batch", 0, burst_share=0.1)}
    tenancy = Tenancy(
        SchedulerSettings(admission=AdmissionSettings(horizon_s=1.0)), policies, queue="wfq"
    )
    sim = simulator(tenancy, max_seqs=8)
    rows = by_id(sim.run([req(i, 0.0001 * i, "bulk") for i in range(5)]))
    assert all(not r.error_code for r in rows.values())
    assert sim.refusals[("bulk", "burst")] == 2
    assert max(rows[i].ttft_ms for i in range(3)) < 10.0
    assert sim.scheduler is not None and sim.scheduler.ledger.tokens_per_s > 0
    assert min(rows[3].ttft_ms, rows[4].ttft_ms) > 1000.0 * MIN_RETRY_S - 0.4


def test_a_client_that_is_refused_past_its_patience_fails_resource_exhausted():
    policies = {"bulk": TenantPolicy("bulk", "batch", 0, burst_share=0.01)}
    tenancy = Tenancy(SchedulerSettings(), policies, queue="wfq", give_up_s=0.0)
    rows = by_id(
        simulator(tenancy, max_seqs=8).run([req(0, 0.0, "bulk", output=200), req(1, 0.001, "bulk")])
    )
    assert rows[0].error_code == ""
    assert (rows[1].error_code, rows[1].ttft_ms) == ("RESOURCE_EXHAUSTED", None)


def test_static_partitions_keep_each_tenant_on_its_nodes():
    tenancy = Tenancy(
        SchedulerSettings(
            mode=Mode.STATIC,
            partitions={"chat": frozenset({"node-0"}), "bulk": frozenset({"node-1"})},
        ),
        POLICIES,
        queue="fcfs",
    )
    sim = simulator(tenancy, nodes=2, max_seqs=4)
    sim.run([req(i, 0.001 * i, "bulk" if i % 2 else "chat") for i in range(6)])
    nodes = {
        i: sim.replicas[rid].node_id if rid in sim.replicas else rid
        for i, rid in sim.routed.items()
    }
    assert {nodes[i] for i in (0, 2, 4)} == {"node-0"}
    assert {nodes[i] for i in (1, 3, 5)} == {"node-1"}


@pytest.mark.parametrize("kind", ["wfq", "fcfs"])
def test_the_node_front_counts_ahead_only_what_a_request_cannot_pass(kind):
    clock = ManualClock()
    front: NodeFront[int] = NodeFront.build(kind, clock)
    for i in range(3):  # three batch requests queue for r
        front.push(QueueItem(f"b{i}", "bulk", "a", 0, 20, 10, replica_id="r"), i)
    front.push(QueueItem("c", "chat", "a", 2, 20, 10, ttft_ms=500.0, replica_id="r"), 3)
    ahead, priority = front.first_tokens._ahead["c"]
    # wfq serves chat's class first: nothing ahead of it; fcfs passes nobody, classless.
    assert (ahead, priority) == ((0, 2) if kind == "wfq" else (3, 0))
