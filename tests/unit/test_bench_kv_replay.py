"""KV benchmark replay on a tiny engine with a fake clock: the engine's hits equal the fixture's
infinite-cache bound when requests do not overlap, the pool ends up holding exactly the computed
working set, and one tenant per request (the recompute configuration) hits nothing."""

from pathlib import Path

import pytest
import torch

from benchmarks.kv.replay import MemoryTrack, data_blocks, replay
from benchmarks.kv.sizing import size_configs
from benchmarks.kv.trace_scale import Scaling, cache_figures, scale
from strata.engine.engine import EngineConfig, LLMEngine
from strata.eval.traces import read_mooncake
from tests.engine_helpers import tiny_loaded

FIXTURE = Path(__file__).parents[1] / "fixtures" / "traces" / "mooncake.jsonl"
VOCAB = 1100


class FakeClock:
    """Every reading moves time on by `tick` (one engine step costs two readings)."""

    def __init__(self, tick: float = 0.01) -> None:
        self.t = 0.0
        self.tick = tick
        self.slept = 0.0

    def __call__(self) -> float:
        self.t += self.tick
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept += seconds
        self.t += seconds


def engine(num_blocks: int) -> LLMEngine:
    torch.set_num_threads(1)
    return LLMEngine(
        tiny_loaded(vocab=VOCAB),
        EngineConfig(block_size=16, num_blocks=num_blocks, max_batched_tokens=64, max_seqs=8),
    )


@pytest.fixture
def requests():
    return scale(read_mooncake(FIXTURE).requests, Scaling(rate=None, vocab_size=VOCAB))


def test_device_only_replay_reaches_the_bound_and_holds_the_working_set(requests):
    figures = cache_figures(requests, 16)
    sizing = size_configs(figures, max_seqs=8, block_bytes=1)
    eng = engine(sizing.device_only_blocks)
    clock = FakeClock()
    result = replay(eng, requests, lambda r: "bench", clock=clock, sleep=clock.sleep)
    assert [r.finish_s is not None for r in result.records] == [True] * 8
    assert [r.output_tokens for r in result.records] == [r.max_tokens for r in requests]
    assert sum(r.cached_tokens // 16 for r in result.records) == figures.bound_blocks == 6
    assert [r.cached_tokens for r in result.records] == [0, 0, 32, 0, 16, 32, 0, 16]
    assert all(r.tier_tokens == 0 for r in result.records)
    assert all(r.arrival_s < r.first_token_s <= r.finish_s for r in result.records)
    assert result.evictions == 0
    assert data_blocks(eng) == figures.working_set_blocks == 12
    assert result.memory.peak_blocks >= 12
    assert clock.slept > 0  # idle gaps are slept through, not spun


def test_one_tenant_per_request_shares_nothing(requests):
    eng = engine(64)
    clock = FakeClock()
    result = replay(eng, requests, lambda r: f"request-{r.index}", clock=clock, sleep=clock.sleep)
    assert [r.cached_tokens for r in result.records] == [0] * 8
    assert len(result.records) == 8 and all(r.finish_s is not None for r in result.records)


def test_memory_mean_is_weighted_by_time():
    m = MemoryTrack()
    m.sample(0.0, 0)
    m.sample(1.0, 10)
    m.sample(3.0, 4)
    assert m.peak_blocks == 10 and m.samples == 3
    assert m.mean_blocks == pytest.approx(20 / 3)  # 0 for 1 s, then 10 for 2 s, over 3 s
    single = MemoryTrack()
    single.sample(0.0, 7)
    assert single.mean_blocks == 7.0
