"""KV tier store in-process on port 0 over a real shared-memory segment (in a temp folder) and a
real disk tier: byte path, checksums, bad input, the shared-memory slot protocol through the real
TierClient, demotion to disk and promotion back, one copy per node, cross-node pulls, events to
the scheduler; then the engine path (TierClient + TierLink) offloading and loading blocks back."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from services.kvstore.events import EventPublisher
from services.kvstore.peers import PeerPuller
from services.kvstore.servicer import KVStoreServicer
from strata.engine.engine import EngineRequest
from strata.engine.sequence import SamplingParams
from strata.engine.tier_link import TierLink
from strata.kvtier.client import TierClient
from strata.kvtier.disk_tier import DiskTier
from strata.kvtier.hashing import checksum, to_bytes
from strata.kvtier.shm_segment import ShmSegment
from strata.kvtier.tiered_store import Tier, TieredStore
from strata.policy.kv_tiering import LRUPolicy
from strata.rpc.server import Registration, channel, start_server
from strata.v1 import kvstore_pb2, kvstore_pb2_grpc, scheduler_pb2, scheduler_pb2_grpc
from tests.engine_helpers import run_to_end, tiny_engine

SLAB = 4096


class Store:
    def __init__(self, tmp_path, name: str, host_bytes: int, disk_bytes: int):
        self.segment = ShmSegment(tmp_path / f"{name}.shm", host_bytes, create=True)
        self.disk = DiskTier(tmp_path / f"{name}-disk", disk_bytes) if disk_bytes else None
        self.tiered = TieredStore(
            self.segment, min(SLAB, host_bytes), self.disk, LRUPolicy(), time.monotonic
        )
        self.peer_channels: list[grpc.aio.Channel] = []
        self.peers = PeerPuller(self.tiered, self._open_peer)
        self.servicer = KVStoreServicer(self.tiered, self.peers, str(self.segment.path))

    def _open_peer(self, address: str) -> grpc.aio.Channel:
        ch = channel(address)
        self.peer_channels.append(ch)
        return ch

    async def start(self, bind: str = "127.0.0.1:0"):
        self.running = await start_server(
            [
                Registration(
                    add=lambda s: kvstore_pb2_grpc.add_KVStoreServicer_to_server(self.servicer, s),
                    service_name=kvstore_pb2.DESCRIPTOR.services_by_name["KVStore"].full_name,
                )
            ],
            bind=bind,
        )
        self.channel = channel(self.running.address)
        # Connected before the first call: a fresh channel to a port an earlier test's server
        # used may start in that address's connection backoff.
        await asyncio.wait_for(self.channel.channel_ready(), 240)
        self.stub = kvstore_pb2_grpc.KVStoreStub(self.channel)
        return self

    async def stop(self):
        await self.peers.close()
        await self.channel.close()
        await self.running.stop(0)
        if self.disk is not None:
            self.disk.close()
        self.segment.close()


@pytest.fixture
async def make_store(tmp_path):
    made = []

    async def _make(host_bytes: int = 64 * 1024, disk_bytes: int = 0, name: str = "a"):
        store = await Store(tmp_path, name, host_bytes, disk_bytes).start()
        made.append(store)
        return store

    yield _make
    for store in made:
        await store.stop()


def block(h: int, data: bytes, layout: str = "float32:1x2x4x1x2") -> kvstore_pb2.KVBlock:
    return kvstore_pb2.KVBlock(
        block_hash=to_bytes(h), layout=layout, data=data, checksum=checksum(data)
    )


def hashes(*hs: int) -> list[bytes]:
    return [to_bytes(h) for h in hs]


async def prefix(stub, *hs: int) -> tuple[int, int, int]:
    r = await stub.Lookup(kvstore_pb2.LookupRequest(block_hashes=hashes(*hs)))
    return r.prefix_blocks, r.host_blocks, r.disk_blocks


async def test_byte_path_round_trip_stops_at_the_first_missing_hash(make_store):
    s = await make_store()
    a, b, c = block(1, b"a" * 1024), block(2, b"b" * 1024), block(3, b"c" * 512, layout="x")
    bad = block(4, b"d" * 1024)
    bad.checksum ^= 1
    reply = await s.stub.PutBlocks(kvstore_pb2.PutBlocksRequest(blocks=[a, b, c, bad]))
    assert reply.stored == 3  # the bad checksum is refused
    assert await prefix(s.stub, 1, 2, 3, 4) == (3, 3, 0)
    assert await prefix(s.stub, 1, 9, 3) == (1, 1, 0)
    got = await s.stub.GetBlocks(kvstore_pb2.GetBlocksRequest(block_hashes=hashes(1, 2, 9, 3)))
    assert [(x.block_hash, x.layout, x.data) for x in got.blocks] == [
        (y.block_hash, y.layout, y.data) for y in (a, b)
    ]
    stats = await s.stub.GetStats(kvstore_pb2.KVStatsRequest())
    assert (stats.blocks, stats.bytes_used, stats.hits, stats.misses, stats.checksum_failures) == (
        3,
        2560,
        2,
        1,
        1,
    )
    assert [(t.tier, t.blocks) for t in stats.tiers] == [("host", 3), ("disk", 0)]


async def test_bad_input_is_invalid_argument_with_a_sentence(make_store):
    s = await make_store()
    seven = b"\x00" * 7
    cases = [
        (
            s.stub.Lookup(kvstore_pb2.LookupRequest(block_hashes=[seven])),
            "bad block hash: a block hash is 8 bytes, got 7",
        ),
        (
            s.stub.Lookup(kvstore_pb2.LookupRequest(block_hashes=hashes(*range(4097)))),
            "at most 4096 block hashes per call, got 4097",
        ),
        (
            s.stub.Reserve(kvstore_pb2.ReserveRequest(block_bytes=1024, count=0)),
            "count must be between 1 and 1024, got 0",
        ),
        (
            s.stub.Reserve(kvstore_pb2.ReserveRequest(block_bytes=SLAB + 1, count=1)),
            "a 4097-byte block does not fit this store's 4096-byte slabs; raise "
            "STRATA_KVSTORE_SLAB_BYTES or use the byte path",
        ),
        (
            s.stub.NoteDeviceBlocks(kvstore_pb2.DeviceBlocksRequest(stored=[1])),
            "worker_id is required: device blocks are tracked per worker",
        ),
        (
            s.stub.Pull(kvstore_pb2.PullRequest(block_hashes=[1])),
            "peer_address is required: the store to pull blocks from",
        ),
    ]
    for call, message in cases:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details() == message


async def test_shared_memory_slots_commit_verify_and_hand_over(make_store):
    s = await make_store()
    client = await asyncio.to_thread(TierClient, s.running.address, worker_id="w1")
    try:
        assert client.shared_memory
        client.prepare(1024)
        await asyncio.to_thread(client.flush)
        payloads = {h: bytes([h]) * 1024 for h in (11, 12, 13)}
        for h, data in payloads.items():
            offset, view = client.take_slot(1024)
            view[:] = data
            client.commit_slot(offset, h, "L", 1024)
        client.note_device([99], [])
        await asyncio.to_thread(client.flush)
        assert client.offloaded == 3 and client.dropped == 0
        assert await prefix(s.stub, 11, 12, 13) == (3, 3, 0)

        fetched, lease = await asyncio.to_thread(client.acquire, [11, 12, 13, 14])
        assert [bytes(f.data) for f in fetched] == list(payloads.values()) and lease
        stats = await s.stub.GetStats(kvstore_pb2.KVStatsRequest())
        assert stats.pinned_blocks == 3
        # 3 blocks in the store plus 1 on the worker's device: 4 distinct blocks on the node
        assert (stats.node_blocks, stats.device_blocks) == (4, 1)
        client.release(lease, moved=True)
        client.note_device([11, 12, 13], [])
        await asyncio.to_thread(client.flush)
        stats = await s.stub.GetStats(kvstore_pb2.KVStatsRequest())
        # handed over: the store freed its copies; the node still holds each block once
        assert (stats.blocks, stats.pinned_blocks, stats.node_blocks) == (0, 0, 4)
    finally:
        await asyncio.to_thread(client.close)


async def test_a_restarted_store_is_reattached_and_the_old_slots_forgotten(tmp_path):
    first = await Store(tmp_path, "r", 64 * 1024, 0).start()
    address = first.running.address
    client = await asyncio.to_thread(TierClient, address, worker_id="w")
    second = None
    try:
        client.prepare(1024)
        await asyncio.to_thread(client.flush)
        slot, view = client.take_slot(1024)
        view[:] = b"\x01" * 1024
        client.commit_slot(slot, 1, "L", 1024)
        await asyncio.to_thread(client.flush)
        await first.stop()  # as a crash: its segment file goes away
        second = await Store(tmp_path, "r", 64 * 1024, 0).start(bind=address)
        deadline = time.monotonic() + 240
        while client.reattached == 0:
            assert time.monotonic() < deadline, "the client never mapped the new segment"
            client.note_device([], [])  # wakes the background thread
            await asyncio.sleep(0.05)
        await asyncio.to_thread(client.flush)
        slot, view = client.take_slot(1024)
        view[:] = b"\x02" * 1024
        client.commit_slot(slot, 2, "L", 1024)
        await asyncio.to_thread(client.flush)
        fetched, lease = await asyncio.to_thread(client.acquire, [2])
        assert [bytes(f.data) for f in fetched] == [b"\x02" * 1024] and lease
        client.release(lease, moved=False)
        await asyncio.to_thread(client.flush)
    finally:
        await asyncio.to_thread(client.close)
        if second is not None:
            await second.stop()


async def test_a_full_host_tier_demotes_to_disk_and_promotes_back(make_store):
    s = await make_store(host_bytes=4 * 1024, disk_bytes=64 * 1024)
    blocks = [block(h, bytes([h]) * 1024) for h in range(1, 7)]
    for b in blocks:
        await s.stub.PutBlocks(kvstore_pb2.PutBlocksRequest(blocks=[b]))
    assert await prefix(s.stub, *range(1, 7)) == (6, 4, 2)  # the two oldest sank to disk
    assert s.tiered.tier_of(1) is Tier.DISK and s.tiered.tier_of(6) is Tier.HOST
    reply = await s.stub.Acquire(kvstore_pb2.AcquireRequest(block_hashes=[1, 2, 3], promote=True))
    assert [p.block_hash for p in reply.blocks] == [1, 2, 3]
    assert bytes(s.segment.read(reply.blocks[0].offset, 1024)) == b"\x01" * 1024
    stats = await s.stub.GetStats(kvstore_pb2.KVStatsRequest())
    # still six blocks, each in exactly one tier
    assert stats.blocks == 6 and sum(t.blocks for t in stats.tiers) == 6
    # 1, 2 and 3 came up; each pushed the least recently used host block (3, 4, 5) down
    assert {t.tier: t.migrations_in for t in stats.tiers} == {"host": 3, "disk": 5}
    await s.stub.Release(kvstore_pb2.ReleaseRequest(lease_ids=[reply.lease_id]))


async def test_prefetch_queues_promotions_without_waiting(make_store):
    s = await make_store(host_bytes=2 * 1024, disk_bytes=64 * 1024)
    for h in (1, 2, 3, 4):
        await s.stub.PutBlocks(kvstore_pb2.PutBlocksRequest(blocks=[block(h, bytes([h]) * 1024)]))
    assert await prefix(s.stub, 1, 2) == (2, 0, 2)
    reply = await s.stub.Prefetch(kvstore_pb2.PrefetchRequest(block_hashes=[1, 2]))
    assert (reply.host_blocks, reply.queued_promotions) == (0, 2)
    await asyncio.to_thread(s.tiered.run_once)  # the migrator's next round
    assert await prefix(s.stub, 1, 2) == (2, 2, 0)


async def test_a_store_pulls_a_prefix_from_a_peer_node(make_store):
    a = await make_store(name="a")
    b = await make_store(name="b")
    data = [bytes([h]) * 1024 for h in (1, 2, 3)]
    await a.stub.PutBlocks(
        kvstore_pb2.PutBlocksRequest(blocks=[block(h, d) for h, d in zip((1, 2, 3), data)])
    )
    await b.stub.PutBlocks(kvstore_pb2.PutBlocksRequest(blocks=[block(1, data[0])]))
    reply = await b.stub.Pull(
        kvstore_pb2.PullRequest(peer_address=a.running.address, block_hashes=[1, 2, 3, 4])
    )
    assert reply.pulled == 2  # 1 was there already, 4 nowhere
    got = await b.stub.GetBlocks(kvstore_pb2.GetBlocksRequest(block_hashes=hashes(1, 2, 3)))
    assert [x.data for x in got.blocks] == data
    assert (await b.stub.GetStats(kvstore_pb2.KVStatsRequest())).peer_blocks_pulled == 2
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await b.stub.Pull(kvstore_pb2.PullRequest(peer_address="127.0.0.1:1", block_hashes=[7]))
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert err.value.details().startswith("peer store 127.0.0.1:1 failed: UNAVAILABLE")
    # One channel per peer, reused, and closed with the store.
    await b.stub.Pull(kvstore_pb2.PullRequest(peer_address=a.running.address, block_hashes=[3]))
    assert len(b.peer_channels) == 2
    await b.peers.close()
    for ch in b.peer_channels:
        assert ch.get_state() is grpc.ChannelConnectivity.SHUTDOWN


class _FakeScheduler(scheduler_pb2_grpc.SchedulerServicer):
    def __init__(self):
        self.reports: list[scheduler_pb2.KVEventsRequest] = []
        self.ask_reset = False

    async def ReportKVEvents(self, request, context):
        self.reports.append(request)
        ask, self.ask_reset = self.ask_reset, False
        return scheduler_pb2.KVEventsResponse(need_reset=ask)


async def test_events_reach_the_scheduler_as_a_reset_then_deltas(make_store):
    s = await make_store()
    fake = _FakeScheduler()
    sched = await start_server(
        [
            Registration(
                add=lambda srv: scheduler_pb2_grpc.add_SchedulerServicer_to_server(fake, srv),
                service_name=scheduler_pb2.DESCRIPTOR.services_by_name["Scheduler"].full_name,
            )
        ]
    )
    pub = EventPublisher(s.tiered, [sched.address], "node-7", "10.0.0.7:50054", 0.05)
    try:
        await s.stub.PutBlocks(kvstore_pb2.PutBlocksRequest(blocks=[block(5, b"e" * 1024)]))
        await pub.publish_once()
        await s.stub.PutBlocks(kvstore_pb2.PutBlocksRequest(blocks=[block(6, b"f" * 1024)]))
        s.tiered.note_device("w", [7], [], reset=False)
        fake.ask_reset = True
        await pub.publish_once()
        await pub.publish_once()  # nothing changed, but a reset was asked for
        first, second, third = fake.reports
        assert (
            first.node_id,
            first.store_address,
            first.sequence,
            first.reset,
            list(first.stored),
        ) == ("node-7", "10.0.0.7:50054", 1, True, [5])
        assert (second.sequence, second.reset, list(second.stored)) == (2, False, [6, 7])
        assert (third.sequence, third.reset, list(third.stored)) == (3, True, [5, 6, 7])
    finally:
        await pub.close()
        await sched.stop(0)


def request(rid: str, prompt: list[int]) -> EngineRequest:
    return EngineRequest(
        request_id=rid,
        prompt_ids=prompt,
        params=SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True),
    )


async def test_engine_offloads_evicted_blocks_and_loads_them_back_on_a_repeat(make_store):
    s = await make_store(host_bytes=256 * 1024)
    client = await asyncio.to_thread(TierClient, s.running.address, worker_id="w")
    try:
        # 8 blocks of 4 tokens: a 20-token prompt plus 4 outputs (23 computed) takes 6 of them
        engine = tiny_engine(num_blocks=8, block_size=4, tier=TierLink(client))
        await asyncio.to_thread(client.flush)  # reserved slots are in place
        prompt = list(range(10, 30))
        # TierClient is a blocking client of a server on this event loop: steps run in a thread.
        engine.add_request(request("first", prompt))
        first = (await asyncio.to_thread(run_to_end, engine))["first"]
        assert len(first) == 4
        # 28 + 4 tokens need all 8 blocks: every cached block of the first request is evicted
        engine.add_request(request("other", list(range(100, 128))))
        await asyncio.to_thread(run_to_end, engine)
        await asyncio.to_thread(client.flush)
        # the first request's 5 full blocks stayed cached until "other" evicted them
        assert (client.offloaded, client.dropped, client.failed) == (5, 0, 0)
        assert (await s.stub.GetStats(kvstore_pb2.KVStatsRequest())).blocks == 5

        engine.add_request(request("again", prompt))
        outputs = []

        def run_collecting() -> None:
            while engine.has_work():
                outputs.extend(engine.step())

        await asyncio.to_thread(run_collecting)
        await asyncio.to_thread(client.flush)
        last = outputs[-1]
        assert last.finished
        # (20 - 1) // 4 = 4 full prompt blocks are hashed; all four come back from the store
        assert (last.tier_tokens, last.cached_tokens) == (16, 0)
        assert [t for o in outputs for t in o.token_ids] == first
        stats = await s.stub.GetStats(kvstore_pb2.KVStatsRequest())
        assert stats.hits == 4 and stats.pinned_blocks == 0
    finally:
        await asyncio.to_thread(client.close)


async def test_a_request_with_a_kv_source_pulls_the_prefix_from_the_peer_node(make_store):
    """Node A computed a prompt; the scheduler routes a repeat to node B naming A's store as the
    source: B's worker prefetches with the peer, B's store pulls, and B loads instead of
    recomputing."""
    a = await make_store(host_bytes=256 * 1024, name="a")
    b = await make_store(host_bytes=256 * 1024, name="b")
    client_a = await asyncio.to_thread(TierClient, a.running.address, worker_id="a")
    client_b = await asyncio.to_thread(TierClient, b.running.address, worker_id="b")
    try:
        prompt = list(range(10, 30))
        engine_a = tiny_engine(num_blocks=8, block_size=4, tier=TierLink(client_a))
        engine_a.add_request(request("first", prompt))
        first = (await asyncio.to_thread(run_to_end, engine_a))["first"]
        engine_a.add_request(request("evict", list(range(100, 128))))  # push it to A's store
        await asyncio.to_thread(run_to_end, engine_a)
        await asyncio.to_thread(client_a.flush)
        assert (await a.stub.GetStats(kvstore_pb2.KVStatsRequest())).blocks == 5

        engine_b = tiny_engine(num_blocks=8, block_size=4, tier=TierLink(client_b))
        req = request("repeat", prompt)
        req.kv_source = a.running.address
        engine_b.add_request(req)
        await asyncio.to_thread(client_b.flush)  # the prefetch went out
        for _ in range(100):  # the pull runs in B's store
            if (await b.stub.GetStats(kvstore_pb2.KVStatsRequest())).peer_blocks_pulled == 4:
                break
            await asyncio.sleep(0.05)
        outputs = []

        def run_collecting() -> None:
            while engine_b.has_work():
                outputs.extend(engine_b.step())

        await asyncio.to_thread(run_collecting)
        assert outputs[-1].tier_tokens == 16  # 4 blocks came from node A, via B
        assert [t for o in outputs for t in o.token_ids] == first
    finally:
        await asyncio.to_thread(client_a.close)
        await asyncio.to_thread(client_b.close)
