"""The server half of multiplexed calls (strata.v1.Multiplex, proto/strata/v1/mux.proto): many
calls of one caller over one long-lived stream, each run exactly as a direct call would run.

- A muxed call resolves its handler through the server's own interceptors, in the server's
  order, with the call's own metadata: the cluster token is checked per call (the stream's is
  checked as well, when it opens), the caller's span context is attached per call, and the guard
  turns malformed bodies and servicer exceptions into statuses as it does for direct calls.
- Each call runs in a task of its own; its response messages and its status go out in the order
  it produced them. A caller's cancel frame, or the call's deadline, cancels the task (a
  servicer sees the same CancelledError as on a direct call); a deadline closes the call with
  DEADLINE_EXCEEDED.
- When the stream ends (the caller half-closed, went away, or the connection broke) every call
  still running on it is cancelled: nothing runs on for a caller that can no longer hear it.
- When the server stops (`drain`, before its grace period), each stream takes no new call
  (UNAVAILABLE, not started: retry elsewhere), lets the calls running on it finish, then ends:
  a stream held open by its caller never keeps a stopping server for the whole grace period.
- Frames ready at once leave as one MuxBatch message (strata.rpc.mux_wire cuts them at 4 MiB).

Request-streaming methods are not carried (none of the muxed hops has one): such a call closes
with UNIMPLEMENTED.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from strata.rpc.mux_wire import DEADLINE_DETAILS, batches, metadata_pb
from strata.v1 import mux_pb2, mux_pb2_grpc

log = logging.getLogger(__name__)

SERVICE_NAME = mux_pb2.DESCRIPTOR.services_by_name["Multiplex"].full_name


@dataclass(frozen=True, slots=True)
class _Details:
    """What an interceptor sees of a call (grpc.HandlerCallDetails' two fields)."""

    method: str
    invocation_metadata: tuple[tuple[str, str], ...]


class HandlerTable:
    """The generic handlers a server was given, recorded as its registrations add them
    (`recorder`), so that a muxed call finds the handler a direct call to the same method
    would."""

    def __init__(self) -> None:
        self._generic: list[grpc.GenericRpcHandler] = []

    def recorder(self, server: grpc.aio.Server) -> Any:
        """A stand-in for `server` to pass to the generated add_*_to_server functions: it
        adds to `server` and records."""
        return _Recorder(server, self._generic)

    def lookup(self, details: _Details) -> grpc.RpcMethodHandler | None:
        for generic in self._generic:
            handler = generic.service(details)  # type: ignore[arg-type]
            if handler is not None:
                return handler
        return None


class _Recorder:
    def __init__(self, server: grpc.aio.Server, generic: list[grpc.GenericRpcHandler]):
        self._server = server
        self._generic = generic

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self._server.add_generic_rpc_handlers(handlers)
        self._generic.extend(handlers)

    def add_registered_method_handlers(self, service: str, handlers: dict) -> None:
        # The generated code adds the same handlers as a generic handler as well.
        self._server.add_registered_method_handlers(service, handlers)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._server, name)


