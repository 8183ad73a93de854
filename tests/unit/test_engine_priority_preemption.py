"""Priority preemption at admission: a higher class displaces lower ones, exact victims and
blocks on a tiny pool; equal priorities never preempt each other; the simulator does not
fast-forward over such a preemption."""

from strata.core.profile import StepCosts
from strata.engine.block_pool import BlockPool
from strata.engine.engine import EngineRequest
from strata.engine.scheduler import Scheduler
from strata.engine.sequence import SamplingParams, Sequence, Status
from strata.kvtier.hashing import HashKeys, chain_hashes
from strata.sim.replica import EngineLimits, SimReplica
from strata.sim.workload import SimRequest
from tests.engine_helpers import run_to_end, tiny_engine
from tests.scheduler_helpers import step_without_model

BS = 4
KEYS = HashKeys.for_request("m", "t", prefix_public=False)


def _seq(rid: str, prompt: int, priority: int, arrival: float, max_tokens: int = 50) -> Sequence:
    base = 10 * (ord(rid[-1]) % 20)
    return Sequence(
        rid,
        [base + i for i in range(prompt)],
        prompt,
        SamplingParams(max_tokens=max_tokens, ignore_eos=True),
        KEYS,
        priority=priority,
        arrival=arrival,
    )


def _ids(seqs) -> list[str]:
    return [getattr(x, "seq", x).request_id for x in seqs]


def test_a_full_batch_gives_the_slot_of_the_lowest_latest_sequence():
    s = Scheduler(BlockPool(64, BS), max_batched_tokens=64, max_seqs=3)
    for seq in (_seq("a", 6, 0, 0.0), _seq("b", 6, 1, 1.0), _seq("c", 6, 0, 2.0)):
        s.add(seq)
    step_without_model(s)
    victims = []
    for k, rid in enumerate(("h", "i", "j", "k")):
        s.add(_seq(rid, 6, 2, 10.0 + k))
        plan = step_without_model(s)
        victims.append(_ids(plan.preempted))
    # lowest priority first, latest arrival among equals; then the priority-1 one; then none:
    # every running sequence is of the same class as "k"
    assert victims == [["c"], ["a"], ["b"], []]
    assert sorted(_ids(s.running)) == ["h", "i", "j"]
    assert sorted(_ids(s.waiting)) == ["a", "b", "c", "k"]
    assert s.priority_preemptions == 3 and s.preemptions == 3


def test_the_victim_leaves_this_steps_plan_and_resumes_from_its_cached_prefix():
    pool = BlockPool(64, BS)
    s = Scheduler(pool, max_batched_tokens=64, max_seqs=2)
    lo_a, lo_b = _seq("a", 9, 0, 0.0, max_tokens=3), _seq("b", 9, 0, 1.0, max_tokens=3)
    s.add(lo_a)
    s.add(lo_b)
    step_without_model(s)
    hashes = list(lo_b.block_hashes)
    assert len(hashes) == 2  # 9 computed tokens: two full blocks
    s.add(_seq("h", 5, 2, 5.0, max_tokens=1))
    plan = step_without_model(s)
    assert _ids(plan.preempted) == ["b"]
    assert _ids(plan.scheduled) == ["a", "h"]  # b's decode was taken back
    assert lo_b.status is Status.WAITING and lo_b.block_ids == [] and lo_b.num_computed == 0
    assert [pool.lookup(h) is not None for h in hashes] == [True, True]  # still cached
    # h finished (one token); b comes back and finds its two full blocks in the device cache
    plan = step_without_model(s)
    assert _ids(plan.scheduled) == ["a", "b"]
    assert plan.scheduled[1].num_new == 2  # 8 of its 10 tokens came from the cache
    assert lo_b.num_computed == 10 and lo_b.block_hashes[:2] == hashes
    assert s.priority_preemptions == 1


def test_no_free_block_preempts_lower_sequences_until_the_prompt_fits():
    pool = BlockPool(10, BS)
    s = Scheduler(pool, max_batched_tokens=64, max_seqs=8)
    lo_a, lo_b = _seq("a", 12, 0, 0.0), _seq("b", 12, 0, 1.0)
    s.add(lo_a)
    s.add(lo_b)
    step_without_model(s)  # 3 blocks each: a [0,1,2], b [3,4,5]
    assert (lo_a.block_ids, lo_b.block_ids) == ([0, 1, 2], [3, 4, 5])
    s.add(_seq("h", 28, 1, 5.0))  # needs 7 blocks
    plan = step_without_model(s)
    # the decodes take one block each (a 6, b 7), leaving 8 and 9; b's four freed make 6 of 7,
    # so a goes too. Freed blocks join the free queue's tail in reverse (tail blocks first), and
    # b's hashed blocks 5, 4, 3 are evicted before a's.
    assert (lo_a.block_ids, lo_b.block_ids) == ([], [])
    assert _ids(plan.preempted) == ["b", "a"]
    h = s.running[0]
    assert h.request_id == "h" and h.block_ids == [8, 9, 7, 5, 4, 3, 6]
    assert _ids(plan.scheduled) == ["h"] and plan.scheduled[0].num_new == 28
    assert _ids(s.waiting) == ["a", "b"]  # a ahead of b: FIFO within the class
    assert chain_hashes(lo_a.token_ids[:12], BS, KEYS)[0] == pool.blocks[0].block_hash
    assert pool.lookup(pool.blocks[0].block_hash) == 0  # a's prefix survives in the cache


