"""The baseline: Hugging Face transformers `generate` on LlamaForCausalLM holding the same
weights, static batches (all prompts have one length, so no padding), greedy, exactly
`--output-len` new tokens (min_new_tokens = max_new_tokens ignores EOS). Then one prompt alone.

    python -m benchmarks.engine.offline_hf --prompts P.json --output-len 128 \
        --dtype bfloat16 --threads 2 --out R.json [--batch-size 16]
"""

from __future__ import annotations

import time

import torch

from benchmarks.engine import runner_cli
from benchmarks.engine.bench_model import load_bench_model
from benchmarks.engine.hf_model import hf_model
from benchmarks.engine.results import OfflineResult

BATCH_SIZE = 16


def generate(
    model, prompts: list[list[int]], output_len: int, batch_size: int
) -> tuple[list[list[int]], float]:
    outputs: list[list[int]] = []
    start = time.perf_counter()
    for i in range(0, len(prompts), batch_size):
        ids = torch.tensor(prompts[i : i + batch_size], dtype=torch.int64)
        with torch.inference_mode():
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                max_new_tokens=output_len,
                min_new_tokens=output_len,
                pad_token_id=model.config.pad_token_id,
            )
        outputs.extend(out[:, ids.shape[1] :].tolist())
    return outputs, time.perf_counter() - start


def main() -> None:
    p = runner_cli.parser(__doc__)
    p.add_argument("--batch-size", type=int, default=BATCH_SIZE, help="static batch size")
    args = runner_cli.parse(p)
    batch_size = args.batch_size
    torch.set_num_threads(args.threads)
    prompts = runner_cli.load_prompts(args.prompts)
    if len({len(p) for p in prompts.batch}) != 1:
        raise ValueError(
            "the transformers baseline batches without padding: all prompts must "
            "have the same length"
        )
    model = hf_model(load_bench_model(), getattr(torch, args.dtype))
    generate(model, prompts.warmup, runner_cli.WARMUP_OUTPUT, len(prompts.warmup))
    results = []
    for mode, batch, size in (
        ("batch", prompts.batch, batch_size),
        ("single", [prompts.single], 1),
    ):
        outputs, seconds = generate(model, batch, args.output_len, size)
        runner_cli.check_lengths("transformers", outputs, args.output_len)
        results.append(
            OfflineResult(
                system="transformers",
                dtype=args.dtype,
                mode=mode,
                requests=len(batch),
                prompt_tokens=sum(map(len, batch)),
                output_tokens=sum(map(len, outputs)),
                seconds=seconds,
                setup=f"generate(), static batches of {size}, sdpa attention",
                token_ids=[o[: runner_cli.AGREEMENT_TOKENS] for o in outputs],
            )
        )
        print(
            f"transformers {args.dtype} {mode}: {results[-1].output_tok_s:.1f} output tok/s "
            f"({seconds:.1f} s)",
            flush=True,
        )
    runner_cli.write_results(args.out, results)


if __name__ == "__main__":
    main()
