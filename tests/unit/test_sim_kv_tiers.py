"""KV tiers and prefix-aware routing in the cluster simulator: the node's tiers order demotions by
the store's own policy objects; evicted blocks land in host, then disk; a later prompt loads its
prefix from there at the priced cost instead of recomputing it; the engine's cost model declines
a load slower than recompute; routing follows the nodes' KV reports; with the feature off (or
idle) nothing changes; fast-forward and exact stepping still agree with it on."""

import json
import random

import pytest

from strata.core.profile import RequestOverheads, StepCosts
from strata.kvtier.hashing import HashKeys, chain_hashes
from strata.policy.placement import ModelDemand
from strata.sim.cluster import ModelSpec, SimConfig, Simulator
from strata.sim.kv_tiers import KVTierSpec, NodeKV
from strata.sim.replica import EngineLimits
from strata.sim.workload import SimRequest

MB = 10**6
# 1 ms per step + 0.1 ms per token: a 16-token prefill chunk takes 2.6 ms, one token 1.1 ms.
FLAT = StepCosts(step_s=1e-3, token_s=1e-4, sample_s=0.0, prefill_attend_s=0.0, decode_attend_s=0.0)
# Four blocks, one 16-token chunk a step: every block is allocated by a step of its own.
TINY = EngineLimits(
    num_blocks=4, block_size=16, max_batched_tokens=16, max_seqs=2, max_context=1024
)
BLOCK_BYTES = 1000
# One block loads in 1 ms from host, 2 ms from disk.
ONE_EACH = KVTierSpec(
    host_blocks=1,
    host_bytes_per_s=1e6,
    disk_blocks=1,
    disk_bytes_per_s=5e5,
    high_watermark=1.0,
    low_watermark=0.5,
)


def spec(name="a", costs=FLAT, limits=TINY, block_bytes=BLOCK_BYTES, overheads=None):
    return ModelSpec(
        name, costs, limits, 10 * MB, overheads or RequestOverheads(), kv_block_bytes=block_bytes
    )


def simulator(models=(spec(),), nodes=(("node-0", 100 * MB),), replicas=None, **cfg):
    wanted = replicas or {m.name: 1 for m in models}
    demands = [ModelDemand(m.name, m.memory_bytes, wanted[m.name]) for m in models]
    return Simulator(list(nodes), list(models), lambda now: demands, SimConfig(**cfg))


def prompt(index, at, ids, tokens, output=1, model="a"):
    return SimRequest(index, at, tokens, output, model, hash_ids=ids, block_tokens=16)


# A: 33 tokens, blocks a0 a1 committed. B: 49 other tokens, whose last two chunks evict a1, then
# a0 (a finished sequence's tail goes first). C: A's prompt again.
A = prompt(0, 0.0, (1, 2, 3), 33)
B = prompt(1, 1.0, (7, 8, 9, 10), 49)
C = prompt(2, 2.0, (1, 2, 3), 33)


def by_id(result):
    return {int(r.request_id): r for r in result.rows}


# -- the node's tiers, on their own ------------------------------------------------------------


def test_host_demotes_in_the_policy_order_and_disk_drops_its_least_recent():
    def node(policy):
        kv = NodeKV(
            KVTierSpec(
                host_blocks=2,
                host_bytes_per_s=1e9,
                disk_blocks=2,
                disk_bytes_per_s=1e9,
                policy=policy,
                high_watermark=1.0,
                low_watermark=0.5,
            )
        )
        kv.evicted(1.0, "w", 11)
        kv.settle()
        for t in (2.0, 3.0):  # block 11 read twice (a load the engine declined)
            kv.acquire([11], t)
            kv.release([11], t, moved=False)
        kv.evicted(4.0, "w", 12)
        kv.evicted(5.0, "w", 13)  # host full: one of 11, 12 goes to disk
        kv.settle()
        return kv

    lru, heat = node("lru"), node("heat")
    # LRU: 11 was last read at 3.0, 12 written at 4.0. Heat: 11 was read three times, 12 once.
    assert (list(lru.host), list(lru.disk)) == ([12, 13], [11])
    assert (list(heat.host), list(heat.disk)) == ([11, 13], [12])
    for kv in (lru, heat):
        kv.evicted(6.0, "w", 14)
        kv.evicted(7.0, "w", 15)
        kv.settle()
        assert kv.counters.demotions == 3 and kv.counters.disk_drops == 1
        assert len(kv.host) == 2 and len(kv.disk) == 2
    # LRU demoted 12, then 13 (dropping 11, on disk longest); heat kept the popular 11 in host
    # and demoted 13, then 14 (dropping 12)
    assert list(lru.disk) == [12, 13] and list(lru.host) == [14, 15]
    assert list(heat.disk) == [13, 14] and list(heat.host) == [11, 15]
    assert 11 not in lru.presence and 12 not in heat.presence and 11 in heat.presence


