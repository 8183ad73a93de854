"""OTLP/gRPC TraceService receiver: spans in over gRPC, into SQL in batches, loss counted.

        gRPC threads (sync server)          |  event loop
  Export -> decode -> reserve room ---------+--call_soon_threadsafe--> bounded asyncio.Queue
          (no room: count dropped, reply    |                              |
           partial_success.rejected_spans)  |                writer task: batches -> sink (SQL)

The receiver runs a synchronous grpc.server on its own threads, never on the event loop: an
exporter's force_flush() blocks its calling thread until Export returns, so a receiver served by
that same (blocked) loop would never answer. For the same reason Export never waits for the
loop: it decides how many spans fit by reserving room in a counter guarded by a thread lock,
which mirrors the queue's bound (a reservation is released when the writer takes the span off
the queue), so the put_nowait that runs later on the loop always finds room.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from concurrent import futures
from dataclasses import dataclass

import grpc
from opentelemetry.proto.collector.trace.v1 import (
    trace_service_pb2,
    trace_service_pb2_grpc,
)
from sqlalchemy.exc import SQLAlchemyError

from strata.rpc.internal_auth import SyncInternalAuthInterceptor
from strata.rpc.server import SERVER_OPTIONS
from strata.security.identity import ClusterIdentity
from strata.telemetry.otlp import count_spans, decode_export_request
from strata.telemetry.span_record import SpanRecord

log = logging.getLogger(__name__)

SpanSink = Callable[[list[SpanRecord]], Awaitable[object]]


@dataclass(slots=True, frozen=True)
class ReceiverStats:
    """received: spans that arrived; dropped: spans lost (queue full, malformed, or a failed
    write). received - dropped spans are stored or on their way."""

    received: int
    dropped: int


class OtlpReceiver:
    """TraceService on its own threads feeding a writer task on the loop that calls start()."""

    def __init__(
        self, sink: SpanSink, capacity: int = 65_536, batch_size: int = 512, threads: int = 4
    ) -> None:
        if capacity < 1 or batch_size < 1:
            raise ValueError(
                f"capacity and batch_size must be positive, got {capacity}, {batch_size}"
            )
        self._sink = sink
        self._capacity = capacity
        self._batch_size = batch_size
        self._threads = threads
        self._lock = threading.Lock()
        self._reserved = 0  # spans accepted by Export and not yet taken by the writer
        self._received = 0
        self._dropped = 0
        self._accepted = 0  # spans handed to the loop, ever
        self._settled = 0  # of those, written or given up on (loop side only)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[SpanRecord] | None = None
        self._settled_changed: asyncio.Condition | None = None
        self._writer: asyncio.Task[None] | None = None
        self._server: grpc.Server | None = None
        self.port = 0

    @property
    def stats(self) -> ReceiverStats:
        with self._lock:
            return ReceiverStats(received=self._received, dropped=self._dropped)

    async def start(
        self, bind: str = "127.0.0.1:0", identity: ClusterIdentity | None = None
    ) -> int:
        """Serve on bind and start the writer; returns the bound port. With `identity`, only
        the cluster's own exporters are heard (internal token, and mutual TLS when on): spans
        become report rows, so nobody else may write them."""
        auth = [SyncInternalAuthInterceptor(identity)] if identity is not None else []
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self._threads, thread_name_prefix="otlp"),
            options=SERVER_OPTIONS,
            interceptors=auth,
        )
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TraceService(self), server)
        creds = identity.server_credentials() if identity is not None else None
        port = (
            server.add_secure_port(bind, creds)
            if creds is not None
            else server.add_insecure_port(bind)
        )
        if port == 0:
            raise RuntimeError(f"could not bind the OTLP receiver to {bind}: is the port in use?")
        self._loop = asyncio.get_running_loop()
        self._queue = asyncio.Queue(maxsize=self._capacity)
        self._settled_changed = asyncio.Condition()
        self._writer = asyncio.create_task(self._write_forever(), name="otlp-span-writer")
        self._writer.add_done_callback(_report_writer_exit)
        server.start()
        self._server, self.port = server, port
        return port

    async def stop(self, grace: float = 2.0) -> None:
        """Stop accepting, write what was accepted, stop the writer."""
        if self._server is not None:
            stopped = self._server.stop(grace)
            await asyncio.to_thread(stopped.wait)
            self._server = None
        await self.flush(timeout=grace + 5.0)
        if self._writer is not None:
            self._writer.cancel()
            await asyncio.gather(self._writer, return_exceptions=True)
            self._writer = None

    async def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every span accepted so far is written (or counted dropped).

        False if that took longer than timeout (the database is slow or down)."""
        assert self._settled_changed is not None, "start() the receiver first"
        with self._lock:
            target = self._accepted
        # Spans handed over just now are still in call_soon_threadsafe callbacks; _settled
        # catches up with them once they are queued and written.
        try:
            async with asyncio.timeout(timeout):
                async with self._settled_changed:
                    await self._settled_changed.wait_for(lambda: self._settled >= target)
        except TimeoutError:
            return False
        return True

    def offer(self, spans: list[SpanRecord], arrived: int) -> int:
        """Called on a gRPC thread: take what fits of spans; returns how many were rejected.

        arrived counts the spans in the export, including malformed ones not in spans."""
        with self._lock:
            room = self._capacity - self._reserved
            accepted = spans[: max(room, 0)]
            rejected = arrived - len(accepted)
            self._received += arrived
            self._dropped += rejected
            self._reserved += len(accepted)
            self._accepted += len(accepted)
        if accepted:
            assert self._loop is not None
            try:
                self._loop.call_soon_threadsafe(self._enqueue, accepted)
            except RuntimeError:
                with self._lock:  # the loop is closed: these spans will never be written
                    self._reserved -= len(accepted)
                    self._accepted -= len(accepted)
                    self._dropped += len(accepted)
                raise
        return rejected

    def _enqueue(self, spans: list[SpanRecord]) -> None:
        assert self._queue is not None
        for span in spans:
            self._queue.put_nowait(span)  # never full: offer() reserved the room

    async def _write_forever(self) -> None:
        assert self._queue is not None
        while True:
            batch = [await self._queue.get()]
            while len(batch) < self._batch_size and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            with self._lock:
                self._reserved -= len(batch)
            try:
                await self._sink(batch)
            except SQLAlchemyError:
                log.exception("could not store %d spans; counted as dropped", len(batch))
                with self._lock:
                    self._dropped += len(batch)
            await self._settle(len(batch))

    async def _settle(self, n: int) -> None:
        assert self._settled_changed is not None
        async with self._settled_changed:
            self._settled += n
            self._settled_changed.notify_all()


