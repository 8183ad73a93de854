"""Simulator requests: scaled like a replay, token ids that share exactly the trace's shared
blocks, and rate scaling by superposing shifted copies of a trace."""

import random

import pytest

from strata.eval.traces import TraceRequest
from strata.eval.workload import Scaling, Window
from strata.sim.workload import SimRequest, sim_requests, superpose


def test_requests_are_scaled_and_windowed_like_a_replay():
    trace = [
        TraceRequest(10.0, 1000, 90, hash_ids=(7, 8)),
        TraceRequest(0.0, 10, 3),
        TraceRequest(30.0, 5, 5),
    ]
    out = sim_requests(
        trace,
        Scaling(time_scale=2, length_scale=4, max_output=20, trace_block_tokens=512),
        Window(max_duration_s=10),
        "m",
        tenants=("x", "y"),
    )
    assert [
        (r.index, r.arrival_s, r.prompt_tokens, r.output_tokens, r.tenant, r.block_tokens)
        for r in out
    ] == [(0, 0.0, 3, 1, "x", 128), (1, 5.0, 250, 20, "y", 128)]
    assert out[1].hash_ids == (7, 8) and out[1].model == "m"


def test_prompt_ids_share_the_hash_blocks_and_nothing_else():
    a = SimRequest(0, 0.0, 40, 1, "m", hash_ids=(5, 6), block_tokens=16).prompt_ids()
    b = SimRequest(1, 0.0, 40, 1, "m", hash_ids=(5, 9), block_tokens=16).prompt_ids()
    c = SimRequest(2, 0.0, 40, 1, "m").prompt_ids()
    assert len(a) == len(b) == len(c) == 40
    assert a[:16] == b[:16] and a[16] != b[16]
    assert a[32:] != b[32:] and set(a[32:]).isdisjoint(c)
    assert len(set(c)) == 1 and all(0 < t < 2**31 for t in a + b + c)


def test_superpose_multiplies_the_rate_over_the_same_span():
    trace = [TraceRequest(float(t), 10 + t, 5, hash_ids=(t,)) for t in range(0, 100, 10)]
    out = superpose(trace, 2.5, random.Random(0))
    assert len(out) in range(22, 29)  # 2 whole copies and about half of a third
    assert all(0.0 <= r.arrival_s <= 90.0 for r in out)
    assert [r.arrival_s for r in out] == sorted(r.arrival_s for r in out)
    # the first copy is the trace itself; copies never share hash ids
    ids = [r.hash_ids[0] for r in out]
    assert len(set(ids)) == len(ids)
    assert superpose(trace, 1.0, random.Random(0)) == [
        TraceRequest(r.arrival_s, r.prompt_tokens, 5, hash_ids=(r.hash_ids[0],)) for r in trace
    ]
    with pytest.raises(ValueError, match="positive number"):
        superpose(trace, 0.0, random.Random(0))
