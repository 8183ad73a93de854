"""The engine end to end on a tiny random model: chunking, batching, prefix cache, preemption."""

import torch

from strata.engine.engine import EngineRequest
from strata.engine.sequence import FinishReason, SamplingParams
from tests.engine_helpers import run_to_end, tiny_engine


def _req(rid, prompt, max_tokens=8, tenant="a", public=False, **kw):
    return EngineRequest(
        rid,
        list(prompt),
        SamplingParams(max_tokens=max_tokens, ignore_eos=True, **kw),
        tenant=tenant,
        prefix_public=public,
    )


def _reference_greedy(engine, prompt, n):
    """Greedy decoding by full recomputation, without the paged cache's incremental state."""
    from strata.engine.attention import AttentionMetadata, SeqSlice

    ids = list(prompt)
    for _ in range(n):
        kv = torch.zeros_like(engine.kv)
        blocks = list(range(-(-len(ids) // engine.config.block_size)))
        meta = AttentionMetadata.build(
            [SeqSlice(0, len(ids), len(ids), blocks)], engine.config.block_size, "cpu"
        )
        logits = engine.model(
            torch.tensor(ids), torch.arange(len(ids)), kv, meta, torch.tensor([len(ids) - 1])
        )
        ids.append(int(logits[0].argmax()))
    return ids[len(prompt) :]


PROMPT = list(range(40, 77))  # 37 tokens: several blocks plus a partial one


def test_chunked_prefill_matches_full_recompute():
    engine = tiny_engine(max_batched_tokens=16)
    engine.add_request(_req("r", PROMPT, max_tokens=10))
    sizes = []
    out = []
    while engine.has_work():
        before = sum(s.num_computed for s in engine.scheduler.running)
        for o in engine.step():
            out.extend(o.token_ids)
        seq = engine.scheduler.find("r")
        if seq is not None:
            sizes.append(seq.num_computed - before)
    # the 37-token prompt is cut into 16-token chunks; the first token comes with the third
    assert sizes[:3] == [16, 16, 5]
    assert out == _reference_greedy(engine, PROMPT, 10)


def test_concurrent_requests_share_steps_and_match_solo_runs():
    prompts = {"a": PROMPT, "b": list(range(100, 111))}
    solo = {}
    for rid, prompt in prompts.items():
        e = tiny_engine()
        e.add_request(_req(rid, prompt))
        solo.update(run_to_end(e))
    engine = tiny_engine()
    for rid, prompt in prompts.items():
        engine.add_request(_req(rid, prompt))
    plan = engine.scheduler.schedule()
    assert sorted(s.seq.request_id for s in plan.scheduled) == ["a", "b"]  # one step, both
    engine = tiny_engine()
    for rid, prompt in prompts.items():
        engine.add_request(_req(rid, prompt))
    assert run_to_end(engine) == solo


def test_prefix_cache_hit_is_per_tenant_unless_public():
    engine = tiny_engine()
    engine.add_request(_req("1", PROMPT, tenant="a"))
    first = run_to_end(engine)["1"]
    outs = {}
    for rid, tenant in (("2", "a"), ("3", "b")):
        engine.add_request(_req(rid, PROMPT, tenant=tenant))
        while engine.has_work():
            for o in engine.step():
                outs.setdefault(rid, []).append(o)
    # 37 tokens, block 4: the 36 leading tokens form 9 full blocks, all reusable by tenant a
    assert outs["2"][-1].cached_tokens == 36
    assert [t for o in outs["2"] for t in o.token_ids] == first
    assert outs["3"][-1].cached_tokens == 0  # another tenant never hits a's private prefix
    engine.add_request(_req("4", PROMPT, tenant="c", public=True))
    run_to_end(engine)
    engine.add_request(_req("5", PROMPT, tenant="d", public=True))
    last = None
    while engine.has_work():
        for o in engine.step():
            last = o
    assert last.cached_tokens == 36


def test_preempted_request_produces_the_same_tokens():
    reference = tiny_engine(num_blocks=64)
    reference.add_request(_req("a", PROMPT, max_tokens=20))
    reference.add_request(_req("b", list(range(120, 150)), max_tokens=20))
    expected = run_to_end(reference)
    # 20 blocks of 4 cannot hold both sequences to the end (15 + 13 blocks): one is preempted
    engine = tiny_engine(num_blocks=20)
    engine.add_request(_req("a", PROMPT, max_tokens=20))
    engine.add_request(_req("b", list(range(120, 150)), max_tokens=20))
    got = run_to_end(engine)
    assert engine.scheduler.preemptions >= 1
    assert got == expected


def test_abort_frees_every_block():
    engine = tiny_engine()
    free_before = engine.pool.num_free
    engine.add_request(_req("a", PROMPT, max_tokens=50))
    engine.step()
    engine.step()
    assert engine.pool.num_free < free_before
    assert engine.abort("a")
    assert engine.pool.num_free == free_before
    assert not engine.has_work()


def test_stop_and_length_finish_reasons():
    engine = tiny_engine()
    engine.add_request(_req("a", PROMPT, max_tokens=3))
    outs = []
    while engine.has_work():
        outs.extend(engine.step())
    assert [o.finished for o in outs] == [False, False, True]
    assert outs[-1].finish_reason is FinishReason.LENGTH
    assert outs[-1].completion_tokens == 3


def test_seeded_sampling_is_reproducible():
    runs = []
    for _ in range(2):
        engine = tiny_engine()
        engine.add_request(_req("a", PROMPT, max_tokens=12, temperature=1.0, top_p=0.9, seed=7))
        runs.append(run_to_end(engine)["a"])
    assert runs[0] == runs[1]


def test_invalid_requests_are_refused_with_a_reason():
    import pytest

    engine = tiny_engine(num_blocks=8)
    with pytest.raises(ValueError, match="empty"):
        engine.add_request(_req("a", []))
    with pytest.raises(ValueError, match="context of 512"):
        engine.add_request(_req("a", [1] * 500, max_tokens=20))
    with pytest.raises(ValueError, match="KV blocks"):
        engine.add_request(_req("a", [1] * 40, max_tokens=20))


def test_cumulative_counters_for_the_node_layer():
    engine = tiny_engine(max_batched_tokens=16)
    engine.add_request(_req("a", PROMPT, max_tokens=5))
    engine.add_request(_req("b", range(10), max_tokens=5))
    run_to_end(engine)
    s = engine.stats
    assert s.prompt_tokens == len(PROMPT) + 10
    # 47 prompt tokens + 8 later decode tokens (the first output comes with the last prefill chunk)
    assert s.step_tokens == 47 + 2 * 4
    assert s.steps >= -(-47 // 16) and s.busy_seconds > 0


def test_queue_time_is_the_wait_before_the_first_scheduled_step():
    engine = tiny_engine(max_seqs=1)
    engine.add_request(_req("a", PROMPT, max_tokens=3))
    engine.add_request(_req("b", range(10), max_tokens=1))  # waits: one sequence slot
    outs = {}
    while engine.has_work():
        for o in engine.step():
            outs[o.request_id] = o
    assert outs["a"].queue_ms < outs["b"].queue_ms  # b waited for a's three steps
    assert outs["b"].queue_ms > 0
