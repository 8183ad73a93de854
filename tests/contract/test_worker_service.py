"""Decode worker in-process on port 0 over an AsyncEngine running dummy-tiny: streaming, prompts
vs chat messages, request errors, cancellation freeing blocks, stats and the generate span."""

from __future__ import annotations

import asyncio

import grpc
import pytest
import torch

from strata.engine.async_engine import AsyncEngine
from strata.engine.dummy import load_dummy
from strata.engine.engine import EngineConfig, EngineRequest, LLMEngine
from strata.engine.loaded import LoadedModel
from strata.engine.sequence import SamplingParams
from strata.rpc.server import channel
from strata.telemetry import names
from strata.v1 import common_pb2, worker_pb2, worker_pb2_grpc
from tests.contract.helpers import global_spans, serve_worker, spans_named
from tests.engine_helpers import run_to_end

MODEL = "dummy-tiny"
BLOCKS = 64
MEMORY_BYTES = 123_456_789
CONFIG = EngineConfig(block_size=16, num_blocks=BLOCKS, max_batched_tokens=256, max_seqs=8)
LENGTH = common_pb2.FINISH_REASON_LENGTH


@pytest.fixture(scope="module")
def loaded() -> LoadedModel:
    torch.set_num_threads(1)
    return load_dummy(MODEL)


@pytest.fixture
async def worker(loaded):
    engine = AsyncEngine(LLMEngine(loaded, CONFIG))
    running = await serve_worker(engine, MEMORY_BYTES)
    ch = channel(running.address)
    yield worker_pb2_grpc.WorkerStub(ch), engine
    await ch.close()
    await running.stop(0)
    engine.stop()


def generate(
    request_id: str = "req-1", prompt: str = "", messages=(), max_tokens: int = 8
) -> worker_pb2.WorkerGenerateRequest:
    return worker_pb2.WorkerGenerateRequest(
        request_id=request_id,
        tenant="acme",
        spec=common_pb2.GenerationSpec(
            model=MODEL,
            prompt=prompt,
            max_tokens=max_tokens,
            messages=[common_pb2.ChatMessage(role=r, content=c) for r, c in messages],
        ),
    )


def reference(loaded: LoadedModel, prompt_ids: list[int], max_tokens: int) -> list[int]:
    """Greedy tokens from a plain LLMEngine: what the worker must stream."""
    engine = LLMEngine(loaded, CONFIG)
    engine.add_request(EngineRequest("ref", prompt_ids, SamplingParams(max_tokens=max_tokens)))
    return run_to_end(engine)["ref"]


async def stats(stub) -> worker_pb2.WorkerStats:
    return await stub.GetStats(worker_pb2.GetStatsRequest())


async def test_generate_streams_one_chunk_per_token_with_usage_on_the_last(worker, loaded):
    stub, engine = worker
    chunks = [c async for c in stub.Generate(generate(prompt="Hello, world"))]
    prompt_ids = engine.engine.tokenizer.encode("Hello, world")
    assert len(prompt_ids) == 12
    assert [list(c.token_ids) for c in chunks] == [[t] for t in reference(loaded, prompt_ids, 8)]
    assert {c.request_id for c in chunks} == {"req-1"}
    assert [c.finish_reason for c in chunks] == [0] * 7 + [LENGTH]
    assert [c.HasField("usage") for c in chunks] == [False] * 7 + [True]
    usage = chunks[-1].usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.cached_prompt_tokens) == (12, 8, 0)
    ids = [t for c in chunks for t in c.token_ids]
    assert "".join(c.text for c in chunks) == engine.engine.tokenizer.decode(ids)


async def test_messages_are_rendered_with_the_chat_template(worker, loaded):
    stub, engine = worker
    messages = [("system", "Be brief."), ("user", "Hi")]
    chunks = [c async for c in stub.Generate(generate(messages=messages, max_tokens=3))]
    tok = engine.engine.tokenizer
    rendered = tok.encode(tok.apply_chat_template(messages))
    assert len(rendered) == 40  # the ChatML frame around 11 characters of content
    assert chunks[-1].usage.prompt_tokens == 40
    assert [t for c in chunks for t in c.token_ids] == reference(loaded, rendered, 3)


@pytest.mark.parametrize(
    ("prompt", "messages", "max_tokens", "details"),
    [
        ("Hi", [("user", "Hi")], 4, "give either prompt or messages, not both"),
        ("", [], 4, "the request has neither a prompt nor messages"),
        (
            "",
            [("robot", "Hi")],
            4,
            "messages[0].role must be one of system, user, assistant, tool, got 'robot'",
        ),
        ("Hello, world", [], 0, "max_tokens must be at least 1, got 0"),
        (
            "Hello, world",
            [],
            2040,
            "prompt (12 tokens) plus max_tokens (2040) exceeds the model's context of 2048 tokens",
        ),
        (
            "Hello, world",
            [],
            1020,  # ceil(1032 / 16) = 65 blocks
            "the request needs 65 KV blocks but this worker has 64; "
            "shorten the prompt or max_tokens",
        ),
    ],
)
async def test_bad_requests_are_invalid_argument(worker, prompt, messages, max_tokens, details):
    stub, _ = worker
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in stub.Generate(
            generate(prompt=prompt, messages=messages, max_tokens=max_tokens)
        ):
            pass
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details() == details
    assert (await stats(stub)).kv_blocks_free == BLOCKS


