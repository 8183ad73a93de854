"""Offline throughput of our engine: every prompt submitted at once, `LLMEngine.step()` until
done, greedy, EOS ignored. Then the first prompt alone (single stream).

    python -m benchmarks.engine.offline_strata --prompts P.json --output-len 128 \
        --dtype bfloat16 --threads 2 --out R.json [--single-only]
"""

from __future__ import annotations

import time

import torch

from benchmarks.engine import runner_cli
from benchmarks.engine.bench_model import load_bench_model
from benchmarks.engine.results import OfflineResult
from strata.engine.engine import EngineConfig, EngineRequest, LLMEngine
from strata.engine.sequence import SamplingParams


def generate(
    engine: LLMEngine, prompts: list[list[int]], output_len: int, tag: str
) -> tuple[list[list[int]], float]:
    """Token ids per prompt and the wall time from the first submission to the last token."""
    params = SamplingParams(temperature=0.0, max_tokens=output_len, ignore_eos=True)
    outputs: dict[str, list[int]] = {}
    start = time.perf_counter()
    for i, ids in enumerate(prompts):
        rid = f"{tag}-{i}"
        outputs[rid] = []
        engine.add_request(EngineRequest(request_id=rid, prompt_ids=ids, params=params))
    while engine.has_work():
        for out in engine.step():
            outputs[out.request_id].extend(out.token_ids)
    seconds = time.perf_counter() - start
    return [outputs[f"{tag}-{i}"] for i in range(len(prompts))], seconds


def main() -> None:
    p = runner_cli.parser(__doc__)
    p.add_argument("--single-only", action="store_true", help="skip the batch: one stream")
    args = runner_cli.parse(p)
    torch.set_num_threads(args.threads)
    prompts = runner_cli.load_prompts(args.prompts)
    config = EngineConfig(
        dtype=args.dtype,
        max_seqs=len(prompts.batch),
        max_batched_tokens=2048,
        kv_cache_bytes=256 << 20,
    )
    engine = LLMEngine(load_bench_model(), config)
    setup = (
        f"LLMEngine, continuous batching, max_seqs={config.max_seqs}, "
        f"max_batched_tokens={config.max_batched_tokens}, block_size={config.block_size}"
    )
    generate(engine, prompts.warmup, runner_cli.WARMUP_OUTPUT, "warmup")
    results = []
    modes = [("batch", prompts.batch), ("single", [prompts.single])]
    for mode, batch in modes[1:] if args.single_only else modes:
        outputs, seconds = generate(engine, batch, args.output_len, mode)
        runner_cli.check_lengths("strata", outputs, args.output_len)
        results.append(
            OfflineResult(
                system="strata",
                dtype=args.dtype,
                mode=mode,
                requests=len(batch),
                prompt_tokens=sum(map(len, batch)),
                output_tokens=sum(map(len, outputs)),
                seconds=seconds,
                setup=setup,
                token_ids=[o[: runner_cli.AGREEMENT_TOKENS] for o in outputs],
            )
        )
        print(
            f"strata {args.dtype} {mode}: {results[-1].output_tok_s:.1f} output tok/s "
            f"({seconds:.1f} s)",
            flush=True,
        )
    runner_cli.write_results(args.out, results)


if __name__ == "__main__":
    main()
