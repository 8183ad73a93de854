"""Arrival curves for the batch-aware planner, read from the metrics collector each round."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import grpc

from strata.policy.placement import ArrivalCurve, SlaTarget
from strata.v1 import metrics_pb2, metrics_pb2_grpc

log = logging.getLogger(__name__)


@dataclass(slots=True, frozen=True)
class CurveSnapshot:
    window_s: float
    curves: dict[str, ArrivalCurve]  # every desired model (zeros without traffic)
    sla: dict[str, SlaTarget] = field(default_factory=dict)


class MetricsCurves:
    """GetArrivalCurves over the configured grid; None (and a warning) when it cannot answer."""

    def __init__(
        self,
        stub: metrics_pb2_grpc.MetricsStub,
        address: str,
        window_s: float,
        windows: int,
        days: int,
        timeout_s: float,
        burst_s: float = 0.0,
    ) -> None:
        self._stub = stub
        self._address = address
        self._request = metrics_pb2.ArrivalCurvesRequest(
            window_s=window_s, windows=windows, days=days, burst_s=burst_s
        )
        self._timeout_s = timeout_s
        self.problem = ""  # why the last fetch came back empty ("" when it did not)

    async def fetch(self, models: Sequence[str]) -> CurveSnapshot | None:
        try:
            reply = await self._stub.GetArrivalCurves(self._request, timeout=self._timeout_s)
        except grpc.aio.AioRpcError as err:
            self.problem = (
                f"the metrics collector at {self._address} did not answer "
                f"GetArrivalCurves ({err.code().name}: {err.details()}); planning "
                f"without arrival curves and without optional moves"
            )
            log.warning("%s", self.problem)
            return None
        self.problem = ""
        return snapshot(reply, models)


def snapshot(reply: metrics_pb2.ArrivalCurvesResponse, models: Sequence[str]) -> CurveSnapshot:
    observed = list(reply.observed_s)
    n = len(observed)
    curves: dict[str, ArrivalCurve] = {}
    sla: dict[str, SlaTarget] = {}
    for c in reply.curves:
        if c.model not in models:
            continue
        curves[c.model] = ArrivalCurve.from_counts(
            c.model,
            reply.window_s,
            list(c.requests),
            observed,
            list(c.prompt_tokens_mean),
            list(c.output_tokens_mean),
            reply.burst_s,
            list(c.burst_requests),
        )
        sla[c.model] = SlaTarget(
            c.sla.sla_class or "best-effort",
            c.sla.ttft_ms if c.sla.HasField("ttft_ms") else None,
            c.sla.tpot_ms if c.sla.HasField("tpot_ms") else None,
        )
    for m in models:
        if m not in curves:  # no request in the span: a known zero, not an unknown
            curves[m] = ArrivalCurve.from_counts(
                m, reply.window_s, [0] * n, observed, [0.0] * n, [0.0] * n
            )
    return CurveSnapshot(reply.window_s, curves, sla)
