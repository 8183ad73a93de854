"""A simulated run's layered report: built from its request rows and node samples by the same
layer functions as a real run's, written as `strata report --json` writes, read back by
`strata report --compare` beside another report file."""

import pytest

from strata.client import cli
from strata.client.report_cli import load_report_file
from strata.sim.report import sim_report, write_report
from tests.unit.test_sim_cluster import req, simulator

EPOCH = 1_700_000_000_000


def _run(outputs):
    return simulator(sample_s=1.0).run([req(i, 0.5 + i, output=n) for i, n in enumerate(outputs)])


def test_report_layers_come_from_the_simulated_rows_and_samples(tmp_path):
    result = _run([3, 3])
    report = sim_report(result, EPOCH, "sim: two requests", '{"nodes": 1}')
    o = report.request.overall
    assert (o.requests, o.errors, o.completion_tokens) == (2, 0, 6)
    assert o.ttft_ms.p50 == pytest.approx(3.0) and o.e2e_ms.p99 == pytest.approx(5.2)
    assert report.run.name == "sim: two requests" and report.run.params_json == '{"nodes": 1}'
    assert report.window_end_unix_ms == EPOCH + round(result.end_s * 1000)
    [node] = report.node.nodes
    # busy 2 x 5.2 ms over the 1.5052 s window: utilization per GPU is busy over wall time.
    # Samples carry whole milliseconds: the last one (all busy) stands at 1505, not 1505.2.
    assert node.utilization == pytest.approx((5.2 + 5.0) / 1505)
    assert report.cluster.utilization == node.utilization
    assert {s.name for s in report.node.series} >= {"utilization", "batch_utilization"}
    path = tmp_path / "sim.json"
    write_report(report, path)
    assert load_report_file(str(path)) == report


def test_compare_reads_two_report_files(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_report(sim_report(_run([3]), EPOCH, "short"), a)
    write_report(sim_report(_run([5]), EPOCH, "long"), b)
    assert cli.main(["report", "--compare", str(a), str(b)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"A = {a}: run 0 'short' (benchmark, finished)")
    row = next(line for line in lines if line.startswith("e2e p50 ms"))
    assert row.split()[-4:] == ["5.2", "7.4", "+2.2", "+42.3%"]


def test_compare_names_a_file_that_is_not_a_report(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"run": null}')
    good = tmp_path / "good.json"
    write_report(sim_report(_run([3]), EPOCH, "x"), good)
    assert cli.main(["report", "--compare", str(good), str(bad)]) == 2
    assert capsys.readouterr().err.startswith(
        f"error: {bad} is not a layered report as `strata report --json` writes it"
    )
