"""Runs the synchronous engine on its own thread and streams outputs to asyncio callers.

Torch releases the GIL inside kernels, so the gRPC event loop keeps answering while a step runs.
Adds and aborts are queued and applied between steps; an abort (a cancelled stream) frees the
request's blocks before the next step.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator

from strata.engine.engine import EngineRequest, LLMEngine, RequestOutput

log = logging.getLogger(__name__)


class EngineFailed(RuntimeError):
    """The engine thread hit an error outside any one request's work (the scheduler itself);
    every request in flight receives it."""


class RequestFailed(RuntimeError):
    """The engine could not compute this request; it alone was stopped (the others go on)."""


class AsyncEngine:
    def __init__(self, engine: LLMEngine):
        self.engine = engine
        self._cond = threading.Condition()
        self._adds: list[tuple[EngineRequest, asyncio.Queue, asyncio.AbstractEventLoop]] = []
        self._aborts: list[str] = []
        self._streams: dict[str, tuple[asyncio.Queue, asyncio.AbstractEventLoop]] = {}
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="engine", daemon=True)
        self._thread.start()

    async def generate(self, req: EngineRequest) -> AsyncIterator[RequestOutput]:
        """Stream outputs; raises ValueError for a bad request before anything is queued."""
        self.engine.validate(req)
        q: asyncio.Queue = asyncio.Queue()
        with self._cond:
            self._adds.append((req, q, asyncio.get_running_loop()))
            self._cond.notify()
        finished = False
        try:
            while True:
                item = await q.get()
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                yield item
                if item.finished:
                    finished = True
                    return
        finally:
            if not finished:
                self.abort(req.request_id)

    def abort(self, request_id: str) -> None:
        with self._cond:
            self._aborts.append(request_id)
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout=10)

    def snapshot(self) -> dict:
        """Counters read from another thread; each value is read atomically."""
        e = self.engine
        by_class = e.queued_by_class()  # one pass over the queues; its values sum to the total
        return {
            "running": e.num_running,
            "waiting": e.num_waiting + len(self._adds),
            "blocks_total": e.pool.num_blocks,
            "blocks_free": e.pool.num_free,
            "blocks_cached": e.pool.num_cached,
            "queued_tokens": sum(by_class.values()),
            "queued_by_class": by_class,
        }

    # -- engine thread -------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cond:
                if not (self._stopping or self._adds or self._aborts or self.engine.has_work()):
                    self.engine.idle()
                while not (self._stopping or self._adds or self._aborts or self.engine.has_work()):
                    self._cond.wait()
                if self._stopping:
                    return
                adds, self._adds = self._adds, []
                aborts, self._aborts = self._aborts, []
            for req, q, loop in adds:
                try:
                    self.engine.add_request(req)
                    self._streams[req.request_id] = (q, loop)
                except ValueError as err:
                    loop.call_soon_threadsafe(q.put_nowait, err)
            for rid in aborts:
                if self.engine.abort(rid):
                    self._streams.pop(rid, None)
            try:
                outputs = self.engine.step()
            except Exception as err:  # noqa: BLE001 - fail every request loudly, keep serving
                log.exception("engine step failed; failing %d requests", len(self._streams))
                self._fail_all(EngineFailed(f"engine step failed: {err}"))
                continue
            for out in outputs:
                target = self._streams.get(out.request_id)
                if target is None:
                    continue
                q, loop = target
                if out.finished:
                    del self._streams[out.request_id]
                item = out if out.error is None else RequestFailed(out.error)
                loop.call_soon_threadsafe(q.put_nowait, item)

    def _fail_all(self, err: BaseException) -> None:
        for rid, (q, loop) in list(self._streams.items()):
            self.engine.abort(rid)
            loop.call_soon_threadsafe(q.put_nowait, err)
        self._streams.clear()
