"""Open-loop replay of scaled requests into an in-process engine, with the figures a KV tier
benchmark needs: per-request TTFT and E2E, and the device tier's KV memory at every step.

One thread: add every request whose arrival time has come, run one engine step, stamp what it
produced, sample the pool; when the engine is idle, sleep until the next arrival. Latencies run
from a request's scheduled arrival, so time spent waiting for a step to finish before it could be
added counts against it, as it would for a client.

Device memory counts blocks holding data: in use, or cached (free but still holding a reusable
prefix). Free blocks that hold no prefix are not memory in use:

    data blocks = num_blocks - (num_free - num_cached)

The mean is weighted by time: each sample holds until the next one (idle gaps included), over
the span from the first arrival to the last completion.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from benchmarks.kv.trace_scale import ScaledRequest
from strata.engine.engine import EngineRequest, LLMEngine
from strata.engine.sequence import SamplingParams


@dataclass(slots=True)
class EngineRequestRecord:
    """One request as the in-process engine served it, stamped at the step that produced its
    output (times from the replay's start): not a client's record (no status, no stream), but
    where its prompt tokens came from, the device prefix cache or the KV tier store."""

    index: int
    arrival_s: float
    prompt_tokens: int
    first_token_s: float | None = None
    finish_s: float | None = None
    output_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens served by the device prefix cache
    tier_tokens: int = 0  # prompt tokens loaded from the KV tier store

    @property
    def ttft_s(self) -> float:
        assert self.first_token_s is not None
        return self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> float:
        assert self.finish_s is not None
        return self.finish_s - self.arrival_s


@dataclass(slots=True)
class MemoryTrack:
    """Data blocks over time: peak and time-weighted mean."""

    peak_blocks: int = 0
    samples: int = 0
    _area: float = 0.0
    _last_t: float | None = None
    _last_blocks: int = 0
    _first_t: float = 0.0

    def sample(self, t: float, blocks: int) -> None:
        if self._last_t is None:
            self._first_t = t
        else:
            self._area += self._last_blocks * (t - self._last_t)
        self._last_t, self._last_blocks = t, blocks
        self.peak_blocks = max(self.peak_blocks, blocks)
        self.samples += 1

    @property
    def mean_blocks(self) -> float:
        if self._last_t is None:
            return 0.0
        span = self._last_t - self._first_t
        return self._area / span if span > 0 else float(self._last_blocks)


@dataclass(slots=True)
class ReplayResult:
    records: list[EngineRequestRecord]
    memory: MemoryTrack
    wall_s: float
    steps: int
    preemptions: int
    evictions: int
    extra: dict = field(default_factory=dict)


def data_blocks(engine: LLMEngine) -> int:
    pool = engine.pool
    return pool.num_blocks - (pool.num_free - pool.num_cached)


def replay(
    engine: LLMEngine,
    requests: Sequence[ScaledRequest],
    tenant_of: Callable[[ScaledRequest], str],
    clock: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
    on_finish: Callable[[EngineRequestRecord], None] | None = None,
) -> ReplayResult:
    """Send `requests` at their arrival times (greedy, EOS ignored) and wait for all of them."""
    pending = deque(sorted(requests, key=lambda r: (r.arrival_s, r.index)))
    records = {
        r.index: EngineRequestRecord(r.index, r.arrival_s, len(r.prompt_ids)) for r in requests
    }
    memory = MemoryTrack()
    steps = 0
    start = clock()
    memory.sample(0.0, data_blocks(engine))
    while pending or engine.has_work():
        now = clock() - start
        while pending and pending[0].arrival_s <= now:
            req = pending.popleft()
            engine.add_request(
                EngineRequest(
                    request_id=str(req.index),
                    prompt_ids=list(req.prompt_ids),
                    params=SamplingParams(max_tokens=req.max_tokens, ignore_eos=True),
                    tenant=tenant_of(req),
                )
            )
        if not engine.has_work():
            sleep(max(0.0, pending[0].arrival_s - now))
            continue
        outputs = engine.step()
        steps += 1
        t = clock() - start
        memory.sample(t, data_blocks(engine))
        for out in outputs:
            rec = records[int(out.request_id)]
            if rec.first_token_s is None:
                rec.first_token_s = t
            if out.finished:
                rec.finish_s = t
                rec.output_tokens = out.completion_tokens
                rec.cached_tokens = out.cached_tokens
                rec.tier_tokens = out.tier_tokens
                if on_finish is not None:
                    on_finish(rec)
    return ReplayResult(
        records=[records[i] for i in sorted(records)],
        memory=memory,
        wall_s=clock() - start,
        steps=steps,
        preemptions=engine.scheduler.preemptions,
        evictions=engine.pool.evictions,
    )
