"""How an engine process's C allocator treats a step's temporaries.

glibc's malloc serves a block above its mmap threshold (128 KiB at start, raised as such blocks
are freed, up to 32 MiB) with a fresh mapping, and returns freed memory at the top of its heap to
the kernel once more than its trim threshold is free there. A prefill step allocates and frees
megabyte tensors by the hundred (a tile's scores, the MLP's activations, each layer's output), so
under those defaults each one is new memory, first touched a 4 KiB page fault at a time: tens of
thousands of faults a step (docs/design/engine.md). `keep_freed_buffers` sets both thresholds
once for the process, so those blocks come from the heap and freed ones stay there for the next
step, as tcmalloc or jemalloc would keep them; what the process holds then follows its largest
step, up to TRIM_THRESHOLD_BYTES more than it uses at the moment.

An operator's own MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_ (glibc's environment
settings) wins: with either set, nothing is changed. Elsewhere than glibc nothing is changed.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform

log = logging.getLogger(__name__)

# mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# the largest mmap threshold glibc accepts on a 64-bit system (DEFAULT_MMAP_THRESHOLD_MAX)
MMAP_THRESHOLD_BYTES = 32 << 20
TRIM_THRESHOLD_BYTES = 512 << 20
OPERATOR_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")

_state: dict[str, bool] = {}


def keep_freed_buffers() -> bool:
    """Set glibc's mmap and trim thresholds for this process (once; later calls return the
    first answer). True where they are set now; False where libc is not glibc, the operator set
    either threshold, or mallopt refused (logged)."""
    if "applied" not in _state:
        _state["applied"] = _apply()
    return _state["applied"]


def _apply() -> bool:
    if platform.libc_ver()[0] != "glibc":
        return False
    if any(name in os.environ for name in OPERATOR_SETTINGS):
        log.info("malloc thresholds left as the environment sets them")
        return False
    libc = ctypes.CDLL(None)
    for param, value in (
        (M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES),
        (M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES),
    ):
        if libc.mallopt(ctypes.c_int(param), ctypes.c_int(value)) != 1:
            log.warning("mallopt(%d, %d) refused; step buffers may page-fault", param, value)
            return False
    return True
