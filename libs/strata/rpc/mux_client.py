"""The client half of multiplexed calls (strata.v1.Multiplex): a channel whose unary and
response-streaming calls travel as frames on one long-lived stream to the server, instead of a
new gRPC call each (proto/strata/v1/mux.proto says why).

`MuxChannel` stands in for a grpc.aio.Channel under a generated stub (`WorkerStub(MuxChannel(
ch, metadata))`): the stub's calls behave as grpc.aio's do for what Strata's callers use:

- a streaming call iterates its responses and raises grpc.aio.AioRpcError with the server's
  code, details and trailing metadata; a unary call is awaited for its response or raises so;
- `cancel()` ends the call at once on this side (CANCELLED) and tells the server, which
  cancels its handler; a deadline (`timeout=`) ends it with DEADLINE_EXCEEDED on both sides;
- each call carries `metadata` (the cluster's token) and the caller's span context, taken when
  the call is made, as a direct call's interceptors add them.

The stream opens on the first call. When it breaks (the server went away, the connection
dropped), every call open on it fails with the stream's status, UNAVAILABLE where that was OK
or the caller's own: a muxed call never hangs and is never lost silently; the next call opens a
new stream. A server without the Multiplex service (UNIMPLEMENTED) gets direct calls from then
on. Client- and bidi-streaming methods always go direct.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import grpc

from strata.rpc.mux_wire import DEADLINE_DETAILS, batches, metadata_pb
from strata.rpc.trace_context import outgoing
from strata.v1 import mux_pb2

log = logging.getLogger(__name__)

CALLS_METHOD = "/strata.v1.Multiplex/Calls"
CANCELLED_DETAILS = "Locally cancelled by application!"
_CODES = {c.value[0]: c for c in grpc.StatusCode}

Metadata = Sequence[tuple[str, str]]


def _error(code: grpc.StatusCode, details: str, trailing: Metadata = ()) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(
        code, grpc.aio.Metadata(), grpc.aio.Metadata(*trailing), details, None
    )


class MuxChannel:
    """Unary and response-streaming calls over one stream to `channel`'s server; everything
    else (other call kinds, channel_ready, close) is `channel`'s own."""

    def __init__(
        self, channel: grpc.aio.Channel, metadata: Metadata = (), direct: bool = False
    ) -> None:
        """`direct`: every call a direct one from the start (multiplexing turned off)."""
        self._channel = channel
        self._metadata = tuple(metadata)
        self._stream: _Stream | None = None
        self._direct = direct  # or: the server has no Multiplex service
        self._ids = itertools.count(1)

    # -- what generated stubs call --------------------------------------------------------------
    def unary_unary(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
        _registered_method: bool = False,
    ) -> Callable[..., Any]:
        direct = self._channel.unary_unary(method, request_serializer, response_deserializer)
        return _MultiCallable(self, direct, method, request_serializer, response_deserializer)

    def unary_stream(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
        _registered_method: bool = False,
    ) -> Callable[..., Any]:
        direct = self._channel.unary_stream(method, request_serializer, response_deserializer)
        return _MultiCallable(self, direct, method, request_serializer, response_deserializer)

    def stream_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._channel.stream_unary(method, *args, **kwargs)

    def stream_stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._channel.stream_stream(method, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._channel, name)

    async def close(self, grace: float | None = None) -> None:
        if self._stream is not None:
            self._stream.end()
        await self._channel.close(grace)

    async def __aenter__(self) -> MuxChannel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- the stream -----------------------------------------------------------------------------
    @property
    def direct(self) -> bool:
        return self._direct

    def _open(self, call: _MuxCall, opened: mux_pb2.MuxOpen) -> None:
        if self._stream is None or self._stream.broken:
            self._stream = _Stream(self, self._channel, self._metadata)
        self._stream.open(call, opened)

    def _unimplemented(self) -> None:
        log.warning("the server has no multiplexed calls: calling it directly from now on")
        self._direct = True

    def _next_id(self) -> int:
        return next(self._ids)


