"""How busy the machine was during one configuration: our CPU time against everyone else's.

Ours is this process plus its waited-for children (the KV tier store); the rest of the machine's
busy time (/proc/stat) over the same wall time was other work, in cores.
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


def _own_seconds() -> float:
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        total += r.ru_utime + r.ru_stime
    return total


@dataclass(slots=True)
class Cores:
    wall_s: float
    own: float
    other: float


class CpuMeter:
    def __init__(self) -> None:
        self._wall = time.perf_counter()
        self._busy = _busy_seconds()
        self._own = _own_seconds()

    def stop(self) -> Cores:
        wall = time.perf_counter() - self._wall
        own = _own_seconds() - self._own
        busy = _busy_seconds() - self._busy
        return Cores(wall_s=wall, own=own / wall, other=max(0.0, busy - own) / wall)
