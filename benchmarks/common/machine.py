"""What the numbers were measured on: the machine's facts, and the one line every report prints
about them (`host_line`)."""

from __future__ import annotations

import os
import platform
from importlib import metadata

# The vector extensions that decide bf16 speed on x86 (AVX-512 BF16, AMX).
FLAGS_OF_INTEREST = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def _cpuinfo(field: str) -> str | None:
    """The first value of `field` in /proc/cpuinfo; None where there is none."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith(field):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_model() -> str:
    return _cpuinfo("model name") or platform.processor() or "unknown CPU"


def cpu_flags() -> set[str]:
    """Every feature flag /proc/cpuinfo lists (empty where it lists none)."""
    return set((_cpuinfo("flags") or "").split())


def cpu_flags_of_interest() -> list[str]:
    have = cpu_flags()
    return [w for w in FLAGS_OF_INTEREST if w in have]


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def machine_facts() -> dict:
    """The machine and the software the benchmark ran on (torch's version from its package
    metadata: reading it does not import torch)."""
    return {
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "cpu_flags": cpu_flags_of_interest(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "python": platform.python_version(),
        "torch": _version("torch"),
        "kernel": platform.release(),
    }


def host_line(facts: dict | None = None) -> str:
    """`<CPU>, <n> cores (<flags>), <memory> GiB; Python <v>, torch <v>, Linux <v>`, without a
    final stop, from `facts` (a stored machine_facts(); this machine's when None)."""
    m = machine_facts() if facts is None else facts
    software = [f"Python {m.get('python')}"]
    if m.get("torch"):
        software.append(f"torch {m['torch']}")
    software.append(f"Linux {m.get('kernel')}")
    return (
        f"{m.get('cpu_model')}, {m.get('cores')} cores "
        f"({', '.join(m.get('cpu_flags') or []) or 'no AVX-512'}), {m.get('memory_gib')} GiB; "
        + ", ".join(software)
    )
