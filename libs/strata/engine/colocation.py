"""How much engines that share one device slow each other's decode steps.

The simulator and the placement planner price a co-located replica's step with its neighbours'
steps in it: on a device that runs one engine's work at a time, each neighbour with work adds a
share s of its own step to mine,

    my step with neighbours  =  my step alone  +  s x (sum of the active neighbours' steps)

s = 1 is strict turn-taking (two compute-bound engines on the same cores); s = 0 is no
interference at all (each engine mostly waits on its own host code, and the device runs a
neighbour's kernels in the gaps). Which one a device is, is measured here, not assumed:

    N identical engines, each in its own process on the same device, decode B sequences at
    context C (decode points), or prefill B prompts of P tokens a step (prefill points). Each
    process sets its work up, waits at a barrier, then steps for `seconds` (re-adding its
    sequences as they finish, so every step has the same shape). Alone: engine 0 steps while
    the others wait; together: all N step. Steps that start after `warmup_s` and end before the
    deadline count, so every counted step of the together phase ran while all N were stepping.

    s = (together / alone - 1) / (N - 1)       medians of step time

Processes, not threads: one interpreter per engine, as the stack runs one worker process per
replica, so the host side of the engines does not share a GIL. Torch threads are set in each.
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from strata.core.profile import ColocationPoint

_READY_TIMEOUT_S = 600.0


@dataclass(slots=True, frozen=True)
class ColocationPlan:
    model: str
    device: str
    dtype: str
    threads: int
    engines: int = 2
    batches: tuple[int, ...] = (1, 8, 32)
    context: int = 512
    prefill_batches: tuple[int, ...] = ()
    prefill_tokens: int = 512
    seconds: float = 4.0
    warmup_s: float = 1.0

    def shapes(self) -> list[tuple[str, int]]:
        return [("decode", b) for b in self.batches] + [
            ("prefill", b) for b in self.prefill_batches
        ]

    def __post_init__(self) -> None:
        if self.engines < 2:
            raise ValueError(f"co-location needs at least 2 engines, got {self.engines}")
        shapes = self.batches + self.prefill_batches
        if not shapes or min(shapes) < 1:
            raise ValueError(
                f"batches must be positive sizes, got {self.batches} and {self.prefill_batches}"
            )
        if self.seconds <= 0 or self.warmup_s < 0:
            raise ValueError(
                f"seconds must be positive and warmup_s not negative, got "
                f"{self.seconds} and {self.warmup_s}"
            )
        if self.threads < 1:
            raise ValueError(f"threads must be at least 1, got {self.threads}")


def measure_colocation(
    plan: ColocationPlan, progress: Callable[[str], None] | None = None
) -> list[ColocationPoint]:
    """One ColocationPoint per batch size (module docstring)."""
    say = progress or (lambda _: None)
    ctx = mp.get_context("spawn")  # CUDA cannot be used in a forked child
    barrier = ctx.Barrier(plan.engines + 1)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_engine_process, args=(plan, i, barrier, results), daemon=True)
        for i in range(plan.engines)
    ]
    for p in procs:
        p.start()
    points = []
    try:
        barrier.wait(_READY_TIMEOUT_S)  # every engine built
        for kind, batch in plan.shapes():
            samples = {}
            for phase in ("alone", "together"):
                barrier.wait(_READY_TIMEOUT_S)  # batches set up
                barrier.wait(_READY_TIMEOUT_S)  # go
                barrier.wait(_READY_TIMEOUT_S + plan.seconds)  # done
                got = [results.get(timeout=_READY_TIMEOUT_S) for _ in range(plan.engines)]
                steps = [
                    s
                    for engine, phase_of, s in got
                    if phase_of == phase and (phase == "together" or engine == 0)
                ]
                samples[phase] = [d for one in steps for d in one]
            if not samples["alone"] or not samples["together"]:
                raise RuntimeError(
                    f"batch {batch}: no step fell inside the measured window; "
                    f"give the measurement more seconds than {plan.seconds}"
                )
            size = plan.context if kind == "decode" else plan.prefill_tokens
            point = ColocationPoint(
                plan.engines,
                batch,
                size,
                statistics.median(samples["alone"]),
                statistics.median(samples["together"]),
                len(samples["alone"]),
                len(samples["together"]),
                kind,
            )
            points.append(point)
            say(
                f"co-location {kind} batch {batch} at {size} tokens: alone "
                f"{point.alone_s * 1e3:.2f} ms, {plan.engines} together "
                f"{point.together_s * 1e3:.2f} ms per step: share {point.share:.3f}"
            )
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    return points


def _engine_process(plan: ColocationPlan, index: int, barrier, results) -> None:
    """One engine: built once, then for each shape an alone phase (engine 0 steps) and a
    together phase (every engine steps), in lockstep with the parent through the barrier."""
    import torch

    from strata.engine.engine import EngineConfig, LLMEngine
    from strata.engine.profiler import StepBench
    from strata.engine.registry import load_model

    torch.set_num_threads(plan.threads)
    round_steps = 32
    biggest = max(plan.batches, default=1)
    prompts = max(plan.prefill_batches, default=0) * plan.prefill_tokens
    blocks = (
        max(
            biggest * -(-(plan.context + round_steps + 2) // 16),
            -(-prompts // 16) + max(plan.prefill_batches, default=0),
        )
        + 64
    )
    config = EngineConfig(
        num_blocks=blocks,
        max_batched_tokens=max(2048, biggest, prompts),
        max_seqs=max(32, biggest),
        device=plan.device,
        dtype=plan.dtype,
    )
    bench = StepBench(LLMEngine(load_model(plan.model), config), seed=index)
    barrier.wait()
    for kind, batch in plan.shapes():
        if kind == "decode":

            def run(deadline=None, warm=False, batch=batch):
                return _decode_round(
                    bench, batch, plan.context, 2 if warm else round_steps, deadline
                )
        else:

            def run(deadline=None, warm=False, batch=batch):
                return _prefill_round(bench, batch, plan.prefill_tokens)

        for phase in ("alone", "together"):
            active = phase == "together" or index == 0
            if active:  # compile and warm this shape before the clock starts
                run(warm=True)
            barrier.wait()
            barrier.wait()
            steps: list[float] = []
            if active:
                begin = time.monotonic()
                count_from = begin + plan.warmup_s
                deadline = count_from + plan.seconds
                while time.monotonic() < deadline:
                    for started, ended in run(deadline):
                        if started >= count_from and ended <= deadline:
                            steps.append(ended - started)
            results.put((index, phase, steps))
            barrier.wait()


def _prefill_round(bench, batch: int, tokens: int) -> Sequence[tuple[float, float]]:
    """One step prefilling `batch` prompts of `tokens` tokens (each sampling its one token)."""
    for _ in range(batch):
        bench.add(tokens, 0, 1)
    started = time.monotonic()
    bench.engine.step()
    ended = time.monotonic()
    bench.drain()
    return [(started, ended)]


def _decode_round(
    bench, batch: int, context: int, steps: int, deadline: float | None = None
) -> Sequence[tuple[float, float]]:
    """`batch` sequences at `context` decoded `steps` tokens (or until the deadline); each
    step's (start, end) on the monotonic clock."""
    for _ in range(batch):
        bench.add(context + 1, context, steps)
    spans = []
    engine = bench.engine
    while engine.has_work():
        started = time.monotonic()
        engine.step()
        ended = time.monotonic()
        spans.append((started, ended))
        if deadline is not None and ended > deadline:
            break
    bench.drain()
    return spans
