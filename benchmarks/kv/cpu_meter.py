"""How busy the machine was during one configuration: our CPU time against everyone else's.

Ours is this process plus, when given, a helper process it runs (the KV tier store, read from
/proc/<pid>/stat while it lives); the rest of the machine's busy time (/proc/stat) over the same
wall time was other work, in cores.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass


def _busy_seconds() -> float:
    with open("/proc/stat", encoding="utf-8") as f:
        fields = f.readline().split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _own_seconds(pid: int | None) -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime + (_process_seconds(pid) if pid is not None else 0.0)


def _process_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # After the command name: state is field 3, utime and stime fields 14 and 15 (man 5 proc).
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(slots=True)
class Cores:
    wall_s: float
    own: float
    other: float


class CpuMeter:
    def __init__(self, helper_pid: int | None = None) -> None:
        self._pid = helper_pid
        self._wall = time.perf_counter()
        self._busy = _busy_seconds()
        self._own = _own_seconds(helper_pid)

    def stop(self) -> Cores:
        """Call while the helper process still runs."""
        wall = time.perf_counter() - self._wall
        own = _own_seconds(self._pid) - self._own
        busy = _busy_seconds() - self._busy
        return Cores(wall_s=wall, own=own / wall, other=max(0.0, busy - own) / wall)
