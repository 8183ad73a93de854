"""Measures the real LLMEngine over a grid of step shapes and fits the simulator's cost line.

Each shape is timed as whole `LLMEngine.step()` calls (schedule, forward, sample, detokenize):

    prefill   one chunk of N tokens after C computed ones, not the prompt's last (no sample)
    decode    B sequences each with one token pending at context C, several steps in a row
    mixed     B decodes and one prefill chunk in the same step (checks that costs add up)

Contexts are set up without computing them: the sequence gets C tokens' worth of device blocks
and their hashes, as if a prefix had been prefilled. The attention of the measured step reads
those blocks exactly as it would read real keys (their values do not change the time), so a
decode at context 4096 is measured without first prefilling 4096 tokens per sequence.

The result is an EngineProfile (strata.core.profile) with the machine, model, dtype, threads,
every raw measurement and the fit's error. Torch threads are set explicitly, never inherited.
"""

from __future__ import annotations

import os
import platform
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from strata.core.profile import (
    EngineProfile,
    Measurement,
    RequestOverheads,
    fit,
    prefill_keys,
)
from strata.engine.engine import EngineConfig, EngineRequest, LLMEngine
from strata.engine.loaded import LoadedModel
from strata.engine.sequence import SamplingParams
from strata.kvtier.hashing import chain_hashes


@dataclass(slots=True, frozen=True)
class ProfileGrid:
    prefill_tokens: tuple[int, ...] = (16, 64, 256, 1024)
    prefill_contexts: tuple[int, ...] = (0, 256, 1024)
    decode_batches: tuple[int, ...] = (1, 4, 16, 32)
    decode_contexts: tuple[int, ...] = (16, 256, 1024)
    mixed: tuple[tuple[int, int, int], ...] = ((8, 256, 64), (16, 128, 256))  # (B, C, N)
    repeats: int = 3
    decode_steps: int = 5

    def __post_init__(self) -> None:
        if self.repeats < 1 or self.decode_steps < 1:
            raise ValueError(
                f"repeats and decode_steps must be at least 1, got "
                f"{self.repeats} and {self.decode_steps}"
            )

    def fitted_to(self, max_context: int, max_seqs: int) -> ProfileGrid:
        """This grid without the shapes a model of max_context positions cannot run."""
        room = max_context - 2 - self.decode_steps
        return ProfileGrid(
            prefill_tokens=tuple(n for n in self.prefill_tokens if n < room),
            prefill_contexts=tuple(c for c in self.prefill_contexts if c < room),
            decode_batches=tuple(b for b in self.decode_batches if b <= max_seqs),
            decode_contexts=tuple(c for c in self.decode_contexts if c < room),
            mixed=tuple(m for m in self.mixed if m[0] < max_seqs and m[1] + m[2] < room),
            repeats=self.repeats,
            decode_steps=self.decode_steps,
        )


QUICK_GRID = ProfileGrid(
    prefill_tokens=(16, 128, 512),
    prefill_contexts=(0, 512),
    decode_batches=(1, 8, 32),
    decode_contexts=(16, 512),
    mixed=((8, 128, 64),),
    repeats=3,
    decode_steps=3,
)


def machine_description() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next(
                (line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu
            )
    except OSError:
        pass
    out = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu": cpu,
        "cpu_count": os.cpu_count() or 0,
    }
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(0)
    return out


