"""Decode worker in-process on port 0 with its solo profile (dummy-tiny): GetStats reports the
measured and profile-predicted seconds of the steps it ran; without a profile, those priced by
its online step line; zero when nothing meters its steps; the worker's config finds the shipped
profile or one in a folder, and refuses a missing path."""

from __future__ import annotations

import math

import pytest
import torch

from services.worker.config import WorkerConfig
from strata.core.settings import ConfigError
from strata.engine.async_engine import AsyncEngine
from strata.engine.dummy import load_dummy
from strata.engine.engine import EngineConfig, LLMEngine
from strata.engine.loaded import LoadedModel
from strata.engine.step_meter import StepMeter, find_profile, learn_steps, meter_from_profile
from strata.rpc.server import channel
from strata.v1 import worker_pb2, worker_pb2_grpc
from tests.contract.helpers import generate_ignoring_eos, serve_worker

MODEL = "dummy-tiny"
CONFIG = EngineConfig(block_size=16, num_blocks=64, max_batched_tokens=256, max_seqs=8)


@pytest.fixture(scope="module")
def loaded() -> LoadedModel:
    torch.set_num_threads(1)
    return load_dummy(MODEL)


async def serve(loaded: LoadedModel, meter: StepMeter | None, learn: bool):
    """The worker over an engine whose steps `meter` observes, or (`learn`) the learner that
    learn_steps installs without a profile, with its meter."""
    llm = LLMEngine(loaded, CONFIG)
    learner = None
    if learn:
        learner = learn_steps(llm)
        meter = learner.meter
    else:
        llm.step_observer = meter
    engine = AsyncEngine(llm)
    running = await serve_worker(engine, 1, meter, learner)
    return running, engine


async def generate_and_read_stats(
    loaded: LoadedModel, meter: StepMeter | None, learn: bool = False
):
    running, engine = await serve(loaded, meter, learn)
    try:
        async with channel(running.address) as ch:
            stub = worker_pb2_grpc.WorkerStub(ch)
            for i in range(2):
                chunks = await generate_ignoring_eos(stub, MODEL, f"r{i}", "interference " * 6, 12)
                assert len(chunks) == 12
            return await stub.GetStats(worker_pb2.GetStatsRequest()), engine.engine.stats
    finally:
        await running.stop(0)
        engine.stop()


async def test_get_stats_reports_observed_and_solo_seconds_of_the_steps_it_ran(loaded):
    meter = meter_from_profile(find_profile(MODEL, "cpu"), MODEL, CONFIG.block_size)
    stats, engine_stats = await generate_and_read_stats(loaded, meter)
    assert stats.steps == engine_stats.steps == meter.steps == 24  # 2 x (1 prefill + 11)
    assert stats.step_seconds_observed == meter.observed_s > 0
    assert stats.step_seconds_solo == meter.solo_s > 0
    # Whole steps are timed, schedule() included: at least the engine's busy time.
    assert stats.step_seconds_observed >= stats.busy_seconds
    ratio = stats.step_seconds_observed / stats.step_seconds_solo
    # Plausible, not a timing claim: this CPU against a profile of a CPU like it.
    assert math.isfinite(ratio) and 0.05 < ratio < 50


async def test_without_a_profile_the_online_line_prices_the_steps(loaded):
    stats, engine_stats = await generate_and_read_stats(loaded, None, learn=True)
    assert stats.steps == engine_stats.steps == 24
    assert stats.step_seconds_observed > 0 and stats.step_seconds_solo > 0
    # The line is learned on step periods: the meter's measured sum is at least the engine's.
    assert stats.step_seconds_observed >= stats.busy_seconds


async def test_unmetered_steps_report_zero_counters(loaded):
    stats, _ = await generate_and_read_stats(loaded, None)
    assert stats.steps == 24
    assert (stats.step_seconds_observed, stats.step_seconds_solo) == (0.0, 0.0)


def test_config_takes_the_shipped_profile_of_the_model_or_none(monkeypatch, tmp_path):
    monkeypatch.setenv("STRATA_WORKER_BIND", "127.0.0.1:0")
    monkeypatch.delenv("STRATA_PROFILE_PATH", raising=False)
    monkeypatch.setenv("STRATA_MODEL", MODEL)
    assert WorkerConfig.from_env().profile == find_profile(MODEL, "cpu") != ""
    monkeypatch.setenv("STRATA_DEVICE", "cuda")
    assert WorkerConfig.from_env().profile == ""
    monkeypatch.setenv("STRATA_DEVICE", "cpu")
    monkeypatch.setenv("STRATA_MODEL", "dummy-bench")
    assert WorkerConfig.from_env().profile == ""
    # A folder: the profile named after the model, if there is one.
    mine = tmp_path / "dummy-bench-cpu.json"
    mine.write_text("{}")
    monkeypatch.setenv("STRATA_PROFILE_PATH", str(tmp_path))
    assert WorkerConfig.from_env().profile == str(mine)
    monkeypatch.setenv("STRATA_MODEL", MODEL)
    assert WorkerConfig.from_env().profile == ""
    monkeypatch.setenv("STRATA_PROFILE_PATH", str(mine))
    assert WorkerConfig.from_env().profile == str(mine)
    monkeypatch.setenv("STRATA_PROFILE_PATH", str(tmp_path / "nope.json"))
    with pytest.raises(ConfigError, match="STRATA_PROFILE_PATH .*nope.json' is neither"):
        WorkerConfig.from_env()
