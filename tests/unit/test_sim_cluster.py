"""The cluster simulator: exact step times from a known cost line, one GPU shared by co-located
replicas, routing from heartbeats, placement and replans, errors, node samples, and fast-forward
giving the same per-request latencies as exact stepping."""

import random

import pytest

from strata.core.profile import RequestOverheads, StepCosts
from strata.eval.synthetic import Uniform, poisson_arrivals, requests_at
from strata.eval.workload import Scaling, Window
from strata.policy.placement import (
    Assignment,
    ModelDemand,
    PlacementPlan,
    Unload,
    plan_placement,
)
from strata.policy.registry import ReplicaPhase
from strata.sim.cluster import ModelSpec, SimConfig, Simulator
from strata.sim.replica import EngineLimits
from strata.sim.workload import SimRequest, sim_requests

# 1 ms per step + 0.1 ms per token: a prefill of 20 tokens takes 3 ms, a decode 1.1 ms.
FLAT = StepCosts(step_s=1e-3, token_s=1e-4, sample_s=0.0, prefill_attend_s=0.0, decode_attend_s=0.0)
LIMITS = EngineLimits(
    num_blocks=64, block_size=16, max_batched_tokens=256, max_seqs=8, max_context=1024
)
MB = 10**6


def spec(name="a", costs=FLAT, limits=LIMITS, overheads=RequestOverheads()):
    return ModelSpec(name, costs, limits, memory_bytes=10 * MB, overheads=overheads)


def simulator(nodes=(("node-0", 100 * MB),), models=(spec(),), replicas=None, **cfg):
    wanted = replicas or {m.name: 1 for m in models}
    demands = [ModelDemand(m.name, m.memory_bytes, wanted[m.name]) for m in models]
    return Simulator(list(nodes), list(models), lambda now: demands, SimConfig(**cfg))


def req(index, at, prompt=20, output=3, model="a"):
    return SimRequest(index, at, prompt, output, model)


def by_id(result):
    return {int(r.request_id): r for r in result.rows}


@pytest.mark.parametrize("fast_forward", [False, True])
def test_one_request_takes_the_profiled_step_times(fast_forward):
    result = simulator(fast_forward=fast_forward).run([req(0, 0.5)])
    [row] = result.rows
    assert row.ttft_ms == pytest.approx(3.0)  # prefill of 20 tokens
    assert row.e2e_ms == pytest.approx(3.0 + 2 * 1.1)  # and two decodes
    assert row.tpot_ms == pytest.approx(1.1)
    assert row.queue_ms == 0.0 and row.completion_tokens == 3 and row.error_code == ""
    assert row.start_unix_ms == 1_700_000_000_500
    assert result.steps == 3 and result.stretches == (1 if fast_forward else 0)


def test_stack_overheads():
    # 2 ms in (plus 0.5 ms of add_request), 1 ms out; sending a token costs the engine's
    # interpreter 0.4 ms, so every step takes 0.4 ms more per token it samples
    slow = spec(
        overheads=RequestOverheads(add_s=5e-4, inbound_s=2e-3, outbound_s=1e-3, token_send_s=4e-4)
    )
    [row] = simulator(models=(slow,)).run([req(0, 0.5)]).rows
    assert row.ttft_ms == pytest.approx(2.5 + 3.4 + 1.0)
    assert row.e2e_ms == pytest.approx(2.5 + 3.4 + 2 * 1.5 + 1.0)
    assert row.queue_ms == 0.0


def test_co_located_replicas_take_turns_on_their_gpu():
    sim = simulator(models=(spec("a"), spec("b")))
    result = sim.run([req(0, 0.5, output=2, model="a"), req(1, 0.5, output=2, model="b")])
    rows = by_id(result)
    # a's prefill (3 ms), b's prefill (3 ms), a's decode (1.1 ms), b's decode (1.1 ms)
    assert (rows[0].ttft_ms, rows[1].ttft_ms) == pytest.approx((3.0, 6.0))
    assert (rows[0].e2e_ms, rows[1].e2e_ms) == pytest.approx((7.1, 8.2))
    # alone on its GPU the same request ends after 4.1 ms
    alone = simulator().run([req(0, 0.5, output=2)])
    assert alone.rows[0].e2e_ms == pytest.approx(4.1)


