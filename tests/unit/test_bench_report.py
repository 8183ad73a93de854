"""Engine benchmark report: cell formatting, ratios to the baseline, tables, busy-machine note."""

from benchmarks.engine.report import (
    BenchReport,
    Phase,
    agreement,
    busy_note,
    highest_rate_within,
    knee_sentence,
    offline_table,
    online_table,
    percentile_cell,
    render,
    single_rounds_section,
    throughput_cell,
)
from benchmarks.engine.results import LatencySummary, OfflineResult, RateResult


def _offline(system, dtype, mode, seconds, token_ids=()):
    n = 64 if mode == "batch" else 1
    return OfflineResult(
        system=system,
        dtype=dtype,
        mode=mode,
        requests=n,
        prompt_tokens=n * 128,
        output_tokens=n * 128,
        seconds=seconds,
        setup=f"{system} setup",
        token_ids=[list(t) for t in token_ids],
    )


def test_percentile_cell():
    assert percentile_cell(LatencySummary(12.34, 56.78, 90.15, 20.0, 3)) == "12.3 / 56.8 / 90.2"
    assert percentile_cell(None) == "—"


def test_throughput_cell_with_and_without_a_baseline():
    assert throughput_cell(354.06, 458.7) == "354.1 (0.77x)"
    assert throughput_cell(917.4, 458.7) == "917.4 (2.00x)"
    assert throughput_cell(354.06, None) == "354.1"
    assert throughput_cell(None, 458.7) == "—"


def test_offline_table_puts_ratios_against_transformers_of_the_same_column():
    results = [
        _offline("strata", "bfloat16", "batch", 8192 / 400),
        _offline("transformers", "bfloat16", "batch", 8192 / 200),
        _offline("transformers", "float32", "batch", 8192 / 100),
        _offline("strata", "bfloat16", "single", 128 / 50),
        _offline("transformers", "bfloat16", "single", 128 / 25),
    ]
    assert offline_table(results) == [
        "| system | 64x128 bf16 | 64x128 fp32 | single stream bf16 | single stream fp32 |",
        "|---|---:|---:|---:|---:|",
        "| strata LLMEngine | 400.0 (2.00x) | — | 50.0 (2.00x) | — |",
        "| transformers generate | 200.0 | 100.0 | 25.0 | — |",
    ]


def test_agreement_counts_identical_greedy_prefixes():
    base = _offline("transformers", "float32", "batch", 1.0, [[1, 2], [3, 4], [5, 6]])
    ours = _offline("strata", "float32", "batch", 1.0, [[1, 2], [3, 9], [5, 6]])
    assert agreement([ours, base]) == [
        "strata LLMEngine float32: 2/3 requests have the same first 2 greedy tokens as transformers"
    ]


def test_online_table_row():
    summary = LatencySummary(10.0, 20.0, 30.0, 15.0, 4)
    rate = RateResult(
        rate=2.0,
        sent=5,
        completed=4,
        cancelled=1,
        failed=0,
        seconds=10.0,
        output_tokens=321,
        ttft_ms=summary,
        tpot_ms=None,
        e2e_ms=summary,
    )
    assert online_table([rate])[2] == (
        "| 2 | 5 | 4 | 1 | 0 | 0.40 | 32.1 | 10.0 / 20.0 / 30.0 | — | 10.0 / 20.0 / 30.0 |"
    )


def _rate(rate: float, p99_ms: float, cancelled: int = 0) -> RateResult:
    summary = LatencySummary(p99_ms / 4, p99_ms / 2, p99_ms, p99_ms / 3, 10)
    return RateResult(rate, 10, 10 - cancelled, cancelled, 0, 5.0, 100, summary, None, summary)


def test_the_highest_rate_within_the_ttft_target_stops_at_the_first_miss():
    sweep = [_rate(4, 900.0), _rate(1, 300.0), _rate(2, 500.0), _rate(8, 2400.0), _rate(12, 900.0)]
    assert highest_rate_within(sweep) == 4  # 12 req/s's P99 does not count past 8's miss
    assert "4 req/s" in knee_sentence(sweep)
    assert highest_rate_within([_rate(1, 300.0), _rate(2, 400.0, cancelled=1)]) == 1
    assert highest_rate_within([_rate(1, 2000.0)]) is None
    assert knee_sentence([_rate(1, 2000.0)]).startswith("No offered rate")
    assert "up to 2 req/s" in knee_sentence([_rate(1, 300.0), _rate(2, 400.0)])


def test_alternating_single_rounds_give_a_row_each_and_the_median_ratio():
    lines = single_rounds_section([(300.0, 400.0), (330.0, 300.0), (310.0, 310.0)])
    assert "| 2 | 330.0 | 300.0 | 1.10x |" in lines
    summary = next(line for line in lines if line.startswith("Median"))
    assert "strata 310.0 tok/s, llama.cpp 310.0 tok/s; median ratio 1.00x" in summary
    assert "(rounds 0.75x-1.10x)" in summary
    assert single_rounds_section([]) == []


def test_busy_note_only_when_other_work_took_cpu():
    quiet = [Phase("a", 10.0, 1.9, 0.05), Phase("b", 30.0, 1.9, 0.2)]
    assert busy_note(quiet, 2) is None
    busy = [
        Phase("a", 10.0, 1.9, 0.1),
        Phase("b", 30.0, 1.5, 0.9),
        Phase("c", 0.0, 0.0, 0.0, "skipped: no trace"),
    ]
    assert busy_note(busy, 2) == (
        "**Busy machine:** other work used 0.70 cores on average during the measured phases "
        "(up to 0.90 during b) of the machine's 2; these numbers are noisy: rerun on an idle "
        "machine before quoting them."
    )


def test_render_names_the_command_and_a_skipped_online_phase():
    report = BenchReport(
        command="make bench-engine",
        date="2026-11-29 12:00 UTC",
        machine={
            "cpu_model": "AMD EPYC",
            "cores": 2,
            "cpu_flags": ["avx512_bf16"],
            "memory_gib": 23.5,
            "python": "3.11.9",
            "torch": "2.13.0+cpu",
            "kernel": "6.1",
        },
        model="`dummy-bench`",
        offline=[_offline("transformers", "bfloat16", "batch", 40.0)],
        online=[],
        online_meta={"skipped": "Skipped: no trace."},
        phases=[Phase("transformers-bfloat16", 41.0, 1.98, 0.01)],
    )
    text = render(report)
    assert "Run 2026-11-29 12:00 UTC with `make bench-engine`." in text
    assert (
        "Machine: AMD EPYC, 2 cores (avx512_bf16), 23.5 GiB; Python 3.11.9, "
        "torch 2.13.0+cpu, Linux 6.1." in text
    )
    assert "| transformers generate | 204.8 | — | — | — |" in text
    assert "\nSkipped: no trace.\n" in text
    assert "Busy machine" not in text
    assert "| transformers-bfloat16 | 41 | 1.98 | 0.01 | ok |" in text
