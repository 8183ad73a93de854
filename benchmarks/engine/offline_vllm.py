"""Peer: vLLM's CPU engine on the same weights (an HF checkpoint directory written by the
orchestrator), same prompts as token ids (no tokenizer: skip_tokenizer_init), greedy, EOS
ignored. Runs in its own virtual environment (.venv-vllm), so it imports only the standard
library and vLLM; the start-up compile (tens of seconds) happens before the timed runs.

    VLLM_CPU_OMP_THREADS_BIND=0-1 VLLM_CPU_KVCACHE_SPACE=2 HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 .venv-vllm/bin/python -m benchmarks.engine.offline_vllm \
        --checkpoint DIR --prompts P.json --output-len 128 --dtype bfloat16 --threads 2 \
        --out R.json
"""

from __future__ import annotations

import os
import time

from benchmarks.engine import runner_cli
from benchmarks.engine.results import OfflineResult


def generate(llm, prompts: list[list[int]], output_len: int) -> tuple[list[list[int]], float]:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(
        temperature=0.0, max_tokens=output_len, ignore_eos=True, detokenize=False
    )
    start = time.perf_counter()
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    seconds = time.perf_counter() - start
    return [list(o.outputs[0].token_ids) for o in outs], seconds


def main() -> None:
    p = runner_cli.parser(__doc__)
    p.add_argument("--checkpoint", required=True, help="HF checkpoint directory")
    args = runner_cli.parse(p)
    from vllm import LLM, __version__

    prompts = runner_cli.load_prompts(args.prompts)
    started = time.perf_counter()
    llm = LLM(
        model=args.checkpoint,
        skip_tokenizer_init=True,
        dtype=args.dtype,
        max_num_seqs=len(prompts.batch),
        seed=0,
    )
    generate(llm, prompts.warmup, runner_cli.WARMUP_OUTPUT)
    startup = time.perf_counter() - started
    print(f"vllm {__version__}: loaded, compiled and warmed up in {startup:.0f} s", flush=True)
    sched = llm.llm_engine.vllm_config.scheduler_config
    setup = (
        f"vLLM {__version__} LLM.generate, max_num_seqs={sched.max_num_seqs}, "
        f"max_num_batched_tokens={sched.max_num_batched_tokens}, "
        f"OMP bind {os.environ.get('VLLM_CPU_OMP_THREADS_BIND', 'auto')}, start-up "
        f"(load, compile, warm-up; not timed) {startup:.0f} s"
    )
    results = []
    for mode, batch in (("batch", prompts.batch), ("single", [prompts.single])):
        outputs, seconds = generate(llm, batch, args.output_len)
        runner_cli.check_lengths("vllm", outputs, args.output_len)
        results.append(
            OfflineResult(
                system="vllm",
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
            f"vllm {args.dtype} {mode}: {results[-1].output_tok_s:.1f} output tok/s "
            f"({seconds:.1f} s)",
            flush=True,
        )
    runner_cli.write_results(args.out, results)


if __name__ == "__main__":
    main()
