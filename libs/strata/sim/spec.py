"""A model as the simulator runs it: its step costs, engine limits, memory and overheads."""

from __future__ import annotations

from dataclasses import dataclass

from strata.core.blocks import DEFAULT_BLOCK_SIZE
from strata.core.profile import EngineProfile, RequestOverheads, StepCosts
from strata.sim.replica import EngineLimits


@dataclass(slots=True, frozen=True)
class ModelSpec:
    name: str
    costs: StepCosts
    limits: EngineLimits
    memory_bytes: int
    overheads: RequestOverheads = RequestOverheads()
    kv_block_bytes: int = 0  # one KV block's bytes (prices tier loads; 0: unknown)
    colocation_share: float = 1.0  # of a neighbour's decode step (strata.sim.replica)
    prefill_colocation_share: float = 1.0  # of a neighbour's step that prefills


def model_spec(
    profile: EngineProfile,
    memory_bytes: int,
    kv_cache_bytes: int = 256 << 20,
    num_blocks: int = 0,
    block_size: int = DEFAULT_BLOCK_SIZE,
    max_batched_tokens: int = 2048,
    max_seqs: int = 32,
    overheads: RequestOverheads | None = None,
) -> ModelSpec:
    """A model as a worker with these engine settings would run it, priced by `profile`; the
    KV pool is num_blocks, or (0) sized from kv_cache_bytes exactly as the engine sizes it."""
    blocks = num_blocks or max(1, kv_cache_bytes // (profile.kv_bytes_per_token * block_size))
    return ModelSpec(
        profile.model,
        profile.costs,
        EngineLimits(blocks, block_size, max_batched_tokens, max_seqs, profile.max_context),
        memory_bytes,
        overheads or profile.overheads,
        profile.kv_bytes_per_token * block_size,
        profile.colocation_share,
        profile.prefill_colocation_share,
    )
