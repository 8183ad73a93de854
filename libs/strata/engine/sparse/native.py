"""The sparse path's fused CPU kernels (sparse_kernels.cpp), compiled on first use.

Built the way strata.engine.kernels builds the dense decode kernel (same compiler flags, same
cache folder, keyed by source, flags, torch version and CPU), and used only where that kernel
is: an engine on the CPU with attention_kernel "cpp". `load()` returns the `torch.ops.
strata_sparse` namespace (select_blocks, sparse_attention) or None, and the sparse path then
runs on torch operations; any failure to build is logged once and leaves it there.
"""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import torch

from strata.engine import kernels

log = logging.getLogger(__name__)

_SOURCE = Path(__file__).with_name("sparse_kernels.cpp")
_state: dict[str, object] = {}


def load():
    """torch.ops.strata_sparse, or None when the kernels cannot be built or loaded."""
    if "ops" in _state:
        return _state["ops"]
    ops = None
    if kernels.load() is not None:
        try:
            torch.ops.load_library(str(kernels.build_library(_SOURCE, "sparse_kernels")))
            ops = torch.ops.strata_sparse
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            log.warning("strata sparse CPU kernels unavailable, using torch operations: %s", exc)
    _state["ops"] = ops
    return ops
