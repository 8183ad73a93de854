"""Peer: llama.cpp (through llama-cpp-python) on the same weights (a bfloat16 GGUF file written
by the orchestrator), same prompts as token ids, greedy, EOS ignored, single stream only: the
binding's Llama object decodes one sequence. Runs in its own virtual environment
(.venv-llamacpp), so it imports only the standard library and llama_cpp.

    .venv-llamacpp/bin/python -m benchmarks.engine.offline_llamacpp --gguf M.gguf \
        --prompts P.json --output-len 128 --dtype bfloat16 --threads 2 --out R.json
"""

from __future__ import annotations

import time
from importlib import metadata

from benchmarks.engine import runner_cli
from benchmarks.engine.results import OfflineResult


def generate(llm, prompt: list[int], output_len: int) -> tuple[list[int], float]:
    """Greedy tokens after `prompt` and the time from submission to the last one."""
    out: list[int] = []
    start = time.perf_counter()
    llm.reset()
    for token in llm.generate(prompt, temp=0.0, top_k=1, reset=True):
        out.append(int(token))
        if len(out) == output_len:
            break
    return out, time.perf_counter() - start


def main() -> None:
    p = runner_cli.parser(__doc__)
    p.add_argument("--gguf", required=True, help="the model as a GGUF file")
    args = runner_cli.parse(p)
    from llama_cpp import Llama

    prompts = runner_cli.load_prompts(args.prompts)
    llm = Llama(
        model_path=args.gguf,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        n_ctx=1024,
        n_batch=512,
        verbose=False,
    )
    for prompt in prompts.warmup:
        generate(llm, prompt, runner_cli.WARMUP_OUTPUT)
    version = metadata.version("llama_cpp_python")
    output, seconds = generate(llm, prompts.single, args.output_len)
    runner_cli.check_lengths("llama.cpp", [output], args.output_len)
    result = OfflineResult(
        system="llamacpp",
        dtype=args.dtype,
        mode="single",
        requests=1,
        prompt_tokens=len(prompts.single),
        output_tokens=len(output),
        seconds=seconds,
        setup=f"llama-cpp-python {version} Llama.generate, {args.threads} threads, "
        "single stream only",
        token_ids=[output[: runner_cli.AGREEMENT_TOKENS]],
    )
    print(f"llamacpp {args.dtype} single: {result.output_tok_s:.1f} output tok/s", flush=True)
    runner_cli.write_results(args.out, [result])


if __name__ == "__main__":
    main()
