"""Reports the node's block set changes to the global scheduler (ReportKVEvents), so that
routing can prefer the node that already holds a request's prefix.

Reports are batched every interval and numbered; the first report, any report after a failed
call, and any report the scheduler asks for (need_reset: it restarted or saw a gap) carry the
whole block set instead of a delta, so a lost report can never leave the scheduler wrong for long.
"""

from __future__ import annotations

import asyncio
import logging

import grpc

from strata.kvtier.tiered_store import TieredStore
from strata.rpc.server import CHANNEL_OPTIONS
from strata.rpc.v1 import scheduler_pb2, scheduler_pb2_grpc

log = logging.getLogger(__name__)


class EventPublisher:
    def __init__(self, store: TieredStore, scheduler_addr: str, node_id: str,
                 store_address: str, interval_s: float):
        self.store = store
        self.node_id = node_id
        self.store_address = store_address
        self.interval_s = interval_s
        self.sequence = 0
        self.reports = 0
        self.failures = 0
        self._reset = True
        self._channel = grpc.aio.insecure_channel(scheduler_addr, options=CHANNEL_OPTIONS)
        self._stub = scheduler_pb2_grpc.SchedulerStub(self._channel)

    async def run(self) -> None:
        while True:
            await self.publish_once()
            await asyncio.sleep(self.interval_s)

    async def publish_once(self) -> None:
        reset = self._reset
        stored, removed = self.store.drain_events(reset)
        if not reset and not stored and not removed:
            return
        self.sequence += 1
        try:
            resp = await self._stub.ReportKVEvents(scheduler_pb2.KVEventsRequest(
                node_id=self.node_id, store_address=self.store_address, sequence=self.sequence,
                reset=reset, stored=stored, removed=removed), timeout=5.0)
        except grpc.aio.AioRpcError as err:
            self.failures += 1
            self._reset = True
            if self.failures == 1 or self.failures % 100 == 0:
                log.warning("reporting KV events to the scheduler failed (%s, %d so far); the "
                            "next report carries the whole block set", err.code().name,
                            self.failures)
            return
        self.reports += 1
        self._reset = resp.need_reset

    async def close(self) -> None:
        await self._channel.close()
