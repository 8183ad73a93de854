"""Node samples: validation, storage once per node and millisecond, queries by time window,
on every store backend."""

import pytest

from strata.core.records import NodeSampleRecord
from strata.store.samples import (
    insert_samples,
    sample_time_range,
    samples_between,
)

pytest_plugins = ["tests.pg"]

T0 = 1_700_000_000_000


def sample(node: str, t: int, **fields) -> NodeSampleRecord:
    return NodeSampleRecord(node_id=node, unix_ms=T0 + t, **fields)


async def test_samples_stored_once_and_read_back_by_window(store):
    full = sample(
        "n1",
        1000,
        utilization=0.5,
        batch_tokens=300,
        batch_budget=2048,
        kv_blocks_device_used=7,
        kv_blocks_device_total=64,
        kv_blocks_host=3,
        kv_blocks_disk=1,
        running=2,
        waiting=4,
        preemptions=9,
        power_watts=120.5,
        energy_joules=4567.25,
        energy_source="rapl",
        prefix_hit_tokens=11,
        tier_hit_tokens=12,
        prompt_tokens=13,
    )
    async with store() as s:
        assert await sample_time_range(s) is None
        assert await insert_samples(s, [full, sample("n0", 0), sample("n0", 2000)]) == 3
        # A resent batch (lost reply) is stored once; the first copy wins.
        assert await insert_samples(s, [sample("n1", 1000, running=99), full]) == 1
        window = await samples_between(s, T0 + 1000, T0 + 2000)
        everything = await samples_between(s, 0, T0 * 2)
        span = await sample_time_range(s)
    assert window == [sample("n0", 2000), full]  # by node, then time
    assert [(x.node_id, x.unix_ms - T0) for x in everything] == [
        ("n0", 0),
        ("n0", 2000),
        ("n1", 1000),
    ]
    assert span == (T0, T0 + 2000)


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"node_id": ""}, "a node sample needs a node_id"),
        ({"unix_ms": 0}, "unix_ms must be a positive Unix time"),
        ({"utilization": 1.5}, "utilization is a fraction of time, at most 1, got 1.5"),
        ({"running": -1}, "running must not be negative, got -1"),
        ({"power_watts": float("nan")}, "power_watts must be a finite number"),
        ({"batch_tokens": 5, "batch_budget": 4}, "batch_tokens (5) cannot exceed batch_budget (4)"),
        ({"kv_blocks_device_used": 3}, "kv_blocks_device_used (3) cannot exceed"),
        ({"energy_source": "guess"}, "energy_source must be one of nvml, rapl, model, got 'guess'"),
    ],
)
def test_bad_samples_are_described(fields, message):
    base = {"node_id": "n", "unix_ms": T0}
    base.update(fields)
    assert message in NodeSampleRecord(**base).problem()
    assert NodeSampleRecord(node_id="n", unix_ms=T0).problem() is None
