"""Placement servicer: GetPlan returns the latest plan, Replan runs a round now."""

from __future__ import annotations

import grpc

from services.placement import convert
from services.placement.planner import Planner, PlanSnapshot, SchedulerUnavailable
from strata.rpc.v1 import placement_pb2, placement_pb2_grpc


class PlacementServicer(placement_pb2_grpc.PlacementServicer):
    def __init__(self, planner: Planner) -> None:
        self._planner = planner

    async def GetPlan(self, request: placement_pb2.GetPlanRequest,
                      context: grpc.aio.ServicerContext) -> placement_pb2.PlacementPlan:
        snapshot = self._planner.latest
        if snapshot is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                "no plan yet: the planner has not reached the scheduler; retry "
                                "shortly or call Replan to see why")
        return _to_pb(snapshot)

    async def Replan(self, request: placement_pb2.ReplanRequest,
                     context: grpc.aio.ServicerContext) -> placement_pb2.PlacementPlan:
        try:
            snapshot = await self._planner.replan()
        except SchedulerUnavailable as err:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(err))
        return _to_pb(snapshot)


def _to_pb(snapshot: PlanSnapshot) -> placement_pb2.PlacementPlan:
    return convert.plan_to_pb(snapshot.plan, snapshot.version, snapshot.created_unix_ms)
