"""The serving benchmark's transport floor (benchmarks.serving.floor): three bare grpc.aio
processes with the cluster's credential answer both ways, and the path's hops take longer than
one hop."""

from __future__ import annotations

from benchmarks.serving.floor import WAYS, measure_floor
from strata.security.secrets import ensure_secrets


def test_floor_measures_both_ways(tmp_path):
    secrets = tmp_path / "secrets"
    ensure_secrets(str(secrets))
    got = {f.way: f for f in measure_floor(str(secrets), 15)}
    assert set(got) == set(WAYS)
    for f in got.values():
        assert f.samples == 15
        assert 0 < f.ttft_p50_ms <= f.e2e_p50_ms
    # Three processes deep and a round trip more: never cheaper than one hop.
    assert got[WAYS[1]].ttft_p50_ms > got[WAYS[0]].ttft_p50_ms
