"""Shared contract-test helpers: the process-wide tracer provider and its in-memory exporter.

Servicers that take a tracer (scheduler, placement) get a private provider per test. The gateway,
node manager and worker trace through the global provider (`trace.get_tracer` at import), and
OpenTelemetry lets a process set that provider once, so every test in the pytest process shares
one provider here and clears its exporter before reading spans.
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.worker.servicer import WorkerServicer
from strata.rpc.server import Registration, start_server
from strata.v1 import common_pb2, worker_pb2, worker_pb2_grpc

_EXPORTER = InMemorySpanExporter()
_installed = False


def global_spans() -> InMemorySpanExporter:
    """The exporter behind the global tracer provider, emptied; installs the provider once.

    SimpleSpanProcessor exports each span as it ends, so a test reads it without flushing.
    """
    global _installed
    if not _installed:
        current = trace.get_tracer_provider()
        if isinstance(current, TracerProvider):
            # Something in this process installed an SDK provider first: listen to it instead.
            current.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        else:
            provider = TracerProvider(resource=Resource.create({"service.name": "contract"}))
            provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
            trace.set_tracer_provider(provider)
        _installed = True
    _EXPORTER.clear()
    return _EXPORTER


def spans_named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


async def serve_worker(engine, memory_bytes: int = 1, meter=None, learner=None):
    """A decode worker servicer over `engine` (an AsyncEngine) on port 0; the running server."""
    servicer = WorkerServicer(engine, memory_bytes, meter, learner)
    return await start_server(
        [
            Registration(
                add=lambda s: worker_pb2_grpc.add_WorkerServicer_to_server(servicer, s),
                service_name=worker_pb2.DESCRIPTOR.services_by_name["Worker"].full_name,
            )
        ]
    )


async def generate_ignoring_eos(
    stub: worker_pb2_grpc.WorkerStub,
    model: str,
    request_id: str,
    prompt: str,
    max_tokens: int,
    tpot_ms: float = 0.0,
) -> list[common_pb2.GenerationChunk]:
    """The chunks of one Worker.Generate of `max_tokens` tokens (EOS ignored) for tenant acme,
    with TPOT target `tpot_ms` (0: none)."""
    request = worker_pb2.WorkerGenerateRequest(
        request_id=request_id,
        tenant="acme",
        tpot_ms=tpot_ms,
        spec=common_pb2.GenerationSpec(
            model=model,
            prompt=prompt,
            max_tokens=max_tokens,
            sampling=common_pb2.SamplingParams(ignore_eos=True),
        ),
    )
    return [c async for c in stub.Generate(request)]


def gateway_servicer(
    scheduler_addresses,
    auth,
    limiter,
    request_timeout_s: float = 10.0,
    prefixes=None,
    tenants=None,
    stale=None,
):
    """The gateway servicer over a pipeline built as services.gateway builds it: `auth`'s store
    and clock for the tenant directory unless one is given, a default prefix hasher."""
    from services.gateway.servicer import GatewayServicer
    from strata.gateway.node_clients import NodeClients
    from strata.gateway.pipeline import RequestPipeline
    from strata.gateway.prefix_hashes import PrefixHasher
    from strata.gateway.scheduler_client import SchedulerClient
    from strata.gateway.tenant_directory import TenantDirectory

    if isinstance(scheduler_addresses, str):
        scheduler_addresses = [scheduler_addresses]
    return GatewayServicer(
        RequestPipeline(
            auth,
            tenants if tenants is not None else TenantDirectory(auth.sessions, auth.clock),
            limiter,
            prefixes if prefixes is not None else PrefixHasher(),
            SchedulerClient(scheduler_addresses, stale),
            NodeClients(),
            request_timeout_s,
        )
    )
