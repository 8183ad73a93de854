"""Decode worker in-process on port 0 (dummy-tiny): GetStats reports the step-time line the worker
learns online from the steps it serves (strata.core.step_model), starting from its solo profile
or, without one, from a conservative line priced from the model's size; the warm-up's steps are
not learned from; the step meter's interference sums are what they were without the learner."""

from __future__ import annotations

import pytest
import torch

from strata.core.step_model import StepLine, conservative_prior, prior_from_costs
from strata.engine.async_engine import AsyncEngine
from strata.engine.dummy import load_dummy
from strata.engine.engine import EngineConfig, LLMEngine
from strata.engine.loaded import LoadedModel
from strata.engine.step_meter import StepMeter, find_profile, learn_steps, meter_from_profile
from strata.rpc.server import channel
from strata.v1 import common_pb2, worker_pb2, worker_pb2_grpc
from tests.contract.helpers import serve_worker

MODEL = "dummy-tiny"
CONFIG = EngineConfig(block_size=16, num_blocks=64, max_batched_tokens=256, max_seqs=8)
TOKENS = 12


@pytest.fixture(scope="module")
def loaded() -> LoadedModel:
    torch.set_num_threads(1)
    return load_dummy(MODEL)


def reported(stats: worker_pb2.WorkerStats) -> StepLine:
    return StepLine.from_coefficients(list(stats.step_line), samples=stats.step_line_samples)


async def serve_and_generate(loaded: LoadedModel, meter: StepMeter | None, requests: int):
    """A worker set up as services.worker sets one up (warm-up, then the learner); its stats
    before and after `requests` generations, the learner and the engine's counters."""
    llm = LLMEngine(loaded, CONFIG)
    llm.warm_up()
    learner = learn_steps(llm, meter)
    engine = AsyncEngine(llm)
    running = await serve_worker(engine, 1, meter, learner)
    try:
        async with channel(running.address) as ch:
            stub = worker_pb2_grpc.WorkerStub(ch)
            before = await stub.GetStats(worker_pb2.GetStatsRequest())
            for i in range(requests):
                chunks = [
                    c
                    async for c in stub.Generate(
                        worker_pb2.WorkerGenerateRequest(
                            request_id=f"r{i}",
                            tenant="acme",
                            spec=common_pb2.GenerationSpec(
                                model=MODEL,
                                prompt="step line " * 6,
                                max_tokens=TOKENS,
                                sampling=common_pb2.SamplingParams(ignore_eos=True),
                            ),
                        )
                    )
                ]
                assert len(chunks) == TOKENS
            after = await stub.GetStats(worker_pb2.GetStatsRequest())
            return before, after, learner, llm.stats
    finally:
        await running.stop(0)
        engine.stop()


async def test_without_a_profile_the_line_starts_conservative_and_learns_from_each_step(loaded):
    before, after, learner, counters = await serve_and_generate(loaded, None, 2)
    cfg = loaded.config  # served in float32: 4 bytes a value
    prior = conservative_prior(cfg.param_count(), 4 * cfg.param_count(), cfg.kv_bytes_per_token(4))
    # The warm-up ran steps, but the learner was installed after it.
    assert reported(before) == prior and before.step_line_samples == 0
    assert len(after.step_line) == 6
    assert after.step_line_samples == counters.steps == after.steps == 2 * TOKENS
    assert reported(after) == learner.model.line()
    assert reported(after) != prior
    # No profile: no interference sums.
    assert (after.step_seconds_observed, after.step_seconds_solo) == (0.0, 0.0)


async def test_with_a_profile_the_line_starts_at_it_and_the_meter_is_unchanged(loaded):
    meter = meter_from_profile(find_profile(MODEL, "cpu"), MODEL, CONFIG.block_size)
    before, after, learner, counters = await serve_and_generate(loaded, meter, 2)
    assert reported(before) == prior_from_costs(meter.costs)
    assert after.step_line_samples == meter.steps == counters.steps == 2 * TOKENS
    assert after.step_seconds_observed == meter.observed_s > 0
    assert after.step_seconds_solo == meter.solo_s > 0
    assert reported(after) == learner.model.line()
    assert all(v >= 0 for v in after.step_line)
