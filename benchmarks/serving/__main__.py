"""Serving through the front doors: what the request path costs, measured in one run on the stack
(dummy-tiny, one node, as compose configures it).

    python -m benchmarks.serving [--requests 100] [--peers vllm] [--no-sweep] [--out FILE]

writes docs/benchmarks/serving.md, or with --no-sweep docs/benchmarks/serving-path.md.

- Path: sequential 4-token requests alternating between the OpenAI HTTP front, gRPC Generate
  through the gateway, and the worker's own Generate (the baseline: the engine behind one gRPC
  hop); targets: the HTTP front adds at most 1 ms TTFT P50 over gRPC, the whole path at most
  2 ms over the worker. Measured twice: first on a stack whose gateway and node open a new
  gRPC call per hop (the baseline), then with the hops multiplexed (the default).
- One hop, two ways: the worker's Generate as new calls and as muxed calls, alternating.
- The transport's floor (benchmarks.serving.floor): the path's hops as bare grpc.aio relays,
  what they cost before any of Strata's work.
- Breakdown: the spans of sequential requests, where the added time goes.
- Load sweep (benchmarks.serving.sweep): the Azure conversation trace at multiples of Strata's
  capacity through its OpenAI endpoint, and with `--peers vllm` through vLLM's OpenAI server
  on the same weights and points; targets: goodput at least vLLM's at every load, P99 TTFT at
  most 1.1x vLLM's below capacity.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

from benchmarks.common.machine import host_line
from benchmarks.common.stack import ComposeStack
from benchmarks.common.tables import table
from benchmarks.common.targets import Target, Verdict, target_table
from benchmarks.serving.breakdown import span_breakdown
from benchmarks.serving.cpu_cost import CpuCost, cpu_per_request
from benchmarks.serving.floor import WAYS as FLOOR_WAYS
from benchmarks.serving.floor import measure_floor
from benchmarks.serving.hop import measure_hop
from benchmarks.serving.path import PathFigures, measure_path, worker_address, worker_spec
from benchmarks.serving.sweep import run_sweep
from benchmarks.serving.sweep_report import sweep_section, sweep_verdicts
from strata.client.sdk import Client
from strata.core import defaults

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs/benchmarks/serving.md"
PATH_OUT = ROOT / "docs/benchmarks/serving-path.md"  # a --no-sweep run's
MODEL = "dummy-tiny"
OVERRIDES = {
    "placement": {"STRATA_MODELS": MODEL},
    "node": {"STRATA_TORCH_THREADS": "1", "STRATA_NODE_STANDBY": "0"},
    # Sequential short requests come faster than the default tenant rate (50/s) on a fast host.
    "gateway": {"STRATA_RATE_LIMIT_RPS": "1000"},
}
TARGETS = {
    "http": Target("OpenAI HTTP front over gRPC Generate, TTFT P50", "<=", 1.0, "{:.2f} ms"),
    "path": Target("gateway path over the worker alone, TTFT P50", "<=", 2.0, "{:.2f} ms"),
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.serving")
    p.add_argument("--requests", type=int, default=100)
    p.add_argument("--out", default="", help=f"default {OUT}, with --no-sweep {PATH_OUT}")
    p.add_argument("--peers", default="", help="servers measured beside Strata: vllm")
    p.add_argument("--no-sweep", action="store_true", help="the path and breakdown only")
    p.add_argument("--command", default="")
    args = p.parse_args(argv)
    args.out = args.out or str(PATH_OUT if args.no_sweep else OUT)
    peers = [x for x in args.peers.split(",") if x]
    with tempfile.TemporaryDirectory(prefix="strata-serving-") as tmp:
        data = Path(tmp)
        # The baseline first: the same stack with a new gRPC call per hop.
        with _ready_stack(data / "direct", {"STRATA_RPC_MULTIPLEX": "false"}) as (stack, key):
            direct_path = measure_path(stack, key, MODEL, args.requests)
            direct_cpu = cpu_per_request(stack, key, MODEL, args.requests)
        with _ready_stack(data / "mux", {}) as (stack, key):
            path = measure_path(stack, key, MODEL, args.requests)
            cpu = cpu_per_request(stack, key, MODEL, args.requests)
            hop = measure_hop(
                worker_address(stack, MODEL), stack.identity, worker_spec(MODEL), args.requests
            )
            spans, span_ttft = span_breakdown(stack, key, MODEL)
        floor = measure_floor(str(data / "mux" / "secrets"), args.requests * 3)
        sweep = None if args.no_sweep else run_sweep(data / "sweep", peers)
    by = {f.way: f for f in path}
    http_over = by["http"].ttft_p50_ms - by["grpc"].ttft_p50_ms
    path_over = by["grpc"].ttft_p50_ms - by["worker"].ttft_p50_ms
    floor_by = {f.way: f for f in floor}
    floor_over = floor_by[FLOOR_WAYS[1]].ttft_p50_ms - floor_by[FLOOR_WAYS[0]].ttft_p50_ms
    direct_by = {f.way: f for f in direct_path}
    direct_over = direct_by["grpc"].ttft_p50_ms - direct_by["worker"].ttft_p50_ms
    verdicts: list[Verdict] = [
        TARGETS["http"].judge(http_over),
        TARGETS["path"].judge(path_over),
        *(sweep_verdicts(sweep) if sweep is not None else ()),
    ]
    command = args.command or " ".join(["python -m benchmarks.serving", *sys.argv[1:]])
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Serving through the front doors",
        "",
        f"Command: `{command}` ({now}; {host_line()}).",
        "",
        f"The stack as compose configures it, serving {MODEL} on one node (one torch thread, no "
        f"standby). {args.requests} rounds of sequential 4-token requests, each round one "
        "request per way in a rotating order: the OpenAI HTTP front (`/v1/completions`, "
        "streamed), gRPC Generate through the gateway, and the worker's Generate directly (the "
        "engine behind one loopback gRPC hop: the baseline). TTFT is the client's, to the "
        "first chunk carrying a token.",
        "",
        "## Targets",
        "",
        *target_table(verdicts),
        "",
        "## Path",
        "",
        f"Multiplexed hops (the default): the gateway path adds {path_over:.2f} ms TTFT P50 over "
        "the worker alone.",
        "",
        *_figures_table("way", path),
        "",
        "The same stack with a new gRPC call per hop (`STRATA_RPC_MULTIPLEX=false` for the "
        f"gateway and the node), measured first in this run: the path adds {direct_over:.2f} ms.",
        "",
        *_figures_table("way", direct_path),
        "",
        "## One hop, two ways",
        "",
        "The same worker's Generate from one asyncio client with the cluster's credential, "
        "alternating: a new gRPC call per request, and the calls multiplexed on one stream "
        "(strata.rpc.mux_client), as the gateway and the node make the hops of every request.",
        "",
        *_figures_table("call", hop),
        "",
        "## The transport's floor",
        "",
        "The path's hops with nothing of Strata in them (benchmarks.serving.floor): bare "
        "grpc.aio processes on uvloop with the cluster's credential, passing bytes of the path's "
        "message sizes. One hop is a client calling the source; the path's hops are the client "
        "calling a front that makes a unary round trip to the source (the route) and then "
        "streams through a relay (the node) from the source (the worker). "
        f"{args.requests * 3} requests each way, alternating, after the stacks stopped: the "
        f"hops alone add {floor_over:.2f} ms TTFT P50, so Strata's own work on the path "
        f"(authentication, policy, routing, queueing, spans, the multiplexed streams) adds "
        f"{path_over - floor_over:.2f} ms above them.",
        "",
        *_figures_table("way", floor),
        "",
        "## CPU time per request",
        "",
        f"{args.requests} sequential 4-token requests through gRPC on each stack, after the "
        "path's: each service's CPU time per request (the node without its decode worker; the "
        "metrics collector ingests the request's spans). When the services' sum nears "
        "the machine's cores times the wall time per request, every hop waits for a core.",
        "",
        *_cpu_table(direct_cpu, cpu),
        "",
        "## Where the time goes",
        "",
        f"Spans of 30 sequential requests through gRPC (client TTFT P50 {span_ttft:.2f} ms in "
        "this part): each span's median start after the gateway's span began, and its median "
        "duration: Strata's own spans, one per service on the path (the caller's context "
        "crosses each hop in the call's metadata; no span per gRPC call).",
        "",
        *table(
            ("span", "starts at ms", "lasts ms", "spans"),
            ((s.name, f"{s.start_ms:.2f}", f"{s.duration_ms:.2f}", s.count) for s in spans),
            "lrrr",
        ),
        "",
        *(sweep_section(sweep) if sweep is not None else ()),
    ]
    Path(args.out).write_text("\n".join(lines))
    Path(args.out).with_suffix(".json").write_text(
        json.dumps(
            {
                "command": command,
                "path": [asdict(f) for f in path],
                "path_direct_hops": [asdict(f) for f in direct_path],
                "hop": [asdict(f) for f in hop],
                "floor": [asdict(f) for f in floor],
                "cpu_ms_per_request": {"direct_hops": asdict(direct_cpu), "muxed": asdict(cpu)},
                "spans": [asdict(s) for s in spans],
                "span_ttft_ms": span_ttft,
                "sweep": sweep,
                "targets": [asdict(v) for v in verdicts],
            },
            indent=1,
        )
    )
    for v in verdicts:
        print(v.line())
    print(f"wrote {args.out}")
    return 0


@contextlib.contextmanager
def _ready_stack(data: Path, env: dict[str, str]) -> Iterator[tuple[ComposeStack, str]]:
    """The stack (OVERRIDES, plus `env` for every service), once the model is ready, and the
    demo tenant's key; stopped after."""
    data.mkdir(parents=True)
    overrides = {svc: {**OVERRIDES.get(svc, {}), **env} for svc in (*OVERRIDES, "gateway")}
    stack = ComposeStack(
        data_dir=data, db_url=f"sqlite+aiosqlite:///{data}/strata.db", overrides=overrides
    )
    stack.start()
    try:
        key = (data / defaults.DEMO_KEY_FILE).read_text().strip()
        with Client(stack.addr("gateway"), key) as c:
            deadline = time.monotonic() + 240
            while MODEL not in {m.name for m in c.list_models()}:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{MODEL} never became ready:\n{stack.logs()}")
                time.sleep(0.3)
        yield stack, key
    finally:
        stack.stop()


def _cpu_table(direct: CpuCost, muxed: CpuCost) -> list[str]:
    names = sorted(muxed.by_service_ms, key=lambda n: -muxed.by_service_ms[n])
    rows = [
        (n, f"{direct.by_service_ms.get(n, 0.0):.2f}", f"{muxed.by_service_ms[n]:.2f}")
        for n in names
    ]
    rows += [
        ("all services", f"{direct.total_ms:.2f}", f"{muxed.total_ms:.2f}"),
        ("wall time per request", f"{direct.wall_ms:.2f}", f"{muxed.wall_ms:.2f}"),
    ]
    return table(("service", "new call per hop, ms", "multiplexed hops, ms"), rows, "lrr")


def _figures_table(first: str, figures: list[PathFigures]) -> list[str]:
    return table(
        (first, "TTFT P50 ms", "TTFT P90 ms", "E2E P50 ms", "requests"),
        (
            (f.way, f"{f.ttft_p50_ms:.2f}", f"{f.ttft_p90_ms:.2f}", f"{f.e2e_p50_ms:.2f}",
             f.samples)
            for f in figures
        ),
        "lrrrr",
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
