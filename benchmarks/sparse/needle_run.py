"""Needle retrieval on the default model, dense and sparse on the same prompts, one engine.

Prompts are run longest first and, within a length, deepest needle first: every prompt of a
trial starts with the same haystack, so each one finds the part before its needle in the prefix
cache (the 100% prompt of the longest length holds all of it) and only the needle and what
follows it is computed again. The sparse request runs right after the dense one on the same
prompt and reads its whole prompt from the cache: both answer from the same KV.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from benchmarks.sparse import engine_api
from benchmarks.sparse.haystack import haystack_text
from benchmarks.sparse.needle import (
    NEEDLE,
    build_prompt,
    chat_pieces,
    is_correct,
    needle_number,
)
from benchmarks.sparse.results import NeedleCell
from strata.engine.engine import LLMEngine

# Essays between two trials' haystack starts: each trial reads other essays first.
TRIAL_STRIDE = 7
# Haystack text to tokenize per prompt token wanted (English runs ~4.3 characters a token here).
CHARS_PER_TOKEN = 6


def run_needles(
    engine: LLMEngine,
    essays: list[tuple[str, str]],
    lengths: list[int],
    depths: list[float],
    trials: int,
    max_new: int = 12,
    log: Callable[[str], None] = print,
) -> list[NeedleCell]:
    tok = engine.tokenizer
    pieces = chat_pieces(tok)
    ends = frozenset(tok.encode("."))
    cells: list[NeedleCell] = []
    for trial in range(trials):
        hay = tok.encode(
            haystack_text(essays, trial * TRIAL_STRIDE, max(lengths) * CHARS_PER_TOKEN)
        )
        rng = random.Random(trial)
        numbers = {(n, d): needle_number(rng) for n in lengths for d in depths}
        for n in sorted(lengths, reverse=True):
            for d in sorted(depths, reverse=True):
                number = numbers[(n, d)]
                prompt = build_prompt(
                    pieces, hay, tok.encode(NEEDLE.format(number=number)), number, d, n, ends
                )
                rid = f"needle-{trial}-{n}-{d:g}"
                dense = engine_api.generate(
                    engine, engine_api.request(rid + "-dense", prompt.ids, max_new, sparse=False)
                )
                before = engine_api.counters(engine)
                sparse = engine_api.generate(
                    engine, engine_api.request(rid + "-sparse", prompt.ids, max_new, sparse=True)
                )
                used = engine_api.counters(engine).minus(before)
                dense_text, sparse_text = tok.decode(dense), tok.decode(sparse)
                cell = NeedleCell(
                    length=n,
                    depth=d,
                    placed_depth=prompt.placed_depth,
                    trial=trial,
                    expected=number,
                    dense_answer=dense_text,
                    sparse_answer=sparse_text,
                    dense_ok=is_correct(dense_text, number),
                    sparse_ok=is_correct(sparse_text, number),
                    counters=used,
                )
                cells.append(cell)
                log(
                    f"   needle {n} tokens at {d:g}% (trial {trial}): expected {number}, "
                    f"dense {'ok' if cell.dense_ok else 'MISS'} {dense_text!r}, sparse "
                    f"{'ok' if cell.sparse_ok else 'MISS'} {sparse_text!r}, "
                    f"{used.layer_steps} sparse layer steps, {used.fallbacks} fallbacks"
                )
    return cells
