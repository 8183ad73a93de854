"""Block payloads on the wire and in host tiers: one block's K and V for every layer.

    payload = kv[:, :, :, block_id]  ->  [layers, 2 (k|v), kv_heads, block_size, head_dim]

The layout string names dtype and shape so a receiver can check it matches its own pool before
writing a block into it.
"""

from __future__ import annotations

import numpy as np
import torch

_NUMPY_VIEW = {
    torch.float32: (np.float32, None),
    torch.float16: (np.float16, None),
    torch.bfloat16: (np.int16, torch.int16),
}
_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def layout_of(shape: tuple[int, ...], dtype: torch.dtype) -> str:
    return f"{_NAMES[dtype]}:" + "x".join(str(d) for d in shape)


def encode(block: torch.Tensor) -> tuple[bytes, str]:
    np_dtype, view = _NUMPY_VIEW[block.dtype]
    t = block.detach().contiguous().cpu()
    if view is not None:
        t = t.view(view)
    return t.numpy().tobytes(), layout_of(tuple(block.shape), block.dtype)


def decode(data: bytes, layout: str, expected_layout: str) -> torch.Tensor:
    if layout != expected_layout:
        raise ValueError(f"block layout {layout} does not match this pool's {expected_layout}")
    name, dims = layout.split(":")
    shape = tuple(int(d) for d in dims.split("x"))
    dtype = {v: k for k, v in _NAMES.items()}[name]
    np_dtype, view = _NUMPY_VIEW[dtype]
    arr = np.frombuffer(data, dtype=np_dtype).reshape(shape)
    t = torch.from_numpy(arr.copy())
    return t.view(dtype) if view is not None else t
