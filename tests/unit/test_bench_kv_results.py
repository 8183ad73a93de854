"""KV benchmark sizing, summaries and the issue's targets: exact pool sizes, hit shares over the
looked-up blocks, PASS/FAIL on each side of every threshold, and the report naming them."""

import pytest

from benchmarks.kv.replay import EngineRequestRecord, MemoryTrack, ReplayResult
from benchmarks.kv.report import KVBenchReport, render
from benchmarks.kv.results import (
    ConfigResult,
    RoundFigures,
    check_targets,
    noise_floor,
    pair_ratios,
    round_figures,
    summarize,
)
from benchmarks.kv.sizing import size_configs
from benchmarks.kv.store_process import StoreFigures, TierFigures
from benchmarks.kv.trace_scale import CacheFigures, Scaling

BLOCK = 368640  # SmolLM2-135M in bfloat16: 30 layers x K,V x 3 heads x 16 tokens x 64 x 2 B
FIGURES = CacheFigures(
    prompt_blocks=4000,
    bound_blocks=2500,
    distinct_prompt_blocks=1800,
    generated_blocks=200,
    max_request_blocks=33,
)


def test_sizing_splits_the_working_set_between_device_host_and_disk():
    s = size_configs(FIGURES, max_seqs=8, block_bytes=BLOCK)
    assert s.working_set_blocks == 2000
    assert s.device_only_blocks == 2000 + 8 * 33
    assert s.tiered_blocks == 700  # 35% of the working set
    assert s.recompute_blocks == 264
    assert s.tier_rest_blocks == 1300
    assert s.host_bytes == 656 * BLOCK  # ceil(650 / 16) slabs of 16 blocks
    assert s.disk_bytes == (1300 - 656 + 130) * BLOCK  # the rest plus 10% of it
    assert s.slab_bytes == 16 * BLOCK


def test_a_tiny_working_set_still_fits_one_request_in_the_tiered_pool():
    small = CacheFigures(10, 5, 8, 2, max_request_blocks=6)
    s = size_configs(small, max_seqs=2, block_bytes=1)
    assert (s.tiered_blocks, s.device_only_blocks, s.recompute_blocks) == (6, 22, 12)
    with pytest.raises(ValueError, match="device_share must be in"):
        size_configs(small, 2, 1, device_share=0)


def result(name, peak, e2e_p50, device_hits, tier_hits, block_bytes=BLOCK) -> ConfigResult:
    return ConfigResult(
        name=name,
        description=f"{name} setup",
        pool_blocks=2264,
        block_bytes=block_bytes,
        requests=100,
        completed=100,
        peak_blocks=peak,
        mean_blocks=peak / 2,
        prompt_blocks=4000,
        device_hit_blocks=device_hits,
        tier_hit_blocks=tier_hits,
        ttft_p50_s=0.5,
        ttft_p99_s=2.0,
        e2e_p50_s=e2e_p50,
        e2e_p99_s=4.0,
        wall_s=120.0,
        steps=900,
        preemptions=0,
        evictions=0,
    )


def test_targets_pass_at_their_thresholds_and_fail_past_them():
    device_only = result("device-only", 2000, 2.0, 2500, 0)
    at_edge = result("tiered", 700, 2.1, 1500, 875)  # 65% less, +5%, 95% of bound
    assert [t.passed for t in check_targets(device_only, at_edge, 2500 / 4000)] == [True] * 3
    past = result("tiered", 701, 2.1001, 1500, 874)
    targets = check_targets(device_only, past, 2500 / 4000)
    assert [t.passed for t in targets] == [False, False, False]
    assert targets[0].measured == "65.0% less (246.4 vs 703.1 MiB)"
    assert targets[1].measured == "+5.0% (2100 vs 2000 ms)"
    assert targets[2].measured == "95.0% of it (59.4% vs 62.5%)"


def test_summary_counts_hits_in_looked_up_blocks_and_takes_percentiles():
    records = [
        EngineRequestRecord(0, 0.0, 33, 0.5, 1.0, 4, 32, 0),
        EngineRequestRecord(1, 1.0, 40, 1.25, 3.0, 4, 16, 16),
        EngineRequestRecord(2, 2.0, 17, None, None),
    ]  # never finished
    memory = MemoryTrack()
    memory.sample(0.0, 3)
    memory.sample(2.0, 5)
    r = summarize("tiered", "d", [ReplayResult(records, memory, 3.0, 10, 0, 2)], 8, 1024, 16)
    assert (r.requests, r.completed) == (3, 2)
    assert r.prompt_blocks == 2 + 2  # (33 - 1) // 16 + (40 - 1) // 16
    assert (r.device_hit_blocks, r.tier_hit_blocks) == (3, 1)
    assert r.hit_ratio == 1.0
    assert (r.ttft_p50_s, r.e2e_p50_s) == (pytest.approx(0.375), pytest.approx(1.5))
    assert (r.peak_blocks, r.mean_blocks) == (5, 3.0)


