"""`strata report` against the real metrics servicer behind the gateway's Metrics API (the
path tenants and the admin take), with the admin key: a run's three layers in the terminal, the
same report as JSON and as HTML with its plots, two runs compared, the run list, bad ids."""

import asyncio
import json
from html.parser import HTMLParser

import pytest

from services.gateway.metrics_proxy import MetricsProxyServicer
from services.metrics.servicer import MetricsServicer
from strata.client import cli
from strata.core.records import NodeSampleRecord
from strata.eval.layers import LayerSettings
from strata.gateway.auth import Authenticator
from strata.policy.clock import ManualClock
from strata.rpc.server import Registration, channel, start_server
from strata.store.db import create_all, make_engine, session_factory
from strata.store.runs import create_run, finish_run
from strata.store.samples import insert_samples
from strata.store.spans import SpanRecord, insert_spans, span_sink
from strata.telemetry import names
from strata.telemetry.receiver import OtlpReceiver
from strata.v1 import metrics_pb2, metrics_pb2_grpc

T0_MS = 1_700_000_000_000
ADMIN_KEY = "sk-strata-admin-test"


def span(n: int, run_id: int, ttft: float) -> SpanRecord:
    start = (T0_MS + 1000 * n) * 1_000_000
    return SpanRecord(
        trace_id=f"{n:032x}",
        span_id=f"{n:016x}",
        parent_span_id="",
        name=names.SPAN_GATEWAY_GENERATE,
        service="gateway",
        start_unix_nano=start,
        end_unix_nano=start + 400_000_000,
        attributes={
            names.TENANT: "demo",
            names.REQUEST_ID: f"r{n}",
            names.TTFT_MS: ttft,
            names.TPOT_MS: 10.0,
            names.E2E_MS: 400.0,
            names.RUN_ID: run_id,
            names.GEN_AI_USAGE_INPUT_TOKENS: 50,
            names.GEN_AI_USAGE_OUTPUT_TOKENS: 20,
        },
    )


@pytest.fixture
async def metrics(tmp_path, monkeypatch):
    engine = make_engine(f"sqlite+aiosqlite:///{tmp_path / 'strata.db'}")
    await create_all(engine)
    sessions = session_factory(engine)
    async with sessions() as s:
        for run_id, ttft in ((1, 100.0), (2, 300.0)):
            base = T0_MS + (run_id - 1) * 10_000
            await create_run(s, f"run-{run_id}", "replay", "{}", base)
            await insert_spans(s, [span(10 * (run_id - 1) + i, run_id, ttft) for i in (1, 2)])
            await finish_run(s, run_id, "", base + 10_000)
        await insert_samples(
            s,
            [
                NodeSampleRecord(
                    node_id="node-0",
                    unix_ms=T0_MS + t,
                    utilization=0.5,
                    energy_source="model",
                    energy_joules=float(t),
                    power_watts=1000.0,
                    kv_blocks_device_used=t // 1000,
                    kv_blocks_device_total=64,
                    prompt_tokens=t,
                    prefix_hit_tokens=t // 4,
                )
                for t in range(0, 20_001, 2000)
            ],
        )
    receiver = OtlpReceiver(span_sink(sessions))
    await receiver.start("127.0.0.1:0")
    servicer = MetricsServicer(sessions, receiver, LayerSettings())
    running = await start_server(
        [
            Registration(
                add=lambda s: metrics_pb2_grpc.add_MetricsServicer_to_server(servicer, s),
                service_name=metrics_pb2.DESCRIPTOR.services_by_name["Metrics"].full_name,
            )
        ]
    )
    collector = channel(running.address)
    proxy = MetricsProxyServicer(
        metrics_pb2_grpc.MetricsStub(collector),
        Authenticator(sessions, ManualClock().now),
        ADMIN_KEY,
    )
    gateway = await start_server(
        [
            Registration(
                add=lambda s: metrics_pb2_grpc.add_MetricsServicer_to_server(proxy, s),
                service_name=metrics_pb2.DESCRIPTOR.services_by_name["Metrics"].full_name,
            )
        ]
    )
    monkeypatch.setenv("STRATA_GATEWAY_ADDR", gateway.address)
    monkeypatch.setenv("STRATA_API_KEY", ADMIN_KEY)
    yield
    await gateway.stop(0)
    await collector.close()
    await running.stop(0)
    await receiver.stop()
    await engine.dispose()


async def run_cli(argv: list[str]) -> int:
    return await asyncio.to_thread(cli.main, argv)


class Svgs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def handle_starttag(self, tag, attrs):
        self.count += tag == "svg"


async def test_run_report_prints_layers_and_writes_json_and_html(metrics, tmp_path, capsys):
    html_path, json_path = tmp_path / "out" / "r1.html", tmp_path / "r1.json"
    assert (
        await run_cli(["report", "--run", "1", "--html", str(html_path), "--json", str(json_path)])
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "run 1 'run-1' (replay, finished)"
    assert "REQUEST LAYER (latencies in ms)" in out and "CLUSTER LAYER" in out
    assert next(line for line in out if line.startswith("all")).split()[2:5] == [
        "2",
        "0",
        "100.0/100.0/100.0",
    ]
    assert any(line.startswith("energy        0.002778 kWh [model] (MODELLED") for line in out)
    assert out[-2:] == [f"json report: {json_path}", f"html report: {html_path}"]
    doc = json.loads(json_path.read_text())
    assert doc["run"]["run_id"] == 1
    assert doc["request"]["overall"]["ttft_ms"]["p50"] == 100.0
    assert doc["node"]["nodes"][0]["prefix_hit_rate"] == 0.25
    assert doc["cluster"]["energy_kwh"] == pytest.approx(10_000 / 3.6e6)
    assert doc["cluster"]["energy_modelled"] is True
    page = html_path.read_text()
    parser = Svgs()
    parser.feed(page)
    assert parser.count == 7
    assert "Strata run 1: run-1" in page and "0.002778 kWh" in page


async def test_compare_two_runs(metrics, capsys):
    assert await run_cli(["report", "--compare", "1", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("A = 1: run 1 'run-1'")
    row = next(line for line in lines if line.startswith("ttft p50 ms"))
    assert row.split()[-4:] == ["100", "300", "+200", "+200.0%"]


async def test_runs_are_listed(metrics, capsys):
    assert await run_cli(["report", "--runs"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "run   name    kind                  started  seconds",
        "1    run-1  replay  2023-11-14 22:13:20 UTC     10.0",
        "2    run-2  replay  2023-11-14 22:13:30 UTC     10.0",
    ]


async def test_unknown_and_malformed_run_ids(metrics, capsys):
    assert await run_cli(["report", "--run", "9"]) == 2
    assert capsys.readouterr().err == (
        "error: NOT_FOUND: no run 9; `strata report --runs` lists the stored runs\n"
    )
    with pytest.raises(SystemExit) as exit_:
        await run_cli(["report", "--run", "zero"])
    assert exit_.value.code == 2
    assert "a run id is a positive integer" in capsys.readouterr().err