class _MultiCallable:
    def __init__(
        self,
        mux: MuxChannel,
        direct: Callable[..., Any],
        method: str,
        serializer: Callable[[Any], bytes] | None,
        deserializer: Callable[[bytes], Any] | None,
    ) -> None:
        self._mux = mux
        self._direct = direct
        self._method = method
        self._serializer = serializer
        self._deserializer = deserializer
        self._streaming = isinstance(direct, grpc.aio.UnaryStreamMultiCallable)

    def __call__(
        self,
        request: Any,
        *,
        timeout: float | None = None,
        metadata: Metadata | None = None,
        **kwargs: Any,
    ) -> Any:
        if self._mux.direct:
            return self._direct(request, timeout=timeout, metadata=metadata, **kwargs)
        data = self._serializer(request) if self._serializer is not None else request
        pairs = [*self._mux._metadata, *outgoing(), *(metadata or ())]
        opened = mux_pb2.MuxOpen(
            method=self._method,
            request=data,
            metadata=metadata_pb(pairs),
            # 0: none; a deadline already past is the least positive one (DEADLINE_EXCEEDED)
            timeout_s=0.0 if timeout is None else max(timeout, 1e-9),
        )
        call = (_MuxStreamCall if self._streaming else _MuxUnaryCall)(
            self._mux._next_id(), self._deserializer, timeout
        )
        self._mux._open(call, opened)
        return call


class _MuxCall:
    """One call's state on this side: its messages as they arrive, then its status."""

    def __init__(
        self, call_id: int, deserializer: Callable[[bytes], Any] | None, timeout: float | None
    ) -> None:
        self.call_id = call_id
        self._deserializer = deserializer
        self._messages: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._status: tuple[grpc.StatusCode, str, tuple[tuple[str, str], ...]] | None = None
        self._closed = asyncio.Event()
        self._stream: _Stream | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._done_callbacks: list[Callable[[Any], None]] = []
        if timeout is not None:
            self._timer = asyncio.get_running_loop().call_later(max(0.0, timeout), self._expire)

    # -- driven by the stream -------------------------------------------------------------------
    def attach(self, stream: _Stream) -> None:
        self._stream = stream

    def message(self, data: bytes) -> None:
        if self._status is None:
            self._messages.put_nowait(data)

    def finish(self, code: grpc.StatusCode, details: str, trailing: Metadata = ()) -> bool:
        """Close the call with this status; False when it was closed already."""
        if self._status is not None:
            return False
        self._status = (code, details, tuple(trailing))
        if self._timer is not None:
            self._timer.cancel()
        self._messages.put_nowait(None)
        self._closed.set()
        for cb in self._done_callbacks:
            cb(self)
        return True

    def _expire(self) -> None:
        if self.finish(grpc.StatusCode.DEADLINE_EXCEEDED, DEADLINE_DETAILS) and self._stream:
            self._stream.cancel(self.call_id)

    # -- what callers use -----------------------------------------------------------------------
    def cancel(self) -> bool:
        if not self.finish(grpc.StatusCode.CANCELLED, CANCELLED_DETAILS):
            return False
        if self._stream is not None:
            self._stream.cancel(self.call_id)
        return True

    def cancelled(self) -> bool:
        return self._status is not None and self._status[0] is grpc.StatusCode.CANCELLED

    def done(self) -> bool:
        return self._status is not None

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        if self._status is not None:
            callback(self)
        else:
            self._done_callbacks.append(callback)

    def time_remaining(self) -> float | None:
        if self._timer is None:
            return None
        return max(0.0, self._timer.when() - asyncio.get_running_loop().time())

    async def initial_metadata(self) -> grpc.aio.Metadata:
        return grpc.aio.Metadata()

    async def trailing_metadata(self) -> grpc.aio.Metadata:
        await self._closed.wait()
        assert self._status is not None
        return grpc.aio.Metadata(*self._status[2])

    async def code(self) -> grpc.StatusCode:
        await self._closed.wait()
        assert self._status is not None
        return self._status[0]

    async def details(self) -> str:
        await self._closed.wait()
        assert self._status is not None
        return self._status[1]

    async def wait_for_connection(self) -> None:
        return None

    async def _next(self) -> Any:
        """The next response, or None after an OK status; raises the call's error status."""
        data = await self._messages.get()
        if data is not None:
            return self._deserializer(data) if self._deserializer is not None else data
        self._messages.put_nowait(None)  # later reads see the end too
        assert self._status is not None
        code, details, trailing = self._status
        if code is not grpc.StatusCode.OK:
            raise _error(code, details, trailing)
        return None