async def test_a_request_id_already_running_is_invalid_argument(worker):
    stub, _ = worker
    first = stub.Generate(generate("dup", prompt="Hello, world", max_tokens=1000))
    await first.read()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for _ in stub.Generate(generate("dup", prompt="Hello", max_tokens=2)):
            pass
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details() == "request id 'dup' is already running"
    first.cancel()
    assert (await wait_stats(stub, lambda s: s.running_requests == 0)).running_requests == 0


async def wait_stats(stub, done, timeout_s: float = 10.0) -> worker_pb2.WorkerStats:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        s = await stats(stub)
        if done(s) or loop.time() > deadline:
            return s
        await asyncio.sleep(0.02)


async def test_cancelling_mid_stream_frees_the_blocks(worker):
    stub, _ = worker
    before = await stats(stub)
    assert (before.kv_blocks_free, before.running_requests) == (BLOCKS, 0)
    call = stub.Generate(generate("long", prompt="x" * 100, max_tokens=900))
    first, second = await call.read(), await call.read()
    assert [len(first.token_ids), len(second.token_ids)] == [1, 1]
    busy = await stats(stub)
    assert busy.running_requests == 1
    assert busy.kv_blocks_free < BLOCKS
    # Its one token a step to compute, queued under its class (the default priority, 0).
    assert [(c.priority, c.tokens) for c in busy.queued_by_class] == [(0, busy.queued_tokens)]
    assert busy.queued_tokens >= 1
    call.cancel()
    after = await wait_stats(stub, lambda s: s.running_requests == 0)
    assert (after.running_requests, after.waiting_requests, after.queued_tokens) == (0, 0, 0)
    assert not after.queued_by_class
    assert after.kv_blocks_free == BLOCKS
    # it stopped early: running to the end would have left (100 + 900 - 1) // 16 = 62 cached
    assert after.kv_blocks_cached < 62


async def test_get_stats_reports_the_model_pool_and_prefix_hits(worker):
    stub, _ = worker
    s = await stats(stub)
    assert (
        s.model,
        s.running_requests,
        s.waiting_requests,
        s.kv_blocks_total,
        s.kv_blocks_free,
        s.kv_blocks_cached,
        s.prefix_hit_tokens,
        s.tier_hit_tokens,
        s.blocks_offloaded,
        s.queued_tokens,
        s.context_length,
        s.memory_bytes,
    ) == (MODEL, 0, 0, BLOCKS, BLOCKS, 0, 0, 0, 0, 0, 2048, MEMORY_BYTES)
    prompt = "a" * 40
    [c async for c in stub.Generate(generate("one", prompt=prompt))]
    s = await stats(stub)
    # 40 + 8 tokens, the last one never computed: (48 - 1) // 16 = 2 full blocks stay cached
    assert (s.kv_blocks_free, s.kv_blocks_cached, s.prefix_hit_tokens) == (BLOCKS, 2, 0)
    again = [c async for c in stub.Generate(generate("two", prompt=prompt))]
    # (40 - 1) // 16 = 2 prompt blocks are looked up, both hit
    assert again[-1].usage.cached_prompt_tokens == 32
    assert (await stats(stub)).prefix_hit_tokens == 32


async def test_generate_span_carries_request_model_and_token_counts(worker):
    stub, _ = worker
    exporter = global_spans()
    [c async for c in stub.Generate(generate("req-span", prompt="Hello, world", max_tokens=3))]
    (span,) = spans_named(exporter, names.SPAN_WORKER_GENERATE)
    assert dict(span.attributes) == {
        names.REQUEST_ID: "req-span",
        names.GEN_AI_REQUEST_MODEL: MODEL,
        names.GEN_AI_USAGE_INPUT_TOKENS: 12,
        names.GEN_AI_USAGE_OUTPUT_TOKENS: 3,
        names.CACHED_TOKENS: 0,
        names.TIER_TOKENS: 0,
    }


async def test_concurrent_requests_without_an_id_on_one_channel_both_run(worker):
    stub, _ = worker
    first = stub.Generate(generate("", prompt="Hello, world", max_tokens=900))
    try:
        await first.read()
        second = [c async for c in stub.Generate(generate("", prompt="Hello", max_tokens=2))]
        assert second[-1].usage.completion_tokens == 2
    finally:
        first.cancel()
        assert (await wait_stats(stub, lambda s: s.running_requests == 0)).running_requests == 0


async def test_get_stats_reports_evicted_block_lifetimes(worker):
    stub, engine = worker
    assert (await stats(stub)).kv_blocks_evicted == 0
    pool = engine.engine.pool
    times = iter([0.0] * 4 + [1.0, 2.0, 3.0, 4.0])  # four commits, then four evictions
    pool.clock = lambda: next(times)
    blocks = pool.allocate(BLOCKS)
    for i, b in enumerate(blocks[:4]):
        pool.commit(b, 1000 + i)
    pool.free(blocks)
    pool.free(pool.allocate(BLOCKS))  # evicts the four committed blocks
    s = await stats(stub)
    assert (s.kv_blocks_evicted, s.block_lifetime_sum_s) == (4, 10.0)
    assert s.block_lifetime_p50_s == 2.5
    assert s.block_lifetime_p99_s == pytest.approx(3.97)  # rank 0.99 x 3 between 3 and 4
