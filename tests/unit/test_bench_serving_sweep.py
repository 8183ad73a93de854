"""The serving benchmark's load sweep report (benchmarks/serving/sweep_report): the targets
against the peer at each load, and the table's rows."""

from __future__ import annotations

from dataclasses import asdict

from benchmarks.overload.points import Latency, point_stats
from strata.core.sla import SlaTable
from strata.eval.client_metrics import ClientRecord


def _records(n_ok: int, ttft_s: float, refused: int = 0) -> list[ClientRecord]:
    out = [
        ClientRecord(
            i,
            "api",
            0.0,
            0.0,
            16,
            8,
            "standard",
            ttft_s=ttft_s,
            e2e_s=ttft_s + 0.35,
            itl_s=[0.05] * 7,
            output_tokens=8,
        )
        for i in range(n_ok)
    ]
    out += [
        ClientRecord(
            n_ok + i,
            "api",
            0.0,
            0.0,
            16,
            8,
            "standard",
            status="RESOURCE_EXHAUSTED",
            error="no replica of 'm' can meet the standard class's TTFT target of 2000 ms now",
        )
        for i in range(refused)
    ]
    return out


def _point(rate: float, window_s: float, records: list[ClientRecord]) -> dict:
    done = [r for r in records if r.ok]
    return {
        "rate": rate,
        "window_s": window_s,
        "output_tokens": sum(r.output_tokens for r in done),
        "itl": asdict(Latency.of(g for r in done for g in r.itl_s)),
        "stats": asdict(point_stats(records, window_s, SlaTable())),
    }


def _sweep(strata: list[dict], vllm: list[dict]) -> dict:
    return {
        "model": "m",
        "settings": {"multiples": [0.5, 2.0], "request_timeout_s": 60.0},
        "capacity": {"rps": 1.0, "completed": 45, "clients": 16, "seconds": 45.0},
        "servers": {"strata": strata, "vllm": vllm},
    }


def test_goodput_is_judged_at_every_load_and_p99_ttft_only_below_capacity():
    from benchmarks.serving.sweep_report import sweep_section, sweep_verdicts

    sweep = _sweep(
        # 0.5x: both serve 10 in time, Strata's TTFT 1.05x vLLM's (within 1.1x).
        # 2x: Strata refuses 20 and serves 20 in time; vLLM serves 40, all past 2 s TTFT.
        [_point(0.5, 20.0, _records(10, 0.21)), _point(2.0, 20.0, _records(20, 0.5, 20))],
        [_point(0.5, 20.0, _records(10, 0.20)), _point(2.0, 20.0, _records(40, 3.0))],
    )
    verdicts = {v.name: v for v in sweep_verdicts(sweep)}
    assert list(verdicts) == [
        "0.5x capacity (0.50 req/s): goodput vs vllm",
        "0.5x capacity (0.50 req/s): P99 TTFT vs vllm",
        "2x capacity (2.00 req/s): goodput vs vllm",
    ]
    assert verdicts["0.5x capacity (0.50 req/s): goodput vs vllm"].passed
    assert verdicts["0.5x capacity (0.50 req/s): P99 TTFT vs vllm"].passed
    assert verdicts["0.5x capacity (0.50 req/s): P99 TTFT vs vllm"].value == 1.05
    at_2x = verdicts["2x capacity (2.00 req/s): goodput vs vllm"]
    assert at_2x.passed and at_2x.measured == "1.00 vs 0.00 req/s"
    # Strata slower than 1.1x below capacity fails.
    slow = _sweep([_point(0.5, 20.0, _records(10, 0.3))], [_point(0.5, 20.0, _records(10, 0.2))])
    assert [v.passed for v in sweep_verdicts(slow)] == [True, False]
    lines = sweep_section(sweep)
    rows = [x for x in lines if x.startswith("| strata") or x.startswith("| vllm")]
    assert len(rows) == 4
    # The 2x row of Strata: offered 40 / 20 s, 20 refused (by the TTFT estimate), ITL 50 ms,
    # 1 req/s done and in time.
    assert rows[1].split(" | ")[1:6] == ["2x", "2.00", "40", "20 (sla 20)", "0"]
    assert "50 / 50 / 50" in rows[1] and rows[1].endswith("| 1.00 |")
