"""One configuration of our engine on the default model, in a fresh process: load time, resident
memory, weight bytes, and decode speed (one stream, and a batch of 8), greedy, EOS ignored.

    python -m benchmarks.weights.phase_strata --threads 2 \
        --mode quantized|float32|float32-one-row|float32-sgemm|bfloat16

Prints one JSON object on its last line.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from strata.engine import packed_linear
from strata.engine.engine import EngineConfig, EngineRequest, LLMEngine
from strata.engine.gguf_loader import default_model_path, load_gguf
from strata.engine.sequence import SamplingParams

MODES = {  # name -> (keep GGUF weights quantized, the engine's dtype)
    "quantized": (True, "float32"),
    "float32": (False, "float32"),
    "float32-one-row": (False, "float32"),  # packed, laid out for one row (PACK_ROWS = 1)
    "float32-sgemm": (False, "float32"),  # float32 never packed: F.linear (MKL's sgemm)
    "bfloat16": (False, "bfloat16"),
}
PROMPT_LEN, DECODE_TOKENS, BATCH = 64, 128, 8


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def decode_rate(engine: LLMEngine, batch: int, seed: int) -> tuple[float, float]:
    """(output tokens/s over the decode steps only, seconds per decode step) for `batch`
    prompts of PROMPT_LEN random tokens, each decoding DECODE_TOKENS tokens."""
    gen = torch.Generator().manual_seed(seed)
    vocab = engine.loaded.config.vocab_size
    params = SamplingParams(temperature=0.0, max_tokens=DECODE_TOKENS, ignore_eos=True)
    for i in range(batch):
        ids = torch.randint(0, vocab, (PROMPT_LEN,), generator=gen).tolist()
        engine.add_request(EngineRequest(f"{seed}-{i}", ids, params))
    tokens = sum(len(o.token_ids) for o in engine.step())  # the prefill, and first tokens
    start, steps = time.perf_counter(), 0
    while engine.has_work():
        tokens += sum(len(o.token_ids) for o in engine.step())
        steps += 1
    seconds = time.perf_counter() - start
    return (tokens - batch) / seconds, seconds / steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--mode", choices=MODES, required=True)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    keep, dtype = MODES[args.mode]
    if args.mode == "float32-sgemm":
        packed_linear.PACK_FLOAT32 = False
    if args.mode == "float32-one-row":
        packed_linear.PACK_ROWS[torch.float32] = 1
    path = default_model_path()
    before = rss_bytes()
    started = time.perf_counter()
    engine = LLMEngine(
        load_gguf(path, keep_quantized=keep),
        EngineConfig(dtype=dtype, quantized_weights=keep, num_blocks=256, max_seqs=BATCH),
    )
    load_s = time.perf_counter() - started
    kv_bytes = engine.kv.numel() * engine.kv.element_size()
    params, weight_bytes = engine.weights_size()
    engine.warm_up()
    decode_rate(engine, 1, 0)  # first shapes of every kind, not measured
    single, single_step = decode_rate(engine, 1, 1)
    batch, batch_step = decode_rate(engine, BATCH, 2)
    result = {
        "mode": args.mode,
        "packed_float32": packed_linear.PACK_FLOAT32,
        "pack_rows": packed_linear.PACK_ROWS[torch.float32],
        "dtype": dtype,
        "file_bytes": path.stat().st_size,
        "parameters": params,
        "weight_bytes": weight_bytes,
        "kv_bytes": kv_bytes,
        "load_s": load_s,
        "rss_growth_bytes": rss_bytes() - before,
        "single_tok_s": single,
        "single_step_s": single_step,
        "batch_tok_s": batch,
        "batch_step_s": batch_step,
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