def test_the_watermark_pass_keeps_blocks_a_request_is_about_to_read():
    kv = NodeKV(
        KVTierSpec(
            host_blocks=4,
            host_bytes_per_s=1e9,
            disk_blocks=8,
            disk_bytes_per_s=1e9,
            policy="lru",
            high_watermark=0.75,
            low_watermark=0.5,
        )
    )
    for t, h in enumerate((21, 22, 23)):
        kv.evicted(float(t), "w", h)
    kv.prefetch([21], 3.0)  # an admitted request will read block 21
    kv.evicted(4.0, "w", 24)  # 4 > 0.75 x 4: demote the coldest down to 2
    kv.settle()
    assert list(kv.host) == [21, 24] and list(kv.disk) == [22, 23]


def test_tier_settings_are_checked_with_a_sentence_to_act_on():
    with pytest.raises(ValueError, match="unknown KV tier policy 'mru'; known: heat, lru"):
        KVTierSpec(host_blocks=4, host_bytes_per_s=1e9, policy="mru")
    with pytest.raises(ValueError, match="a disk tier needs"):
        KVTierSpec(host_blocks=4, host_bytes_per_s=1e9, disk_blocks=8)
    with pytest.raises(ValueError, match="model 'a' has no kv_block_bytes"):
        simulator(models=(spec(block_bytes=0),), kv_tiers=ONE_EACH)


# -- tiers in the simulator ---------------------------------------------------------------------


def test_evicted_blocks_land_in_host_then_disk():
    sim = simulator(kv_tiers=ONE_EACH)
    sim.run([A, B])
    a0, a1 = A.prefix_hashes(16)
    kv = sim.nodes["node-0"].kv
    # a1 went to host first; a0 then needed its room, and the policy demoted a1 to disk
    assert list(kv.host) == [a0] and list(kv.disk) == [a1]
    assert (kv.counters.offloaded, kv.counters.demotions) == (2, 1)
    assert a0 in kv.presence and a1 in kv.presence


def test_a_later_prompt_loads_its_prefix_at_the_priced_cost():
    off = by_id(simulator().run([A, B, C]))
    sim = simulator(kv_tiers=ONE_EACH)
    result = sim.run([A, B, C])
    on = by_id(result)
    # recomputed: chunks of 16, 16 and 1 tokens
    assert off[2].ttft_ms == pytest.approx(2.6 + 2.6 + 1.1)
    # loaded: a0 from host (1 ms) and a1 from disk (2 ms) inside the step that computes the
    # prompt's last token (1.1 ms)
    assert on[2].ttft_ms == pytest.approx(1.1 + 1.0 + 2.0)
    assert [on[i].ttft_ms for i in (0, 1)] == [off[i].ttft_ms for i in (0, 1)]
    kv = sim.nodes["node-0"].kv
    assert (kv.counters.loaded_host, kv.counters.loaded_disk) == (1, 1)
    a0, a1 = A.prefix_hashes(16)
    assert a0 not in kv.host and a1 not in kv.disk  # handed over: one copy per node
    [replica] = sim.replicas.values()
    assert replica.pool.lookup(a0) is not None and replica.pool.lookup(a1) is not None
    assert replica.counters.tier_hit_tokens == 32 and on[2].cached_tokens == 0
    assert result.samples[-1].tier_hit_tokens == 32


def test_the_engine_recomputes_when_its_measured_load_is_slower():
    # 100 ms a block from host, against 16 tokens x 0.12 ms of prefill (the 64-token chunks of
    # the long prompts measure it, whose last chunks evict the short prompt's block): the first
    # load is tried (nothing measured yet) and measured, the second declined.
    limits = EngineLimits(
        num_blocks=12, block_size=16, max_batched_tokens=64, max_seqs=2, max_context=1024
    )
    slow = KVTierSpec(host_blocks=8, host_bytes_per_s=1e4, high_watermark=1.0, low_watermark=0.5)
    reqs = [
        prompt(0, 0.0, (1,), 17),
        prompt(1, 0.5, tuple(range(20, 32)), 177),
        prompt(2, 1.0, (1,), 17),
        prompt(3, 1.5, tuple(range(40, 52)), 177),
        prompt(4, 2.0, (1,), 17),
    ]
    sim = simulator(models=(spec(limits=limits),), kv_tiers=slow)
    rows = by_id(sim.run(reqs))
    kv = sim.nodes["node-0"].kv
    assert (kv.counters.loaded_host, kv.counters.declined) == (1, 1)
    assert rows[2].ttft_ms == pytest.approx(1.1 + 100.0)  # loaded
    assert rows[4].ttft_ms == pytest.approx(1.0 + 1.7)  # recomputed: 17 tokens


