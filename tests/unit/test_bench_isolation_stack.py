"""The isolation benchmark's stack runner, the parts without processes: one row per request
(retries counted once, from the first attempt), the static partition, each way's settings."""

import pytest

from benchmarks.isolation.stack_rows import merge_rows
from benchmarks.isolation.stack_ways import (
    PoolSettings,
    static_partitions,
    way_overrides,
)
from benchmarks.isolation.workload import TenantSpec
from strata.core.records import RequestRecord
from strata.core.sla import SlaTable
from strata.eval.client_metrics import ClientRecord
from strata.eval.traces import TraceRequest

ORIGIN = 1_700_000_000_000
TENANTS = [
    TenantSpec("chat", "interactive", 0.35),
    TenantSpec("api", "standard", 0.35),
    TenantSpec("noisy", "standard", 0.15, aggressor=True),
    TenantSpec("bulk", "batch", 0.15),
]


def gateway_row(
    request_id: str, tenant: str, start_ms: int, ttft: float | None, e2e: float, error: str = ""
) -> RequestRecord:
    return RequestRecord(
        request_id=request_id,
        trace_id="t" + request_id,
        tenant=tenant,
        model="dummy-tiny",
        start_unix_ms=start_ms,
        ttft_ms=ttft,
        tpot_ms=5.0,
        e2e_ms=e2e,
        queue_ms=1.0,
        prompt_tokens=10,
        completion_tokens=4,
        cached_tokens=0,
        finish_reason="length",
        error_code=error,
        status_code=2 if error else 0,
        run_id=1,
    )


def test_a_retried_request_is_one_row_from_its_first_attempt():
    records = [
        # served on its third attempt (1.0, 1.2, 1.5 s): the gateway measured 40/200 ms
        ClientRecord(
            0,
            "chat",
            1.0,
            1.0,
            10,
            4,
            request_id="r0",
            ttft_s=0.54,
            e2e_s=0.7,
            finished_s=1.7,
            output_tokens=4,
        ),
        # refused twice, then given up: no request id reached the client
        ClientRecord(
            1,
            "noisy",
            2.0,
            2.0,
            10,
            4,
            status="RESOURCE_EXHAUSTED",
            error="over its share",
            finished_s=2.3,
        ),
        # served at once, but its span never reached the store
        ClientRecord(
            2,
            "api",
            3.0,
            3.0,
            10,
            4,
            request_id="r2",
            ttft_s=0.05,
            e2e_s=0.25,
            finished_s=3.25,
            output_tokens=4,
            prompt_tokens=11,
        ),
        ClientRecord(
            3,
            "api",
            4.0,
            4.0,
            10,
            4,
            request_id="r3",
            ttft_s=0.03,
            e2e_s=0.1,
            finished_s=4.1,
            output_tokens=4,
        ),
    ]
    attempts = {0: [1.0, 1.2, 1.5], 1: [2.0, 2.3]}
    rows = [
        gateway_row("r0", "chat", ORIGIN + 1500, 40.0, 200.0),
        gateway_row("x1", "chat", ORIGIN + 1000, None, 2.0, "RESOURCE_EXHAUSTED"),
        gateway_row("x2", "chat", ORIGIN + 1200, None, 2.0, "RESOURCE_EXHAUSTED"),
        gateway_row("r3", "api", ORIGIN + 4001, 30.0, 99.0),
    ]
    merged = merge_rows(records, attempts, rows, ORIGIN, "dummy-tiny")

    assert [
        (r.request_id, r.tenant, r.start_unix_ms, r.ttft_ms, r.e2e_ms, r.error_code)
        for r in merged.rows
    ] == [
        ("r0", "chat", ORIGIN + 1000, 540.0, 700.0, ""),
        ("client-1", "noisy", ORIGIN + 2000, None, pytest.approx(300.0), "RESOURCE_EXHAUSTED"),
        ("r2", "api", ORIGIN + 3000, 50.0, 250.0, ""),
        ("r3", "api", ORIGIN + 4001, 30.0, 99.0, ""),
    ]
    # the gateway's own figures are kept where it measured them
    assert (merged.rows[0].queue_ms, merged.rows[0].run_id) == (1.0, 1)
    assert (merged.rows[1].status_code, merged.rows[2].prompt_tokens, merged.rows[2].tpot_ms) == (
        2,
        11,
        pytest.approx(200 / 3),
    )
    assert merged.client_only == 1
    assert merged.refused_attempts == {"chat": 2, "noisy": 2}


def test_static_partition_keeps_the_victims_away_from_the_aggressor():
    trace = [
        TraceRequest(0.0, 600, 100, tenant="chat"),
        TraceRequest(0.1, 500, 100, tenant="api"),
        TraceRequest(0.2, 900, 300, tenant="noisy"),
        TraceRequest(0.3, 100, 100, tenant="bulk"),
    ]
    table = SlaTable()
    assert static_partitions(TENANTS, trace, table, ["node-0", "node-1"]) == {
        "chat": ["node-0"],
        "api": ["node-0"],
        "noisy": ["node-1"],
        "bulk": ["node-1"],
    }
    # 1300 of 2700 tokens protected: 4 nodes x 0.48 -> 2 for them, 2 for the rest
    assert static_partitions(TENANTS, trace, table, ["a", "b", "c", "d"]) == {
        "chat": ["a", "b"],
        "api": ["a", "b"],
        "noisy": ["c", "d"],
        "bulk": ["c", "d"],
    }
    with pytest.raises(ValueError, match="at least 2 nodes"):
        static_partitions(TENANTS, trace, table, ["node-0"])


def test_each_way_sets_the_scheduler_mode_and_the_node_queue():
    table = SlaTable()
    parts = {"chat": ["node-0"], "noisy": ["node-1"]}
    static = way_overrides("static", PoolSettings(), table, parts)
    assert static["scheduler"] == {
        "STRATA_SCHEDULER_MODE": "static",
        "STRATA_SCHEDULER_PARTITIONS": "chat=node-0;noisy=node-1",
    }
    assert static["node"]["STRATA_NODE_QUEUE"] == "fcfs"
    two_level = way_overrides("two-level", PoolSettings(), table, {})
    assert (
        two_level["scheduler"]["STRATA_SCHEDULER_MODE"],
        two_level["node"]["STRATA_NODE_QUEUE"],
        two_level["node"]["STRATA_TORCH_THREADS"],
        two_level["node"]["STRATA_NODE_STANDBY"],
        two_level["placement"]["STRATA_REPLICAS"],
    ) == ("two-level", "wfq", "1", "0", "2")
    assert (
        two_level["gateway"]["STRATA_SLA_CLASSES"]
        == two_level["metrics"]["STRATA_SLA_CLASSES"]
        == "interactive=500/100@2,standard=2000/200,batch=best-effort"
    )
    assert way_overrides("fcfs", PoolSettings(), table, {})["node"]["STRATA_NODE_QUEUE"] == "fcfs"
    with pytest.raises(ValueError, match="way must be one of"):
        way_overrides("round-robin", PoolSettings(), table, {})
