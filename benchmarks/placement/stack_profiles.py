"""Engine profiles of the benchmark's models on this machine, and what one replica sustains.

The batch-aware planner prices a model on a node by its engine profile (`strata profile`), keyed
by model and device kind; the repository ships one for dummy-tiny only. The benchmark measures
each of its models once, as the workers run them (one torch thread, fp32, compose's batch
settings), with the profiler's quick grid, into a folder the planner is pointed at
(STRATA_PLACEMENT_PROFILES). A profile already in the folder is reused, so reruns price the
models the same way; delete the folder to measure again. Each model's prompt length is then
fitted to a capacity (fit_prompt), and its rates follow from that capacity.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from benchmarks.placement.stack_workload import ModelRole
from strata.core.sla import SlaClass
from strata.engine.dummy_configs import DUMMY_CONFIGS
from strata.policy.placement.capacity import EngineCosts, SlaTarget, replica_capacity
from strata.policy.placement.profiles import load_profiles

DEVICE = "cpu"


@dataclass(slots=True, frozen=True)
class ModelCost:
    model: str
    prefill_ms: float  # one prompt of the role's length, the engine to itself
    decode_ms: float  # one decode step of one sequence at the role's mean context
    capacity: float  # requests/s one replica sustains within the class's targets


def profile_path(folder: Path, model: str) -> Path:
    return folder / f"{model}-{DEVICE}.json"


def ensure_profiles(models: Sequence[str], folder: Path, threads: int = 1) -> dict[str, float]:
    """Measures the models without a profile in `folder`; model -> seconds it took (0: reused)."""
    folder.mkdir(parents=True, exist_ok=True)
    took = {}
    for model in models:
        out = profile_path(folder, model)
        if out.exists():
            took[model] = 0.0
            continue
        started = time.perf_counter()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "strata.client.cli",
                "profile",
                "--model",
                model,
                "--quick",
                "--threads",
                str(threads),
                "--device",
                DEVICE,
                "--out",
                str(out),
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"profiling {model} failed ({done.returncode}):\n"
                f"{done.stdout[-2000:]}{done.stderr[-2000:]}"
            )
        took[model] = time.perf_counter() - started
    return took


def model_costs(roles: Sequence[ModelRole], folder: Path, sla: SlaClass) -> dict[str, ModelCost]:
    """Each role priced by its profile in `folder`, as the planner will price it."""
    table = load_profiles(str(folder))
    target = SlaTarget(sla.name, sla.ttft_ms, sla.tpot_ms)
    out = {}
    for r in roles:
        costs = table(r.model, DEVICE)
        if costs is None:
            raise ValueError(f"no {DEVICE} profile of {r.model} in {folder}")
        context = r.prompt_tokens + r.output_tokens / 2
        out[r.model] = ModelCost(
            r.model,
            costs.prefill_s(r.prompt_tokens) * 1000,
            costs.decode_step_s(1, context) * 1000,
            replica_capacity(costs, target, r.prompt_tokens, r.output_tokens),
        )
    return out


def capacities(costs: Mapping[str, ModelCost]) -> dict[str, float]:
    return {m: c.capacity for m, c in costs.items()}


def fit_prompt(
    costs: EngineCosts, sla: SlaTarget, output_tokens: int, capacity: float, max_prompt: int
) -> int:
    """The shortest prompt (1..max_prompt tokens) with which one replica sustains at most
    `capacity` requests/s within `sla` (max_prompt when even that sustains more).

    A replica's capacity under a TTFT target falls steeply with the prompt's prefill time (the
    99th percentile of the wait behind other prefills grows like a log over 1 - load), so the
    same token counts priced by two profiles of one machine can differ 3x in capacity. Fitting
    the prompt to a capacity instead keeps the rates, and with them the machine's load and
    each window's request count, the same from run to run."""
    lo, hi = 1, max_prompt
    if replica_capacity(costs, sla, hi, output_tokens) > capacity:
        return hi
    while lo < hi:
        mid = (lo + hi) // 2
        if replica_capacity(costs, sla, mid, output_tokens) <= capacity:
            hi = mid
        else:
            lo = mid + 1
    return lo


def fit_roles(
    roles: Sequence[ModelRole], folder: Path, sla: SlaClass, capacity: float
) -> list[ModelRole]:
    """`roles` with prompts fitted to `capacity` (fit_prompt) on the profiles in `folder`,
    within each model's context."""
    table = load_profiles(str(folder))
    target = SlaTarget(sla.name, sla.ttft_ms, sla.tpot_ms)
    out = []
    for r in roles:
        costs = table(r.model, DEVICE)
        if costs is None:
            raise ValueError(f"no {DEVICE} profile of {r.model} in {folder}")
        limit = DUMMY_CONFIGS[r.model].max_position_embeddings - r.output_tokens
        out.append(
            replace(r, prompt_tokens=fit_prompt(costs, target, r.output_tokens, capacity, limit))
        )
    return out
