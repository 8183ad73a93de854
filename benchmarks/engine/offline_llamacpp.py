"""Peer: llama.cpp (through llama-cpp-python) on the same weights (a bfloat16 GGUF file written
by the orchestrator), same prompts as token ids, greedy, EOS ignored, single stream only: the
binding's Llama object decodes one sequence. Runs in its own virtual environment
(.venv-llamacpp), so it imports only the standard library and llama_cpp.

    .venv-llamacpp/bin/python -m benchmarks.engine.offline_llamacpp --gguf M.gguf \
        --prompts P.json --output-len 128 --dtype bfloat16 --threads 2 --out R.json
"""

from __future__ import annotations

from importlib import metadata

from benchmarks.common.llamacpp import greedy, open_model
from benchmarks.engine import runner_cli
from benchmarks.engine.results import OfflineResult


def main() -> None:
    p = runner_cli.parser(__doc__)
    p.add_argument("--gguf", required=True, help="the model as a GGUF file")
    args = runner_cli.parse(p)
    prompts = runner_cli.load_prompts(args.prompts)
    llm = open_model(args.gguf, args.threads)
    for prompt in prompts.warmup:
        greedy(llm, prompt, runner_cli.WARMUP_OUTPUT)
    version = metadata.version("llama_cpp_python")
    output, times = greedy(llm, prompts.single, args.output_len)
    seconds = times[-1] - times[0]
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
