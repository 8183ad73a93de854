"""The replay client and `strata replay` against in-process fake Gateway and Metrics on port 0.

The fakes stand in for the real services only here. The gateway fake streams one token every
TOKEN_GAP_S after FIRST_TOKEN_S and notes when each call arrived and how many were in flight, so
the tests can show the sender is open loop: a request starts at its offset even while earlier
ones are still streaming.
"""

from __future__ import annotations

import asyncio
import io
import json
import time
from pathlib import Path

import grpc
import pytest

from strata.client import cli
from strata.client.replay import Progress, ReplayConfig, replay
from strata.eval.workload import WorkloadRequest
from strata.rpc.server import Registration, start_server
from strata.v1 import (
    common_pb2,
    gateway_pb2,
    gateway_pb2_grpc,
    metrics_pb2,
    metrics_pb2_grpc,
)

KEYS = {"key-a": "alice", "key-b": "bob"}
RUN_ID = 42
FIRST_TOKEN_S = 0.05
TOKEN_GAP_S = 0.1
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
MOONCAKE = Path(__file__).resolve().parents[1] / "fixtures" / "traces" / "mooncake.jsonl"


class FakeGateway(gateway_pb2_grpc.GatewayServicer):
    def __init__(self, first_token_s: float = FIRST_TOKEN_S, gap_s: float = TOKEN_GAP_S) -> None:
        self.first_token_s = first_token_s
        self.gap_s = gap_s
        self.calls: list[tuple[float, dict[str, str], gateway_pb2.GenerateRequest]] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def Generate(self, request, context):
        metadata = dict(context.invocation_metadata())
        self.calls.append((time.perf_counter(), metadata, request))
        if metadata.get("authorization", "").removeprefix("Bearer ") not in KEYS:
            await context.abort(
                grpc.StatusCode.UNAUTHENTICATED,
                "API key not recognised: use a key issued for your tenant",
            )
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.first_token_s)
            for i in range(request.max_tokens):
                if i:
                    await asyncio.sleep(self.gap_s)
                yield gateway_pb2.GenerateResponse(
                    request_id=f"r{len(self.calls)}", text="x", token_ids=[120], trace_id=TRACE_ID
                )
            yield gateway_pb2.GenerateResponse(
                request_id=f"r{len(self.calls)}",
                trace_id=TRACE_ID,
                finish_reason=common_pb2.FINISH_REASON_LENGTH,
                usage=common_pb2.Usage(
                    prompt_tokens=len(request.prompt),
                    completion_tokens=request.max_tokens,
                    cached_prompt_tokens=2,
                ),
            )
        finally:
            self.in_flight -= 1


class FakeMetrics(metrics_pb2_grpc.MetricsServicer):
    def __init__(self) -> None:
        self.started: list[metrics_pb2.StartRunRequest] = []
        self.finished: list[metrics_pb2.FinishRunRequest] = []

    async def StartRun(self, request, context):
        self.started.append(request)
        return metrics_pb2.RunInfo(
            run_id=RUN_ID,
            name=request.name,
            kind=request.kind,
            params_json=request.params_json,
            started_unix_ms=1,
        )

    async def FinishRun(self, request, context):
        self.finished.append(request)
        return metrics_pb2.RunInfo(run_id=request.run_id, finished_unix_ms=2)


@pytest.fixture
async def fakes():
    gateway, metrics = FakeGateway(), FakeMetrics()
    running = await start_server(
        [
            Registration(
                add=lambda s: gateway_pb2_grpc.add_GatewayServicer_to_server(gateway, s),
                service_name=gateway_pb2.DESCRIPTOR.services_by_name["Gateway"].full_name,
            ),
            Registration(
                add=lambda s: metrics_pb2_grpc.add_MetricsServicer_to_server(metrics, s),
                service_name=metrics_pb2.DESCRIPTOR.services_by_name["Metrics"].full_name,
            ),
        ]
    )
    yield gateway, metrics, running.address
    await running.stop(0)


