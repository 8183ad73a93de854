"""The host tier's memory: one file in /dev/shm, mapped by the KV tier store and by every worker.

The store creates (and owns) the segment; workers on the node map the same file and read or write
block bytes at offsets the store hands out, so a block moves between a worker's device pool and
host memory with one memcpy and never travels through gRPC. Where /dev/shm does not exist (or is
not shared with the worker, e.g. separate containers without a shared IPC namespace), workers
fall back to the byte path of the KVStore service.

A process's first write to a page of the segment faults it into its own mapping (on this
machine's VM about 2 us a page, 200 us for a 360 KiB block, seven times the copy itself).
`prefault` does that ahead of time for pages a worker is about to write (the host slots it
reserves, from its client's background thread), so the engine thread's eviction copies find
them mapped; on Linux it is one madvise(MADV_POPULATE_WRITE) call per contiguous run of pages,
made through ctypes so that other threads run meanwhile. Where that is not available (another
OS, a kernel before 5.14) it does nothing and the first copy faults as before.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
import sys
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_DIR = "/dev/shm"
MADV_POPULATE_WRITE = 23  # Linux 5.14+


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
        self._madvise = _populate_call()
        if self._madvise is not None:
            probe = ctypes.c_char.from_buffer(self._map)  # a buffer export: released at once
            self._base = ctypes.addressof(probe)
            del probe

    def write(self, offset: int, data: bytes | memoryview) -> None:
        self.view[offset : offset + len(data)] = data

    def read(self, offset: int, nbytes: int) -> memoryview:
        """A view into the segment (no copy): valid while the slot stays pinned."""
        return self.view[offset : offset + nbytes]

    def prefault(self, ranges: Iterable[tuple[int, int]]) -> int:
        """Map the pages under each (offset, nbytes) of `ranges` into this process, writable,
        without writing them (module docstring); returns the bytes asked for in the calls that
        succeeded (0 where prefaulting is unavailable: a failed call disables it)."""
        if self._madvise is None:
            return 0
        done = 0
        for start, end in _page_runs(ranges, mmap.PAGESIZE, self.size):
            if self._madvise(self._base + start, end - start, MADV_POPULATE_WRITE) != 0:
                log.info(
                    "prefaulting %s is unavailable (madvise errno %d): first copies fault",
                    self.path,
                    ctypes.get_errno(),
                )
                self._madvise = None
                return done
            done += end - start
        return done

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


def _populate_call():
    """libc's madvise as a ctypes function (the GIL released during the call), or None off
    Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def _page_runs(ranges: Iterable[tuple[int, int]], page: int, size: int) -> list[tuple[int, int]]:
    """The (start, end) byte runs, page-aligned and within [0, size), covering `ranges`
    ((offset, nbytes) each), sorted, with touching or overlapping runs merged."""
    runs: list[tuple[int, int]] = []
    for offset, nbytes in sorted(r for r in ranges if r[1] > 0):
        start = max(0, offset - offset % page)
        end = min(size, -(-(offset + nbytes) // page) * page)
        if start >= end:
            continue
        if runs and start <= runs[-1][1]:
            runs[-1] = (runs[-1][0], max(runs[-1][1], end))
        else:
            runs.append((start, end))
    return runs
