"""The benchmark's one contact with the engine's sparse path: building an engine with a
SparseConfig, requests with the path on or off, running a request to its end, and reading the
cumulative counters (strata.engine.sparse.SparseStats) as the benchmark's SparseCounters."""

from __future__ import annotations

from benchmarks.sparse.results import SparseCounters
from strata.engine.engine import EngineConfig, EngineRequest, LLMEngine
from strata.engine.loaded import LoadedModel
from strata.engine.sequence import SamplingParams
from strata.engine.sparse import SparseConfig

BLOCK_SIZE = 16


def new_engine(
    loaded: LoadedModel,
    sparse: SparseConfig,
    dtype: str,
    num_blocks: int,
    max_batched_tokens: int,
    max_seqs: int,
) -> LLMEngine:
    return LLMEngine(
        loaded,
        EngineConfig(
            block_size=BLOCK_SIZE,
            num_blocks=num_blocks,
            max_batched_tokens=max_batched_tokens,
            max_seqs=max_seqs,
            dtype=dtype,
            sparse=sparse,
        ),
    )


def request(
    request_id: str, prompt: list[int], max_tokens: int, sparse: bool, ignore_eos: bool = False
) -> EngineRequest:
    """Greedy; `sparse` chooses the path for this request whatever the engine's default."""
    return EngineRequest(
        request_id,
        list(prompt),
        SamplingParams(max_tokens=max_tokens, ignore_eos=ignore_eos),
        sparse=sparse,
    )


def generate(engine: LLMEngine, req: EngineRequest) -> list[int]:
    """Run one request alone to its end; its generated token ids."""
    if engine.has_work():
        raise RuntimeError("generate runs one request on an idle engine")
    engine.add_request(req)
    out: list[int] = []
    while engine.has_work():
        for o in engine.step():
            out.extend(o.token_ids)
    return out


def counters(engine: LLMEngine) -> SparseCounters:
    if engine.sparse is None:
        raise ValueError("the engine was built without a SparseConfig")
    s = engine.sparse.stats
    return SparseCounters(
        rows=s.decode_rows,
        layer_steps=s.layer_steps,
        fallbacks=s.fallbacks,
        blocks_read=s.blocks_read,
        blocks_dense=s.blocks_dense,
        dense_layer_steps=s.dense_layer_steps,
        partly_dense=s.partly_dense,
        group_steps=s.group_steps,
        groups_kept=s.groups_kept,
    )