def request(index: int, at: float, key: str, tokens: int = 4) -> WorkloadRequest:
    return WorkloadRequest(
        index=index,
        send_at_s=at,
        prompt="abcdefgh"[: index + 4],
        prompt_tokens=index + 4,
        max_tokens=tokens,
        tenant=KEYS.get(key, "x"),
        api_key=key,
    )


async def test_open_loop_timing_metadata_files_and_summary(fakes, tmp_path):
    gateway, metrics, address = fakes
    workload = [
        request(0, 0.0, "key-a"),
        request(1, 0.1, "key-b"),
        request(2, 0.2, "key-a"),
        request(3, 0.3, "key-b"),
        request(4, 0.3, "wrong-key"),
    ]
    config = ReplayConfig(
        model="dummy-small",
        gateway=address,
        metrics=address,
        out_dir=str(tmp_path),
        name="fixture",
        params={"trace": "t.csv"},
    )
    started = time.perf_counter()
    result = await replay(workload, config)

    # open loop: every request arrived at its offset, while request 0 (0.35 s long) still ran
    offsets = sorted(t - started for t, _, _ in gateway.calls)
    assert offsets == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.3], abs=0.06)
    assert gateway.max_in_flight == 4
    assert {(md["authorization"], md["x-strata-run-id"]) for _, md, _ in gateway.calls} == {
        ("Bearer key-a", "42"),
        ("Bearer key-b", "42"),
        ("Bearer wrong-key", "42"),
    }
    sent = sorted(gateway.calls, key=lambda c: c[2].prompt)
    assert [(r.model, r.max_tokens, r.sampling.ignore_eos) for _, _, r in sent] == [
        ("dummy-small", 4, True)
    ] * 5

    [start] = metrics.started
    assert (start.name, start.kind, json.loads(start.params_json)) == (
        "fixture",
        "replay",
        {"trace": "t.csv"},
    )

    records = sorted(result.records, key=lambda r: r.index)
    assert [(r.tenant, r.status) for r in records] == [
        ("alice", "OK"),
        ("bob", "OK"),
        ("alice", "OK"),
        ("bob", "OK"),
        ("x", "UNAUTHENTICATED"),
    ]
    for r in records[:4]:
        assert r.ttft_s == pytest.approx(FIRST_TOKEN_S, abs=0.05)
        assert r.itl_s == pytest.approx([TOKEN_GAP_S] * 3, abs=0.05)
        assert r.tpot_s == pytest.approx(TOKEN_GAP_S, abs=0.03)
        assert (r.output_tokens, r.prompt_tokens, r.cached_tokens) == (4, r.index + 4, 2)
        assert (r.finish_reason, r.trace_id) == ("FINISH_REASON_LENGTH", TRACE_ID)
        assert r.sent_s - r.scheduled_s < 0.05
    assert records[4].error == "API key not recognised: use a key issued for your tenant"

    s = result.summary
    assert (s.requests, s.succeeded, s.errors) == (5, 4, {"UNAUTHENTICATED": 1})
    assert (s.prompt_tokens, s.output_tokens, s.cached_tokens) == (4 + 5 + 6 + 7, 16, 8)
    assert s.prompt_token_mismatches == 0
    assert s.duration_s == pytest.approx(0.3 + FIRST_TOKEN_S + 3 * TOKEN_GAP_S, abs=0.08)
    assert s.output_throughput == pytest.approx(16 / s.duration_s)
    assert (s.ttft_ms.count, s.itl_ms.count, s.e2e_ms.count) == (4, 12, 4)

    [finish] = metrics.finished
    assert finish.run_id == RUN_ID
    client_summary = json.loads(finish.client_summary_json)
    assert (
        client_summary["run_id"],
        client_summary["succeeded"],
        client_summary["failed"],
        client_summary["errors"],
        client_summary["not_sent"],
    ) == (42, 4, 1, {"UNAUTHENTICATED": 1}, 0)
    assert client_summary["ttft_ms"]["p50"] == pytest.approx(s.ttft_ms.p50)
    run_dir = tmp_path / "run-42"
    assert result.run_dir == str(run_dir)
    assert json.loads((run_dir / "summary.json").read_text()) == client_summary
    lines = [json.loads(x) for x in (run_dir / "requests.jsonl").read_text().splitlines()]
    assert [(x["index"], x["status"], x["output_tokens"]) for x in lines] == [
        (0, "OK", 4),
        (1, "OK", 4),
        (2, "OK", 4),
        (3, "OK", 4),
        (4, "UNAUTHENTICATED", 0),
    ]


