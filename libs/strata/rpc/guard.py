"""The server interceptor every Strata service runs: no caller sees Python's insides.

- A body that does not parse as the method's request message is answered INVALID_ARGUMENT with
  a sentence naming the message type (gRPC would answer UNKNOWN with the parser's exception
  and log a traceback per call). Such calls are logged once per method per interval, with a
  count (`LogThrottle`), so a client sending garbage in a loop cannot flood the log.
- An exception a servicer did not turn into a status is answered INTERNAL with a reference id
  the log line carries; its traceback is logged once per (method, exception type) per
  interval, later ones are counted. A servicer's own `context.abort` passes through untouched.

Handlers are wrapped once per method (cached), so the cost per call is one isinstance check.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from strata.core.log_throttle import LogThrottle

log = logging.getLogger(__name__)


class _Malformed:
    """What the wrapped deserializer returns for a body that does not parse."""

    __slots__ = ("error",)

    def __init__(self, error: str):
        self.error = error


class GuardInterceptor(grpc.aio.ServerInterceptor):
    def __init__(
        self, clock: Callable[[], float] = time.monotonic, interval_s: float = 60.0
    ) -> None:
        self._throttle = LogThrottle(clock, interval_s)
        # method -> (the handler as registered, its wrapped form)
        self._handlers: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(self, continuation, details: grpc.HandlerCallDetails):
        handler = await continuation(details)
        if handler is None or handler.request_streaming:
            return handler
        method = details.method
        cached = self._handlers.get(method)
        if cached is None or cached[0] is not handler:
            cached = self._handlers[method] = (handler, self._wrap(method, handler))
        return cached[1]

    def _wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        parse = handler.request_deserializer
        type_name = _type_name(parse)

        def deserialize(data: bytes) -> Any:
            try:
                return parse(data) if parse is not None else data
            except DecodeError as err:
                return _Malformed(str(err))

        async def malformed(request: _Malformed, context: grpc.aio.ServicerContext) -> None:
            ok, count = self._throttle.allow((method, "malformed"))
            if ok:
                log.warning(
                    "%s: a request body that is not a valid %s (%s)%s",
                    method,
                    type_name,
                    request.error,
                    f"; {count} more since the last such line" if count else "",
                )
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"the request body is not a valid {type_name} message; send "
                f"the message this method's .proto declares",
            )

        async def internal(err: Exception, context: grpc.aio.ServicerContext) -> None:
            ref = uuid.uuid4().hex[:12]
            ok, count = self._throttle.allow((method, type(err).__name__))
            if ok:
                log.error(
                    "%s: unexpected %s (reference %s)%s",
                    method,
                    type(err).__name__,
                    ref,
                    f"; {count} more since the last such line" if count else "",
                    exc_info=err,
                )
            await context.abort(
                grpc.StatusCode.INTERNAL,
                f"internal error (reference {ref}); the service logged it, "
                f"retrying will not help until it is fixed",
            )

        if handler.response_streaming:
            inner_stream = handler.unary_stream

            async def unary_stream(request, context):
                if isinstance(request, _Malformed):
                    await malformed(request, context)
                try:
                    result = inner_stream(request, context)
                    if hasattr(result, "__aiter__"):
                        async for item in result:
                            yield item
                    else:
                        await result
                except grpc.aio.AbortError:
                    raise
                except Exception as err:  # noqa: BLE001 - becomes INTERNAL with a reference
                    await internal(err, context)

            return grpc.unary_stream_rpc_method_handler(
                unary_stream,
                request_deserializer=deserialize,
                response_serializer=handler.response_serializer,
            )
        inner_unary = handler.unary_unary

        async def unary_unary(request, context):
            if isinstance(request, _Malformed):
                await malformed(request, context)
            try:
                return await inner_unary(request, context)
            except grpc.aio.AbortError:
                raise
            except Exception as err:  # noqa: BLE001 - becomes INTERNAL with a reference
                await internal(err, context)

        return grpc.unary_unary_rpc_method_handler(
            unary_unary,
            request_deserializer=deserialize,
            response_serializer=handler.response_serializer,
        )


def _type_name(parse: Callable[[bytes], Any] | None) -> str:
    owner = getattr(parse, "__self__", None)
    descriptor = getattr(owner, "DESCRIPTOR", None)
    return descriptor.full_name if descriptor is not None else "request"
