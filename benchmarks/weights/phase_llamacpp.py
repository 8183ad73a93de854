"""llama.cpp (through llama-cpp-python, in its own venv) on the very same GGUF file: one stream
of greedy decode after a prompt of the same length, 2 threads.

    .venv-llamacpp/bin/python -m benchmarks.weights.phase_llamacpp --model M.gguf --threads 2 \
        [--no-extra-buffer-types]

The peer's venv has no Strata: this imports only the standard library and llama_cpp. Prints one
JSON object on its last line.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from importlib import metadata

from benchmarks.common.llamacpp import greedy, open_model

PROMPT_LEN, DECODE_TOKENS = 64, 128


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument(
        "--no-extra-buffer-types",
        action="store_true",
        help="keep the weights in llama.cpp's plain CPU buffers (no AMX or repacked copies)",
    )
    args = p.parse_args()
    started = time.perf_counter()
    llm = open_model(args.model, args.threads, not args.no_extra_buffer_types)
    load_s = time.perf_counter() - started
    vocab = llm.n_vocab()
    rates = []
    for seed in (0, 1):  # the first run warms up, the second is measured
        rng = random.Random(seed)
        prompt = [rng.randrange(3, vocab) for _ in range(PROMPT_LEN)]
        _, times = greedy(llm, prompt, DECODE_TOKENS + 1)
        decode = times[1:]  # from the first token on: decode steps only
        rates.append((len(decode) - 1) / (decode[-1] - decode[0]))
    print(
        json.dumps(
            {
                "mode": "llama.cpp",
                "version": metadata.version("llama_cpp_python"),
                "extra_buffer_types": not args.no_extra_buffer_types,
                "load_s": load_s,
                "single_tok_s": rates[-1],
                "single_step_s": 1 / rates[-1],
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