class _MuxStreamCall(_MuxCall):
    def __aiter__(self) -> AsyncIterator[Any]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Any]:
        while (reply := await self._next()) is not None:
            yield reply

    async def read(self) -> Any:
        reply = await self._next()
        return grpc.aio.EOF if reply is None else reply


class _MuxUnaryCall(_MuxCall):
    def __await__(self) -> Any:
        return self._response().__await__()

    async def _response(self) -> Any:
        reply = await self._next()
        if reply is None:
            raise _error(grpc.StatusCode.INTERNAL, "the server closed the call without a response")
        await self._closed.wait()
        assert self._status is not None
        if self._status[0] is not grpc.StatusCode.OK:
            raise _error(*self._status)
        return reply


class _Stream:
    """One open Calls stream: the calls on it by id, a writer that sends whatever frames are
    ready as one batch, a reader that hands each frame to its call."""

    def __init__(self, mux: MuxChannel, channel: grpc.aio.Channel, metadata: Metadata) -> None:
        self._mux = mux
        self._calls: dict[int, _MuxCall] = {}
        self._out: list[mux_pb2.MuxFrame] = []
        self._ready = asyncio.Event()
        self._ending = False
        self.broken = False
        self._rpc = channel.stream_stream(
            CALLS_METHOD,
            request_serializer=mux_pb2.MuxBatch.SerializeToString,
            response_deserializer=mux_pb2.MuxBatch.FromString,
        )(metadata=[*metadata])
        loop = asyncio.get_running_loop()
        self._writer = loop.create_task(self._write())
        self._reader = loop.create_task(self._read())

    def open(self, call: _MuxCall, opened: mux_pb2.MuxOpen) -> None:
        call.attach(self)
        self._calls[call.call_id] = call
        call.add_done_callback(self._forget)
        self._send(mux_pb2.MuxFrame(call_id=call.call_id, open=opened))

    def _forget(self, call: _MuxCall) -> None:
        self._calls.pop(call.call_id, None)

    def cancel(self, call_id: int) -> None:
        if not self.broken:
            self._send(mux_pb2.MuxFrame(call_id=call_id, cancel=True))

    def end(self) -> None:
        """Half-close: no new calls; the server finishes those open."""
        self._ending = True
        self._ready.set()

    def _send(self, frame: mux_pb2.MuxFrame) -> None:
        self._out.append(frame)
        self._ready.set()

    async def _write(self) -> None:
        try:
            while True:
                while not self._out and not self._ending:
                    self._ready.clear()
                    await self._ready.wait()
                if self._out:
                    frames, self._out = self._out, []
                    for batch in batches(frames):
                        await self._rpc.write(batch)
                elif self._ending:
                    await self._rpc.done_writing()
                    return
        except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
            # The stream broke: the reader sees its status and fails the calls.
            return

    async def _read(self) -> None:
        code, details = grpc.StatusCode.UNAVAILABLE, "the server ended the stream"
        try:
            while True:
                batch = await self._rpc.read()
                if batch is grpc.aio.EOF:
                    break
                for frame in batch.frames:
                    self._deliver(frame)
        except grpc.aio.AioRpcError as err:
            code, details = err.code(), err.details() or ""
        finally:
            self._break(code, details)

    def _deliver(self, frame: mux_pb2.MuxFrame) -> None:
        call = self._calls.get(frame.call_id)
        if call is None:
            return  # cancelled or expired here already
        kind = frame.WhichOneof("kind")
        if kind == "message":
            call.message(frame.message)
        elif kind == "close":
            c = frame.close
            call.finish(
                _CODES.get(c.code, grpc.StatusCode.UNKNOWN),
                c.details,
                [(m.key, m.value) for m in c.trailing_metadata],
            )

    def _break(self, code: grpc.StatusCode, details: str) -> None:
        self.broken = True
        self._writer.cancel()
        if code is grpc.StatusCode.UNIMPLEMENTED:
            self._mux._unimplemented()
        if code in (grpc.StatusCode.OK, grpc.StatusCode.CANCELLED, grpc.StatusCode.UNIMPLEMENTED):
            code = grpc.StatusCode.UNAVAILABLE
        for call in list(self._calls.values()):
            call.finish(code, f"the stream carrying this call broke: {details}")
        self._calls.clear()
