"""Where a step's time goes in our engine: torch.profiler over a prefill and a run of decode
steps of the benchmark model, printed as the top operators by self CPU time. Not part of the
published run; a tool for whoever optimizes the engine.

    python -m benchmarks.engine.profile_step --dtype float32 --batch 1 --decode-steps 16
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.engine.bench_model import load_bench_model
from benchmarks.engine.workload import offline_prompts
from strata.engine.engine import EngineConfig, EngineRequest, LLMEngine
from strata.engine.sequence import SamplingParams


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--decode-steps", type=int, default=16)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rows", type=int, default=25)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    engine = LLMEngine(load_bench_model(), EngineConfig(dtype=args.dtype, max_seqs=args.batch))
    params = SamplingParams(max_tokens=args.decode_steps + 4, ignore_eos=True)
    for i, ids in enumerate(offline_prompts(args.batch, args.prompt_len, 1)):
        engine.add_request(EngineRequest(request_id=f"p{i}", prompt_ids=ids, params=params))
    started = time.perf_counter()
    while engine.stats.step_tokens < args.batch * args.prompt_len:  # prefill
        engine.step()
    prefill = time.perf_counter() - started
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        started = time.perf_counter()
        for _ in range(args.decode_steps):
            engine.step()
        decode = time.perf_counter() - started
    print(
        f"prefill {args.batch}x{args.prompt_len}: {prefill:.2f} s; {args.decode_steps} decode "
        f"steps of {args.batch}: {decode / args.decode_steps * 1000:.1f} ms per step"
    )
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


if __name__ == "__main__":
    main()
