"""Free loopback ports for the processes a benchmark (or a test) starts.

Ports come from below Linux's ephemeral range (32768-60999 by default): a stack's ports are
chosen before its processes start, and a port the kernel handed out as ephemeral could meanwhile
go to a worker that a node manager started on port 0 (seen as "Address already in use" at a
node's start). No port is handed out twice by one process.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Iterable

PORTS = range(20000, 32000)
_rng = random.Random()
_given: set[int] = set()  # handed out by this process: never twice


def is_free(port: int) -> bool:
    """Nothing listens on (or holds) 127.0.0.1:port now."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(tries: int = 200) -> int:
    """One free loopback port."""
    for _ in range(tries):
        port = _rng.choice(PORTS)
        if port not in _given and is_free(port):
            _given.add(port)
            return port
    raise RuntimeError(f"no free port in {PORTS.start}-{PORTS.stop - 1} after {tries} tries")


def free_port_base(offsets: Iterable[int], tries: int = 200) -> int:
    """A base port, a multiple of 10, at which base + every offset is free."""
    offsets = tuple(offsets)
    for _ in range(tries):
        base = _rng.randrange(PORTS.start + 1000, PORTS.stop - 1000, 10)
        ports = [base + o for o in offsets]
        if not _given.intersection(ports) and all(is_free(p) for p in ports):
            _given.update(ports)
            return base
    raise RuntimeError(f"no free block of ports at offsets {offsets}")
