"""Decode-step latency, dense against sparse, at several context lengths in one process.

One long base prompt is prefilled once; every measured request is a prefix of it of the
context's length whose last `TAIL` tokens are its own (so a batch's rows attend different
queries over the same shared prefix blocks, and the sparse path selects per row). Rounds
alternate which path goes first, so a burst of other work on the machine lands on both.
Only decode-only steps with the whole batch in them are timed: the engine's step observer gives
the whole step's seconds, schedule and sampling included, as serving sees them.
"""

from __future__ import annotations

from collections.abc import Callable

from benchmarks.sparse import engine_api
from benchmarks.sparse.results import LatencyRun, SparseCounters
from strata.core.stats import percentiles
from strata.engine.engine import LLMEngine
from strata.engine.scheduler import ScheduledSeq

TAIL = 16


def request_prompts(base: list[int], length: int, batch: int, vocab: int) -> list[list[int]]:
    """`batch` prompts of `length` tokens: base's first length - TAIL tokens, then a tail of
    base's next TAIL tokens shifted by the row's number (1, 2, ...) modulo the vocabulary."""
    if length > len(base):
        raise ValueError(f"the base prompt has {len(base)} tokens, {length} wanted")
    head, tail = base[: length - TAIL], base[length - TAIL : length]
    return [head + [(t + row + 1) % vocab for t in tail] for row in range(batch)]


def decode_latency(
    engine: LLMEngine,
    base: list[int],
    contexts: list[tuple[int, int]],
    batches: list[int],
    steps: int,
    rounds: int,
    log: Callable[[str], None] = print,
    model: str = "",
) -> list[LatencyRun]:
    """contexts: (nominal context, prompt tokens). Every run times rounds x steps steps;
    `model` labels the runs ("": the long-context dummy model)."""
    vocab = engine.loaded.config.vocab_size
    engine_api.generate(engine, engine_api.request("lat-warm", base, 1, sparse=False))
    timed: list[float] = []
    want = 0

    def observe(scheduled: list[ScheduledSeq], seconds: float, _period_s: float) -> None:
        if len(scheduled) == want and all(item.num_new == 1 for item in scheduled):
            timed.append(seconds)

    runs: list[LatencyRun] = []
    previous = engine.step_observer
    engine.step_observer = observe
    try:
        for nominal, length in contexts:
            for batch in batches:
                samples: dict[bool, list[float]] = {False: [], True: []}
                used = {False: SparseCounters(), True: SparseCounters()}
                prompts = request_prompts(base, length, batch, vocab)
                for r in range(rounds):
                    for sparse in (False, True) if r % 2 == 0 else (True, False):
                        timed.clear()
                        want = batch
                        before = engine_api.counters(engine)
                        for i, p in enumerate(prompts):
                            engine.add_request(
                                engine_api.request(
                                    f"lat-{length}-{batch}-{r}-{int(sparse)}-{i}",
                                    p,
                                    steps + 1,
                                    sparse=sparse,
                                    ignore_eos=True,
                                )
                            )
                        while engine.has_work():
                            engine.step()
                        samples[sparse].extend(timed)
                        used[sparse] = used[sparse].plus(engine_api.counters(engine).minus(before))
                for sparse in (False, True):
                    p50, p99 = percentiles(samples[sparse], (50, 99))
                    run = LatencyRun(
                        context=nominal,
                        prompt_tokens=length,
                        batch=batch,
                        sparse=sparse,
                        steps=len(samples[sparse]),
                        p50_s=p50,
                        p99_s=p99,
                        mean_s=sum(samples[sparse]) / len(samples[sparse]),
                        counters=used[sparse],
                        model=model,
                    )
                    runs.append(run)
                    log(
                        f"   {nominal // 1024}k batch {batch} {'sparse' if sparse else 'dense'}:"
                        f" P50 {p50 * 1000:.2f} ms P99 {p99 * 1000:.2f} ms over {run.steps} "
                        f"steps, {used[sparse].fallbacks}/{used[sparse].layer_steps} fallbacks, "
                        f"{used[sparse].dense_layer_steps} layer steps dense by the policy, "
                        f"{used[sparse].partly_dense} with a KV head group dense"
                    )
    finally:
        engine.step_observer = previous
    return runs
