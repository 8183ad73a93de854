"""A fast-forward stretch's step arithmetic: which steps have started or ended by a time,
including at the exact boundaries, as a step-by-step count would say; alone on a GPU and
taking turns with other replicas; and the first token a stretch samples, stamped as the engine
stamps it."""

import random

from strata.core.profile import StepCosts
from strata.sim.replica import EngineLimits, SimReplica, Stretch
from strata.sim.workload import SimRequest


def _stretch(rng, steps, first, growth, end1, gap, gap_growth):
    return Stretch(
        steps=steps,
        batch=4,
        first_s=first,
        growth_s=growth,
        order=[],
        allocs=[(1, 0), (17, 1), (17, 0), (33, 0)],
        alloc_steps=[1, 17, 17, 33],
        end1_s=end1,
        gap_s=gap,
        gap_growth_s=gap_growth,
    )


def test_step_counts_match_a_step_by_step_count():
    rng = random.Random(5)
    for case in range(300):
        steps = rng.randint(2, 300)
        first, growth = rng.uniform(1e-4, 0.2), rng.choice([0.0, 1e-7, 1e-4])
        start = rng.uniform(0, 100)
        if case % 2:  # alone on the GPU
            st = _stretch(rng, steps, first, growth, start + first, first + growth, growth)
        else:  # second of three replicas taking turns
            others = [(rng.uniform(1e-4, 0.2), rng.choice([0.0, 1e-6])) for _ in range(2)]
            per_round = first + sum(a for a, _ in others)
            all_growth = growth + sum(g for _, g in others)
            before, before_growth = others[0][0] + first, others[0][1] + growth
            st = _stretch(
                rng, steps, first, growth, start + before, per_round + before_growth, all_growth
            )
            # its step j ends after j rounds of the first replica and j of its own, j - 1
            # of the third
            j = rng.randint(1, steps)
            expect = (
                start
                + sum(
                    others[0][0] + others[0][1] * (k - 1) + first + growth * (k - 1)
                    for k in range(1, j + 1)
                )
                + sum(others[1][0] + others[1][1] * (k - 1) for k in range(1, j))
            )
            assert abs(st.end_of(j) - expect) < 1e-9
        ends = [st.end_of(j) for j in range(1, steps + 1)]
        starts = [st.start_of(j) for j in range(1, steps + 1)]
        assert all(s < e for s, e in zip(starts, ends))
        times = [rng.uniform(starts[0] - 1, ends[-1] + 1) for _ in range(5)]
        times += [rng.choice(ends) for _ in range(3)] + [rng.choice(starts) for _ in range(3)]
        for t in times:
            assert st.ended_by(t) == sum(1 for e in ends if e <= t)
            assert st.count_before(t, False) == sum(1 for s in starts if s < t)
            assert st.count_before(t, True) == sum(1 for s in starts if s <= t)
    assert [st.allocated_by(k) for k in (0, 1, 16, 17, 40)] == [0, 1, 1, 3, 4]
    assert st.busy_of(3) == 3 * st.first_s + 3 * st.growth_s


def test_a_first_token_sampled_in_a_stretch_stamps_the_sequence_as_the_engine_does():
    # A 17-token prompt under a 16-token budget: the first step computes 16 tokens, so its
    # last prompt token goes with the decodes, and the stretch samples its first token. The
    # engine stamps Sequence.first_token_at there; the worker's step budget reads it (the slack
    # a decode lends the prefill beside it: strata.policy.scheduling.slo.decode_allowance_ms).
    costs = StepCosts(0.01, 0.001, 0.0, 0.0, 0.0)
    limits = EngineLimits(num_blocks=16, block_size=16, max_batched_tokens=16)
    replica = SimReplica("r0", "m", "n0", limits, costs)
    replica.add(SimRequest(0, 0.0, 17, 8, "m"), 0.0, 0.0, tpot_ms=100.0)
    seconds = replica.begin_step(0.0)
    assert seconds is not None
    replica.end_step(seconds)
    (seq,) = replica.scheduler.running
    assert (seq.num_pending, seq.num_output, seq.first_token_at) == (1, 0, None)
    (active,) = replica.active.values()
    st = replica.plan_stretch()
    assert st is not None
    replica.start_stretch(st, st.steps, seconds + st.first_s, st.first_s, st.growth_s)
    replica.finish_stretch()
    assert seq.first_token_at == active.first_token_s == st.end_of(1)
