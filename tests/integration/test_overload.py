"""Overload on the real stack (dummy-tiny, one node): a burst several times what the node's
engine slots hold is refused early (RESOURCE_EXHAUSTED with a retry-after, before the class's
TTFT target could pass), and the requests the stack admits meet their class's targets.

The standard class here is TTFT <= 3 s, TPOT <= 100 ms; the node's worker learns its step line
from a warm-up, and a burst of 160 concurrent requests of 64 tokens then meets engine slots of
at most 16 (max_seqs) that the TPOT rule may shrink further. The scheduler prices waits with
what the worker and the node measured there (the step line, the slot turnover).

Heartbeats come every 0.1 s, so several land while the burst is being routed: each is a
snapshot that may predate requests already routed, which the scheduler must keep counting
until a report lists their routes (strata.policy.scheduling.arrivals). Counting them only until
the next report admitted up to 100 of the burst here, with TTFTs near 5 s.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import grpc
import pytest

from strata.client.sdk import AsyncClient, Client
from strata.core import defaults
from strata.rpc.channels import sync_channel
from strata.telemetry import names
from strata.v1 import scheduler_pb2, scheduler_pb2_grpc
from tests.integration.conftest import running_stack

pytestmark = pytest.mark.integration
MODEL = "dummy-tiny"
TTFT_MS, TPOT_MS = 3000.0, 100.0
CLASSES = f"interactive=500/50@2,standard={TTFT_MS:.0f}/{TPOT_MS:.0f},batch=best-effort"
OVERRIDES = {
    "placement": {"STRATA_MODELS": MODEL, "STRATA_REPLAN_INTERVAL_S": "1.0"},
    # Admission allows estimates up to 70% of the TTFT target (85% by default): the client's
    # 320 streams share this machine's two cores with the stack, and the burst's own load
    # slows the engine past the warm-up its estimates are priced by.
    "scheduler": {"STRATA_HEARTBEAT_INTERVAL_S": "0.1", "STRATA_SLA_SLACK": "0.7"},
    "node": {
        "STRATA_HEARTBEAT_INTERVAL_S": "0.1",
        "STRATA_TORCH_THREADS": "1",
        "STRATA_MAX_SEQS": "16",
        "STRATA_NODE_STANDBY": "0",
    },
    "gateway": {
        "STRATA_SLA_CLASSES": CLASSES,
        "STRATA_RATE_LIMIT_RPS": "1000",
        "STRATA_RATE_LIMIT_BURST": "1000",
    },  # fmt: skip
    "metrics": {"STRATA_SLA_CLASSES": CLASSES},
}
BURST = 320
MAX_TOKENS = 64
PROMPT = "the quick brown fox jumps over the lazy dog " * 6


@dataclass
class Outcome:
    code: grpc.StatusCode | None = None  # None: completed
    retry_after_ms: int | None = None
    ended_s: float = 0.0  # from sending to the refusal or the stream's end
    ttft_s: float | None = None
    tpot_s: float | None = None


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with running_stack(tmp_path_factory.mktemp("overload"), OVERRIDES) as s:
        yield s


async def one(client: AsyncClient, i: int) -> Outcome:
    out = Outcome()
    sent = time.monotonic()
    times = []
    try:
        async for chunk in client.generate(
            MODEL, f"{i} {PROMPT}", max_tokens=MAX_TOKENS, ignore_eos=True, timeout=240
        ):
            if chunk.token_ids:
                times.extend([time.monotonic()] * len(chunk.token_ids))
    except grpc.aio.AioRpcError as err:
        out.code = err.code()
        for key, value in err.trailing_metadata() or ():
            if key == names.RETRY_AFTER_METADATA:
                out.retry_after_ms = int(value)
    out.ended_s = time.monotonic() - sent
    if out.code is None and times:
        out.ttft_s = times[0] - sent
        if len(times) > 1:
            out.tpot_s = (times[-1] - times[0]) / (len(times) - 1)
    return out


async def burst(address: str, key: str, n: int) -> list[Outcome]:
    async with AsyncClient(address, key) as client:
        return await asyncio.gather(*(one(client, i) for i in range(n)))


def measured(nodes) -> bool:
    """The scheduler holds the replica's learned line and slot turnover, and no slot."""
    replicas = [r for n in nodes for r in n.replicas if r.model == MODEL]
    return bool(replicas) and all(
        r.step_line_samples > 0 and r.slot_turnover_s > 0 and r.slot_requests == 0 for r in replicas
    )


def test_a_burst_is_refused_early_and_what_is_admitted_meets_its_targets(stack):
    key = (stack.data_dir / defaults.DEMO_KEY_FILE).read_text().strip()
    gateway = stack.addr("gateway")
    deadline = time.monotonic() + 240
    with Client(gateway, key) as c:
        while MODEL not in {m.name for m in c.list_models()}:
            assert time.monotonic() < deadline, f"{MODEL} never became ready:\n{stack.logs()}"
            time.sleep(0.3)
    # Warm-up: the worker learns its step line from real batches, and the node its slot
    # turnover; the burst comes once the scheduler has both and the warm-up has left. Before
    # any step is measured admission prices with the worker's conservative prior line, so it
    # may refuse part of the warm-up: refusals only, and a wave of the engine's slots served.
    warm = asyncio.run(burst(gateway, key, 48))
    codes = [o.code for o in warm]
    assert set(codes) <= {None, grpc.StatusCode.RESOURCE_EXHAUSTED}, codes
    assert codes.count(None) >= 16, codes
    with sync_channel(stack.addr("scheduler"), stack.identity) as ch:
        scheduler = scheduler_pb2_grpc.SchedulerStub(ch)
        while not measured(scheduler.ListNodes(scheduler_pb2.ListNodesRequest()).nodes):
            assert time.monotonic() < deadline + 240, f"never measured:\n{stack.logs()}"
            time.sleep(0.3)

    outcomes = asyncio.run(burst(gateway, key, BURST))
    refused = [o for o in outcomes if o.code is not None]
    served = [o for o in outcomes if o.code is None]
    assert {o.code for o in refused} <= {grpc.StatusCode.RESOURCE_EXHAUSTED}, (
        [o.code for o in refused],
        stack.logs(),
    )
    assert refused, "a burst twenty times the engine's slots was admitted whole"
    assert served, "the burst was refused whole"
    # Refused early, with a hint: not after waiting in a queue until the target had passed.
    assert all(o.retry_after_ms and o.retry_after_ms > 0 for o in refused)
    assert sorted(o.ended_s for o in refused)[len(refused) // 2] < TTFT_MS / 1000
    # What was admitted meets its class's targets: `make bench-overload` measures the 90%
    # the issue asks; on a busy 2-core machine running the whole stack and the client, a
    # burst's own load makes it slower than the warm-up it was priced by, so this test holds
    # a floor under that (70%) and a ceiling on lateness that admitting the whole burst (ten
    # waves of the engine's slots, TTFT near 3x the target) could not keep.
    met = [
        o
        for o in served
        if o.ttft_s is not None
        and o.ttft_s <= TTFT_MS / 1000
        and (o.tpot_s is None or o.tpot_s <= TPOT_MS / 1000)
    ]
    ttfts = sorted(round(o.ttft_s or -1, 2) for o in served)
    summary = f"{len(met)} of {len(served)} admitted met the targets ({len(refused)} refused)"
    assert len(met) >= 0.7 * len(served), f"{summary}; TTFTs {ttfts}"
    assert ttfts[-1] <= 1.5 * TTFT_MS / 1000, f"{summary}; TTFTs {ttfts}"
