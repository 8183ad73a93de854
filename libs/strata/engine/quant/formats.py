"""Quantized weight matrices in the engine's two in-memory formats, and their GGUF decoders.

A matrix W of shape (rows, cols) is cut along each row into blocks of BLOCK (32) weights, stored
one after another, row after row, in one uint8 tensor (rows, cols / BLOCK * block bytes):

    bits 4   24 bytes a block: float32 scale, float32 offset, 16 bytes of nibbles
             w = q * scale + offset, q in 0..15; byte j holds weight j in its low nibble and
             weight j + 16 in its high one
    bits 8   36 bytes a block: float32 scale, 32 int8 values; w = q * scale

so that a product walks each row as one sequential stream of bytes (scales beside their
weights, not in arrays of their own: a decode step is bound by how fast it reads them).

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
BLOCK_BYTES = {4: 24, 8: 36}

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

    Invariants: `cols` is a multiple of BLOCK; `data` is contiguous uint8
    (rows, cols // BLOCK * BLOCK_BYTES[bits]).
    """

    bits: int
    data: torch.Tensor
    cols: int

    @property
    def shape(self) -> tuple[int, int]:
        return (self.data.shape[0], self.cols)

    @property
    def nbytes(self) -> int:
        return self.data.numel()

    def blocks(self) -> torch.Tensor:
        """The data as (rows, cols // BLOCK, block bytes)."""
        return self.data.view(self.data.shape[0], self.cols // BLOCK, BLOCK_BYTES[self.bits])

    def rows(self, index: torch.Tensor) -> QuantizedWeight:
        """The rows at `index` (a permutation or a selection), still quantized."""
        return QuantizedWeight(self.bits, self.data.index_select(0, index), self.cols)

    @staticmethod
    def stack(parts: list[QuantizedWeight]) -> QuantizedWeight:
        """The matrices one above another (the rows of a fused projection); every part must have
        the same bits and column count."""
        first = parts[0]
        if any(p.bits != first.bits or p.cols != first.cols for p in parts):
            raise ValueError("stacked quantized matrices need the same format and column count")
        return QuantizedWeight(first.bits, torch.cat([p.data for p in parts]), first.cols)


def pack(
    bits: int, quants: np.ndarray, scales: np.ndarray, offsets: np.ndarray | None
) -> torch.Tensor:
    """The `data` of a matrix from its parts: `quants` (rows, blocks, 16) uint8 nibble bytes for
    4 bits or (rows, blocks, 32) int8 for 8, `scales` and `offsets` (rows, blocks) float32."""
    rows, blocks = scales.shape
    out = np.empty((rows, blocks, BLOCK_BYTES[bits]), dtype=np.uint8)
    out[:, :, 0:4] = (
        np.ascontiguousarray(scales, dtype=np.float32).view(np.uint8).reshape(rows, blocks, 4)
    )
    head = 4
    if bits == 4:
        assert offsets is not None
        out[:, :, 4:8] = (
            np.ascontiguousarray(offsets, dtype=np.float32).view(np.uint8).reshape(rows, blocks, 4)
        )
        head = 8
    out[:, :, head:] = np.ascontiguousarray(quants).view(np.uint8)
    return torch.from_numpy(out.reshape(rows, -1))


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
    per_row = cols // BLOCK
    if qtype == GGMLQuantizationType.Q8_0:
        if cols % BLOCK:
            raise ValueError(f"Q8_0 needs columns in multiples of {BLOCK}, got {cols}")
        blocks = raw.reshape(-1, 34)
        q = blocks[:, 2:].reshape(rows, per_row, BLOCK)
        scale = _f16(blocks[:, 0:2]).reshape(rows, per_row)
        return QuantizedWeight(8, pack(8, q, scale, None), cols)
    if qtype not in _Q4:
        raise ValueError(f"GGUF type {qtype.name} has no quantized in-memory format")
    size, weights, decode = _Q4[qtype]
    if cols % weights:
        raise ValueError(f"{qtype.name} needs columns in multiples of {weights}, got {cols}")
    packed, scale, offset = decode(raw.reshape(-1, size))
    return QuantizedWeight(
        4,
        pack(
            4,
            np.ascontiguousarray(packed).reshape(rows, per_row, BLOCK // 2),
            np.asarray(scale, np.float32).reshape(rows, per_row),
            np.asarray(offset, np.float32).reshape(rows, per_row),
        ),
        cols,
    )


def dequantize(weight: QuantizedWeight, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The matrix in `dtype`, decoded with torch operations (the reference for the native
    kernel, and its fallback): the weights in float32 exactly, then rounded once to `dtype`."""
    rows, cols = weight.shape
    b = weight.blocks()
    scales = b[..., 0:4].contiguous().view(torch.float32)  # (rows, blocks, 1)
    if weight.bits == 8:
        q = b[..., 4:].contiguous().view(torch.int8).float()
        values = q * scales
    else:
        offsets = b[..., 4:8].contiguous().view(torch.float32)
        p = b[..., 8:]
        q = torch.cat((p & 0x0F, p >> 4), dim=-1).float()
        values = q * scales + offsets
    return values.reshape(rows, cols).to(dtype)
