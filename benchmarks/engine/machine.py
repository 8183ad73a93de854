"""What the numbers were measured on, and how busy the machine was meanwhile.

A phase's CPU contention is measured, not guessed: the machine's busy CPU time (/proc/stat)
during the phase minus the CPU time of the phase's own process tree (rusage of waited-for
children). What is left was other work, reported in cores; on a 2-core machine, 0.5 means a
quarter of the machine was not ours.
"""

from __future__ import annotations

import os
import platform
import resource
import time
from dataclasses import dataclass


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_flags_of_interest() -> list[str]:
    """The vector extensions that decide bf16 speed on x86 (AVX-512 BF16, AMX)."""
    wanted = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    return [w for w in wanted if w in have]
    except OSError:
        pass
    return []


def machine_facts() -> dict:
    import torch

    return {
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "cpu_flags": cpu_flags_of_interest(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "kernel": platform.release(),
    }


def _busy_seconds() -> float:
    with open("/proc/stat", encoding="utf-8") as f:
        fields = f.readline().split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _children_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


@dataclass(slots=True)
class PhaseCpu:
    wall_s: float
    own_cores: float  # average cores used by the phase's processes
    other_cores: float  # average cores used by everything else on the machine


class CpuMeter:
    """Start before launching a phase's subprocess; stop after it has been waited for."""

    def __init__(self) -> None:
        self._wall = time.perf_counter()
        self._busy = _busy_seconds()
        self._own = _children_seconds()

    def stop(self) -> PhaseCpu:
        wall = time.perf_counter() - self._wall
        busy = _busy_seconds() - self._busy
        own = _children_seconds() - self._own
        return PhaseCpu(wall_s=wall, own_cores=own / wall, other_cores=max(0.0, busy - own) / wall)
