"""KV tier store in-process on port 0: prefix semantics, checksums, LRU eviction, bad hashes,
stats; then the real engine path (TierClient + TierLink) offloading and loading blocks back."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from services.kvstore.servicer import KVStoreServicer
from strata.engine.engine import EngineRequest
from strata.engine.sequence import SamplingParams
from strata.engine.tier_link import TierLink
from strata.kvtier.client import TierClient
from strata.kvtier.hashing import checksum, to_bytes
from strata.kvtier.host_tier import HostTier
from strata.rpc.server import Registration, channel, start_server
from strata.rpc.v1 import kvstore_pb2, kvstore_pb2_grpc
from tests.engine_helpers import run_to_end, tiny_engine


async def serve(tier: HostTier):
    servicer = KVStoreServicer(tier)
    return await start_server([Registration(
        add=lambda s: kvstore_pb2_grpc.add_KVStoreServicer_to_server(servicer, s),
        service_name=kvstore_pb2.DESCRIPTOR.services_by_name["KVStore"].full_name)])


@pytest.fixture
def tier(request) -> HostTier:
    return HostTier(getattr(request, "param", 1 << 20))


@pytest.fixture
async def store(tier):
    running = await serve(tier)
    ch = channel(running.address)
    yield kvstore_pb2_grpc.KVStoreStub(ch)
    await ch.close()
    await running.stop(0)


def block(h: int, data: bytes, layout: str = "float32:1x2x4x1x2") -> kvstore_pb2.KVBlock:
    return kvstore_pb2.KVBlock(block_hash=to_bytes(h), layout=layout, data=data,
                               checksum=checksum(data))


def hashes(*hs: int) -> list[bytes]:
    return [to_bytes(h) for h in hs]


async def put(stub, *blocks: kvstore_pb2.KVBlock) -> tuple[int, int]:
    reply = await stub.PutBlocks(kvstore_pb2.PutBlocksRequest(blocks=blocks))
    return reply.stored, reply.evicted


async def prefix(stub, *hs: int) -> int:
    return (await stub.Lookup(kvstore_pb2.LookupRequest(block_hashes=hashes(*hs)))).prefix_blocks


async def stats(stub) -> tuple[int, ...]:
    s = await stub.GetStats(kvstore_pb2.KVStatsRequest())
    return (s.blocks, s.bytes_used, s.bytes_capacity, s.hits, s.misses, s.evictions,
            s.checksum_failures)


async def test_put_lookup_get_round_trip_stops_at_the_first_missing_hash(store):
    a, b, c = block(1, b"a" * 10), block(2, b"b" * 20), block(3, b"c" * 30, layout="other")
    assert await put(store, a, b, c) == (3, 0)
    assert await prefix(store, 1, 2, 3) == 3
    assert await prefix(store, 1, 9, 3) == 1       # 3 is stored, but 9 ends the prefix
    assert await prefix(store, 9, 1) == 0
    reply = await store.GetBlocks(kvstore_pb2.GetBlocksRequest(block_hashes=hashes(1, 2, 3)))
    assert [(b.block_hash, b.layout, b.data, b.checksum) for b in reply.blocks] == [
        (x.block_hash, x.layout, x.data, x.checksum) for x in (a, b, c)]
    reply = await store.GetBlocks(kvstore_pb2.GetBlocksRequest(block_hashes=hashes(1, 9, 3)))
    assert [b.data for b in reply.blocks] == [b"a" * 10]
    # blocks, bytes used, capacity, hits (1+2+3 then 1), misses (the 9), evictions, failures
    assert await stats(store) == (3, 60, 1 << 20, 4, 1, 0, 0)


async def test_block_with_a_wrong_checksum_is_rejected(store):
    bad = block(7, b"payload")
    bad.checksum ^= 1
    assert await put(store, bad, block(8, b"good")) == (1, 0)
    assert await prefix(store, 7) == 0
    assert await prefix(store, 8) == 1
    assert await stats(store) == (1, 4, 1 << 20, 0, 0, 0, 0)


@pytest.mark.parametrize("tier", [300], indirect=True)
async def test_lru_eviction_in_a_300_byte_store(store):
    assert await put(store, *(block(h, bytes([h]) * 100) for h in (1, 2, 3))) == (3, 0)
    await store.GetBlocks(kvstore_pb2.GetBlocksRequest(block_hashes=hashes(1)))  # 1 is now MRU
    assert await put(store, block(4, b"d" * 100)) == (1, 1)
    assert [await prefix(store, h) for h in (1, 2, 3, 4)] == [1, 0, 1, 1]
    # 250 bytes fit only after all three 100-byte blocks leave
    assert await put(store, block(5, b"e" * 250)) == (1, 3)
    assert [await prefix(store, h) for h in (1, 3, 4, 5)] == [0, 0, 0, 1]
    assert await put(store, block(6, b"f" * 301)) == (0, 0)     # larger than the whole store
    assert await stats(store) == (1, 250, 300, 1, 0, 4, 0)


async def test_a_block_corrupted_in_the_store_ends_the_prefix_and_is_dropped(store, tier):
    assert await put(store, block(1, b"a" * 10), block(2, b"b" * 10), block(3, b"c" * 10)) == (
        3, 0)
    # Memory corruption behind the store's back: the checksum taken at put time no longer fits.
    tier._blocks[2].data = b"B" * 10
    reply = await store.GetBlocks(kvstore_pb2.GetBlocksRequest(block_hashes=hashes(1, 2, 3)))
    assert [b.data for b in reply.blocks] == [b"a" * 10]
    assert await prefix(store, 1, 2, 3) == 1
    assert await stats(store) == (2, 20, 1 << 20, 1, 0, 0, 1)


async def test_malformed_hashes_are_invalid_argument(store):
    seven = b"\x00" * 7
    calls = [
        store.PutBlocks(kvstore_pb2.PutBlocksRequest(blocks=[kvstore_pb2.KVBlock(
            block_hash=seven, data=b"x", checksum=checksum(b"x"))])),
        store.Lookup(kvstore_pb2.LookupRequest(block_hashes=[seven])),
        store.GetBlocks(kvstore_pb2.GetBlocksRequest(block_hashes=[to_bytes(1), seven])),
    ]
    for call in calls:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details() == "bad block hash: a block hash is 8 bytes, got 7"
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await store.Lookup(kvstore_pb2.LookupRequest(block_hashes=hashes(*range(4097))))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details() == "at most 4096 block hashes per call, got 4097"
    assert await stats(store) == (0, 0, 1 << 20, 0, 0, 0, 0)


def request(rid: str, prompt: list[int]) -> EngineRequest:
    return EngineRequest(request_id=rid, prompt_ids=prompt,
                         params=SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True))


async def test_engine_offloads_evicted_blocks_and_loads_them_back_on_a_repeat():
    running = await serve(HostTier(1 << 20))
    ch = channel(running.address)
    stub = kvstore_pb2_grpc.KVStoreStub(ch)
    client = TierClient(running.address)
    try:
        # 8 blocks of 4 tokens: a 20-token prompt plus 4 outputs (23 computed) takes 6 of them
        engine = tiny_engine(num_blocks=8, block_size=4, tier=TierLink(client))
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
        assert (await stub.GetStats(kvstore_pb2.KVStatsRequest())).blocks == 5

        engine.add_request(request("again", prompt))
        outputs = []

        def run_collecting() -> None:
            while engine.has_work():
                outputs.extend(engine.step())

        await asyncio.to_thread(run_collecting)
        last = outputs[-1]
        assert last.finished
        # (20 - 1) // 4 = 4 full prompt blocks are hashed; all four come back from the store
        assert (last.tier_tokens, last.cached_tokens) == (16, 0)
        assert [t for o in outputs for t in o.token_ids] == first
        assert engine.stats.tier_hit_tokens == 16
        assert (await stub.GetStats(kvstore_pb2.KVStatsRequest())).hits == 4
    finally:
        await ch.close()
        client.close()
        await running.stop(0)