async def test_deadline_and_send_window(fakes, tmp_path):
    gateway, metrics, address = fakes
    workload = [
        request(0, 0.0, "key-a", tokens=20),
        request(1, 0.05, "key-a", tokens=1),
        request(2, 0.4, "key-a", tokens=1),
    ]
    config = ReplayConfig(
        model="m",
        gateway=address,
        metrics=address,
        out_dir=str(tmp_path),
        request_timeout_s=0.2,
        max_duration_s=0.2,
    )
    result = await replay(workload, config)
    assert result.not_sent == 1
    assert len(gateway.calls) == 2
    assert [(r.index, r.status, r.output_tokens) for r in result.records] == [
        (0, "DEADLINE_EXCEEDED", 2),
        (1, "OK", 1),
    ]
    assert result.records[0].finished_s == pytest.approx(0.2, abs=0.05)
    assert json.loads(metrics.finished[0].client_summary_json)["not_sent"] == 1


def test_progress_lines_on_a_pipe_and_on_a_terminal():
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    def drive(stream: io.StringIO) -> Progress:
        now = [0.0]
        progress = Progress(10, stream, lambda: now[0])
        progress.sent(), progress.sent(), progress.sent()
        progress.done(True), progress.done(False)
        now[0] = 2.0
        progress.finish()
        return progress

    line = "[    2.0s] sent 3/10  in flight 1  done 2  errors 1  1.0 req/s"
    pipe, tty = io.StringIO(), Tty()
    assert drive(pipe).interval_s == 5.0
    assert pipe.getvalue() == line + "\n"
    assert drive(tty).interval_s == 0.25
    assert tty.getvalue() == "\r\x1b[2K" + line + "\n"


async def run_cli(argv: list[str]) -> int:
    # main() runs its own event loop (asyncio.run), so it needs a thread of its own.
    return await asyncio.to_thread(cli.main, argv)


