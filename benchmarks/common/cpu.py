"""How busy the machine was during a measured span: our CPU time against everyone else's.

The machine's busy CPU time comes from /proc/stat. Ours is, as the meter is asked: the process
trees it watches (read from /proc while they live: a stack's services and the decode workers
they start, a helper process), this process, and with `children=True` the children this process
has waited for (rusage: a phase run to completion as a subprocess). What is left over the same
wall time was other work, reported in cores; on a 2-core machine, 0.5 means a quarter of the
machine was not ours. A watched process that exits between the two readings loses its time
here, so stop the meter while they still run.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_TICK = os.sysconf("SC_CLK_TCK")
# Other work averaging more than this many cores during a measured span makes it noisy.
BUSY_CORES = 0.25


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


def _own_s(children: bool) -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    own = r.ru_utime + r.ru_stime
    if children:
        c = resource.getrusage(resource.RUSAGE_CHILDREN)
        own += c.ru_utime + c.ru_stime
    return own


@dataclass(slots=True, frozen=True)
class CpuShare:
    """Cores used on average over wall_s."""

    wall_s: float
    watched: float  # the watched process trees (a stack's services, a helper process)
    own: float  # this process (and, when asked, the children it waited for)
    other: float  # everything else on the machine

    @property
    def ours(self) -> float:
        return self.watched + self.own


class CpuMeter:
    """Start at the beginning of the span, `stop()` at its end."""

    def __init__(self, pids: Iterable[int] = (), *, children: bool = False) -> None:
        self._roots = set(pids)
        self._children = children
        self._start = (
            time.perf_counter(),
            machine_busy_s(),
            tree_cpu_s(self._roots) if self._roots else 0.0,
            _own_s(children),
        )

    def stop(self) -> CpuShare:
        wall0, busy0, watched0, own0 = self._start
        wall = time.perf_counter() - wall0
        watched = (tree_cpu_s(self._roots) if self._roots else 0.0) - watched0
        own = _own_s(self._children) - own0
        other = max(0.0, machine_busy_s() - busy0 - watched - own)
        return CpuShare(wall, watched / wall, own / wall, other / wall)


def busy_note(
    spans: Sequence[tuple[str, float, float]], cores: int | None, during: str, advice: str
) -> str | None:
    """A warning for a report when other work competed for the CPU: `spans` are (name, wall
    seconds, other work in cores), `during` says what they were ("the measured phases"),
    `advice` how to read the figures. None when no span's other work exceeded BUSY_CORES."""
    if not spans:
        return None
    worst = max(spans, key=lambda s: s[2])
    if worst[2] <= BUSY_CORES:
        return None
    wall = sum(s[1] for s in spans)
    mean = sum(s[2] * s[1] for s in spans) / wall if wall > 0 else worst[2]
    peak = f" (up to {worst[2]:.2f} during {worst[0]})" if len(spans) > 1 else ""
    return (
        f"**Busy machine:** other work used {mean:.2f} cores on average {during}{peak} of "
        f"the machine's {cores or os.cpu_count()}; {advice}"
    )
