"""How busy the machine was during one configuration: our CPU time against everyone else's.

Ours is this process plus, when given, a helper process it runs (the KV tier store, read from
/proc/<pid>/stat while it lives); the rest of the machine's busy time (/proc/stat) over the same
wall time was other work, in cores.
"""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass

from benchmarks.isolation.stack_cpu import machine_busy_s, tree_cpu_s


def _own_seconds(pid: int | None) -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime + (tree_cpu_s({pid}) if pid is not None else 0.0)


@dataclass(slots=True)
class Cores:
    wall_s: float
    own: float
    other: float


class CpuMeter:
    def __init__(self, helper_pid: int | None = None) -> None:
        self._pid = helper_pid
        self._wall = time.perf_counter()
        self._busy = machine_busy_s()
        self._own = _own_seconds(helper_pid)

    def stop(self) -> Cores:
        """Call while the helper process still runs."""
        wall = time.perf_counter() - self._wall
        own = _own_seconds(self._pid) - self._own
        busy = machine_busy_s() - self._busy
        return Cores(wall_s=wall, own=own / wall, other=max(0.0, busy - own) / wall)
