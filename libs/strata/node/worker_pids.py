"""The node manager's record of its decode worker processes, kept on disk so that a node manager
started after its predecessor died can find what that one left behind.

Workers die with their node manager (strata.core.lifeline), so normally nothing is left. The
record is the net under that: one file per live worker, `<pid>.json` with the process's start
time in clock ticks (field 22 of /proc/<pid>/stat), which tells a leftover worker from an
unrelated process that got the pid later, and the pid of the node manager that started it.
`reap_leftovers` kills every recorded process that is still the same process and no longer the
child of the node manager that started it (an orphan: a live node manager's worker is never
touched, even if two node managers were given the same folder), and removes the records.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from pathlib import Path

log = logging.getLogger(__name__)


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None if there is no such pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    return int(stat.rsplit(")", 1)[1].split()[19])


class WorkerPids:
    def __init__(self, directory: str | os.PathLike[str]):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)

    def record(self, pid: int, replica_id: str) -> None:
        ticks = start_ticks(pid)
        if ticks is None:
            return  # already gone
        path = self.dir / f"{pid}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(
            json.dumps(
                {"pid": pid, "start_ticks": ticks, "replica_id": replica_id, "parent": os.getpid()}
            )
        )
        tmp.replace(path)

    def forget(self, pid: int) -> None:
        (self.dir / f"{pid}.json").unlink(missing_ok=True)

    def recorded(self) -> list[dict]:
        out = []
        for path in sorted(self.dir.glob("*.json")):
            try:
                out.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                path.unlink(missing_ok=True)  # half-written by a process that died
        return out

    def reap_leftovers(self, timeout_s: float = 10.0) -> list[int]:
        """SIGKILL every recorded worker that still runs as an orphan, wait until each is gone,
        clear their records; returns the pids killed."""
        killed = []
        for entry in self.recorded():
            pid = int(entry["pid"])
            if start_ticks(pid) != entry["start_ticks"]:
                self.forget(pid)  # gone, or the pid belongs to another process
                continue
            if parent_of(pid) == entry.get("parent"):
                continue  # its node manager lives: not a leftover
            log.warning(
                "killing worker %s (pid %d) left by a previous node manager",
                entry.get("replica_id", "?"),
                pid,
            )
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
            self.forget(pid)
        deadline = time.monotonic() + timeout_s
        for pid in killed:
            while _exists_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
        return killed


def parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return None


def _exists_alive(pid: int) -> bool:
    """Whether pid runs (a zombie, killed and waiting for its reaper, counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