def _report_writer_exit(task: asyncio.Task[None]) -> None:
    # The writer only ends by cancellation; anything else is a bug that would silently stop
    # storing spans, so it is logged where an operator sees it, not left to the GC.
    if not task.cancelled() and task.exception() is not None:
        log.error(
            "the OTLP span writer stopped; spans are no longer stored", exc_info=task.exception()
        )


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, receiver: OtlpReceiver) -> None:
        self._receiver = receiver

    def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: grpc.ServicerContext
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        spans = decode_export_request(request)
        arrived = count_spans(request)
        malformed = arrived - len(spans)
        try:
            rejected = self._receiver.offer(spans, arrived)
        except RuntimeError:
            # call_soon_threadsafe on a closed loop: the collector is shutting down.
            context.abort(
                grpc.StatusCode.UNAVAILABLE,
                "the metrics collector is shutting down; retry against its successor",
            )
        response = trace_service_pb2.ExportTraceServiceResponse()
        if rejected:
            reasons = []
            if malformed:
                reasons.append(f"{malformed} had trace/span ids of the wrong length or all zero")
            if rejected > malformed:
                reasons.append(f"{rejected - malformed} did not fit the receiver's full queue")
            response.partial_success.rejected_spans = rejected
            response.partial_success.error_message = (
                f"{rejected} of {arrived} spans rejected: " + "; ".join(reasons)
            )
        return response
