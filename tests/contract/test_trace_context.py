"""One trace across processes without a span per hop (strata.rpc.trace_context): a call made
inside a span carries its context, and the span a handler starts is that span's child, for
unary and streaming handlers alike; a call from outside any span starts no trace."""

from __future__ import annotations

from opentelemetry import trace

from strata.rpc.channels import channel
from strata.rpc.server import Registration, start_server
from strata.v1 import common_pb2, scheduler_pb2_grpc, worker_pb2, worker_pb2_grpc
from tests.contract.helpers import global_spans

CALL_TIMEOUT_S = 240.0  # a call's deadline on a busy 2-core machine


class _Scheduler(scheduler_pb2_grpc.SchedulerServicer):
    async def ListModels(self, request, context):
        with trace.get_tracer(__name__).start_as_current_span("handled.unary"):
            return common_pb2.ListModelsResponse()


class _Worker(worker_pb2_grpc.WorkerServicer):
    async def Generate(self, request, context):
        with trace.get_tracer(__name__).start_as_current_span("handled.stream"):
            yield common_pb2.GenerationChunk(text="x")


async def test_a_handlers_span_is_the_callers_child_across_the_wire():
    exporter = global_spans()
    scheduler, worker = _Scheduler(), _Worker()
    running = await start_server(
        [
            Registration(
                add=lambda s: scheduler_pb2_grpc.add_SchedulerServicer_to_server(scheduler, s),
                service_name="strata.v1.Scheduler",
            ),
            Registration(
                add=lambda s: worker_pb2_grpc.add_WorkerServicer_to_server(worker, s),
                service_name="strata.v1.Worker",
            ),
        ]
    )
    address = f"127.0.0.1:{running.port}"
    try:
        async with channel(address) as ch:
            with trace.get_tracer(__name__).start_as_current_span("caller") as caller:
                await scheduler_pb2_grpc.SchedulerStub(ch).ListModels(
                    common_pb2.ListModelsRequest(), timeout=CALL_TIMEOUT_S
                )
                stream = worker_pb2_grpc.WorkerStub(ch).Generate(
                    worker_pb2.WorkerGenerateRequest(), timeout=CALL_TIMEOUT_S
                )
                assert [c.text async for c in stream] == ["x"]
            await scheduler_pb2_grpc.SchedulerStub(ch).ListModels(
                common_pb2.ListModelsRequest(), timeout=CALL_TIMEOUT_S
            )
    finally:
        await running.stop(0)
    spans: dict = {}
    for span in exporter.get_finished_spans():
        spans.setdefault(span.name, span)  # the first of each name: made inside "caller"
    ctx = caller.get_span_context()
    for name in ("handled.unary", "handled.stream"):
        assert spans[name].context.trace_id == ctx.trace_id, name
        assert spans[name].parent.span_id == ctx.span_id, name
    # Outside any span: the handler's span is a root of its own trace.
    roots = [s for s in exporter.get_finished_spans() if s.name == "handled.unary"]
    assert len(roots) == 2 and roots[-1].parent is None
