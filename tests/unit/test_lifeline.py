"""Processes die with the process that started them: a child started with child_env and calling
die_with_parent gets its signal when the parent is killed with SIGKILL; a node manager's record
of its workers lets a successor reap one that survived anyway, and never an unrelated process
that reused the pid."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from strata.core.lifeline import PARENT_PID_ENV, child_env, die_with_parent
from strata.node.worker_pids import WorkerPids, start_ticks

CHILD = (
    "from strata.core.lifeline import die_with_parent; import time; "
    "assert die_with_parent(); print('armed', flush=True); time.sleep(600)"
)


def _wait_gone(pid: int, timeout_s: float = 240.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def test_a_child_dies_when_its_parent_is_killed(tmp_path):
    parent_code = textwrap.dedent(f"""
        import os, signal, subprocess, sys
        from strata.core.lifeline import child_env
        child = subprocess.Popen([sys.executable, "-c", {CHILD!r}],
                                 env=child_env(os.environ, signal.SIGKILL),
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "armed"
        print(child.pid, flush=True)
        import time; time.sleep(600)
    """)
    parent = subprocess.Popen(
        [sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True
    )
    try:
        child_pid = int(parent.stdout.readline())
        assert start_ticks(child_pid) is not None
        parent.kill()
        parent.wait()
        assert _wait_gone(child_pid)
    finally:
        parent.kill()


def test_a_child_whose_parent_is_already_gone_exits_at_once():
    env = {**os.environ, PARENT_PID_ENV: "1"}  # "started by" init: not our parent
    done = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1 and "parent process 1 is gone" in done.stderr


def test_without_a_recorded_parent_nothing_changes():
    assert die_with_parent({}) is False
    assert child_env({"A": "1"}, signal.SIGTERM)[PARENT_PID_ENV] == str(os.getpid())


def test_a_successor_reaps_orphaned_workers_and_spares_reused_pids_and_live_nodes(tmp_path):
    pids = WorkerPids(tmp_path / "node")
    leftover = subprocess.Popen(["sleep", "600"])
    unrelated = subprocess.Popen(["sleep", "600"])
    mine = subprocess.Popen(["sleep", "600"])
    try:
        for p, rid in ((leftover, "m-0"), (unrelated, "m-1"), (mine, "m-2")):
            pids.record(p.pid, rid)
        # m-0's node manager died (the record names another parent); m-1's worker died and the
        # pid now belongs to another process; m-2's node manager (this test) lives.
        for p, old, new in (
            (leftover, '"parent": ', '"parent": 1'),
            (unrelated, '"start_ticks": ', '"start_ticks": 1'),
        ):
            record = tmp_path / "node" / f"{p.pid}.json"
            record.write_text(record.read_text().replace(old, new))
        assert WorkerPids(tmp_path / "node").reap_leftovers() == [leftover.pid]
        assert leftover.wait(timeout=60) == -signal.SIGKILL
        assert unrelated.poll() is None and mine.poll() is None
        assert [r["pid"] for r in pids.recorded()] == [mine.pid]
    finally:
        for p in (leftover, unrelated, mine):
            p.kill()
            p.wait()