class StepBench:
    """One engine and the bookkeeping to set up shapes on it."""

    def __init__(self, engine: LLMEngine, seed: int) -> None:
        self.engine = engine
        self.rng = random.Random(seed)
        self.vocab = engine.loaded.config.vocab_size
        self.budget = engine.config.max_batched_tokens
        self.bs = engine.config.block_size
        self.next_id = 0

    def add(self, prompt: int, computed: int, max_tokens: int) -> str:
        """A request of `prompt` random tokens whose first `computed` are already in the cache."""
        rid = f"profile-{self.next_id}"
        self.next_id += 1
        ids = [self.rng.randrange(3, self.vocab) for _ in range(prompt)]
        self.engine.add_request(
            EngineRequest(
                rid,
                ids,
                SamplingParams(max_tokens=max_tokens, ignore_eos=True),
                tenant="__profile__",
            )
        )
        if computed:
            seq = self.engine.scheduler.find(rid)
            assert seq is not None, "add_request queued it with the scheduler"
            bs = self.engine.config.block_size
            blocks = self.engine.pool.allocate(-(-computed // bs))
            if blocks is None:
                raise ValueError(
                    f"the profiling KV pool cannot hold {computed} tokens of "
                    f"context; give the engine more blocks"
                )
            seq.block_ids = blocks
            seq.block_hashes = chain_hashes(ids[:computed], bs, seq.hash_keys)
            seq.num_computed = computed
        return rid

    def timed_step(self, budget: int) -> float:
        self.engine.scheduler.max_batched_tokens = budget
        started = time.perf_counter()
        self.engine.step()
        return time.perf_counter() - started

    def drain(self) -> None:
        self.engine.scheduler.max_batched_tokens = self.budget
        while self.engine.has_work():
            self.engine.step()

    def prefill(self, tokens: int, context: int, repeats: int) -> Measurement:
        samples = []
        for _ in range(repeats):
            self.add(context + tokens + 1, context, 1)
            samples.append(self.timed_step(tokens))
            self.drain()
        return Measurement(
            "prefill",
            tokens,
            0,
            prefill_keys(1, tokens, context + tokens, self.bs),
            0.0,
            statistics.median(samples),
            samples,
            context=context,
        )

    def decode(self, batch: int, context: int, repeats: int, steps: int) -> Measurement:
        samples = []
        for _ in range(repeats):
            for _ in range(batch):
                self.add(context + 1, context, steps)
            samples += [self.timed_step(self.budget) for _ in range(steps)]
            self.drain()
        # Step j attends context + j keys per sequence; the median step is the middle one.
        mean_context = context + (steps + 1) / 2
        return Measurement(
            "decode",
            batch,
            batch,
            0.0,
            batch * mean_context,
            statistics.median(samples),
            samples,
            batch=batch,
            context=round(mean_context),
        )

    def mixed(self, batch: int, context: int, tokens: int, repeats: int) -> Measurement:
        samples = []
        for _ in range(repeats):
            for _ in range(batch):
                self.add(context + 1, context, 1)
            self.add(tokens + 1, 0, 1)
            samples.append(self.timed_step(batch + tokens))
            self.drain()
        return Measurement(
            "mixed",
            batch + tokens,
            batch,
            prefill_keys(1, tokens, tokens, self.bs),
            batch * (context + 1.0),
            statistics.median(samples),
            samples,
            batch=batch,
            context=context,
        )

    def add_seconds(self, prompt: int, repeats: int) -> float:
        samples = []
        for _ in range(repeats):
            started = time.perf_counter()
            self.add(prompt, 0, 1)
            samples.append(time.perf_counter() - started)
            self.drain()
        return statistics.median(samples)


def profile_engine(
    loaded: LoadedModel,
    config: EngineConfig,
    threads: int,
    grid: ProfileGrid = ProfileGrid(),
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> EngineProfile:
    """Measure `loaded` on an engine built with `config` and `threads` torch threads."""
    if threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    torch.set_num_threads(threads)
    engine = LLMEngine(loaded, config)
    engine.warm_up()
    grid = grid.fitted_to(engine.max_context, config.max_seqs)
    bench = StepBench(engine, seed)
    say = progress or (lambda _: None)
    points: list[Measurement] = []
    for n in grid.prefill_tokens:
        for c in grid.prefill_contexts:
            if n > config.max_batched_tokens or c + n + 2 > engine.max_context:
                continue
            points.append(bench.prefill(n, c, grid.repeats))
            say(f"prefill {n} tokens at context {c}: {points[-1].seconds * 1e3:.2f} ms")
    for b in grid.decode_batches:
        for c in grid.decode_contexts:
            points.append(bench.decode(b, c, grid.repeats, grid.decode_steps))
            say(f"decode batch {b} at context {c}: {points[-1].seconds * 1e3:.2f} ms")
    checks = []
    for b, c, n in grid.mixed:
        if b + n <= config.max_batched_tokens:
            checks.append(bench.mixed(b, c, n, grid.repeats))
            say(f"mixed {b} decodes at {c} + {n} prefill: {checks[-1].seconds * 1e3:.2f} ms")
    costs, error = fit(points + checks)
    return EngineProfile(
        model=engine.model_name,
        dtype=str(engine.dtype).removeprefix("torch."),
        device=config.device,
        threads=threads,
        machine=machine_description(),
        engine=asdict(config),
        kv_bytes_per_token=loaded.config.kv_bytes_per_token(torch.finfo(engine.dtype).bits // 8),
        max_context=engine.max_context,
        costs=costs,
        fit_error=error,
        measurements=points + checks,
        overheads=RequestOverheads(add_s=bench.add_seconds(64, grid.repeats)),
        created_unix_s=time.time(),
        notes=[f"native decode attention kernel: {engine.native_attention}"],
    )
