"""Long-context decode with a dual path: a block index picks candidate KV blocks, exact attention
runs on them, the estimated attention mass left out goes to the left-out tokens' mean value, and
a trust check sends a layer's KV head group back to full attention when that mass may be too
large.

    config.py   SparseConfig: when a row goes sparse, its budget, sinks, window, threshold
    index.py    BlockIndex: per physical block, layer and KV head, the keys' box and mean, and
                the values' sum
    select.py   scoring, selection, the bound and the estimate of the mass left out
    attend.py   exact attention of (row, KV head) pairs over their own block lists
    compensate.py  per-request running sums of the values; (1 - m) got + m v_left
    native.py   sparse_kernels.cpp: block scoring and attention with the log partition, fused
                for the CPU (reading index and cache in place); torch operations elsewhere
    decode.py   the engine's side: per-step plan, per-layer run, counters, probes
    fidelity.py side-by-side runs for measurements (dense vs sparse, teacher-forced)

Using it without a worker:

    from strata.engine.engine import EngineConfig, EngineRequest, LLMEngine
    from strata.engine.sparse import SparseConfig
    engine = LLMEngine(loaded, EngineConfig(sparse=SparseConfig(enabled=True, min_context=4096)))
    engine.add_request(EngineRequest("a", ids, params))              # the default: sparse
    engine.add_request(EngineRequest("b", ids, params, sparse=False))  # dense, bit for bit
    engine.sparse.stats                                   # SparseStats, cumulative counters
    engine.sparse.probe = callback                        # LayerProbe per layer: both outputs

and `fidelity.teacher_forced(...)` runs a prompt and a fixed continuation through the dense and
the sparse path and returns both paths' logits and per-layer attention agreement.
"""

from strata.engine.sparse.config import SparseConfig
from strata.engine.sparse.decode import LayerProbe, SparseDecoder, SparseStats

__all__ = ["LayerProbe", "SparseConfig", "SparseDecoder", "SparseStats"]
