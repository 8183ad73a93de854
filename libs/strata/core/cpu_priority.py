"""Background CPU priority for a process that shares cores with decode engines.

Linux's SCHED_IDLE class runs a thread only on a core no normal thread wants, so a helper
service (the KV tier store: commits, migrations, disk writes) takes no time slice from an
engine's torch threads while they compute, and runs in the gaps between steps. A synchronous
call into such a helper does not starve: the caller blocks, its core goes idle, and the helper
runs there.

Threads inherit their creator's class, but threads created before the call (a gRPC runtime's
pollers, say) do not change: `to_background` moves every thread the process has at that moment,
so call it again after starting the threads that matter.
"""

from __future__ import annotations

import enum
import os


class CpuClass(enum.StrEnum):
    NORMAL = "normal"
    IDLE = "idle"  # SCHED_IDLE: CPU time nothing else wants


CLASSES = tuple(c.value for c in CpuClass)


def to_background() -> int:
    """Put every current thread of this process in SCHED_IDLE; returns how many moved."""
    moved = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setscheduler(int(tid), os.SCHED_IDLE, os.sched_param(0))
        except ProcessLookupError:
            continue  # the thread ended between the listing and the call
        moved += 1
    return moved


def scheduling_class(tid: int = 0) -> str:
    return "idle" if os.sched_getscheduler(tid) == os.SCHED_IDLE else "normal"
