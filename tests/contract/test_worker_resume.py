"""Decode worker in-process on port 0 over dummy-tiny: a Generate with resume_output_ids
continues another worker's stream exactly (greedy tokens and text as one uninterrupted run,
usage counting the resumed tokens as output), finishes at once when they reached max_tokens,
and refuses ids outside the vocabulary."""

from __future__ import annotations

import grpc
import pytest
import torch

from strata.engine.async_engine import AsyncEngine
from strata.engine.dummy import load_dummy
from strata.engine.engine import EngineConfig, LLMEngine
from strata.rpc.server import channel
from strata.v1 import common_pb2, worker_pb2, worker_pb2_grpc
from tests.contract.helpers import serve_worker

MODEL = "dummy-tiny"
CONFIG = EngineConfig(block_size=16, num_blocks=64, max_batched_tokens=256, max_seqs=8)
LENGTH = common_pb2.FINISH_REASON_LENGTH
PROMPT = "Resume me, please"


@pytest.fixture
async def stub():
    torch.set_num_threads(1)
    engine = AsyncEngine(LLMEngine(load_dummy(MODEL), CONFIG))
    running = await serve_worker(engine, 1)
    ch = channel(running.address)
    yield worker_pb2_grpc.WorkerStub(ch)
    await ch.close()
    await running.stop(0)
    engine.stop()


def generate(request_id: str, max_tokens: int, resume=()) -> worker_pb2.WorkerGenerateRequest:
    return worker_pb2.WorkerGenerateRequest(
        request_id=request_id,
        tenant="acme",
        resume_output_ids=list(resume),
        spec=common_pb2.GenerationSpec(
            model=MODEL,
            prompt=PROMPT,
            max_tokens=max_tokens,
            sampling=common_pb2.SamplingParams(ignore_eos=True),
        ),
    )


async def chunks(stub, request) -> list[common_pb2.GenerationChunk]:
    return [c async for c in stub.Generate(request)]


def tokens(cs) -> list[int]:
    return [t for c in cs for t in c.token_ids]


# dummy-tiny's 7th token here is a lone UTF-8 continuation byte, held back until the 8th
# releases it as U+FFFD: a failure after 7 splits the text inside held-back bytes.
@pytest.mark.parametrize("streamed", [5, 7])
async def test_streamed_tokens_then_a_resume_equal_one_uninterrupted_run(stub, streamed):
    whole = await chunks(stub, generate("whole", 12))
    assert len(tokens(whole)) == 12 and whole[-1].finish_reason == LENGTH
    assert (whole[6].text, whole[7].text) == ("", "\ufffdc")
    first = (await chunks(stub, generate("first", 12)))[:streamed]  # then the worker "died"
    assert tokens(first) == tokens(whole)[:streamed]
    rest = await chunks(stub, generate("rest", 12, resume=tokens(first)))
    assert tokens(rest) == tokens(whole)[streamed:]
    assert len(rest) == 12 - streamed
    assert [c.finish_reason for c in rest] == [0] * (11 - streamed) + [LENGTH]
    assert "".join(c.text for c in first + rest) == "".join(c.text for c in whole)
    assert [c.text for c in rest] == [c.text for c in whole[streamed:]]
    prompt_tokens = len(PROMPT.encode())
    assert (rest[-1].usage.prompt_tokens, rest[-1].usage.completion_tokens) == (prompt_tokens, 12)
    assert (whole[-1].usage.prompt_tokens, whole[-1].usage.completion_tokens) == (prompt_tokens, 12)


async def test_a_resume_that_reached_max_tokens_finishes_at_once(stub):
    whole = await chunks(stub, generate("whole", 6))
    done = await chunks(stub, generate("done", 6, resume=tokens(whole)))
    assert len(done) == 1
    c = done[0]
    assert (list(c.token_ids), c.text, c.finish_reason) == ([], "", LENGTH)
    assert (c.usage.prompt_tokens, c.usage.completion_tokens) == (len(PROMPT.encode()), 6)


async def test_a_resume_id_outside_the_vocabulary_is_refused(stub):
    vocab = load_dummy(MODEL).config.vocab_size
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await chunks(stub, generate("bad", 6, resume=[1, vocab]))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details() == (
        f"resume_output_ids holds token id {vocab}, outside the model's vocabulary (0..{vocab - 1})"
    )
