"""A fast-forward stretch's step arithmetic: which steps have started or ended by a time,
including at the exact boundaries, as a step-by-step count would say."""

import random

from strata.sim.replica import Stretch


def test_step_counts_match_a_step_by_step_count():
    rng = random.Random(5)
    for _ in range(200):
        st = Stretch(start_s=rng.uniform(0, 100), steps=rng.randint(2, 300), batch=4,
                     first_s=rng.uniform(1e-4, 0.2), growth_s=rng.choice([0.0, 1e-7, 1e-4]),
                     order=[], allocs=[(1, 0), (17, 1), (17, 0), (33, 0)],
                     alloc_steps=[1, 17, 17, 33])
        ends = [st.end_of(i) for i in range(st.steps + 1)]
        times = [rng.uniform(st.start_s - 1, ends[-1] + 1) for _ in range(5)]
        times += [ends[rng.randint(0, st.steps)] for _ in range(5)]
        for t in times:
            assert st.ended_by(t) == sum(1 for e in ends[1:] if e <= t)
            for inclusive in (False, True):
                starts = ends[:-1]
                want = sum(1 for s in starts if s < t or (inclusive and s == t))
                assert st.count_before(t, inclusive) == want
    assert [st.allocated_by(k) for k in (0, 1, 16, 17, 40)] == [0, 1, 1, 3, 4]
