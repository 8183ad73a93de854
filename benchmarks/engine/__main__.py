"""`make bench-engine`: every phase of the engine benchmark, one after another, each in its own
process so that only one measured thing runs at a time; then docs/benchmarks/engine.{md,json}.

    python -m benchmarks.engine [--peers vllm,llamacpp] [--rates 1,2,4,8,12,16] [--command ...]

Phases: our engine offline (bf16, fp32), transformers offline (bf16, fp32), the decode worker
online (bf16, a Poisson sweep), and optional peers. Logs and per-request data go to
docs/benchmarks/raw/ (ignored by git).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import asdict
from datetime import UTC, datetime

from benchmarks.common.cpu import CpuMeter
from benchmarks.common.machine import machine_facts
from benchmarks.engine.report import BenchReport, Phase, render
from benchmarks.engine.results import OfflineResult, RateResult, read_json, write_json
from benchmarks.engine.workload import PromptSet

DOCS = "docs/benchmarks"
RAW = os.path.join(DOCS, "raw")
TRACE = "../shared/data/traces/AzureLLMInferenceTrace_conv_2023.csv"
VLLM_PYTHON = ".venv-vllm/bin/python"
LLAMACPP_PYTHON = ".venv-llamacpp/bin/python"
PROMPTS, PROMPT_LEN, OUTPUT_LEN, PROMPT_SEED = 64, 128, 128, 0
THREADS = 2
PHASE_TIMEOUT_S = 900
SINGLE_ROUNDS = 5  # alternating single-stream rounds of strata and llama.cpp
VLLM_ENV = {
    "VLLM_CPU_OMP_THREADS_BIND": "0-1",
    "VLLM_CPU_KVCACHE_SPACE": "2",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}
SUMMARY_LINE = re.compile(r"^(strata|transformers|vllm|llamacpp|online) ")


def run_phase(name: str, argv: list[str], env: dict[str, str] | None = None) -> tuple[Phase, bool]:
    """Run one measured process to completion; its output goes to raw/<name>.log."""
    log_path = os.path.join(RAW, f"{name}.log")
    print(f"== {name}: {shlex.join(argv)}", flush=True)
    meter = CpuMeter(children=True)  # the phase's process, waited for
    with open(log_path, "w", encoding="utf-8") as log:
        try:
            rc = subprocess.run(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                timeout=PHASE_TIMEOUT_S,
            ).returncode
        except subprocess.TimeoutExpired:
            rc = None
    cpu = meter.stop()
    with open(log_path, encoding="utf-8", errors="replace") as log:
        lines = log.read().splitlines()
    for line in lines:
        if SUMMARY_LINE.match(line):
            print("   " + line, flush=True)
    if rc == 0:
        status = "ok"
    else:
        why = f"timed out after {PHASE_TIMEOUT_S} s" if rc is None else f"exit code {rc}"
        tail = next((ln.strip() for ln in reversed(lines) if ln.strip()), "")
        status = f"failed: {why}; last log line: {tail[:200]} (log: {log_path})"
        print("   " + status, flush=True)
    return Phase(name, cpu.wall_s, cpu.own, cpu.other, status), rc == 0


def offline_phase(
    name: str,
    argv: list[str],
    dtype: str,
    out: list[OfflineResult],
    phases: list[Phase],
    env: dict[str, str] | None = None,
) -> bool:
    path = os.path.join(RAW, f"{name}.json")
    phase, ok = run_phase(
        name,
        [
            *argv,
            "--prompts",
            os.path.join(RAW, "prompts.json"),
            "--output-len",
            str(OUTPUT_LEN),
            "--dtype",
            dtype,
            "--threads",
            str(THREADS),
            "--out",
            path,
        ],
        env,
    )
    phases.append(phase)
    if ok:
        out.extend(OfflineResult.from_dict(d) for d in read_json(path))
    return ok


def vllm_phase(out: list[OfflineResult], phases: list[Phase]) -> bool:
    if not os.path.exists(VLLM_PYTHON):
        phases.append(
            Phase(
                "vllm-bfloat16",
                0.0,
                0.0,
                0.0,
                f"skipped: {VLLM_PYTHON} is missing (`make bench-engine PEERS=vllm` creates it)",
            )
        )
        return False
    # the peer loads models from disk: the very same tensors, written as an HF checkpoint
    import torch

    from benchmarks.engine.bench_model import load_bench_model
    from benchmarks.engine.hf_model import save_checkpoint

    checkpoint = os.path.join(RAW, "hf-checkpoint")
    save_checkpoint(load_bench_model(), checkpoint, torch.bfloat16)
    return offline_phase(
        "vllm-bfloat16",
        [VLLM_PYTHON, "-m", "benchmarks.engine.offline_vllm", "--checkpoint", checkpoint],
        "bfloat16",
        out,
        phases,
        VLLM_ENV,
    )


def llamacpp_phase(out: list[OfflineResult], phases: list[Phase]) -> str | None:
    if not os.path.exists(LLAMACPP_PYTHON):
        phases.append(
            Phase(
                "llamacpp-bfloat16",
                0.0,
                0.0,
                0.0,
                f"skipped: {LLAMACPP_PYTHON} is missing "
                "(`make bench-engine PEERS=llamacpp` creates it)",
            )
        )
        return None
    # the very same tensors, written as a bfloat16 GGUF file
    from benchmarks.engine.bench_model import load_bench_model
    from benchmarks.engine.gguf_model import save_gguf

    path = str(save_gguf(load_bench_model(), os.path.join(RAW, "bench-bf16.gguf")))
    ok = offline_phase(
        "llamacpp-bfloat16",
        [LLAMACPP_PYTHON, "-m", "benchmarks.engine.offline_llamacpp", "--gguf", path],
        "bfloat16",
        out,
        phases,
    )
    return path if ok else None


def alternating_single(gguf: str, phases: list[Phase]) -> list[tuple[float, float]]:
    """SINGLE_ROUNDS rounds of the bf16 single stream, strata's and llama.cpp's one after the
    other in fresh processes, which goes first swapped each round; (strata, llama.cpp) tok/s
    of every round both finished (a failed phase ends the rounds)."""
    runners = {
        "strata": [sys.executable, "-m", "benchmarks.engine.offline_strata", "--single-only"],
        "llamacpp": [LLAMACPP_PYTHON, "-m", "benchmarks.engine.offline_llamacpp", "--gguf", gguf],
    }
    rounds: list[tuple[float, float]] = []
    for i in range(SINGLE_ROUNDS):
        order = ("strata", "llamacpp") if i % 2 == 0 else ("llamacpp", "strata")
        got: dict[str, float] = {}
        for system in order:
            results: list[OfflineResult] = []
            if not offline_phase(
                f"single-{system}-{i + 1}", runners[system], "bfloat16", results, phases
            ):
                return rounds
            got[system] = next(r.output_tok_s for r in results if r.mode == "single")
        rounds.append((got["strata"], got["llamacpp"]))
    return rounds


def read_bandwidth(phases: list[Phase]) -> float | None:
    """This machine's read bandwidth in bytes/s, measured now by benchmarks.weights'
    phase_bandwidth (the best of five sums over 1 GiB, THREADS threads); None if it failed."""
    phase, ok = run_phase(
        "bandwidth",
        [sys.executable, "-m", "benchmarks.weights.phase_bandwidth", "--threads", str(THREADS)],
    )
    phases.append(phase)
    if not ok:
        return None
    with open(os.path.join(RAW, "bandwidth.log"), encoding="utf-8") as log:
        last = log.read().strip().splitlines()[-1]
    return float(json.loads(last)["read_bytes_per_s"])


def bandwidth_notes(offline: list[OfflineResult], bandwidth: float, params: int) -> list[str]:
    """For each single-stream result: the weight bytes a token reads (`params` of them, at the
    result's dtype), over the time a token took (prompt prefill included, so the fraction is a
    lower bound), against `bandwidth`."""
    notes = [
        f"Read bandwidth measured in this run: {bandwidth / 1e9:.1f} GB/s (the best of five "
        f"sums over 1 GiB, {THREADS} threads)."
    ]
    for r in offline:
        if r.mode != "single" or not r.output_tokens:
            continue
        step = r.seconds / r.output_tokens
        weights = params * (2 if r.dtype == "bfloat16" else 4)
        notes.append(
            f"{r.system} {r.dtype} single stream: {weights / 1e6:.0f} MB of weights a token in "
            f"{step * 1e3:.2f} ms (prefill included): {weights / step / 1e9:.1f} GB/s, "
            f"{weights / step / bandwidth:.0%} of the measured read bandwidth."
        )
    return notes


def bench_params() -> int:
    """The weights a decode token reads: every parameter but an untied embedding table, of
    which it reads one row."""
    from benchmarks.engine.bench_model import load_bench_model

    c = load_bench_model().config
    table = 0 if c.tie_word_embeddings else c.vocab_size * c.hidden_size
    return int(c.param_count()) - table


def model_description() -> str:
    from benchmarks.engine.bench_model import BENCH_MODEL, load_bench_model

    c = load_bench_model().config
    return (
        f"`{BENCH_MODEL}` (hidden {c.hidden_size}, {c.num_layers} layers, {c.num_heads} "
        f"heads, {c.num_kv_heads} KV heads, intermediate {c.intermediate_size}, vocab "
        f"{c.vocab_size}, {c.param_count() / 1e6:.1f} M parameters)"
    )


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--peers", default="", help="comma-separated peers to add: vllm, llamacpp")
    p.add_argument("--rates", default="1,2,4,8,12,16", help="online offered req/s")
    p.add_argument("--trace", default=TRACE, help="Azure conversation trace CSV")
    p.add_argument("--command", default="", help="how this run was invoked, for the report")
    args = p.parse_args()
    peers = {x.strip() for x in args.peers.split(",") if x.strip()}
    unknown = peers - {"vllm", "llamacpp"}
    if unknown:
        p.error(f"unknown peers {', '.join(sorted(unknown))}; known: vllm, llamacpp")
    command = args.command or shlex.join([sys.executable, "-m", "benchmarks.engine", *sys.argv[1:]])
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    os.makedirs(RAW, exist_ok=True)
    write_json(
        os.path.join(RAW, "prompts.json"), asdict(PromptSet.draw(PROMPTS, PROMPT_LEN, PROMPT_SEED))
    )
    offline: list[OfflineResult] = []
    phases: list[Phase] = []
    ok = True
    bandwidth = read_bandwidth(phases)
    for dtype in ("bfloat16", "float32"):
        ok &= offline_phase(
            f"strata-{dtype}",
            [sys.executable, "-m", "benchmarks.engine.offline_strata"],
            dtype,
            offline,
            phases,
        )
    for dtype in ("bfloat16", "float32"):
        ok &= offline_phase(
            f"transformers-{dtype}",
            [sys.executable, "-m", "benchmarks.engine.offline_hf"],
            dtype,
            offline,
            phases,
        )
    online: list[RateResult] = []
    online_meta: dict = {}
    if os.path.exists(args.trace):
        out = os.path.join(RAW, "online.json")
        phase, online_ok = run_phase(
            "online-bfloat16",
            [
                sys.executable,
                "-m",
                "benchmarks.engine.online",
                "--trace",
                args.trace,
                "--rates",
                args.rates,
                "--dtype",
                "bfloat16",
                "--threads",
                str(THREADS),
                "--out",
                out,
                "--raw",
                os.path.join(RAW, "online-requests.jsonl"),
                "--worker-log",
                os.path.join(RAW, "online-worker.log"),
            ],
        )
        phases.append(phase)
        ok &= online_ok
        if online_ok:
            data = read_json(out)
            online_meta = data["meta"]
            online = [RateResult.from_dict(d) for d in data["rates"]]
    else:
        online_meta = {
            "skipped": f"Skipped: the Azure conversation trace is not at "
            f"`{args.trace}` (relative to the repository root)."
        }
        print(online_meta["skipped"], flush=True)
        phases.append(Phase("online-bfloat16", 0.0, 0.0, 0.0, "skipped: no trace"))
    if "vllm" in peers:
        vllm_phase(offline, phases)  # a peer failing is reported, not fatal
    single_rounds: list[tuple[float, float]] = []
    if "llamacpp" in peers:
        gguf = llamacpp_phase(offline, phases)
        if gguf is not None:
            single_rounds = alternating_single(gguf, phases)
    total = sum(ph.wall_s for ph in phases)
    report = BenchReport(
        command=command,
        date=date,
        machine=machine_facts(),
        model=model_description(),
        offline=offline,
        online=online,
        online_meta=online_meta,
        phases=phases,
        single_rounds=single_rounds,
        notes=[
            f"The phases took {total / 60:.1f} minutes in all.",
            *(bandwidth_notes(offline, bandwidth, bench_params()) if bandwidth else []),
        ],
    )
    write_json(os.path.join(DOCS, "engine.json"), report.to_dict())
    with open(os.path.join(DOCS, "engine.md"), "w", encoding="utf-8") as f:
        f.write(render(report))
    print(f"wrote {DOCS}/engine.md and engine.json", flush=True)
    if not ok:
        sys.exit("some phases failed: see the Phases table in docs/benchmarks/engine.md")


if __name__ == "__main__":
    main()
