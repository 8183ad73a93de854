"""Fidelity per decode step, through the engine's side-by-side tool
(strata.engine.sparse.fidelity.teacher_forced):

    1. the engine generates `steps` tokens greedily on the dense path (the prompt mostly from
       the prefix cache): the continuation;
    2. teacher_forced prefills the prompt once and feeds the continuation one token per decode
       step, dense, then again with the sparse path on from the same prefilled prompt, with the
       layer probe on: both runs predict every next token after the same history;
    3. in between, the dense run once more with its decode attention through the pure-torch
       path instead of the fused CPU kernel (torch_dense), where the engine has the kernel.

Top-1 agreement compares the two runs' greedy tokens step by step (so one disagreement does not
drag every later step with it; the first one is where free-running outputs would part). The
attention-output cosine compares, at each layer of each sparse step, what the layer went on
with (the selection's output, or full attention where the trust check fell back) with full
attention on the same query and cache; the selection's own cosine, before fallbacks, is shown
next to it. The dense run's top-1 against the engine's own tokens checks the harness: it should
be 100%, bar float ties. The dense logits' lead of the top token over the runner-up says how
close to a tie the steps were (median over steps, and the largest among disagreeing steps): a
disagreement at a near-tie is a rounding difference, one at a wide lead a selection miss.
The dense floor measures the rounding part directly: the top-1 agreement of the two dense runs,
which compute the same attention exactly and differ only in float rounding (same dtype, same
cache), is how often rounding alone flips the top token; sparse-vs-dense agreement below it is
the sparse path's own doing.
"""

from __future__ import annotations

import time

import torch

from benchmarks.sparse import engine_api
from benchmarks.sparse.results import CosineStats, FidelityRun
from strata.core.stats import percentile
from strata.engine.engine import LLMEngine
from strata.engine.sparse.fidelity import teacher_forced


def fidelity_run(engine: LLMEngine, model: str, prompt: list[int], steps: int) -> FidelityRun:
    started = time.perf_counter()
    continuation = engine_api.generate(
        engine,
        engine_api.request("fidelity-continuation", prompt, steps, sparse=False, ignore_eos=True),
    )
    before = engine_api.counters(engine)
    tf = teacher_forced(
        engine, prompt, continuation, probe=True, torch_dense=engine.native_attention
    )
    used = engine_api.counters(engine).minus(before)
    dense_top = tf.dense_logits.argmax(-1)
    sparse_top = tf.sparse_logits.argmax(-1)
    same = dense_top == sparse_top
    differ = (~same).nonzero().flatten().tolist()
    # step t predicts the token after continuation[t]: the engine chose continuation[t + 1]
    replay = (
        (dense_top[:-1] == torch.tensor(continuation[1:])).float().mean().item()
        if len(continuation) > 1
        else 1.0
    )
    taken = tf.sparse_steps
    top2 = tf.dense_logits.topk(2, dim=-1).values
    margin = top2[:, 0] - top2[:, 1]  # dense top-1 lead over the runner-up
    floor = (
        None
        if tf.dense_torch_logits is None
        else int((dense_top == tf.dense_torch_logits.argmax(-1)).sum())
    )
    return FidelityRun(
        model=model,
        context=len(prompt),
        steps=len(continuation),
        agree=int(same.sum()),
        first_disagreement=differ[0] if differ else None,
        cosine=cosine_stats(tf.cosine[taken].tolist()),
        cosine_selected=cosine_stats(tf.cosine_selected[taken].tolist()),
        counters=used,
        dense_replay=replay,
        margin_median=margin.median().item(),
        disagree_margin_max=margin[~same].max().item() if differ else None,
        dense_floor_agree=floor,
        wall_s=time.perf_counter() - started,
    )


def cosine_stats(values: list[float]) -> CosineStats | None:
    if not values:
        return None
    return CosineStats(
        count=len(values), mean=sum(values) / len(values), p1=percentile(values, 1), min=min(values)
    )
