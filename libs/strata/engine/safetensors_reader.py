"""Reading safetensors tensors straight into buffers the caller owns.

The format: an 8-byte little-endian header length, a JSON header naming each tensor's dtype,
shape and byte range, then the data. `read_into` copies a tensor's bytes from the file into a
destination with one readinto, so a checkpoint loads with one copy of its weights in memory and
no mapping of the file (the `safetensors` package maps it, and every page read from the map
counts towards the process's resident memory until the file is closed). Little-endian hosts only,
as the format's data is.
"""

from __future__ import annotations

import json
import os
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}


@dataclass(frozen=True, slots=True)
class Entry:
    dtype: torch.dtype
    shape: tuple[int, ...]
    begin: int  # absolute offset in the file
    end: int


class SafetensorsFile:
    """One .safetensors file's header; tensors are read on demand."""

    def __init__(self, path: str | os.PathLike[str]):
        if sys.byteorder != "little":
            raise OSError("safetensors data is little-endian; this host is not")
        self.path = Path(path)
        with open(self.path, "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            total = self.path.stat().st_size
            if size > total - 8:
                raise ValueError(f"{self.path.name}: header length {size} exceeds the file")
            header = json.loads(f.read(size))
        start = 8 + size
        self.entries: dict[str, Entry] = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            if info["dtype"] not in DTYPES:
                raise ValueError(
                    f"{self.path.name}: tensor {name} has dtype {info['dtype']}, "
                    f"which the engine cannot load"
                )
            begin, end = info["data_offsets"]
            entry = Entry(DTYPES[info["dtype"]], tuple(info["shape"]), start + begin, start + end)
            numel = 1
            for d in entry.shape:
                numel *= d
            if end - begin != numel * entry.dtype.itemsize or start + end > total:
                raise ValueError(
                    f"{self.path.name}: tensor {name}'s byte range does not fit "
                    f"its shape or the file"
                )
            self.entries[name] = entry

    def keys(self) -> list[str]:
        return list(self.entries)

    def read_into(self, name: str, out: torch.Tensor) -> None:
        """Fill `out` (contiguous, on the CPU, of the tensor's element count) with tensor `name`,
        converting to out's dtype where it differs (through one temporary of the tensor)."""
        entry = self.entries[name]
        if out.dtype != entry.dtype:
            tmp = torch.empty(entry.shape, dtype=entry.dtype)
            self.read_into(name, tmp)
            out.copy_(tmp.reshape(out.shape))
            return
        if not out.is_contiguous() or out.device.type != "cpu":
            raise ValueError("read_into needs a contiguous CPU destination")
        view = out.reshape(-1).view(torch.uint8).numpy()
        if view.nbytes != entry.end - entry.begin:
            raise ValueError(
                f"{name} has {entry.end - entry.begin} bytes, the buffer {view.nbytes}"
            )
        with open(self.path, "rb", buffering=0) as f:
            f.seek(entry.begin)
            done = 0
            while done < view.nbytes:
                got = f.readinto(view[done:].data)
                if not got:
                    raise ValueError(f"{self.path.name} ends inside tensor {name}")
                done += got
