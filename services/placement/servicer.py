"""Placement servicer: GetPlan returns the latest plan, Replan runs a round now (cordoning or
uncordoning nodes first), Explain returns the numbers behind the latest plan's decisions."""

from __future__ import annotations

import grpc

from services.placement import convert
from services.placement.lease import NotHolder
from services.placement.planner import (
    Planner,
    PlanSnapshot,
    SchedulerUnavailable,
    UnknownNode,
)
from strata.v1 import placement_pb2, placement_pb2_grpc

_NO_PLAN = (
    "no plan yet: the planner has not reached the scheduler; retry shortly or call "
    "Replan to see why"
)


class PlacementServicer(placement_pb2_grpc.PlacementServicer):
    def __init__(self, planner: Planner) -> None:
        self._planner = planner

    async def GetPlan(
        self, request: placement_pb2.GetPlanRequest, context: grpc.aio.ServicerContext
    ) -> placement_pb2.PlacementPlan:
        snapshot = self._planner.latest
        if snapshot is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, _NO_PLAN)
        return _to_pb(snapshot)

    async def Replan(
        self, request: placement_pb2.ReplanRequest, context: grpc.aio.ServicerContext
    ) -> placement_pb2.PlacementPlan:
        both = sorted(set(request.cordon) & set(request.uncordon))
        if both:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{', '.join(both)} cannot be cordoned and uncordoned at once",
            )
        try:
            snapshot = await self._planner.replan(request.cordon, request.uncordon)
        except SchedulerUnavailable as err:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(err))
        except UnknownNode as err:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(err))
        except NotHolder as err:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{err}; this planner applies no plan while it is on standby: ask the one that "
                f"holds the lease",
            )
        return _to_pb(snapshot)

    async def Explain(
        self, request: placement_pb2.ExplainRequest, context: grpc.aio.ServicerContext
    ) -> placement_pb2.PlacementExplanation:
        snapshot = self._planner.latest
        if snapshot is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, _NO_PLAN)
        return convert.explanation_pb(
            snapshot.outcome.explanation,
            snapshot.version,
            snapshot.created_unix_ms,
            snapshot.notes,
            request.model,
            request.node_id,
        )


def _to_pb(snapshot: PlanSnapshot) -> placement_pb2.PlacementPlan:
    moves = [
        placement_pb2.PlacementMove(
            model=m.model,
            from_node_id=r.node_id,
            from_replica_id=r.replica_id,
            to_node_id=next((n for n, rid in m.new if rid == m.to_replica.get(r.replica_id)), ""),
            to_replica_id=m.to_replica.get(r.replica_id, ""),
            state=str(m.phase),
            reason=f"{r.reason}{'; ' + m.detail if m.detail else ''}",
        )
        for m in snapshot.migrations
        for r in m.old
    ]
    return convert.plan_to_pb(
        snapshot.plan,
        snapshot.version,
        snapshot.created_unix_ms,
        snapshot.policy,
        snapshot.outcome.rejected,
        moves,
        snapshot.cordoned,
    )