def test_routing_reads_heartbeats():
    nodes = (("node-0", 100 * MB), ("node-1", 100 * MB))
    sim = simulator(nodes=nodes, replicas={"a": 2}, heartbeat_s=0.1, seed=3)
    # A long request lands somewhere; after the next heartbeats its node reports the load, so
    # the next request goes to the other node. Two requests within one heartbeat interval see
    # the same (stale) state: the scheduler's behaviour, reproduced.
    sim.run([req(0, 0.01, prompt=200, output=500), req(1, 0.5, output=2)])
    assert sim.routed[0] != sim.routed[1]
    assert set(sim.routed.values()) == {"a@node-0", "a@node-1"}


def test_requests_the_engine_or_the_cluster_refuses():
    result = simulator().run(
        [req(0, 0.1, prompt=1000, output=100), req(1, 0.2, model="unknown"), req(2, 0.3)]
    )
    rows = by_id(result)
    assert rows[0].error_code == "INVALID_ARGUMENT" and rows[0].ttft_ms is None
    assert rows[1].error_code == "UNAVAILABLE"
    assert rows[2].error_code == "" and rows[2].ttft_ms == pytest.approx(3.0)


def test_placement_runs_at_start_and_every_replan():
    calls = []

    def placement(nodes, models):
        calls.append(
            (
                [(n.node_id, tuple(r.replica_id for r in n.replicas)) for n in nodes],
                [(m.name, m.replicas) for m in models],
            )
        )
        return plan_placement(nodes, models)

    sim = Simulator(
        [("node-0", 100 * MB), ("node-1", 100 * MB)],
        [spec("a")],
        lambda now: [ModelDemand("a", 10 * MB, 2 if now >= 1.0 else 1)],
        SimConfig(replan_s=1.0, load_s=0.5, heartbeat_s=0.25),
        placement,
    )
    result = sim.run([req(i, 0.1 + 0.5 * i, output=2) for i in range(6)])
    assert calls[0] == ([("node-0", ()), ("node-1", ())], [("a", 1)])
    assert calls[1] == ([("node-0", ("a@node-0",)), ("node-1", ())], [("a", 2)])
    assert isinstance(result.placements[1], PlacementPlan)
    assert [a.replica_id for a in result.placements[1].loads] == ["a@node-1"]
    # loaded at 1.0, ready at 1.5 (and routable after node-1's next heartbeat): the requests
    # before that all went to node-0
    assert [sim.routed[i] for i in range(3)] == ["a@node-0"] * 3
    assert "a@node-1" in {sim.routed[i] for i in range(3, 6)}
    assert sim.nodes["node-1"].phases["a@node-1"] is ReplicaPhase.READY


def test_a_moved_replica_serves_until_its_replacement_is_ready():
    # The plan moves "a" from node-0 to node-1 at t=1.0; the new replica loads until 1.5.
    def placement(nodes, models):
        if not any(n.replicas for n in nodes):
            return plan_placement(nodes[:1], models)
        if not nodes[0].replicas:
            return PlacementPlan(assignments=[Assignment("a", "node-1", "a@node-1", "kept")])
        return PlacementPlan(
            assignments=[Assignment("a", "node-1", "a@node-1", "moved")],
            loads=[Assignment("a", "node-1", "a@node-1", "moved")],
            unloads=[Unload("a", "node-0", "a@node-0", "moved")],
        )

    sim = Simulator(
        [("node-0", 100 * MB), ("node-1", 100 * MB)],
        [spec("a")],
        lambda now: [ModelDemand("a", 10 * MB, 1)],
        SimConfig(replan_s=1.0, load_s=0.5, heartbeat_s=0.25, horizon_s=2.9),
        placement,
    )
    result = sim.run([req(i, 0.6 + 0.2 * i, output=2) for i in range(10)])
    rows = by_id(result)
    # requests between the replan and the new replica's first heartbeat as READY still find
    # the old one (no UNAVAILABLE gap); it drains only once a@node-1 is READY and announced
    assert all(rows[i].error_code == "" for i in range(10))
    assert [sim.routed[i] for i in range(5)] == ["a@node-0"] * 5
    assert [sim.routed[i] for i in range(8, 10)] == ["a@node-1"] * 2
    assert "a@node-0" not in sim.nodes["node-0"].phases