@pytest.fixture
def quick_fakes(fakes, monkeypatch, tmp_path):
    gateway, metrics, address = fakes
    gateway.first_token_s = gateway.gap_s = 0.0
    monkeypatch.setenv("STRATA_GATEWAY_ADDR", address)
    monkeypatch.setenv("STRATA_METRICS_ADDR", address)
    monkeypatch.setenv("STRATA_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("STRATA_API_KEY", raising=False)
    return gateway, metrics


async def test_cli_replays_a_mooncake_trace_with_shared_prefixes(quick_fakes, tmp_path, capsys):
    gateway, metrics = quick_fakes
    code = await run_cli(
        [
            "replay",
            "--trace",
            str(MOONCAKE),
            "--format",
            "mooncake",
            "--model",
            "dummy-small",
            "--time-scale",
            "20",
            "--length-scale",
            "4",
            "--max-prompt",
            "400",
            "--max-output",
            "20",
            "--tenants",
            "alice=key-a,bob=key-b",
            "--name",
            "mc",
            "--prompt-seed",
            "5",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    lines = out.out.splitlines()
    assert lines[:2] == ["run 42 (mc)", "requests    8 sent, 8 ok, 0 failed"]
    assert lines[-1] == f"results     {tmp_path / 'out' / 'run-42'}"
    assert out.err.startswith(
        "replaying 8 requests over 0.2 s to dummy-small (tenants: alice, bob)\n"
    )

    prompts = {len(r.prompt): r for _, _, r in gateway.calls}
    assert sorted(prompts) == [75, 128, 175, 256, 300, 375, 384, 400]
    assert prompts[300].prompt[:256] == prompts[375].prompt[:256]  # hash ids 0, 1
    assert prompts[300].prompt[256:] != prompts[375].prompt[256:300]  # 2 vs 5
    assert prompts[400].prompt[:300] == prompts[300].prompt  # 0, 1, 2 (, 7)
    assert prompts[256].prompt[:175] == prompts[175].prompt  # 3, 4
    assert {md["authorization"] for _, md, _ in gateway.calls} == {"Bearer key-a", "Bearer key-b"}

    params = json.loads(metrics.started[0].params_json)
    assert {
        k: params[k]
        for k in (
            "format",
            "requests",
            "time_scale",
            "length_scale",
            "block_tokens",
            "prompt_seed",
            "text",
            "tenants",
            "tenant_mapping",
        )
    } == {
        "format": "mooncake",
        "requests": 8,
        "time_scale": 20.0,
        "length_scale": 4.0,
        "block_tokens": 128,
        "prompt_seed": 5,
        "text": "bytes",
        "tenants": ["alice", "bob"],
        "tenant_mapping": "round-robin",
    }
    assert "key-a" not in metrics.started[0].params_json
    summary = json.loads((tmp_path / "out" / "run-42" / "summary.json").read_text())
    assert (summary["succeeded"], summary["prompt_tokens"]) == (
        8,
        75 + 128 + 175 + 256 + 300 + 375 + 384 + 400,
    )


async def test_cli_synthetic_poisson_with_the_demo_key(quick_fakes, tmp_path, capsys):
    gateway, _ = quick_fakes
    (tmp_path / "demo_api_key").write_text("key-a\n")
    code = await run_cli(
        [
            "replay",
            "--format",
            "poisson",
            "--rate",
            "50",
            "--max-requests",
            "6",
            "--prompt-tokens",
            "12",
            "--output-tokens",
            "3",
            "--model",
            "dummy-tiny",
        ]
    )
    assert code == 0, capsys.readouterr().err
    assert [(len(r.prompt), r.max_tokens) for _, _, r in gateway.calls] == [(12, 3)] * 6
    assert (tmp_path / "replays" / "run-42" / "requests.jsonl").is_file()


async def test_cli_exit_1_when_nothing_succeeds_and_2_on_bad_arguments(
    quick_fakes, tmp_path, capsys
):
    code = await run_cli(
        [
            "replay",
            "--format",
            "gamma",
            "--rate",
            "100",
            "--cv",
            "2",
            "--max-requests",
            "3",
            "--model",
            "dummy-tiny",
            "--tenants",
            "nope",
            "--out",
            str(tmp_path),
        ]
    )
    out = capsys.readouterr().out
    assert code == 1
    assert "requests    3 sent, 0 ok, 3 failed (UNAUTHENTICATED 3)" in out
    assert await run_cli(["replay", "--format", "azure", "--model", "m"]) == 2
    assert capsys.readouterr().err == "error: --format azure reads a file: give --trace FILE\n"
    missing = tmp_path / "none.csv"
    assert (
        await run_cli(["replay", "--format", "azure", "--trace", str(missing), "--model", "m"]) == 2
    )
    assert str(missing) in capsys.readouterr().err
    assert await run_cli(["replay", "--format", "poisson", "--rate", "1", "--model", "m"]) == 2
    assert "needs --duration, --max-duration or --max-requests" in capsys.readouterr().err


async def test_cli_without_a_metrics_service_sends_nothing(quick_fakes, monkeypatch, capsys):
    gateway, _ = quick_fakes
    monkeypatch.setenv("STRATA_API_KEY", "key-a")
    assert (
        await run_cli(
            [
                "--metrics",
                "127.0.0.1:1",
                "replay",
                "--format",
                "poisson",
                "--rate",
                "10",
                "--max-requests",
                "2",
                "--model",
                "m",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "error: the metrics service at 127.0.0.1:1 did not open a run (UNAVAILABLE: " in err
    assert "nothing was sent" in err
    assert gateway.calls == []
