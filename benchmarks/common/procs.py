"""Processes read from /proc: what one holds (resident memory, open files, threads), its
children, and which decode worker serves an address."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class ProcFigures:
    pid: int
    name: str  # the module a Strata process runs (services.gateway, ...)
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
    return ProcFigures(
        pid,
        name_of(pid),
        int(fields.get("VmRSS", "0 kB").split()[0]),
        files,
        int(fields.get("Threads", "0").strip()),
    )


def children(pid: int) -> list[int]:
    """The live (not zombie) children of `pid`."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited while we looked
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


def worker_pid(node_pid: int, address: str) -> int:
    """The decode worker of node manager `node_pid` that listens on `address`: the one whose
    serialized configuration (STRATA_WORKER_CONFIG) names it."""
    for pid in children(node_pid):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for entry in environ:
            key, _, value = entry.partition(b"=")
            if key == b"STRATA_WORKER_CONFIG" and json.loads(value).get("worker_bind") == address:
                return pid
    raise AssertionError(f"no worker process of node {node_pid} serves {address}")
