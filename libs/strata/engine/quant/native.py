"""The quantized linear kernels (quant_kernels.cpp), compiled on first use.

Built as strata.engine.kernels builds the attention kernel (same flags, same cache, keyed by
source, flags, torch version and CPU). `load()` returns the `torch.ops.strata_quant` namespace
(linear, dequantize) or None, and quantized layers then run on torch operations; a failure to
build is logged once.
"""

from __future__ import annotations

from pathlib import Path

from strata.engine import kernels

_SOURCE = Path(__file__).with_name("quant_kernels.cpp")


def load():
    """torch.ops.strata_quant, or None when the kernels cannot be built or loaded."""
    return kernels.load_extra(
        _SOURCE, "quant_kernels", "strata_quant", "strata quantized CPU kernels"
    )
