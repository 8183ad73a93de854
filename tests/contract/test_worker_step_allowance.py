"""Decode worker in-process on port 0 (dummy-tiny) with its step budget: GetStats reports the
longest step its running decodes with a TPOT target allowed at the latest step, what the
scheduler prices a prompt's prefill with; nothing where no decode has a target."""

from __future__ import annotations

import pytest
import torch

from services.worker.step_budget import StepBudget
from strata.core.step_model import StepLine
from strata.engine.async_engine import AsyncEngine
from strata.engine.dummy import load_dummy
from strata.engine.engine import EngineConfig, LLMEngine
from strata.engine.loaded import LoadedModel
from strata.rpc.server import channel
from strata.v1 import worker_pb2, worker_pb2_grpc
from tests.contract.helpers import generate_ignoring_eos, serve_worker

MODEL = "dummy-tiny"
CONFIG = EngineConfig(block_size=16, num_blocks=64, max_batched_tokens=256, max_seqs=8)
LINE = StepLine(0.010, 2e-5, 0.002 - 2e-5, 1e-8, 1e-6, 0.0)


@pytest.fixture(scope="module")
def loaded() -> LoadedModel:
    torch.set_num_threads(1)
    return load_dummy(MODEL)


async def allowance_after(loaded: LoadedModel, tpot_ms: float) -> tuple[float, float]:
    """(reported over GetStats, the budget's own) after a 12-token generation whose request
    has TPOT target `tpot_ms` (0: none). The budget keeps its allowance for an hour, so a slow
    machine reads the latest step's."""
    llm = LLMEngine(loaded, CONFIG)
    budget = StepBudget(lambda: LINE, CONFIG.max_batched_tokens, CONFIG.block_size, max_age_s=3600)
    llm.step_budget = budget
    engine = AsyncEngine(llm)
    running = await serve_worker(engine)
    try:
        async with channel(running.address) as ch:
            stub = worker_pb2_grpc.WorkerStub(ch)
            chunks = await generate_ignoring_eos(stub, MODEL, "r", "slack " * 6, 12, tpot_ms)
            assert len(chunks) == 12
            stats = await stub.GetStats(worker_pb2.GetStatsRequest())
            return stats.step_allowance_ms, budget.allowance_ms()
    finally:
        await running.stop(0)
        engine.stop()


async def test_get_stats_reports_what_the_decodes_allowed_at_the_latest_step(loaded):
    reported, own = await allowance_after(loaded, 100.0)
    # dummy-tiny decodes far faster than 100 ms a token: its unspent slack lends the step
    # more than one gap's 90 ms.
    assert reported == own and reported > 90.0


async def test_get_stats_reports_nothing_lent_without_a_tpot_target(loaded):
    assert await allowance_after(loaded, 0.0) == (0.0, 0.0)
