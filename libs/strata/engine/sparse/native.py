"""The sparse path's fused CPU kernels (sparse_kernels.cpp), compiled on first use.

Built the way strata.engine.kernels builds the dense decode kernel (same compiler flags, same
cache folder, keyed by source, flags, torch version and CPU), and used only where that kernel
is: an engine on the CPU with attention_kernel "cpp". `load()` returns the `torch.ops.
strata_sparse` namespace (select_blocks, sparse_attention) or None, and the sparse path then
runs on torch operations; any failure to build is logged once and leaves it there.
"""

from __future__ import annotations

from pathlib import Path

from strata.engine import kernels

_SOURCE = Path(__file__).with_name("sparse_kernels.cpp")


def load():
    """torch.ops.strata_sparse, or None when the kernels cannot be built or loaded."""
    return kernels.load_extra(
        _SOURCE, "sparse_kernels", "strata_sparse", "strata sparse CPU kernels"
    )
