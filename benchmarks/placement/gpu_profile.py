"""The GPU machine's half of benchmarks/placement/gpu_profile.sh: a full `strata profile` of a
model on the device with its co-location share (2 engines at batches 1, 8, 32), and a 4-engine
point at batch 8 that checks the share's additive model (4 engines should cost alone x (1 + 3 s)).

    python benchmarks/placement/gpu_profile.py OUT_DIR [MODEL] [prefill]

`prefill` measures only the 2-engine prefill points, into OUT_DIR/colocate-prefill.json.

Imports only the engine and the simulator's profile format (no gRPC services, OpenTelemetry or
SQLAlchemy), since the GPU machine has torch and little else; a file, not stdin, because the
co-located engines are spawned processes that re-import their parent's main module.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time


def main() -> int:
    out = sys.argv[1]
    model = sys.argv[2] if len(sys.argv) > 2 else "dummy-1b"
    import torch

    from strata.engine.colocation import ColocationPlan, measure_colocation
    from strata.engine.engine import EngineConfig
    from strata.engine.profiler import ProfileGrid, profile_engine
    from strata.engine.registry import load_model

    os.makedirs(out, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = "bfloat16" if device == "cuda" else "float32"
    if sys.argv[3:] == ["prefill"]:
        points = measure_colocation(
            ColocationPlan(
                model=model,
                device=device,
                dtype=dtype,
                threads=1,
                engines=2,
                batches=(),
                prefill_batches=(1, 4),
                seconds=3.0,
            ),
            progress=print,
        )
        _save_points(points, os.path.join(out, "colocate-prefill.json"))
        return 0
    grid = ProfileGrid()
    need = max(grid.decode_batches) * (max(grid.decode_contexts) + grid.decode_steps + 16)
    config = EngineConfig(
        num_blocks=-(-need // 16) + 256,
        max_batched_tokens=2048,
        max_seqs=32,
        device=device,
        dtype=dtype,
    )
    started = time.perf_counter()
    profile = profile_engine(load_model(model), config, 1, grid, progress=print)
    print(f"profile in {time.perf_counter() - started:.0f} s", flush=True)
    profile.colocation = measure_colocation(
        ColocationPlan(
            model=model,
            device=device,
            dtype=dtype,
            threads=1,
            engines=2,
            batches=(1, 8, 32),
            prefill_batches=(1, 4),
        ),
        progress=print,
    )
    print(
        f"co-location share: decode {profile.colocation_share:.3f}, prefill "
        f"{profile.prefill_colocation_share:.3f}",
        flush=True,
    )
    name = f"{model}-{'h200' if 'H200' in profile.machine.get('gpu', '') else device}.json"
    profile.save(os.path.join(out, name))
    four = measure_colocation(
        ColocationPlan(model=model, device=device, dtype=dtype, threads=1, engines=4, batches=(8,)),
        progress=print,
    )
    _save_points(four, os.path.join(out, "colocate4.json"))
    print(f"done in {time.perf_counter() - started:.0f} s", flush=True)
    return 0


def _save_points(points, path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump([dataclasses.asdict(p) for p in points], f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
