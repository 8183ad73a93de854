"""What a process holds, read from /proc: resident memory, open files, threads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class ProcFigures:
    pid: int
    name: str            # the module a Strata process runs (services.gateway, ...)
    rss_kb: int
    open_files: int
    threads: int


def name_of(pid: int) -> str:
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    if b"-m" in args:
        return args[args.index(b"-m") + 1].decode()
    return args[0].decode().rsplit("/", 1)[-1]


def figures(pid: int) -> ProcFigures | None:
    """The process's figures now; None when it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        files = len(list(Path(f"/proc/{pid}/fd").iterdir()))
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return ProcFigures(pid, name_of(pid), int(fields.get("VmRSS", "0 kB").split()[0]), files,
                       int(fields.get("Threads", "0").strip()))
