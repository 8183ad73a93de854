"""bench-placement's simulated comparison at toy size: the report carries its command, every
run, the judged run's targets and the work per GPU."""

from benchmarks.placement.__main__ import main


def test_a_tiny_comparison_writes_the_judged_targets(tmp_path):
    out = tmp_path / "placement.md"
    assert (
        main(
            [
                "--gpus",
                "4",
                "--models",
                "2",
                "--period",
                "300",
                "--windows",
                "4",
                "--red-lines",
                "1.03,class",
                "--lookahead",
                "0",
                "--compare-profile",
                "",
                "--no-stack",
                "--out",
                str(out),
                "--command",
                "make bench-placement",
            ]
        )
        == 0
    )
    text = out.read_text()
    assert "with `make bench-placement`" in text
    assert "## Targets (issue 6), judged on batch-aware, 1.03x alone" in text
    assert "busiest 15 s slice" in text
    rows = [
        line
        for line in text.splitlines()
        if line.startswith("| baseline |") or line.startswith("| batch-aware, ")
    ]
    assert len(rows) == 3 + 2  # the runs' table (baseline and two red lines), then
    assert "| requests per GPU-hour vs baseline |" in text  # each red line's trade-off
    assert "Replica counts configured for every run" in text
