"""uvicorn inside the gateway's event loop (uvloop), beside the gRPC server.

The gateway owns SIGTERM (strata.rpc.server.serve_until_signal): the embedded server installs no
signal handlers of its own and stops when the gateway stops it, after the gRPC port.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Generator

import uvicorn
from starlette.applications import Starlette

START_TIMEOUT_S = 30.0


class _EmbeddedServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield  # the gateway's own handler stops it


class HttpServer:
    def __init__(
        self,
        app: Starlette,
        bind: str,
        certfile: str = "",
        keyfile: str = "",
        grace_s: float = 30.0,
    ) -> None:
        host, _, port = bind.rpartition(":")
        if not host or not port.isdecimal():
            raise ValueError(f"the HTTP bind address must be host:port, got {bind!r}")
        config = uvicorn.Config(
            app,
            host=host,
            port=int(port),
            lifespan="off",
            access_log=False,
            log_level="warning",
            ssl_certfile=certfile or None,
            ssl_keyfile=keyfile or None,
            timeout_graceful_shutdown=max(1, round(grace_s)),
        )
        self.server = _EmbeddedServer(config)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Serve; RuntimeError when the port cannot be bound."""
        self._task = asyncio.create_task(self.server.serve())
        deadline = asyncio.get_running_loop().time() + START_TIMEOUT_S
        while not self.server.started:
            if self._task.done() or asyncio.get_running_loop().time() > deadline:
                raise RuntimeError(
                    f"the HTTP server could not listen on {self.server.config.host}:"
                    f"{self.server.config.port}: is the port already in use?"
                )
            await asyncio.sleep(0.02)

    @property
    def port(self) -> int:
        """The bound port (the real one when bound to port 0)."""
        for server in self.server.servers:
            for sock in server.sockets:
                return int(sock.getsockname()[1])
        return int(self.server.config.port)

    async def stop(self) -> None:
        """Stop taking connections, give the streams in flight the grace, then return."""
        if self._task is None:
            return
        self.server.should_exit = True
        with contextlib.suppress(SystemExit):
            await self._task
        self._task = None
