"""Latency model and batch capacity: closed forms for one replica, interference for two, the
pair benefit and the migration cost."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

from strata.policy.placement import (
    Demand,
    MigrationCost,
    SlaTarget,
    pair_benefit,
    predict,
    replica_capacity,
)


@dataclass(frozen=True)
class LinearCosts:
    """prefill = tokens / 10,000 s; a decode step = 10 ms + 1 ms per sequence."""

    max_batch: int = 64
    colocation_share: float = 1.0
    prefill_colocation_share: float = 1.0

    def prefill_s(self, tokens: float) -> float:
        return tokens / 10_000

    def decode_step_s(self, batch: float, context: float) -> float:
        return 0.010 + 0.001 * batch


COSTS = LinearCosts()


def test_one_replica_matches_the_closed_form():
    # rate 10/s, 100-token prompts, 50-token answers: prefill load 10 * 0.01 = 0.1; with a
    # linear step the batch solves n = 500 (0.01 + 0.001 n) / 0.9, so n = 5 / 0.4 = 12.5.
    [p] = predict([(COSTS, Demand(10.0, 100, 50))])
    assert p.batch == pytest.approx(12.5, rel=1e-9)
    batch99 = 12.5 + 2.326 * math.sqrt(12.5)
    assert p.tpot_p99_ms == pytest.approx((0.010 + 0.001 * batch99) / 0.9 * 1000, rel=1e-9)
    ttft = 0.01 + math.log(10) * 0.01 / 0.9 + (0.010 + 0.001 * 12.5)
    assert p.ttft_p99_ms == pytest.approx(ttft * 1000, rel=1e-9)
    assert p.occupancy == pytest.approx(0.1 + (1 - math.exp(-12.5)) * 0.9, rel=1e-9)


def test_a_replica_that_outgrows_its_batch_or_its_prefill_budget_cannot_keep_up():
    [batch] = predict([(LinearCosts(max_batch=8), Demand(10.0, 100, 50))])
    [prefill] = predict([(COSTS, Demand(100.0, 100, 50))])  # prefill load 1.0
    assert not batch.stable and not prefill.stable
    assert math.isinf(batch.ttft_p99_ms) and math.isinf(prefill.tpot_p99_ms)
    assert predict([(COSTS, Demand(0.0, 100, 50))])[0].ttft_p99_ms == 0.0


def test_capacity_is_the_rate_where_the_binding_p99_meets_its_target():
    sla = SlaTarget("interactive", ttft_ms=500, tpot_ms=40)
    cap = replica_capacity(COSTS, sla, 100, 50)
    [at] = predict([(COSTS, Demand(cap, 100, 50))])
    [above] = predict([(COSTS, Demand(cap * 1.001, 100, 50))])
    assert at.tpot_p99_ms == pytest.approx(40.0, rel=1e-9) and at.ttft_p99_ms < 500
    assert above.tpot_p99_ms > 40.0
    assert replica_capacity(COSTS, SlaTarget("tight", ttft_ms=5), 100, 50) == 0.0
    best_effort = replica_capacity(COSTS, SlaTarget("batch"), 100, 50)
    assert best_effort > cap and predict([(COSTS, Demand(best_effort, 100, 50))])[0].stable


def test_a_co_located_replica_slows_its_neighbour_by_its_steps():
    alone = predict([(COSTS, Demand(10.0, 100, 50))])[0]
    shared, other = predict([(COSTS, Demand(10.0, 100, 50)), (COSTS, Demand(2.0, 100, 50))])
    assert shared.tpot_p99_ms > alone.tpot_p99_ms and shared.ttft_p99_ms > alone.ttft_p99_ms
    assert shared.batch > alone.batch
    assert 0 < other.occupancy < shared.occupancy
    assert shared.occupancy + other.occupancy <= 1.0 + 1e-9


def test_pair_benefit_rewards_alternating_peaks_only():
    a, b = np.array([0.6, 0.1]), np.array([0.1, 0.6])
    assert pair_benefit(a, b) == pytest.approx(0.5, abs=1e-12)  # 1.2 reserved apart, 0.7 together
    assert pair_benefit(a, a) == 0.0
    assert pair_benefit(a, np.zeros(2)) == 0.0


def test_migration_cost_is_load_and_warm_up_seconds_over_the_horizon():
    cost = MigrationCost(load_bytes_per_s=2e9, warmup_s=30, horizon_s=600)
    assert cost.seconds(4 * 10**9) == 32.0
    assert cost.of(4 * 10**9) == 32.0 / 600
    with pytest.raises(ValueError, match="positive load_bytes_per_s and horizon_s"):
        MigrationCost(horizon_s=0)


def test_the_neighbours_shares_scale_what_their_steps_and_prefills_add():
    mine = Demand(10.0, 100, 50)
    alone = predict([(COSTS, mine)])[0]
    # a neighbour with no prompt to prefill: at shares 0 it costs nothing at all
    quiet = Demand(2.0, 0, 50)
    free = predict(
        [
            (LinearCosts(colocation_share=0.0, prefill_colocation_share=0.0), mine),
            (LinearCosts(colocation_share=0.0, prefill_colocation_share=0.0), quiet),
        ]
    )[0]
    assert free.tpot_p99_ms == pytest.approx(alone.tpot_p99_ms)
    assert free.ttft_p99_ms == pytest.approx(alone.ttft_p99_ms)
    tpot = {
        s: predict(
            [(LinearCosts(colocation_share=s), mine), (LinearCosts(colocation_share=s), quiet)]
        )[0].tpot_p99_ms
        for s in (0.0, 0.5, 1.0)
    }
    assert tpot[0.0] < tpot[0.5] < tpot[1.0]
    # the neighbour's prefills count by the prefill share: 1 is the GPU-wide load of strict turns
    pair = Demand(4.0, 400, 20)  # prefills of 40 ms, 16% of the GPU each
    ttft = {
        f: predict(
            [
                (LinearCosts(prefill_colocation_share=f), pair),
                (LinearCosts(prefill_colocation_share=f), pair),
            ]
        )[0].ttft_p99_ms
        for f in (0.0, 0.5, 1.0)
    }
    assert ttft[0.0] < ttft[0.5] < ttft[1.0]
    # and a load that overflows only by the neighbour's prefills is no overload at share 0
    heavy = Demand(60.0, 100, 1)  # 60 prefills of 10 ms a second: 0.6 each
    assert not predict([(COSTS, heavy), (COSTS, heavy)])[0].stable
    assert predict(
        [
            (LinearCosts(prefill_colocation_share=0.0), heavy),
            (LinearCosts(prefill_colocation_share=0.0), heavy),
        ]
    )[0].stable
