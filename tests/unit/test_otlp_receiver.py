"""OTLP receiver: bounded hand-off to the writer, rejected spans reported and counted."""

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from sqlalchemy.exc import OperationalError

from strata.telemetry.receiver import OtlpReceiver, ReceiverStats

TRACE = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")


def export(*names: str, bad_ids: int = 0) -> ExportTraceServiceRequest:
    spans = [
        Span(trace_id=TRACE, span_id=(i + 1).to_bytes(8, "big"), name=n)
        for i, n in enumerate(names)
    ]
    spans += [Span(trace_id=b"\x01", span_id=b"\x01" * 8, name="bad")] * bad_ids
    return ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])]
    )


async def send(port: int, request: ExportTraceServiceRequest):
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        return await trace_service_pb2_grpc.TraceServiceStub(ch).Export(request, timeout=5)


async def test_spans_beyond_capacity_are_rejected_and_counted():
    written = []

    async def sink(batch):
        written.append([s.name for s in batch])

    receiver = OtlpReceiver(sink, capacity=3, batch_size=2)
    port = await receiver.start()
    try:
        reply = await send(port, export("a", "b", "c", "d", "e"))
        assert reply.partial_success.rejected_spans == 2
        assert reply.partial_success.error_message == (
            "2 of 5 spans rejected: 2 did not fit the receiver's full queue"
        )
        assert await receiver.flush(timeout=5) is True
        assert written == [["a", "b"], ["c"]]
        # Room again once the writer has taken them.
        reply = await send(port, export("f"))
        assert not reply.HasField("partial_success")
        assert await receiver.flush(timeout=5) is True
        assert written[-1] == ["f"]
        assert receiver.stats == ReceiverStats(received=6, dropped=2)
    finally:
        await receiver.stop()


async def test_malformed_ids_are_rejected_with_the_reason():
    async def sink(batch):
        pass

    receiver = OtlpReceiver(sink)
    port = await receiver.start()
    try:
        reply = await send(port, export("ok", bad_ids=2))
        assert reply.partial_success.rejected_spans == 2
        assert reply.partial_success.error_message == (
            "2 of 3 spans rejected: 2 had trace/span ids of the wrong length or all zero"
        )
        assert receiver.stats == ReceiverStats(received=3, dropped=2)
    finally:
        await receiver.stop()


async def test_failed_write_counts_the_batch_as_dropped():
    async def sink(batch):
        raise OperationalError("INSERT INTO spans", {}, Exception("disk I/O error"))

    receiver = OtlpReceiver(sink)
    port = await receiver.start()
    try:
        reply = await send(port, export("a", "b"))
        assert not reply.HasField("partial_success")  # accepted; the loss happens later
        assert await receiver.flush(timeout=5) is True
        assert receiver.stats == ReceiverStats(received=2, dropped=2)
    finally:
        await receiver.stop()
