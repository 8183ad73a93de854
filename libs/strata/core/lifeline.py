"""A child process that dies with the process that started it.

A parent that starts a Strata process puts its own pid in the child's environment
(`child_env`); the child calls `die_with_parent` first thing. Linux then sends the child
`signal` when the parent exits for any reason, `kill -9` included (prctl PR_SET_PDEATHSIG), and
a parent that died before the child asked is caught by comparing getppid() with the recorded
pid: the child exits at once instead of living on under init.

The supervisor of `make run` gives its services SIGTERM (they stop gracefully: a node manager
stops its workers, a KV tier store removes its shared memory); a node manager gives its decode
workers SIGKILL (with their node manager gone, no caller can reach what they serve). Without the
variable (compose, Kubernetes, a process started by hand) nothing changes: there the container
runtime owns the process tree.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Mapping

PARENT_PID_ENV = "STRATA_PARENT_PID"
DEATH_SIGNAL_ENV = "STRATA_PARENT_DEATH_SIGNAL"
_PR_SET_PDEATHSIG = 1


def child_env(
    env: Mapping[str, str], death_signal: signal.Signals = signal.SIGTERM
) -> dict[str, str]:
    """`env` plus what makes the child started with it die with this process."""
    return {**env, PARENT_PID_ENV: str(os.getpid()), DEATH_SIGNAL_ENV: death_signal.name}


def die_with_parent(environ: Mapping[str, str] = os.environ) -> bool:
    """Arrange to receive the recorded signal when the recorded parent dies; exit now if it is
    already gone. False when no parent was recorded (nothing to do) or the platform has no
    prctl."""
    raw = environ.get(PARENT_PID_ENV, "")
    if not raw.isdecimal() or not sys.platform.startswith("linux"):
        return False
    sig = signal.Signals[environ.get(DEATH_SIGNAL_ENV) or "SIGTERM"]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != int(raw):
        # The parent died between starting us and the prctl: nobody would stop us later.
        print(f"parent process {raw} is gone; exiting", file=sys.stderr, flush=True)
        os._exit(1)
    return True
