"""`make bench-prefill`'s pieces: the baseline's single group, the trace's sizes, the report."""

from pathlib import Path

from benchmarks.engine.mixed_prefill import WAYS, one_group, render, trace_sizes

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures/traces/azure_conv.csv"


def test_the_baseline_pads_every_chunk_into_one_group():
    assert one_group([(512, 512), (9, 9), (40, 90)], 16) == [[0, 1, 2]]
    assert one_group([], 16) == []


def test_sizes_follow_the_trace_scaled_and_clipped():
    sizes = trace_sizes(FIXTURE)
    assert sizes[0] == (94, 11)  # ceil(374 / 4), ceil(44 / 4)
    assert all(1 <= p <= 1024 and 1 <= o <= 64 for p, o in sizes)


def test_the_report_compares_both_ways_from_the_same_rounds():
    rounds = [
        {"way": w, "round": r, "requests": 2, "prompt_tokens": 10, "output_tokens": 4,
         "seconds": s, "ttft_mean_s": s / 2, "ttft_p90_s": s}
        for r in range(2)
        for w, s in zip(WAYS, (4.0, 2.0))
    ]  # fmt: skip
    data = {"command": "make bench-prefill", "machine": {}, "dtype": "bfloat16", "threads": 1,
            "group_overhead_keys": 4096, "rounds": rounds}  # fmt: skip
    text = render(data)
    assert "make bench-prefill" in text
    assert "the burst 2.00x as fast, mean TTFT 2.00x lower" in text
    assert text.count("| one padded group |") == 3 and text.count("| groups |") == 3