def test_with_tiers_off_or_idle_results_are_unchanged():
    sim = simulator()
    off = sim.run([A, B, C])
    assert sim.kv_index is None and sim.nodes["node-0"].kv is None
    assert [r.ttft_ms for r in off.rows] == pytest.approx(
        [2 * 2.6 + 1.1, 3 * 2.6 + 1.1, 2 * 2.6 + 1.1]
    )
    # a pool that never evicts gives the tiers nothing to do: every figure as without them
    roomy = spec(
        limits=EngineLimits(
            num_blocks=64, block_size=16, max_batched_tokens=16, max_seqs=2, max_context=1024
        )
    )
    reqs = [prompt(i, 0.01 * i, (i % 3, 9), 40, output=5) for i in range(12)]
    plain = simulator(models=(roomy,)).run(reqs)
    tiered = simulator(models=(roomy,), kv_tiers=ONE_EACH).run(reqs)
    assert [(r.request_id, r.ttft_ms, r.e2e_ms, r.cached_tokens) for r in plain.rows] == [
        (r.request_id, r.ttft_ms, r.e2e_ms, r.cached_tokens) for r in tiered.rows
    ]


# -- prefix routing -----------------------------------------------------------------------------


def test_routing_sends_a_prompt_to_the_node_holding_its_prefix():
    roomy = spec(
        limits=EngineLimits(
            num_blocks=64, block_size=16, max_batched_tokens=256, max_seqs=8, max_context=1024
        )
    )
    nodes = (("node-0", 100 * MB), ("node-1", 100 * MB))
    shared = [prompt(i, 0.5 * i, (1, 2, 3, 4), 64, output=2) for i in range(7)]
    fresh = [prompt(10 + i, 0.25 + 0.5 * i, (100 + i, 200 + i), 40, output=2) for i in range(6)]
    runs = {}
    for on in (False, True):
        sim = simulator(
            models=(roomy,),
            nodes=nodes,
            replicas={"a": 2},
            heartbeat_s=0.1,
            kv_events_s=0.1,
            prefix_routing=on,
            seed=4,
        )
        sim.run(shared + fresh)
        runs[on] = sim
    sim = runs[True]
    holder = sim.routed[0]
    node = sim.replicas[holder].node_id
    hashes = shared[0].prefix_hashes(16)
    assert len(hashes) == 3
    assert sim.kv_index.leading_blocks(node, hashes) == 3
    other = ({"node-0", "node-1"} - {node}).pop()
    assert sim.kv_index.leading_blocks(other, hashes) == 0
    # every later request with the prefix goes where it is; prompts no node holds still go
    # by load (ties drawn at random), to both nodes
    assert {sim.routed[i] for i in range(1, 7)} == {holder}
    assert {sim.routed[r.index] for r in fresh} == {"a@node-0", "a@node-1"}
    # without prefix routing the same prefix lands on both
    assert {runs[False].routed[i] for i in range(7)} == {"a@node-0", "a@node-1"}


def test_prefix_hashes_are_the_engine_chain_of_the_prompt_but_its_last_token():
    req = prompt(0, 0.0, (5, 6, 7), 40, model="m")
    ids = req.prompt_ids()
    assert req.prefix_hashes(16) == chain_hashes(ids[:39], 16, HashKeys("m", "t:sim"))
    assert len(req.prefix_hashes(16)) == 2 and len(req.prefix_hashes(8)) == 4


# -- fast-forward ---------------------------------------------------------------------------------


def _shared_workload(n=60, seed=2):
    rng = random.Random(seed)
    out, t = [], 0.0
    for i in range(n):
        t += rng.expovariate(100.0)
        family = rng.randrange(4)
        ids = tuple(family * 100 + k for k in range(rng.randint(1, 6))) + (1000 + i,)
        out.append(
            SimRequest(
                i,
                t,
                rng.randint(8, 120),
                rng.randint(1, 120),
                "b" if i % 4 == 3 else "a",
                tenant=f"t{i % 2}",
                hash_ids=ids,
                block_tokens=16,
            )
        )
    return out


