"""Reports the node's block set changes to the global schedulers (ReportKVEvents), so that
routing can prefer the node that already holds a request's prefix.

Reports are batched every interval and numbered per scheduler; the first report, any report
after a failed call, and any report a scheduler asks for (need_reset: it restarted or saw a gap)
carry the whole block set instead of a delta, so a lost report can never leave a scheduler
wrong for long. With several schedulers side by side each gets every report; a delta is drained
from the store once and sent to all, and one that needs the whole set makes the next report a
whole set for all.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import grpc

from strata.kvtier.tiered_store import TieredStore
from strata.rpc.channels import channel
from strata.v1 import scheduler_pb2, scheduler_pb2_grpc

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Target:
    address: str
    channel: grpc.aio.Channel
    stub: scheduler_pb2_grpc.SchedulerStub
    sequence: int = 0
    failures: int = 0
    reset: bool = True


class EventPublisher:
    def __init__(
        self,
        store: TieredStore,
        scheduler_addrs: Sequence[str],
        node_id: str,
        store_address: str,
        interval_s: float,
    ):
        self.store = store
        self.node_id = node_id
        self.store_address = store_address
        self.interval_s = interval_s
        self.reports = 0
        self._targets = []
        for address in scheduler_addrs:
            ch = channel(address)
            self._targets.append(_Target(address, ch, scheduler_pb2_grpc.SchedulerStub(ch)))

    @property
    def failures(self) -> int:
        return sum(t.failures for t in self._targets)

    async def run(self) -> None:
        while True:
            await self.publish_once()
            await asyncio.sleep(self.interval_s)

    async def publish_once(self) -> None:
        reset = any(t.reset for t in self._targets)
        stored, removed = self.store.drain_events(reset)
        if not reset and not stored and not removed:
            return
        await asyncio.gather(*(self._send(t, reset, stored, removed) for t in self._targets))

    async def _send(self, t: _Target, reset: bool, stored: list[int], removed: list[int]) -> None:
        t.sequence += 1
        try:
            resp = await t.stub.ReportKVEvents(
                scheduler_pb2.KVEventsRequest(
                    node_id=self.node_id,
                    store_address=self.store_address,
                    sequence=t.sequence,
                    reset=reset,
                    stored=stored,
                    removed=removed,
                ),
                timeout=5.0,
            )
        except grpc.aio.AioRpcError as err:
            t.failures += 1
            t.reset = True
            if t.failures == 1 or t.failures % 100 == 0:
                log.warning(
                    "reporting KV events to the scheduler at %s failed (%s, %d so far); "
                    "the next report carries the whole block set",
                    t.address,
                    err.code().name,
                    t.failures,
                )
            return
        self.reports += 1
        t.reset = resp.need_reset

    async def close(self) -> None:
        for t in self._targets:
            await t.channel.close()
