"""Builds a round's Explanation from its final working placement, moves, unloads and unplaced
replicas (strata.policy.placement.explain holds the types)."""

from __future__ import annotations

from collections.abc import Sequence

from strata.policy.placement.benefit import MigrationCost, pair_benefit, peak
from strata.policy.placement.explain import (
    KEEP,
    LOAD,
    MOVE,
    UNLOAD,
    UNPLACED,
    Decision,
    Explanation,
    NodeLoad,
    PairBenefit,
)
from strata.policy.placement.ffd import Unload, Unplaced
from strata.policy.placement.improve import Move
from strata.policy.placement.working import Working


def explain_round(
    w: Working,
    policy: str,
    window_s: float,
    moves: Sequence[Move],
    unloads: Sequence[Unload],
    unplaced: Sequence[Unplaced],
    migration: MigrationCost,
) -> Explanation:
    e = Explanation(policy=policy, window_s=window_s, windows=w.loads.windows)
    by_target = {(m.model, m.to_node): m for m in moves if m.to_node}
    slots = sorted(
        ((s, g) for g in w.gpus for s in g.slots), key=lambda sg: (sg[0].model, sg[1].node_id)
    )
    checks = {
        g.node_id: tuple(w.red_line.check(g.node_id, g.device, g.models()))
        for g in w.gpus
        if g.slots
    }
    for s, g in slots:
        mine = w.load_of(s.model, g)
        pairs = tuple(
            PairBenefit(
                s.model, o.model, g.node_id, round(pair_benefit(mine, w.load_of(o.model, g)), 12)
            )
            for o in sorted(g.slots, key=lambda o: o.model)
            if o is not s
        )
        move = by_target.get((s.model, g.node_id))
        if s.origin == g.node_id:
            action, benefit, cost, origin = KEEP, 0.0, 0.0, ""
        elif move is not None:
            action, benefit, cost, origin = MOVE, move.benefit, move.cost, move.from_node
        else:
            action, benefit, cost, origin = (
                LOAD,
                sum(p.benefit for p in pairs),
                migration.of(s.memory),
                "",
            )
        e.decisions.append(
            Decision(
                action,
                s.model,
                s.replica_id,
                g.node_id,
                origin,
                s.reason,
                benefit,
                cost,
                tuple(float(x) for x in g.load),
                pairs,
                checks[g.node_id],
            )
        )
    for u in unloads:
        e.decisions.append(Decision(UNLOAD, u.model, u.replica_id, "", u.node_id, u.reason))
    for left in unplaced:
        e.decisions.append(
            Decision(UNPLACED, left.model, "", "", "", f"{left.missing} replica(s): {left.reason}")
        )
    for g in w.gpus:
        loads = tuple(float(x) for x in g.load)
        e.nodes.append(
            NodeLoad(
                g.node_id,
                g.device,
                tuple(sorted(g.models())),
                loads,
                peak(g.load),
                sum(loads) / len(loads) if loads else 0.0,
            )
        )
    e.violations = [c for node_checks in checks.values() for c in node_checks if not c.ok]
    return e
