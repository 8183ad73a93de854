"""Where the machine's CPU went during a stack run: the stack's processes, this one, the rest.

The stack's CPU time is that of its services' processes and all their descendants (the decode
workers a node manager starts), read from /proc; the machine's busy time comes from /proc/stat.
What neither the stack nor this process used was other work, which makes latencies on a shared
2-core machine noisy. A process that exits between the two readings loses its time here, so
measure while the stack runs.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterable
from dataclasses import dataclass

_TICK = os.sysconf("SC_CLK_TCK")


def machine_busy_s() -> float:
    with open("/proc/stat", encoding="utf-8") as f:
        fields = f.readline().split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / _TICK


def tree_cpu_s(roots: set[int]) -> float:
    """CPU seconds of the live processes in `roots` and of all their live descendants."""
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdecimal():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                text = f.read()
        except OSError:  # gone since the listing
            continue
        # the fields after the command, which may hold spaces, in parentheses
        rest = text[text.rindex(")") + 2 :].split()
        pid = int(entry)
        parent[pid] = int(rest[1])
        cpu[pid] = (int(rest[11]) + int(rest[12])) / _TICK

    def in_tree(pid: int) -> bool:
        while pid > 1:
            if pid in roots:
                return True
            pid = parent.get(pid, 0)
        return False

    return sum(seconds for pid, seconds in cpu.items() if in_tree(pid))


def _self_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


@dataclass(slots=True, frozen=True)
class CpuShare:
    """Cores used on average over wall_s."""

    wall_s: float
    stack: float
    client: float
    other: float


class CpuMeter:
    def __init__(self, pids: Iterable[int]) -> None:
        self._roots = set(pids)
        self._start = (time.perf_counter(), machine_busy_s(), tree_cpu_s(self._roots), _self_s())

    def stop(self) -> CpuShare:
        wall0, busy0, stack0, self0 = self._start
        wall = time.perf_counter() - wall0
        stack = tree_cpu_s(self._roots) - stack0
        own = _self_s() - self0
        other = max(0.0, machine_busy_s() - busy0 - stack - own)
        return CpuShare(wall, stack / wall, own / wall, other / wall)
