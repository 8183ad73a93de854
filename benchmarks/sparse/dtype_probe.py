"""Which dtype the default model runs faster in on this CPU: one prefill and a few decode steps
in float32 and in bfloat16, dense, the same prompt (bfloat16 is faster only where the CPU has
bf16 matrix support; the run reports what it measured instead of assuming)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from benchmarks.sparse import engine_api
from strata.engine.loaded import LoadedModel
from strata.engine.sparse.config import SparseConfig


@dataclass(slots=True)
class DtypeTiming:
    dtype: str
    prefill_s: float
    decode_s: float  # mean decode step


def time_dtype(loaded: LoadedModel, dtype: str, prompt: list[int], steps: int) -> DtypeTiming:
    engine = engine_api.new_engine(
        loaded,
        SparseConfig(),
        dtype,
        num_blocks=-(-(len(prompt) + steps + 1) // 16) + 4,
        max_batched_tokens=2048,
        max_seqs=1,
    )
    times: list[float] = []
    engine.add_request(
        engine_api.request("dtype-probe", prompt, steps + 1, sparse=False, ignore_eos=True)
    )
    while engine.has_work():
        t = time.perf_counter()
        engine.step()
        times.append(time.perf_counter() - t)
    # the prompt fits one step's token budget only up to 2048 tokens; later steps are decodes
    prefill_steps = -(-len(prompt) // 2048)
    decodes = times[prefill_steps:]
    return DtypeTiming(dtype, sum(times[:prefill_steps]), sum(decodes) / len(decodes))


def probe_dtypes(
    loaded: LoadedModel, chosen: str, prompt: list[int], steps: int = 32
) -> tuple[list[DtypeTiming], str, str]:
    """Times both dtypes; returns the timings, the report's line, and the dtype the run uses:
    `chosen`, or with "auto" the faster one here (prefill plus `steps` decode steps)."""
    timings = [time_dtype(loaded, d, prompt, steps) for d in ("float32", "bfloat16")]
    f32, bf16 = timings
    faster = (
        "bfloat16"
        if bf16.prefill_s + steps * bf16.decode_s < f32.prefill_s + steps * f32.decode_s
        else "float32"
    )
    used = faster if chosen == "auto" else chosen
    how = (
        "so this run uses it (--dtype auto)"
        if chosen == "auto"
        else "and this run uses it"
        if used == faster
        else f"but this run used {used} (--dtype)"
    )
    line = (
        f"{len(prompt)}-token prefill {f32.prefill_s:.1f} s in float32, "
        f"{bf16.prefill_s:.1f} s in bfloat16; decode step {f32.decode_s * 1000:.0f} vs "
        f"{bf16.decode_s * 1000:.0f} ms: {faster} is faster here, {how}"
    )
    return timings, line, used