def test_preemption_that_could_not_free_enough_does_not_happen():
    pool = BlockPool(10, BS)
    s = Scheduler(pool, max_batched_tokens=64, max_seqs=8)
    s.add(_seq("a", 20, 2, 0.0))  # 5 blocks at priority 2
    s.add(_seq("b", 8, 0, 1.0))  # 2 blocks at priority 0
    step_without_model(s)
    s.add(_seq("h", 28, 1, 5.0))  # 7 blocks: free 1 + b's 3 < 7
    plan = step_without_model(s)
    assert plan.preempted == [] and s.priority_preemptions == 0
    assert _ids(s.running) == ["a", "b"] and _ids(s.waiting) == ["h"]
    assert s.waiting_for_memory == 1


def test_equal_priorities_never_preempt_each_other_at_admission():
    s = Scheduler(BlockPool(64, BS), max_batched_tokens=64, max_seqs=1)
    s.add(_seq("a", 6, 1, 0.0, max_tokens=3))
    step_without_model(s)
    s.add(_seq("b", 6, 1, 1.0, max_tokens=1))
    s.add(_seq("c", 6, 0, 2.0, max_tokens=1))
    order = []
    while s.has_work():
        plan = step_without_model(s)
        assert plan.preempted == []
        order.extend(
            x.seq.request_id for x in plan.scheduled if x.seq.num_computed == x.seq.num_prompt
        )  # a prefill just ended
    assert order == ["b", "c"] and s.priority_preemptions == 0


def test_a_class_that_lost_a_sequence_admits_nothing_more_in_that_step():
    pool = BlockPool(12, BS)
    s = Scheduler(pool, max_batched_tokens=64, max_seqs=8)
    s.add(_seq("a", 16, 0, 0.0))  # 4 blocks
    s.add(_seq("b", 16, 0, 1.0))  # 4 blocks
    step_without_model(s)
    s.add(_seq("h", 16, 2, 5.0))  # needs 4 of the 2 free: b goes
    s.add(_seq("c", 4, 0, 6.0))  # 1 block would fit next to h
    plan = step_without_model(s)
    assert _ids(plan.preempted) == ["b"]
    assert sorted(_ids(s.running)) == ["a", "h"]
    assert _ids(s.waiting) == ["b", "c"]  # c did not overtake b


def test_engine_output_is_unchanged_by_priority_preemption():
    prompts = {"lo1": list(range(30, 50)), "lo2": list(range(60, 80)), "hi": list(range(5, 25))}
    reference = tiny_engine(num_blocks=64)
    for rid, p in prompts.items():
        reference.add_request(
            EngineRequest(rid, p, SamplingParams(max_tokens=12, ignore_eos=True), "t")
        )
    expected = run_to_end(reference)
    engine = tiny_engine(num_blocks=64, max_seqs=2)
    for rid in ("lo1", "lo2"):
        engine.add_request(
            EngineRequest(
                rid, prompts[rid], SamplingParams(max_tokens=12, ignore_eos=True), "t", priority=0
            )
        )
    engine.step()
    engine.step()
    engine.add_request(
        EngineRequest(
            "hi", prompts["hi"], SamplingParams(max_tokens=12, ignore_eos=True), "t", priority=2
        )
    )
    got = {}
    first_hi_step = None
    for n in range(1000):
        if not engine.has_work():
            break
        for o in engine.step():
            got.setdefault(o.request_id, []).extend(o.token_ids)
            if o.request_id == "hi" and first_hi_step is None:
                first_hi_step = n
    assert first_hi_step == 0  # admitted at once, not after a lo
    assert engine.scheduler.priority_preemptions == 1
    assert {k: len(v) for k, v in got.items()} == {"lo1": 10, "lo2": 10, "hi": 12}
    # lo2 was recomputed after the preemption: its tokens are the same as undisturbed
    for rid in ("lo1", "lo2"):
        assert expected[rid][2:] == got[rid]
    assert expected["hi"] == got["hi"]


def test_the_simulator_steps_exactly_while_a_waiting_request_outranks_a_running_one():
    costs = StepCosts(
        step_s=1e-3, token_s=1e-4, sample_s=0.0, prefill_attend_s=0.0, decode_attend_s=0.0
    )

    def replica(waiting_priority: int) -> SimReplica:
        r = SimReplica(
            "r0", "m", "n0", EngineLimits(num_blocks=64, block_size=4, max_seqs=1), costs
        )
        r.add(SimRequest(0, 0.0, 8, 20, "m"), 0.0, 0.0)
        r.begin_step(0.0)
        r.end_step(0.01)  # prefilled: decoding from here on
        r.add(SimRequest(1, 0.01, 8, 20, "m"), 0.01, 0.01)
        r.take_adds(0.01)
        r.scheduler.waiting[0].priority = waiting_priority
        return r

    assert replica(0).plan_stretch().steps == 19  # a full batch of equals: no change
    r = replica(2)
    assert r.plan_stretch() is None
    r.begin_step(0.01)
    assert r.scheduler.priority_preemptions == 1
    assert [s.request_id for s in r.scheduler.running] == ["1"]
