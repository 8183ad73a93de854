"""Readiness that tells the truth: a service's gRPC health for its own services follows what it
needs to do its work (a check it supplies), while the empty service name stays SERVING as long
as the process serves (liveness). Kubernetes probes the service names for readiness and the empty
name for liveness; compose's healthchecks and the supervisor probe the empty name.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from grpc_health.v1 import health_pb2

from strata.rpc.server import RunningServer

log = logging.getLogger(__name__)
INTERVAL_S = 1.0

Readiness = Callable[[], Awaitable[str | None]]  # None: ready; else why not


async def keep_ready(
    running: RunningServer,
    readiness: Readiness,
    stop: asyncio.Event,
    interval_s: float = INTERVAL_S,
    what: str = "",
) -> None:
    """Until `stop`: every `interval_s`, set the health of `running`'s services to SERVING when
    `readiness` says ready, else NOT_SERVING, logging each change with its reason."""
    serving: bool | None = None
    while not stop.is_set():
        why = await readiness()
        if (why is None) != serving:
            serving = why is None
            status = (
                health_pb2.HealthCheckResponse.SERVING
                if serving
                else health_pb2.HealthCheckResponse.NOT_SERVING
            )
            for name in running.services:
                await running.health.set(name, status)
            if serving:
                log.info("ready%s", f": {what}" if what else "")
            else:
                log.info("not ready: %s", why)
        try:
            await asyncio.wait_for(stop.wait(), interval_s)
        except TimeoutError:
            pass
