"""Co-located replicas sharing a simulated GPU by the profile's co-location shares: strict turns
at share 1 (as before the shares), their own pace at share 0, in between by the measured share;
a step is never shorter than alone; the shares come from the profile into every replica."""

from dataclasses import replace

import pytest

from strata.core.profile import ColocationPoint, EngineProfile, FitError, StepCosts
from strata.policy.placement import ModelDemand
from strata.sim.cluster import SimConfig, Simulator, model_spec
from strata.sim.replica import shared_factor
from strata.sim.workload import SimRequest

# 1 ms per step + 0.1 ms per token: a prefill of 20 tokens takes 3 ms, a decode 1.1 ms.
FLAT = StepCosts(step_s=1e-3, token_s=1e-4, sample_s=0.0, prefill_attend_s=0.0, decode_attend_s=0.0)
SLOW = replace(FLAT, step_s=5e-3)  # a decode of 5.1 ms
MB = 10**6


def profile(costs=FLAT, decode_share=None, prefill_share=None) -> EngineProfile:
    points = []
    if decode_share is not None:
        points.append(ColocationPoint(2, 8, 512, 0.010, 0.010 * (1 + decode_share)))
    if prefill_share is not None:
        points.append(
            ColocationPoint(2, 1, 512, 0.020, 0.020 * (1 + prefill_share), kind="prefill")
        )
    return EngineProfile(
        model="m",
        dtype="float32",
        device="cuda",
        threads=1,
        machine={},
        engine={},
        kv_bytes_per_token=1024,
        max_context=1024,
        costs=costs,
        fit_error=FitError(0.0, 0.0, 1),
        measurements=[],
        colocation=points,
    )


def run(specs, requests, fast_forward):
    demands = [ModelDemand(s.name, s.memory_bytes, 1) for s in specs]
    sim = Simulator(
        [("gpu-0", 100 * MB)],
        list(specs),
        lambda now: demands,
        SimConfig(fast_forward=fast_forward),
    )
    return {r.model: r for r in sim.run(requests).rows}


def spec(name, prof):
    return replace(
        model_spec(prof, 10 * MB, num_blocks=64, max_batched_tokens=256, max_seqs=8), name=name
    )


def test_the_hold_is_the_share_plus_an_even_split_of_the_rest():
    assert shared_factor(1.0, 3) == 1.0
    assert shared_factor(0.0, 2) == 0.5
    assert shared_factor(0.5, 2) == pytest.approx(0.75)
    assert shared_factor(0.0, 1) == 1.0  # alone: all of itself


def test_the_profile_carries_its_measured_shares_into_the_simulated_replicas():
    p = profile(decode_share=-0.2, prefill_share=0.4)
    assert p.colocation_share == 0.0  # measured below 0: clipped
    assert p.prefill_colocation_share == pytest.approx(0.4)
    s = model_spec(p, 10 * MB)
    assert (s.colocation_share, s.prefill_colocation_share) == (0.0, pytest.approx(0.4))
    unmeasured = profile()
    assert unmeasured.colocation_share == unmeasured.prefill_colocation_share == 1.0
    back = EngineProfile.from_json(p.to_json())
    assert back.colocation == p.colocation


@pytest.mark.parametrize("fast_forward", [False, True])
@pytest.mark.parametrize("share", [0.0, 0.5, 1.0])
def test_two_decoding_neighbours_each_step_at_alone_times_one_plus_the_share(share, fast_forward):
    p = profile(decode_share=share, prefill_share=1.0)
    # 160 decodes each: the neighbour's prefill at the start adds at most 3 ms / 160 a token
    requests = [SimRequest(0, 0.5, 20, 161, "a"), SimRequest(1, 0.5, 20, 161, "b")]
    rows = run([spec("a", p), spec("b", p)], requests, fast_forward)
    for model in "ab":
        assert rows[model].tpot_ms == pytest.approx(1.1 * (1 + share), rel=0.03)
    # prefills take strict turns at a prefill share of 1: b's waits for a's
    assert (rows["a"].ttft_ms, rows["b"].ttft_ms) == pytest.approx((3.0, 6.0))


def test_a_prefill_share_below_one_lets_the_second_prefill_start_during_the_first():
    p = profile(decode_share=0.0, prefill_share=0.0)
    requests = [SimRequest(0, 0.5, 20, 1, "a"), SimRequest(1, 0.5, 20, 1, "b")]
    rows = run([spec("a", p), spec("b", p)], requests, False)
    # a's prefill holds the GPU for half of its 3 ms; b's starts then and lasts its own 3 ms
    assert (rows["a"].ttft_ms, rows["b"].ttft_ms) == pytest.approx((3.0, 4.5))


def test_no_step_is_shorter_than_alone_beside_a_faster_neighbour():
    slow, fast = profile(SLOW, decode_share=0.0), profile(FLAT, decode_share=0.0)
    requests = [SimRequest(0, 0.5, 20, 31, "slow"), SimRequest(1, 0.5, 20, 31, "fast")]
    rows = run([spec("slow", slow), spec("fast", fast)], requests, False)
    # unequal steps leave the round-robin: fast-forward steps them exactly
    fast_forwarded = run([spec("slow", slow), spec("fast", fast)], requests, True)
    for model, row in rows.items():
        for field in ("ttft_ms", "e2e_ms", "tpot_ms"):
            assert getattr(fast_forwarded[model], field) == pytest.approx(
                getattr(row, field), rel=1e-9
            )
    alone = run([spec("slow", slow)], requests[:1], False)
    assert rows["slow"].tpot_ms >= alone["slow"].tpot_ms - 1e-9
    assert rows["slow"].tpot_ms == pytest.approx(5.1, rel=0.02)
    # the fast one steps between the slow one's holds of the GPU (half of its 5.1 ms at share
    # 0): slower than alone, faster than strict turns (1.1 + 5.1 ms)
    assert 1.1 - 1e-9 <= rows["fast"].tpot_ms < 6.2 * 0.75
