"""The host tier's memory: one file in /dev/shm, mapped by the KV tier store and by every worker.

The store creates (and owns) the segment; workers on the node map the same file and read or write
block bytes at offsets the store hands out, so a block moves between a worker's device pool and
host memory with one memcpy and never travels through gRPC. Where /dev/shm does not exist (or is
not shared with the worker, e.g. separate containers without a shared IPC namespace), workers
fall back to the byte path of the KVStore service.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

DEFAULT_DIR = "/dev/shm"


class ShmSegment:
    def __init__(self, path: str | os.PathLike[str], size: int, create: bool):
        self.path = Path(path)
        self.size = size
        if create:
            # A segment left by a killed store holds nothing the directory knows: start empty.
            self.path.unlink(missing_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.ftruncate(fd, size)
                self._map = mmap.mmap(fd, size)
            finally:
                os.close(fd)
        else:
            fd = os.open(self.path, os.O_RDWR)
            try:
                actual = os.fstat(fd).st_size
                if actual != size:
                    raise ValueError(
                        f"shared memory segment {self.path} is {actual} bytes, "
                        f"the store said {size}"
                    )
                self._map = mmap.mmap(fd, size)
            finally:
                os.close(fd)
        self._owner = create
        self.view = memoryview(self._map)

    def write(self, offset: int, data: bytes | memoryview) -> None:
        self.view[offset : offset + len(data)] = data

    def read(self, offset: int, nbytes: int) -> memoryview:
        """A view into the segment (no copy): valid while the slot stays pinned."""
        return self.view[offset : offset + nbytes]

    def close(self) -> None:
        self.view.release()
        self._map.close()
        if self._owner:
            self.path.unlink(missing_ok=True)


def segment_path(directory: str, node_id: str, port: int) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in node_id) or "node"
    return Path(directory) / f"strata-kv-{safe}-{port}"


def usable_dir(directory: str) -> bool:
    return os.path.isdir(directory) and os.access(directory, os.W_OK)
