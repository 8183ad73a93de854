"""Quantized weight matrices in the engine's two in-memory formats, and their GGUF decoders.

A matrix W of shape (rows, cols) is cut along each row into blocks of BLOCK (32) weights. Every
block has a float32 scale, and a 4-bit matrix also a float32 offset:

    bits 4   packed uint8 (rows, cols / 2)   w = q * scale + offset,  q in 0..15
             byte j of a block holds weight j in its low nibble and weight j + 16 in its high
    bits 8   packed int8  (rows, cols)       w = q * scale,           q in -128..127

GGUF's Q4_0, Q4_1 and Q4_K become the 4-bit format and Q8_0 the 8-bit one, losslessly: every
scale and offset those formats imply (an f16 times an integer of at most 6 bits) is exact in
float32, and so is q * scale, so a weight decoded here equals, bit for bit, what
`gguf.quants.dequantize` gives. Rows are independent, so selecting or permuting rows (the
Q/K RoPE un-permutation) and stacking matrices with the same column count and format (q|k|v,
gate|up) need no re-quantization.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from gguf import GGMLQuantizationType

BLOCK = 32

# the GGUF types decoded into a quantized matrix; any other type is widened to float at load
GGUF_TYPES = (
    GGMLQuantizationType.Q4_0,
    GGMLQuantizationType.Q4_1,
    GGMLQuantizationType.Q4_K,
    GGMLQuantizationType.Q8_0,
)


@dataclass(frozen=True, slots=True)
class QuantizedWeight:
    """One quantized matrix (see the module docstring for the layout).

    Invariants: `cols` is a multiple of BLOCK; `packed` is (rows, cols // 2) uint8 for 4 bits
    or (rows, cols) int8 for 8; `scales` and, for 4 bits, `offsets` are (rows, cols // BLOCK)
    float32; all contiguous and on one device. For 8 bits `offsets` is an empty tensor.
    """

    bits: int
    packed: torch.Tensor
    scales: torch.Tensor
    offsets: torch.Tensor

    @property
    def shape(self) -> tuple[int, int]:
        rows = self.packed.shape[0]
        return (rows, self.packed.shape[1] * (2 if self.bits == 4 else 1))

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.packed, self.scales, self.offsets))

    def rows(self, index: torch.Tensor) -> QuantizedWeight:
        """The rows at `index` (a permutation or a selection), still quantized."""
        offsets = self.offsets.index_select(0, index) if self.bits == 4 else self.offsets
        return QuantizedWeight(
            self.bits,
            self.packed.index_select(0, index),
            self.scales.index_select(0, index),
            offsets,
        )

    @staticmethod
    def stack(parts: list[QuantizedWeight]) -> QuantizedWeight:
        """The matrices one above another (the rows of a fused projection); every part must have
        the same bits and column count."""
        first = parts[0]
        if any(p.bits != first.bits or p.shape[1] != first.shape[1] for p in parts):
            raise ValueError("stacked quantized matrices need the same format and column count")
        offsets = torch.cat([p.offsets for p in parts]) if first.bits == 4 else first.offsets
        return QuantizedWeight(
            first.bits,
            torch.cat([p.packed for p in parts]),
            torch.cat([p.scales for p in parts]),
            offsets,
        )


def _f16(column: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(column).view(np.float16).astype(np.float32).reshape(-1)


def _nibbles(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Bytes holding `low` (weights 0..15 of a block) and `high` (16..31) as nibbles."""
    return (low | (high << 4)).astype(np.uint8)


def _q4_0(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    d = _f16(blocks[:, 0:2])
    return blocks[:, 2:18], d, -8.0 * d


def _q4_1(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return blocks[:, 4:20], _f16(blocks[:, 0:2]), _f16(blocks[:, 2:4])


def _q4_k(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A 256-weight super-block: f16 d and dmin, 12 bytes of 6-bit scales and mins for its eight
    32-weight sub-blocks, then 128 bytes where sub-block 2c takes the low nibbles of bytes
    32c..32c+31 and sub-block 2c+1 their high nibbles."""
    n = blocks.shape[0]
    d, dmin = _f16(blocks[:, 0:2]), _f16(blocks[:, 2:4])
    packed_scales = blocks[:, 4:16].reshape(n, 3, 4)
    lo, hi, mixed = packed_scales[:, 0], packed_scales[:, 1], packed_scales[:, 2]
    sc = np.concatenate([lo & 0x3F, (mixed & 0x0F) | ((lo >> 2) & 0x30)], axis=1)
    mn = np.concatenate([hi & 0x3F, (mixed >> 4) | ((hi >> 2) & 0x30)], axis=1)
    qs = blocks[:, 16:144].reshape(n, 4, 32)
    sub = np.stack([qs & 0x0F, qs >> 4], axis=2).reshape(n * 8, 32)  # sub-block order
    packed = _nibbles(sub[:, :16], sub[:, 16:])
    scale = (d[:, None] * sc.astype(np.float32)).reshape(n * 8)
    offset = -(dmin[:, None] * mn.astype(np.float32)).reshape(n * 8)
    return packed, scale, offset


_Q4 = {
    GGMLQuantizationType.Q4_0: (18, 32, _q4_0),
    GGMLQuantizationType.Q4_1: (20, 32, _q4_1),
    GGMLQuantizationType.Q4_K: (144, 256, _q4_k),
}


def from_gguf(
    data: np.ndarray, qtype: GGMLQuantizationType, shape: tuple[int, int]
) -> QuantizedWeight:
    """A GGUF tensor's raw blocks (`data`: uint8, one row of blocks per matrix row, as
    GGUFReader gives them) as a QuantizedWeight of `shape` (rows, cols); ValueError for a type
    outside GGUF_TYPES or a shape the blocks do not fit."""
    rows, cols = shape
    raw = np.ascontiguousarray(data, dtype=np.uint8).reshape(rows, -1)
    if qtype == GGMLQuantizationType.Q8_0:
        if cols % BLOCK:
            raise ValueError(f"Q8_0 needs columns in multiples of {BLOCK}, got {cols}")
        blocks = raw.reshape(-1, 34)
        q = np.ascontiguousarray(blocks[:, 2:]).view(np.int8).reshape(rows, cols)
        scale = _f16(blocks[:, 0:2]).reshape(rows, cols // BLOCK)
        return QuantizedWeight(
            8,
            torch.from_numpy(q.copy()),
            torch.from_numpy(scale.copy()),
            torch.empty(0, dtype=torch.float32),
        )
    if qtype not in _Q4:
        raise ValueError(f"GGUF type {qtype.name} has no quantized in-memory format")
    size, weights, decode = _Q4[qtype]
    if cols % weights:
        raise ValueError(f"{qtype.name} needs columns in multiples of {weights}, got {cols}")
    packed, scale, offset = decode(raw.reshape(-1, size))
    per_row = cols // BLOCK
    return QuantizedWeight(
        4,
        torch.from_numpy(np.ascontiguousarray(packed).reshape(rows, cols // 2).copy()),
        torch.from_numpy(np.asarray(scale, np.float32).reshape(rows, per_row).copy()),
        torch.from_numpy(np.asarray(offset, np.float32).reshape(rows, per_row).copy()),
    )


def dequantize(weight: QuantizedWeight, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The matrix in `dtype`, decoded with torch operations (the reference for the native
    kernel, and its fallback): the weights in float32 exactly, then rounded once to `dtype`."""
    rows, cols = weight.shape
    blocks = cols // BLOCK
    if weight.bits == 8:
        q = weight.packed.view(rows, blocks, BLOCK).float()
        values = q * weight.scales.unsqueeze(-1)
    else:
        p = weight.packed.view(rows, blocks, BLOCK // 2)
        q = torch.cat((p & 0x0F, p >> 4), dim=-1).float()
        values = q * weight.scales.unsqueeze(-1) + weight.offsets.unsqueeze(-1)
    return values.reshape(rows, cols).to(dtype)