class MuxContext:
    """The part of grpc.aio.ServicerContext that Strata's servicers and interceptors use, for
    one muxed call."""

    def __init__(
        self, metadata: tuple[tuple[str, str], ...], deadline: float | None, peer: str
    ) -> None:
        self._metadata = metadata
        self._deadline = deadline
        self._peer = peer
        self.status_code = grpc.StatusCode.OK
        self.status_details = ""
        self.trailing: tuple[tuple[str, str], ...] = ()
        self.is_cancelled = False
        self.expired = False  # its deadline passed (the task was cancelled for it)

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def time_remaining(self) -> float | None:
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - asyncio.get_running_loop().time())

    async def abort(
        self,
        code: grpc.StatusCode,
        details: str = "",
        trailing_metadata: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.status_code, self.status_details = code, details
        if trailing_metadata:
            self.trailing = tuple(trailing_metadata)
        raise grpc.aio.AbortError(details)

    def set_code(self, code: grpc.StatusCode) -> None:
        self.status_code = code

    def set_details(self, details: str) -> None:
        self.status_details = details

    def set_trailing_metadata(self, metadata: Sequence[tuple[str, str]]) -> None:
        self.trailing = tuple(metadata)

    def code(self) -> grpc.StatusCode:
        return self.status_code

    def details(self) -> str:
        return self.status_details

    def cancelled(self) -> bool:
        return self.is_cancelled

    def peer(self) -> str:
        return self._peer


class MultiplexServicer(mux_pb2_grpc.MultiplexServicer):
    """Runs the muxed calls of each stream against `table` through `interceptors` (the list
    the server itself was built with)."""

    def __init__(
        self, table: HandlerTable, interceptors: Sequence[grpc.aio.ServerInterceptor]
    ) -> None:
        self._table = table
        self._interceptors = list(interceptors)
        self._streams: set[_Stream] = set()
        self.draining = False

    def drain(self) -> None:
        """The server is stopping: every stream, open or opened from now on, ends once the
        calls running on it are done, and starts no new one."""
        self.draining = True
        for stream in self._streams:
            stream.drain()

    async def resolve(self, details: _Details) -> grpc.RpcMethodHandler | None:
        """The handler a direct call with these details would run: the interceptors in order,
        the recorded handlers last."""

        async def step(i: int, d: _Details) -> grpc.RpcMethodHandler | None:
            if i == len(self._interceptors):
                return self._table.lookup(d)
            return await self._interceptors[i].intercept_service(lambda nd: step(i + 1, nd), d)

        return await step(0, details)

    async def Calls(
        self, request_iterator: AsyncIterator[mux_pb2.MuxBatch], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[mux_pb2.MuxBatch]:
        stream = _Stream(self, context.peer())
        self._streams.add(stream)
        if self.draining:
            stream.drain()
        reader = asyncio.create_task(stream.read(request_iterator))
        try:
            while True:
                frames = await stream.next_frames()
                if frames is None:
                    break
                for batch in batches(frames):
                    yield batch
        finally:
            self._streams.discard(stream)
            reader.cancel()
            reader.add_done_callback(_retrieve)
            stream.cancel_all()


class _Stream:
    """One caller's stream: its running calls and the frames waiting to go out."""

    def __init__(self, servicer: MultiplexServicer, peer: str) -> None:
        self._servicer = servicer
        self._peer = peer
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._contexts: dict[int, MuxContext] = {}
        self._out: list[mux_pb2.MuxFrame] = []
        self._ready = asyncio.Event()
        self._ended = False
        self._draining = False

    def drain(self) -> None:
        self._draining = True
        self._ready.set()

    async def next_frames(self) -> list[mux_pb2.MuxFrame] | None:
        """Everything ready to go out; None once the caller's side ended (or the server
        drains) and every call closed."""
        while not self._out:
            if (self._ended or self._draining) and not self._tasks:
                return None
            self._ready.clear()
            await self._ready.wait()
        frames, self._out = self._out, []
        return frames

    def _send(self, frame: mux_pb2.MuxFrame) -> None:
        self._out.append(frame)
        self._ready.set()

    async def read(self, request_iterator: AsyncIterator[mux_pb2.MuxBatch]) -> None:
        try:
            async for batch in request_iterator:
                for frame in batch.frames:
                    self._on_frame(frame)
        finally:
            self._ended = True
            self._ready.set()

    def _on_frame(self, frame: mux_pb2.MuxFrame) -> None:
        kind = frame.WhichOneof("kind")
        if kind == "open":
            if self._draining:
                self._close(
                    frame.call_id,
                    grpc.StatusCode.UNAVAILABLE,
                    "the server is shutting down and did not start this call; retry",
                )
                return
            if frame.call_id in self._tasks:
                self._close(
                    frame.call_id,
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"call id {frame.call_id} is already open on this stream; ids must be unique",
                )
                return
            self._start(frame.call_id, frame.open)
        elif kind == "cancel":
            task = self._tasks.get(frame.call_id)
            if task is not None:
                self._contexts[frame.call_id].is_cancelled = True
                task.cancel()

    def _start(self, call_id: int, opened: mux_pb2.MuxOpen) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + opened.timeout_s if opened.timeout_s > 0 else None
        metadata = tuple((m.key, m.value) for m in opened.metadata)
        ctx = MuxContext(metadata, deadline, self._peer)
        task = loop.create_task(self._run(call_id, opened, ctx))
        self._tasks[call_id] = task
        self._contexts[call_id] = ctx
        if deadline is not None:
            timer = loop.call_at(deadline, self._expire, ctx, task)
            task.add_done_callback(lambda _t: timer.cancel())

    @staticmethod
    def _expire(ctx: MuxContext, task: asyncio.Task[None]) -> None:
        if not task.done():
            ctx.expired = ctx.is_cancelled = True
            task.cancel()

    async def _run(self, call_id: int, opened: mux_pb2.MuxOpen, ctx: MuxContext) -> None:
        try:
            handler = await self._servicer.resolve(
                _Details(opened.method, ctx.invocation_metadata())
            )
            if handler is None or handler.request_streaming:
                await ctx.abort(
                    grpc.StatusCode.UNIMPLEMENTED,
                    f"method {opened.method} is not served over this stream",
                )
                return  # unreachable: abort raises
            parse = handler.request_deserializer
            request = parse(opened.request) if parse is not None else opened.request
            serialize = handler.response_serializer
            if handler.response_streaming:
                replies = handler.unary_stream(request, ctx)
                async for reply in replies:
                    self._message(call_id, reply, serialize)
            else:
                self._message(call_id, await handler.unary_unary(request, ctx), serialize)
            self._close(call_id, ctx.status_code, ctx.status_details, ctx.trailing)
        except grpc.aio.AbortError:
            self._close(call_id, ctx.status_code, ctx.status_details, ctx.trailing)
        except asyncio.CancelledError:
            if ctx.expired:
                self._close(call_id, grpc.StatusCode.DEADLINE_EXCEEDED, DEADLINE_DETAILS)
            # else: the caller cancelled (it has closed the call itself) or the stream ended
        except Exception as err:  # noqa: BLE001 - the guard turns servicer errors into INTERNAL first
            log.error("muxed call %s failed outside its handler", opened.method, exc_info=err)
            self._close(call_id, grpc.StatusCode.UNKNOWN, f"{type(err).__name__} serving the call")
        finally:
            self._tasks.pop(call_id, None)
            self._contexts.pop(call_id, None)
            if (self._ended or self._draining) and not self._tasks:
                self._ready.set()

    def _message(self, call_id: int, reply: Any, serialize: Any) -> None:
        data = serialize(reply) if serialize is not None else reply
        self._send(mux_pb2.MuxFrame(call_id=call_id, message=data))

    def _close(
        self,
        call_id: int,
        code: grpc.StatusCode,
        details: str = "",
        trailing: Sequence[tuple[str, str]] = (),
    ) -> None:
        self._send(
            mux_pb2.MuxFrame(
                call_id=call_id,
                close=mux_pb2.MuxClose(
                    code=code.value[0],
                    details=details,
                    trailing_metadata=metadata_pb(trailing),
                ),
            )
        )

    def cancel_all(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()


def _retrieve(task: asyncio.Task[None]) -> None:
    """Collect the reader's outcome: the stream's own error ends the stream, and was the
    caller's to see."""
    if not task.cancelled():
        task.exception()