def test_fast_forward_agrees_with_exact_stepping_with_tiers_and_prefix_routing():
    costs = StepCosts(
        step_s=4e-4,
        token_s=2e-5,
        sample_s=3e-5,
        prefill_attend_s=1e-8,
        decode_attend_s=5e-7,
        group_s=1e-4,
    )
    small = EngineLimits(
        num_blocks=24, block_size=16, max_batched_tokens=128, max_seqs=8, max_context=1024
    )
    overheads = RequestOverheads(add_s=1e-5, inbound_s=2e-3, outbound_s=1e-3, token_send_s=2e-4)
    models = (spec("a", costs, small, 4096, overheads), spec("b", costs, small, 4096, overheads))
    tiers = KVTierSpec(
        host_blocks=6,
        host_bytes_per_s=4e8,
        disk_blocks=10,
        disk_bytes_per_s=1e8,
        high_watermark=0.9,
        low_watermark=0.5,
    )
    out = {}
    for ff in (False, True):
        sim = simulator(
            models=models,
            nodes=(("node-0", 25 * MB), ("node-1", 15 * MB)),
            replicas={"a": 2, "b": 1},
            heartbeat_s=0.02,
            sample_s=0.05,
            kv_events_s=0.01,
            fast_forward=ff,
            kv_tiers=tiers,
            prefix_routing=True,
        )
        out[ff] = (sim.run(_shared_workload()), sim)
    (exact, es), (fast, fs) = out[False], out[True]
    assert fast.stretches > 20 and exact.stretches == 0 and exact.steps == fast.steps
    a, b = by_id(exact), by_id(fast)
    assert a.keys() == b.keys() and len(a) == 60
    for i in a:
        assert b[i].error_code == a[i].error_code == ""
        for field in ("ttft_ms", "e2e_ms", "queue_ms"):
            assert getattr(b[i], field) == pytest.approx(
                getattr(a[i], field), rel=1e-9, abs=1e-9
            ), (i, field)
        assert b[i].cached_tokens == a[i].cached_tokens
    assert fs.routed == es.routed
    counters = [n.kv.counters for n in es.nodes.values()]
    assert counters == [n.kv.counters for n in fs.nodes.values()]
    # the tiers were busy: loads from both, demotions, and blocks dropped off a node
    assert sum(c.loaded_host for c in counters) > 0 and sum(c.loaded_disk for c in counters) > 0
    assert sum(c.demotions for c in counters) > 0 and sum(c.disk_drops for c in counters) > 0
    # node samples read mid-stretch see the evictions of the steps started by then
    for s, t in zip(exact.samples, fast.samples, strict=True):
        assert (
            s.unix_ms,
            s.kv_blocks_host,
            s.kv_blocks_disk,
            s.tier_hit_tokens,
            s.kv_blocks_evicted,
            s.kv_blocks_device_used,
        ) == (
            t.unix_ms,
            t.kv_blocks_host,
            t.kv_blocks_disk,
            t.tier_hit_tokens,
            t.kv_blocks_evicted,
            t.kv_blocks_device_used,
        )
        assert s.block_lifetime_sum_s == pytest.approx(t.block_lifetime_sum_s, abs=1e-9)


# -- the benchmark's pure parts -----------------------------------------------------------------


def test_the_benchmark_scales_mooncake_as_bench_kv_and_counts_the_bound(tmp_path):
    from benchmarks.sim.kv_tiers import (
        WAYS,
        bound_blocks,
        mooncake_requests,
        run_kv_tiers,
    )
    from strata.eval.traces import read_mooncake

    rows = [(1000, 1100, 40, [1, 2, 3]), (1500, 1030, 5, [1, 2, 4]), (3000, 600, 9, [1, 5])]
    path = tmp_path / "mooncake.jsonl"
    path.write_text(
        "".join(
            json.dumps({"timestamp": t, "input_length": n, "output_length": o, "hash_ids": ids})
            + "\n"
            for t, n, o, ids in rows
        )
    )
    reqs = mooncake_requests(read_mooncake(path).requests, "m")
    # a hash id (512 tokens) is one 16-token block: 1100 tokens -> 35, outputs capped at 16
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in reqs] == [
        (0.0, 35, 16),
        (0.5, 33, 5),
        (2.0, 19, 9),
    ]
    assert [len(r.prefix_hashes(16)) for r in reqs] == [2, 2, 1]
    # the second prompt's first two blocks were the first's; the third's one block too
    assert bound_blocks(reqs) == (5, 3)
    bench = run_kv_tiers(path, nodes=2)
    assert [w.way for w in bench.ways] == list(WAYS) and bench.window == (0, 3)
    assert all(w.requests == 3 and w.failed == 0 for w in bench.ways)
    text = bench.describe()
    assert "requests 0 to 2 (3" in text and "| tiers, prefix routing |" in text
