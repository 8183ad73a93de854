"""The quantized linear kernels (quant_kernels.cpp), compiled on first use.

Built as strata.engine.kernels builds the attention kernel (same flags, same cache, keyed by
source, flags, torch version and CPU). `load()` returns the `torch.ops.strata_quant` namespace
(linear, dequantize) or None, and quantized layers then run on torch operations; a failure to
build is logged once.
"""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import torch

from strata.engine import kernels

log = logging.getLogger(__name__)

_SOURCE = Path(__file__).with_name("quant_kernels.cpp")
_state: dict[str, object] = {}


def load():
    """torch.ops.strata_quant, or None when the kernels cannot be built or loaded."""
    if "ops" in _state:
        return _state["ops"]
    ops = None
    if kernels.load() is not None:
        try:
            torch.ops.load_library(str(kernels.build_library(_SOURCE, "quant_kernels")))
            ops = torch.ops.strata_quant
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            log.warning("strata quantized CPU kernels unavailable, using torch operations: %s", exc)
    _state["ops"] = ops
    return ops
