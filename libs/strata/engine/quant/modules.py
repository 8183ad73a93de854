"""Layers that hold a QuantizedWeight and compute in the activations' dtype.

QuantLinear is y = x @ W^T; QuantEmbedding looks rows up, and a tied LM head multiplies
with the same matrix. Both keep the weight's tensors as registered buffers (so state_dict,
`.to(device)` and the worker's memory report see them) and are filled by `set`, after the model
has been cast to its dtype, so that the float32 scales are never narrowed.

On the CPU the native kernel (native.py) does the work when it can be built; otherwise, and on
any other device, the matrix is decoded with torch operations at each call.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from strata.engine.quant import native
from strata.engine.quant.formats import QuantizedWeight, dequantize


class QuantLayer(nn.Module):
    """What both quantized layers share: the weight's buffers and the matrix product."""

    def __init__(self, dtype: torch.dtype):
        super().__init__()
        self.data: torch.Tensor
        self.dtype = dtype  # of activations in and out
        self.bits = 0
        self.cols = 0
        self._native = None

    def set(self, weight: QuantizedWeight, use_native: bool = True) -> None:
        self.bits, self.cols = weight.bits, weight.cols
        self.register_buffer("data", weight.data.contiguous())
        self._native = native.load() if use_native else None

    @property
    def native(self) -> bool:
        """Whether the native kernel multiplies on the CPU (it was built and `set` asked for it)."""
        return self._native is not None

    @property
    def weight_q(self) -> QuantizedWeight:
        return QuantizedWeight(self.bits, self.data, self.cols)

    def matmul(self, x: torch.Tensor, float_sums: bool = False) -> torch.Tensor:
        """x @ W^T for a 2-D x in self.dtype, in x's dtype; with float_sums, the native few-row
        product returns its float32 sums instead (other paths still return x's dtype)."""
        if self._native is not None and x.device.type == "cpu":
            return self._native.linear(x, self.data, self.bits, float_sums)
        return F.linear(x, dequantize(self.weight_q, x.dtype))


class QuantLinear(QuantLayer):
    """A linear layer without bias (the only kind a quantized checkpoint here has)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.matmul(x)


class QuantEmbedding(QuantLayer):
    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return dequantize(self.weight_q.rows(ids), self.dtype)
