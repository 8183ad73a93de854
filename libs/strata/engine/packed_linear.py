"""Linear layers whose bfloat16 weights are laid out for oneDNN once, not on every call.

On the CPU, F.linear of bfloat16 tensors runs oneDNN's matmul, which first copies the weight into
its own blocked layout, every call. A decode step multiplies one row per sequence, so that copy
is most of the work (measurements: docs/design/engine.md). The reordered weight
(torch.ops.mkldnn._reorder_linear_weight, what torch's own CPU compiler uses for frozen weights)
gives the same numbers bit for bit, for any number of rows (tested), since the matmul is the same.

One row of x (a single sequence's decode step) does not go through oneDNN at all: a product of
one row reads the whole weight once, and kernels/bf16_linear.cpp reads it in its own row-major
layout, prefetched, at 1.5-3x the pace of oneDNN's packed product (measured:
docs/design/engine.md); it accumulates in float32 in another order, so its result can differ
from F.linear's in the last bit of bfloat16 (tested). Rows with a bias keep to oneDNN.

float32 is packed only on a CPU without oneDNN's bfloat16 path (AVX2 only; `PACK_FLOAT32`):
there oneDNN's packed float32 product beats MKL's sgemm behind F.linear, most of all for wide
weights at a few rows (the LM head: 2-3x), while on an AVX-512 CPU the packed path neither
matches nor beats sgemm (measurements: docs/design/engine.md). Packed float32 sums in another
order than sgemm: results agree to float32 rounding, not bit for bit (tested). On a CPU
without oneDNN's bfloat16 path (where the bfloat16 reorder raises) every bfloat16 product
without a bias goes through kernels/bf16_linear.cpp, whose weights widened in registers ran
2.5-5.6x as fast as F.linear's bfloat16 product there, at 1 to 64 rows (docs/design/engine.md);
one with a bias goes through F.linear. A packed copy remembers the weight's version counter,
so a weight changed in place (a test, a reload) is packed again at its next use. The copy
doubles the memory of the linear weights it covers.

Up to F32_ROW_MAX rows of float32 x by a float32 weight without a bias (a decode step) go through
kernels/f32_linear.cpp on a CPU with AVX-512, where float32 is not packed: it reads the weight in
its own row-major layout, four rows at a time against every x row, and ran 2.1-3.3x as fast as
F.linear (MKL's sgemm) at one row and 1.07-1.46x at 64 (docs/design/engine.md). It sums in
another order than sgemm: results agree to float32 rounding (tested).
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from strata.engine import kernels

# whether this torch build has oneDNN and its packed linear ops, and this CPU runs oneDNN's
# bfloat16 path (AVX-512 BW/VL/DQ or AVX-NE-CONVERT; on an AVX2-only CPU the reorder raises), asked
# once: every linear call of a step asks `available`
ONEDNN = torch.backends.mkldnn.is_available() and hasattr(
    torch.ops.mkldnn, "_reorder_linear_weight"
)
ONEDNN_BF16 = ONEDNN and torch.ops.mkldnn._is_mkldnn_bf16_supported()
# whether float32 weights are packed too: where oneDNN has no bfloat16 path (an AVX2-only CPU)
PACK_FLOAT32 = ONEDNN and not ONEDNN_BF16
# whether this CPU multiplies bfloat16 tiles in hardware (AMX)
AMX_BF16 = "amx_bf16" in kernels.cpu_flags()
# the rows oneDNN lays a packed weight out for, by dtype: any number of rows multiplies through
# it, but a float32 weight laid out for one row multiplies 2-16 rows (a decode batch) up to 2x
# slower than one laid out for 16, which is as fast at one row and at a prefill's hundreds; on a
# CPU with AMX a bfloat16 weight laid out for 16 rows multiplies 64 rows ~15% faster than one
# laid out for one, and 4-16 rows as fast; elsewhere bfloat16 keeps the one-row layout it was
# measured with (measurements: docs/design/engine.md)
PACK_ROWS = {
    torch.float32: 16,
    torch.bfloat16: 16 if AMX_BF16 else 1,
}


_ROW_SOURCE = Path(kernels.__file__).with_name("bf16_linear.cpp")

_F32_SOURCE = Path(kernels.__file__).with_name("f32_linear.cpp")
# the most rows of float32 x that go through kernels/f32_linear.cpp (measured up to 64)
F32_ROW_MAX = 64
# where it does: measured on an AVX-512 CPU, where float32 is not packed
F32_ROWS = not PACK_FLOAT32 and "avx512f" in kernels.cpu_flags()

# How Packs.linear multiplies (Packs.route): the codes kernels/decode_layers.cpp takes too.
LINEAR, PACKED, BF16_ROW, F32_ROW = 0, 1, 2, 3


def load_row_kernel():
    """torch.ops.strata_bf16 (kernels/bf16_linear.cpp, the few-row bfloat16 product), built or
    loaded from the cache, or None where it cannot be (a failure is logged once)."""
    return kernels.load_extra(_ROW_SOURCE, "bf16_linear", "strata_bf16", "strata bf16 row kernel")


def row_class(rows: int) -> int:
    """Which of Packs.route's row thresholds `rows` rows of x fall in: 0 one row, 1 up to
    F32_ROW_MAX, 2 more. Every number of rows in one class is routed alike, so a decode plan
    made for one serves the class."""
    return 0 if rows == 1 else 1 if rows <= F32_ROW_MAX else 2


def load_f32_kernel():
    """torch.ops.strata_f32 (kernels/f32_linear.cpp, the few-row float32 product), built or
    loaded from the cache, or None where it cannot be (a failure is logged once)."""
    return kernels.load_extra(_F32_SOURCE, "f32_linear", "strata_f32", "strata f32 row kernel")


def available(weight: torch.Tensor) -> bool:
    """Whether a weight of this kind is packed: on the CPU, bfloat16 where oneDNN's bfloat16
    path runs on this CPU (ONEDNN_BF16), float32 where PACK_FLOAT32 says so."""
    if weight.device.type != "cpu":
        return False
    if weight.dtype == torch.bfloat16:
        return ONEDNN_BF16
    return weight.dtype == torch.float32 and PACK_FLOAT32


class Packs:
    """The packed copies of some linear layers' weights (one per name), made at first use and
    made again when the weight is another tensor (the module was moved or cast) or was changed in
    place (its version counter moved)."""

    __slots__ = ("_slots",)

    def __init__(self):
        self._slots: dict[str, tuple[torch.Tensor, int, torch.Tensor]] = {}

    def route(
        self,
        name: str,
        dtype: torch.dtype,
        rows: int,
        weight: torch.Tensor,
        bias: torch.Tensor | None = None,
    ) -> tuple[int, torch.Tensor]:
        """How `linear` multiplies `rows` rows of x in `dtype` by this weight: (LINEAR, the
        weight), F.linear; (BF16_ROW, the weight), the bfloat16 row kernel (one row, or any
        number where oneDNN has no bfloat16 path); (F32_ROW, the weight), the float32 row kernel
        (up to F32_ROW_MAX rows where F32_ROWS); or (PACKED, the packed copy, made or made
        again here), oneDNN's packed product."""
        if dtype != weight.dtype:
            return LINEAR, weight
        if (
            F32_ROWS
            and weight.dtype == torch.float32
            and weight.device.type == "cpu"
            and rows <= F32_ROW_MAX
            and bias is None
            and weight.is_contiguous()
            and load_f32_kernel() is not None
        ):
            return F32_ROW, weight
        if (
            weight.dtype == torch.bfloat16
            and weight.device.type == "cpu"
            and (rows == 1 or not ONEDNN_BF16)
            and bias is None
            and weight.is_contiguous()
            and load_row_kernel() is not None
        ):
            return BF16_ROW, weight
        if not available(weight):
            return LINEAR, weight
        slot = self._slots.get(name)
        if slot is None or slot[0] is not weight or slot[1] != weight._version:
            with torch.no_grad():
                packed = torch.ops.mkldnn._reorder_linear_weight(
                    weight.detach(), PACK_ROWS[weight.dtype]
                )
            slot = (weight, weight._version, packed)
            self._slots[name] = slot
        return PACKED, slot[2]

    def linear(
        self,
        name: str,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None = None,
        float_sums: bool = False,
    ) -> torch.Tensor:
        """F.linear(x, weight, bias), through the packed weight where `available`, in x's dtype;
        with float_sums, the bfloat16 row kernel returns its float32 sums instead."""
        kind, w = self.route(name, x.dtype, x.shape[0], weight, bias)
        if kind == LINEAR:
            return F.linear(x, weight, bias)
        if kind == BF16_ROW:
            return load_row_kernel().linear(x, weight, float_sums)
        if kind == F32_ROW:
            return load_f32_kernel().linear(x, weight)
        return torch.ops.mkldnn._linear_pointwise(x, w, bias, "none", [], "")
