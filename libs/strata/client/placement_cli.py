"""`strata placement`: the placement planner's plan, a replan now, and why it decided what it did.

    strata placement plan
    strata placement replan --cordon node-0        # move node-0's replicas away, then drain it
    strata placement replan --uncordon node-0
    strata placement explain --model smollm2-135m-instruct

The planner's address comes from --placement, else STRATA_PLACEMENT_ADDR, else the default.
Explain prints, per decision, the node's load per window afterwards, the pair benefit against
each replica sharing the GPU, the migration cost, and each model's worst-window P99 against its
class's targets (the red line).
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import grpc

from strata.core import defaults
from strata.rpc.channels import channel
from strata.security.settings import SecurityFields
from strata.v1 import placement_pb2, placement_pb2_grpc

PLACEMENT_TIMEOUT_S = 30.0


def add_placement_parser(sub: argparse._SubParsersAction) -> None:
    """Register `placement` on the `strata` command's subparsers."""
    p = sub.add_parser(
        "placement",
        help="the placement plan, replans and their explanation",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--placement",
        help="placement planner host:port (default: "
        f"STRATA_PLACEMENT_ADDR or {defaults.PLACEMENT_ADDR})",
    )
    verbs = p.add_subparsers(dest="placement_command", required=True)
    verbs.add_parser("plan", help="the latest plan").set_defaults(handler=_plan)
    replan = verbs.add_parser("replan", help="plan and apply now")
    replan.add_argument(
        "--cordon",
        action="append",
        default=[],
        metavar="NODE",
        help="move this node's replicas elsewhere and keep it empty (repeatable)",
    )
    replan.add_argument(
        "--uncordon",
        action="append",
        default=[],
        metavar="NODE",
        help="let a cordoned node take replicas again (repeatable)",
    )
    replan.set_defaults(handler=_replan)
    explain = verbs.add_parser("explain", help="the numbers behind the latest plan's decisions")
    explain.add_argument("--model", default="", help="only this model's decisions")
    explain.add_argument("--node", default="", help="only decisions that involve this node")
    explain.set_defaults(handler=_explain)


def _stub(args: argparse.Namespace) -> tuple[grpc.aio.Channel, placement_pb2_grpc.PlacementStub]:
    """The planner is internal: an operator calls it with the cluster credential, read from the
    secrets folder (STRATA_SECRETS_DIR, or the data dir's `secrets`, as `make run` keeps it)."""
    address = args.placement or os.environ.get("STRATA_PLACEMENT_ADDR") or defaults.PLACEMENT_ADDR
    ch = channel(address, SecurityFields().security().client_identity())
    return ch, placement_pb2_grpc.PlacementStub(ch)


async def _plan(args: argparse.Namespace) -> int:
    ch, stub = _stub(args)
    async with ch:
        plan = await stub.GetPlan(placement_pb2.GetPlanRequest(), timeout=PLACEMENT_TIMEOUT_S)
    print(format_plan(plan))
    return 0


async def _replan(args: argparse.Namespace) -> int:
    ch, stub = _stub(args)
    async with ch:
        plan = await stub.Replan(
            placement_pb2.ReplanRequest(cordon=args.cordon, uncordon=args.uncordon),
            timeout=PLACEMENT_TIMEOUT_S,
        )
    print(format_plan(plan))
    return 0


async def _explain(args: argparse.Namespace) -> int:
    ch, stub = _stub(args)
    async with ch:
        e = await stub.Explain(
            placement_pb2.ExplainRequest(model=args.model, node_id=args.node),
            timeout=PLACEMENT_TIMEOUT_S,
        )
    sys.stdout.write(format_explanation(e))
    return 0


def format_plan(plan: placement_pb2.PlacementPlan) -> str:
    lines = [
        f"plan v{plan.version} ({plan.policy or 'ffd'})"
        + (": REJECTED by the SLA red line, the placement stays" if plan.rejected else "")
    ]
    if plan.cordoned_nodes:
        lines.append(f"cordoned: {', '.join(plan.cordoned_nodes)}")
    for a in plan.assignments:
        lines.append(f"  {a.model:<28} {a.node_id:<12} {a.replica_id:<36} {a.reason}")
    for m in plan.moves:
        lines.append(
            f"  move {m.model} {m.from_replica_id}@{m.from_node_id} -> "
            f"{m.to_replica_id}@{m.to_node_id}: {m.state} ({m.reason})"
        )
    if plan.unplaced_models:
        lines.append(
            f"unplaced: {', '.join(plan.unplaced_models)} (see `strata placement explain`)"
        )
    return "\n".join(lines)


def format_explanation(e: placement_pb2.PlacementExplanation) -> str:
    out = [f"plan v{e.plan_version}: {e.summary}"]
    if e.windows:
        out.append(f"windows: {e.windows} of {e.window_s:g} s")
    out += [f"note: {n}" for n in e.notes]
    if e.models:
        out.append("models:")
        out += [
            f"  {m.model}: {m.replicas} replica(s), peak {m.peak_rate:.3g} req/s, "
            f"{m.sla_class or 'no class'}: {m.reason}"
            for m in e.models
        ]
    used = [n for n in e.nodes if n.models]
    if used:
        out.append("nodes:")
        out += [
            f"  {n.node_id} [{', '.join(n.models)}]"
            + (
                f" peak {n.peak:.3f} mean {n.mean:.3f} loads {_loads(n.window_loads)}"
                if n.window_loads
                else ""
            )
            for n in used
        ]
    out.append("decisions:")
    for d in e.decisions:
        where = d.node_id or "-"
        if d.from_node_id:
            where = f"{d.from_node_id} -> {where}"
        out.append(f"  {d.action} {d.model} {d.replica_id} on {where}: {d.reason}")
        if d.window_loads:
            out.append(f"      node loads per window: {_loads(d.window_loads)}")
        out += [f"      pair benefit with {p.other}: {p.benefit:.3f} GPU" for p in d.pairs]
        if d.migration_cost:
            out.append(f"      migration cost {d.migration_cost:.4f} GPU, gain {d.benefit:.3f} GPU")
        out += [f"      red line: {_check(c)}" for c in d.red_line]
    if e.violations:
        out.append("red-line violations:")
        out += [f"  {_check(v)}" for v in e.violations]
    return "\n".join(out) + "\n"


def _loads(values) -> str:
    return " ".join(f"{v:.2f}" for v in values)


def _check(c: placement_pb2.RedLineCheck) -> str:
    if not c.modelled:
        return f"{c.model} on {c.node_id}: not modelled (no engine profile or no traffic)"

    def ms(v: float) -> str:
        return "inf" if math.isinf(v) else f"{v:.1f}"

    ttft = f"{c.ttft_target_ms:g}" if c.HasField("ttft_target_ms") else "-"
    tpot = f"{c.tpot_target_ms:g}" if c.HasField("tpot_target_ms") else "-"
    when = f" while {c.bursting} bursts" if c.bursting else ""
    return (
        f"{c.model} on {c.node_id} window {c.window}{when}: P99 TTFT "
        f"{ms(c.ttft_p99_ms)}/{ttft} "
        f"ms, TPOT {ms(c.tpot_p99_ms)}/{tpot} ms ({c.sla_class}) "
        f"{'ok' if c.ok else 'BREAKS'}"
    )