def test_report_shows_command_tables_store_tiers_and_verdicts():
    figures = CacheFigures(4000, 2500, 1800, 200, 33)
    sizing = size_configs(figures, 8, BLOCK)
    device_only = result("device-only", 2000, 2.0, 2500, 0)
    tiered = result("tiered", 700, 2.5, 1500, 500)
    tiered.store = StoreFigures(
        900,
        0,
        0,
        500,
        20,
        0,
        0,
        0,
        tiers=(
            TierFigures("host", 400, 0, 0, 450, 0, 10),
            TierFigures("disk", 500, 0, 0, 50, 0, 480),
        ),
    )
    text = render(
        KVBenchReport(
            command="make bench-kv",
            date="2026-11-29 14:00 UTC",
            machine="test box",
            setup="tiny",
            trace="fixture.",
            scaling=Scaling(),
            figures=figures,
            sizing=sizing,
            results=[device_only, tiered],
            targets=check_targets(device_only, tiered, 0.625),
        )
    )
    assert "Run 2026-11-29 14:00 UTC with `make bench-kv`." in text
    assert "infinite-cache bound: 2500 of them were in an earlier prompt = **62.5%**" in text
    assert (
        "| tiered | 795.9 | 246.1 | 123.0 | 37.5% | 12.5% | 50.0% (62.5%) | 500 / 2000 | "
        "2500 / 4000 | 100/100 | 120 |" in text
    )
    assert "| host | 400 | 0.0 / 0.0 | 450 | 0 | 10 |" in text
    assert (
        "| device-tier KV memory (peak) vs device-only | >= 65% less | 65.0% less "
        "(246.1 vs 703.1 MiB) | PASS |" in text
    )
    assert (
        "| P50 E2E latency vs device-only | <= 5% higher | +25.0% (2500 vs 2000 ms) | "
        "FAIL |" in text
    )


def test_rounds_pool_their_requests_and_keep_their_own_latencies():
    def replay_of(offset, peak):
        memory = MemoryTrack()
        memory.sample(0.0, peak)
        records = [
            EngineRequestRecord(0, 0.0, 33, 0.5 + offset, 1.0 + offset, 4, 32, 0),
            EngineRequestRecord(1, 1.0, 33, 1.5 + offset, 2.0 + offset, 4, 0, 32),
        ]
        return ReplayResult(records, memory, 3.0 + offset, 10, 1, 2)

    first, second = replay_of(0.0, 5), replay_of(1.0, 7)
    pooled = summarize("tiered", "d", [first, second], 8, 1024, 16)
    assert (pooled.requests, pooled.completed, pooled.prompt_blocks) == (4, 4, 8)
    assert (pooled.device_hit_blocks, pooled.tier_hit_blocks) == (4, 4)
    assert (pooled.peak_blocks, pooled.mean_blocks) == (7, 6.0)
    assert (pooled.wall_s, pooled.steps, pooled.preemptions, pooled.evictions) == (7.0, 20, 2, 4)
    assert pooled.e2e_p50_s == pytest.approx(1.5)  # of 1.0, 1.0, 2.0, 2.0
    assert round_figures(second, 1, 0, 0.9, 0.1) == RoundFigures(
        1,
        0,
        pytest.approx(1.5),
        pytest.approx(1.5),
        pytest.approx(2.0),
        pytest.approx(2.0),
        0.9,
        0.1,
    )


def rounds_of(*p50s, first=True):
    """Rounds alternate who runs first, starting with this configuration when `first`."""
    return [
        RoundFigures(i, (i + (0 if first else 1)) % 2, 0.1, 0.2, p50, 1.0)
        for i, p50 in enumerate(p50s)
    ]


def test_pair_ratios_compare_rounds_that_ran_back_to_back_and_the_floor_is_the_spread():
    device_only = result("device-only", 2000, 2.0, 2500, 0)
    tiered = result("tiered", 700, 2.1, 1500, 875)
    device_only.rounds = rounds_of(1.0, 1.25, 0.8)
    tiered.rounds = rounds_of(1.1, 1.0, 0.8, first=False)
    assert pair_ratios(device_only, tiered) == pytest.approx([0.1, -0.2, 0.0])
    assert noise_floor(device_only) == pytest.approx(1.25 / 0.8 - 1)
    assert noise_floor(result("one round", 1, 1.0, 0, 0)) is None


def test_report_has_a_round_table_with_the_noise_floor():
    figures = CacheFigures(4000, 2500, 1800, 200, 33)
    device_only = result("device-only", 2000, 2.0, 2500, 0)
    tiered = result("tiered", 700, 2.1, 1500, 875)
    device_only.rounds = rounds_of(1.0, 1.25)
    tiered.rounds = rounds_of(1.1, 1.0, first=False)
    text = render(
        KVBenchReport(
            command="make bench-kv",
            date="d",
            machine="m",
            setup="s",
            trace="t.",
            scaling=Scaling(),
            figures=figures,
            sizing=size_configs(figures, 8, BLOCK),
            results=[device_only, tiered],
            targets=check_targets(device_only, tiered, 0.625),
        )
    )
    assert "| 1 | device-only | 100 / 1000 | 100 / 1100 | +10.0% | 0.00 |" in text
    assert "| 2 | tiered | 100 / 1250 | 100 / 1000 | -20.0% | 0.00 |" in text
    assert "device-only's own P50 E2E moved 25.0% between rounds" in text
