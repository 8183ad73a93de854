"""llama.cpp (through llama-cpp-python, in its own venv) on the very same GGUF file: one stream
of greedy decode after a prompt of the same length, 2 threads.

    .venv-llamacpp/bin/python benchmarks/weights/phase_llamacpp.py --model M.gguf --threads 2

Run as a file, not a module: the peer's venv has no Strata. Prints one JSON object last.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from importlib import metadata

from llama_cpp import Llama

PROMPT_LEN, DECODE_TOKENS = 64, 128


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", required=True)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    started = time.perf_counter()
    llm = Llama(
        model_path=args.model,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        n_ctx=1024,
        n_batch=512,
        verbose=False,
    )
    load_s = time.perf_counter() - started
    vocab = llm.n_vocab()
    rates = []
    for seed in (0, 1):  # the first run warms up, the second is measured
        rng = random.Random(seed)
        prompt = [rng.randrange(3, vocab) for _ in range(PROMPT_LEN)]
        llm.reset()
        times = []
        for _ in llm.generate(prompt, temp=0.0, top_k=1, reset=True):
            times.append(time.perf_counter())
            if len(times) == DECODE_TOKENS + 1:
                break
        rates.append((len(times) - 1) / (times[-1] - times[0]))
    print(
        json.dumps(
            {
                "mode": "llama.cpp",
                "version": metadata.version("llama_cpp_python"),
                "load_s": load_s,
                "single_tok_s": rates[-1],
                "single_step_s": 1 / rates[-1],
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
