"""Replanning moves: relocate replicas that run now only when what a move gains beats its cost.

Two kinds of candidate, scored in GPUs (strata.policy.placement.benefit):

    single   one replica to another used GPU: gain = GPU freed (1 if its GPU empties) + the
             peak capacity freed on its GPU - the peak added on the target
    drain    every replica of one GPU, each to the best other used GPU (heaviest first): gain =
             one GPU + the peak changes; only the DRAIN_CANDIDATES least-loaded GPUs are tried,
             since a drain is a chain of placements and the emptiest GPUs are where it pays

A candidate is taken when gain - migration cost > 0, every target's window loads stay within
its batch capacity (<= 1) and its red line holds with the new replica (removing replicas never
raises anyone's latency, so sources need no check). The best candidate is applied, then the
search runs again, until nothing pays or `max_moves` replicas have moved. Replicas placed or
moved earlier in the round are not moved again.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from strata.policy.placement.benefit import MigrationCost, peak
from strata.policy.placement.ffd import new_replica_id
from strata.policy.placement.working import FULL, Gpu, Slot, Working

DRAIN_CANDIDATES = 8
_EPS = 1e-9


@dataclass(slots=True)
class Move:
    model: str
    from_node: str
    from_replica: str
    to_node: str  # "" until the replica has a place
    to_replica: str
    forced: bool  # the red line made it; no gain needed
    benefit: float  # GPUs the move gains (0 when forced)
    cost: float  # migration cost in GPUs over the horizon
    reason: str


@dataclass(slots=True)
class _Candidate:
    net: float
    benefit: float
    cost: float
    steps: list[tuple[Slot, Gpu, Gpu]]  # (replica, from, to)
    kind: str


def improve(w: Working, migration: MigrationCost, max_moves: int) -> list[Move]:
    moves: list[Move] = []
    while len(moves) < max_moves:
        budget = max_moves - len(moves)
        best = _best_single(w, migration)
        for drain in _drains(w, migration, budget):
            if best is None or drain.net > best.net + _EPS:
                best = drain
        if best is None or best.net <= _EPS:
            break
        for slot, src, dst in best.steps:
            moves.append(_apply(w, slot, src, dst, best, migration))
    return moves


def _movable(gpu: Gpu) -> list[Slot]:
    return [s for s in gpu.slots if s.origin == gpu.node_id and not s.moved]


def _best_single(w: Working, migration: MigrationCost) -> _Candidate | None:
    gpus = w.gpus
    if len(gpus) < 2 or not any(_movable(g) for g in gpus):
        return None
    windows = w.loads.windows
    matrix = np.stack([g.load for g in gpus]) if windows else np.zeros((len(gpus), 1))
    peaks = matrix.max(axis=1)
    devices = sorted({g.device for g in gpus})
    device_index = np.array([devices.index(g.device) for g in gpus])
    used = np.array([g.used for g in gpus])
    free = np.array([g.free for g in gpus])
    order = np.arange(len(gpus))
    hosting: dict[str, np.ndarray] = {}  # model -> GPUs that hold a replica of it
    peak_with: dict[str, np.ndarray] = {}  # model -> each GPU's peak with one more replica
    best: _Candidate | None = None
    for i, src in enumerate(gpus):
        for slot in _movable(src):
            m = slot.model
            if m not in hosting:
                hosting[m] = np.array([g.hosts(m) for g in gpus])
                per_device = (
                    np.stack([w.loads.load(m, d) for d in devices])
                    if windows
                    else np.zeros((len(devices), 1))
                )
                peak_with[m] = (matrix + per_device[device_index]).max(axis=1)
            rest = src.load - w.load_of(m, src)
            emptied = len(src.slots) == 1 and src.foreign == 0
            base = (1.0 if emptied else 0.0) + peak(src.load) - peak(rest)
            gain = np.round(base + peaks - peak_with[m], 12)
            cost = migration.of(slot.memory)
            ok = used & (free >= slot.memory) & (order != i) & ~hosting[m] & (peak_with[m] <= FULL)
            for j in np.lexsort((order, -gain)):
                if not ok[j]:
                    continue
                net = float(gain[j]) - cost
                if net <= _EPS or (best is not None and net <= best.net + _EPS):
                    break
                if w.holds_with(gpus[j], m):
                    best = _Candidate(net, float(gain[j]), cost, [(slot, src, gpus[j])], "single")
                    break
    return best


def _drains(w: Working, migration: MigrationCost, budget: int) -> list[_Candidate]:
    sources = [
        g
        for g in w.gpus
        if g.foreign == 0
        and len(g.slots) >= 2
        and len(g.slots) <= budget
        and len(_movable(g)) == len(g.slots)
    ]
    sources.sort(key=lambda g: (float(g.load.mean()) if g.load.size else 0.0, g.node_id))
    out = []
    for src in sources[:DRAIN_CANDIDATES]:
        before, original = w.cost_of(w.gpus), list(src.slots)
        done: list[tuple[Slot, Gpu, Gpu]] = []
        for slot in sorted(src.slots, key=lambda s: (-peak(w.load_of(s.model, src)), s.model)):
            dst = w.best_target(slot.model, slot.memory, {src.node_id}, only_used=True)
            if dst is None:
                break
            w.remove(src, slot)
            w.add(dst, slot)
            done.append((slot, src, dst))
        complete = not src.slots
        after = w.cost_of(w.gpus)
        for slot, _, dst in reversed(done):
            w.remove(dst, slot)
        src.slots = original
        src.load = w.total(src)
        if complete:
            cost = sum(migration.of(s.memory) for s, _, _ in done)
            benefit = round(before - after, 12)
            out.append(_Candidate(benefit - cost, benefit, cost, done, "drain"))
    return out


def _apply(
    w: Working, slot: Slot, src: Gpu, dst: Gpu, c: _Candidate, migration: MigrationCost
) -> Move:
    w.remove(src, slot)
    new_id = new_replica_id(slot.model, dst.node_id)
    share = c.benefit if c.kind == "single" else c.benefit / len(c.steps)
    cost = migration.of(slot.memory)
    what = (
        "frees the most"
        if c.kind == "single"
        else f"empties {src.node_id} with {len(c.steps)} move(s), {c.benefit:.3f} GPU gained in all"
    )
    reason = (
        f"replan ({c.kind}): {what}; gain {share:.3f} GPU > migration cost {cost:.4f} GPU "
        f"({migration.seconds(slot.memory):.1f} s over a {migration.horizon_s:.0f} s "
        f"horizon)"
    )
    moved = Slot(slot.model, new_id, slot.memory, src.node_id, slot.replica_id, reason, True)
    w.add(dst, moved)
    return Move(
        slot.model, src.node_id, slot.replica_id, dst.node_id, new_id, False, share, cost, reason
    )
