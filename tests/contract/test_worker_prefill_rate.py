"""Decode worker in-process (dummy-tiny): GetStats reports the engine's measured prefill
throughput, 0 before any step of 64 tokens or more, which routing divides queued prompt tokens
by."""

from __future__ import annotations

import pytest
import torch

from strata.engine.async_engine import AsyncEngine
from strata.engine.dummy import load_dummy
from strata.engine.engine import EngineConfig, LLMEngine
from strata.rpc.server import channel
from strata.v1 import common_pb2, worker_pb2, worker_pb2_grpc
from tests.contract.helpers import serve_worker

MODEL = "dummy-tiny"


async def test_prefill_throughput_is_reported_once_a_prompt_was_prefilled():
    torch.set_num_threads(1)
    llm = LLMEngine(
        load_dummy(MODEL),
        EngineConfig(block_size=16, num_blocks=64, max_batched_tokens=256, max_seqs=4),
    )
    engine = AsyncEngine(llm)
    running = await serve_worker(engine, 1)
    try:
        async with channel(running.address) as ch:
            stub = worker_pb2_grpc.WorkerStub(ch)
            before = await stub.GetStats(worker_pb2.GetStatsRequest())
            assert before.prefill_tokens_per_s == 0.0
            # dummy-tiny's byte tokenizer: 120 characters are 120 prompt tokens, one step
            [
                _
                async for _ in stub.Generate(
                    worker_pb2.WorkerGenerateRequest(
                        request_id="r",
                        spec=common_pb2.GenerationSpec(model=MODEL, prompt="x" * 120, max_tokens=2),
                    )
                )
            ]
            after = await stub.GetStats(worker_pb2.GetStatsRequest())
        assert after.prefill_tokens_per_s > 0
        assert after.prefill_tokens_per_s == pytest.approx(1 / llm.costs.prefill_s_per_token)
    finally:
        await running.stop(0)
        engine.stop()
