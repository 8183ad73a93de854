"""Weights kept in their checkpoint's quantized format, and the layers that multiply with them.

formats.py holds the two in-memory formats and the GGUF decoders, modules.py the layers,
native.py the CPU kernel's loader (quant_kernels.cpp).
"""

from strata.engine.quant.formats import BLOCK, GGUF_TYPES, QuantizedWeight, dequantize, from_gguf
from strata.engine.quant.modules import QuantEmbedding, QuantLayer, QuantLinear

__all__ = [
    "BLOCK",
    "GGUF_TYPES",
    "QuantEmbedding",
    "QuantLayer",
    "QuantLinear",
    "QuantizedWeight",
    "dequantize",
    "from_gguf",
]
