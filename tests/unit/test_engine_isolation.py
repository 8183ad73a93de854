"""A request can fail only itself: one tenant's request that breaks a step (a forward that raises,
a row that cannot be sampled, a temperature that once overflowed the sampler) is retired alone,
and every other request in the same steps finishes with exactly the tokens of a solo run."""

from __future__ import annotations

import asyncio

import pytest
import torch

from strata.engine.async_engine import AsyncEngine, RequestFailed
from strata.engine.engine import EngineRequest
from strata.engine.sampler import SamplingError, SeqSampler
from strata.engine.sequence import SamplingParams
from tests.engine_helpers import run_to_end, tiny_engine

POISON = 299  # a token id the patched model refuses to compute
PROMPTS = {f"r{i}": list(range(20 + 7 * i, 37 + 7 * i)) for i in range(6)}


def _req(rid, prompt, max_tokens=8, **kw):
    return EngineRequest(
        rid,
        list(prompt),
        SamplingParams(max_tokens=max_tokens, ignore_eos=True, **kw),
        tenant=f"tenant-{rid}",
    )


def _solo() -> dict[str, list[int]]:
    out = {}
    for rid, prompt in PROMPTS.items():
        e = tiny_engine()
        e.add_request(_req(rid, prompt))
        out.update(run_to_end(e))
    return out


def _outputs(engine, max_steps=10_000):
    """Every output of every step until the engine is idle."""
    outs = []
    for _ in range(max_steps):
        if not engine.has_work():
            return outs
        outs.extend(engine.step())
    raise AssertionError("engine did not finish")


def _tokens(outs):
    got: dict[str, list[int]] = {}
    for o in outs:
        if o.error is None:
            got.setdefault(o.request_id, []).extend(o.token_ids)
    return got


def test_tiny_temperature_samples_greedily_beside_other_tenants():
    solo = _solo()
    engine = tiny_engine()
    for rid, prompt in PROMPTS.items():
        engine.add_request(_req(rid, prompt))
    engine.add_request(_req("tiny-t", range(60, 80), temperature=1e-45))
    outs = _outputs(engine)
    assert all(o.error is None for o in outs)
    got = _tokens(outs)
    assert {rid: got[rid] for rid in PROMPTS} == solo
    greedy = tiny_engine()
    greedy.add_request(_req("tiny-t", range(60, 80)))
    assert got["tiny-t"] == run_to_end(greedy)["tiny-t"]


def test_a_forward_that_raises_for_one_request_fails_it_alone():
    solo = _solo()
    engine = tiny_engine()
    real = engine.model

    def model(ids, *args):
        if bool((ids == POISON).any()):
            raise RuntimeError("poisoned input")
        return real(ids, *args)

    engine.model = model
    for rid, prompt in PROMPTS.items():
        engine.add_request(_req(rid, prompt))
    engine.add_request(_req("bad", [5, 6, POISON, 7]))
    outs = _outputs(engine)
    failed = [o for o in outs if o.error is not None]
    assert [o.request_id for o in failed] == ["bad"]
    assert failed[0].finished and "poisoned input" in failed[0].error
    assert _tokens(outs) == solo
    # the failed request's blocks went back to the pool
    assert engine.pool.num_free == engine.pool.num_blocks


def test_a_row_that_cannot_be_sampled_fails_alone():
    solo = _solo()
    engine = tiny_engine()
    for rid, prompt in PROMPTS.items():
        engine.add_request(_req(rid, prompt))
    engine.add_request(_req("nan", range(90, 99), temperature=1.0, seed=1))

    class Broken(SeqSampler):
        __slots__ = ()

        def sample(self, logits, history):
            raise SamplingError("the model produced no finite logit for this request's next token")

    engine._samplers["nan"] = Broken(SamplingParams(temperature=1.0), 9)
    outs = _outputs(engine)
    assert [o.request_id for o in outs if o.error is not None] == ["nan"]
    assert _tokens(outs) == solo


def test_sampling_is_finite_for_extreme_admitted_values():
    from strata.engine.sampler import SeqSampler, sample_batch

    logits = torch.tensor(
        [[1e30, -1e30, 3.0, float("inf")], [float("nan")] * 4, [0.5, 2.0, 1.0, -1.0]]
    )
    samplers = [
        SeqSampler(SamplingParams(temperature=2e-5, top_p=0.5, min_p=1.0, seed=3), 1),
        SeqSampler(SamplingParams(temperature=1.0, seed=3), 1),
        SeqSampler(SamplingParams(temperature=1e-3, repetition_penalty=1e-30, seed=3), 1),
    ]
    picks = sample_batch(logits, samplers, [[0], [0], [0, 1]])
    assert picks[0].token_id == 3  # +inf is the largest, not a nan
    assert isinstance(picks[1], SamplingError)  # nothing finite: this row alone
    assert picks[2].token_id == 1  # penalty made it huge, not nan


def test_greedy_fast_path_fails_only_the_row_without_a_finite_logit():
    from strata.engine.sampler import SeqSampler, sample_batch

    logits = torch.tensor(
        [[0.0, 2.0], [float("nan"), float("nan")], [float("-inf"), float("-inf")], [3.0, 1.0]]
    )
    picks = sample_batch(logits, [SeqSampler(SamplingParams(), 1) for _ in range(4)], [[0]] * 4)
    assert [p.token_id if not isinstance(p, SamplingError) else None for p in picks] == [
        1,
        None,
        None,
        0,
    ]


@pytest.mark.asyncio
async def test_async_engine_fails_one_stream_and_serves_the_others():
    solo = _solo()
    engine = tiny_engine()
    real = engine.model

    def model(ids, *args):
        if bool((ids == POISON).any()):
            raise RuntimeError("poisoned input")
        return real(ids, *args)

    engine.model = model
    runner = AsyncEngine(engine)

    async def collect(req):
        tokens = []
        async for out in runner.generate(req):
            tokens.extend(out.token_ids)
        return tokens

    try:
        tasks = {
            rid: asyncio.create_task(collect(_req(rid, prompt))) for rid, prompt in PROMPTS.items()
        }
        bad = asyncio.create_task(collect(_req("bad", [POISON, 1, 2])))
        with pytest.raises(RequestFailed, match="poisoned input"):
            await asyncio.wait_for(bad, 120)
        got = {rid: await asyncio.wait_for(t, 120) for rid, t in tasks.items()}
        assert got == solo
        # the engine serves new requests afterwards
        assert await asyncio.wait_for(collect(_req("r0", PROMPTS["r0"])), 120) == solo["r0"]
    finally:
        runner.stop()