def test_node_samples_measure_utilization_as_busy_over_wall_time():
    result = simulator(sample_s=1.0).run([req(0, 0.5)])
    samples = [
        (s.unix_ms - 1_700_000_000_000, s.utilization, s.batch_tokens) for s in result.samples
    ]
    # at the start, at half the interval (one node's phase), and when the run ends: the 5.2 ms
    # after the arrival were all engine steps
    assert samples[:2] == [(0, 0.0, 0), (500, 0.0, 0)]
    assert samples[2][0] == 505 and samples[2][1] == pytest.approx(1.0) and samples[2][2] == 22
    assert result.samples[2].kv_blocks_device_total == 64


def _workload(n=60, seed=1):
    rng = random.Random(seed)
    trace = requests_at(
        poisson_arrivals(100.0, rng, count=n), Uniform(8, 120), Uniform(1, 120), rng
    )
    reqs = sim_requests(trace, Scaling(), Window(), "a")
    # every fourth request to a second model, co-located with a's first replica
    return [
        SimRequest(
            r.index, r.arrival_s, r.prompt_tokens, r.output_tokens, "b" if r.index % 4 == 3 else "a"
        )
        for r in reqs
    ]


@pytest.mark.parametrize("send_s", [0.0, 2e-4])
def test_fast_forward_gives_the_same_latencies_as_exact_stepping(send_s):
    costs = StepCosts(
        step_s=4e-4,
        token_s=2e-5,
        sample_s=3e-5,
        prefill_attend_s=1e-8,
        decode_attend_s=5e-7,
        group_s=1e-4,
    )
    # 24 blocks of 16 tokens for up to 8 sequences: decodes run out of blocks and preempt
    small = EngineLimits(
        num_blocks=24, block_size=16, max_batched_tokens=128, max_seqs=8, max_context=1024
    )
    overheads = RequestOverheads(add_s=1e-5, inbound_s=2e-3, outbound_s=1e-3, token_send_s=send_s)
    models = (spec("a", costs, small, overheads), spec("b", costs, small, overheads))
    nodes = (("node-0", 25 * MB), ("node-1", 15 * MB))  # node-0 hosts a and b
    out = {}
    for ff in (False, True):
        sim = simulator(
            nodes=nodes,
            models=models,
            replicas={"a": 2, "b": 1},
            heartbeat_s=0.02,
            sample_s=0.05,
            fast_forward=ff,
        )
        out[ff] = (sim.run(_workload()), sim)
    exact, fast = out[False][0], out[True][0]
    assert fast.stretches > 10 and exact.stretches == 0
    assert fast.events < exact.events
    assert sum(n.preemptions for n in out[True][1].nodes.values()) > 0
    assert exact.steps == fast.steps
    a, b = by_id(exact), by_id(fast)
    assert a.keys() == b.keys() and len(a) == 60
    for i in a:
        assert b[i].error_code == a[i].error_code == ""
        for field in ("ttft_ms", "e2e_ms", "queue_ms"):
            assert getattr(b[i], field) == pytest.approx(
                getattr(a[i], field), rel=1e-9, abs=1e-9
            ), (i, field)
    assert out[True][1].routed == out[False][1].routed
    # node samples read mid-stretch agree with the exact run's too; device blocks in use may
    # count a cached block the stretch took as newly used (replica.used_blocks says why)
    for s, t in zip(exact.samples, fast.samples, strict=True):
        assert (s.node_id, s.unix_ms, s.batch_tokens, s.running, s.waiting) == (
            t.node_id,
            t.unix_ms,
            t.batch_tokens,
            t.running,
            t.waiting,
        )
        assert 0 <= t.kv_blocks_device_used - s.kv_blocks_device_used <= 8
        assert s.utilization == pytest.approx(t.utilization, abs=1e-9)


def test_the_horizon_ends_a_run_and_fails_what_is_unfinished():
    result = simulator(horizon_s=0.502).run([req(0, 0.5), req(1, 0.501), req(2, 0.9)])
    rows = by_id(result)
    assert result.end_s == 0.502 and sorted(rows) == [0, 1]
    assert rows[0].error_code == rows[1].error_code == "DEADLINE_EXCEEDED"
    assert rows[0].e2e_ms == pytest.approx(2.0) and rows[1].e2e_ms == pytest.approx(1.0)
