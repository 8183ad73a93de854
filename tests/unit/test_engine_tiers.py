"""The engine over tiny KV tiers: a full device pool demotes instead of refusing, every tier full
makes new work wait (with the signal set) and never deadlocks, outputs stay exact."""

from __future__ import annotations

from strata.engine.engine import EngineRequest
from strata.engine.sequence import SamplingParams
from strata.engine.tier_link import TierLink
from tests.engine_helpers import LocalTierClient, run_to_end, tiny_engine

# tiny model blocks: 2 layers x k|v x 2 kv heads x 4 tokens x 16 dims x 4 bytes
BLOCK_BYTES = 2 * 2 * 2 * 4 * 16 * 4


def _req(rid: str, prompt: list[int], max_tokens: int = 6) -> EngineRequest:
    return EngineRequest(
        rid, prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True), tenant="t"
    )


def _prompts() -> dict[str, list[int]]:
    shared = list(range(20, 44))  # 6 shared blocks of 4 tokens
    return {f"r{i}": shared + [100 + i * 7 + j for j in range(8 + i % 5)] for i in range(12)}


def test_a_full_device_pool_demotes_cold_blocks_instead_of_queueing():
    client = LocalTierClient(host_bytes=64 * BLOCK_BYTES)
    engine = tiny_engine(num_blocks=16, tier=TierLink(client))
    engine.add_request(_req("a", list(range(10, 50)), max_tokens=2))
    run_to_end(engine)
    assert engine.pool.num_cached == 10 and client.offloaded == 0
    engine.add_request(_req("b", list(range(200, 240)), max_tokens=2))
    engine.step()
    # admitted in its first step: cold cached blocks went down to host memory to make room
    assert engine.num_running == 1 and engine.num_waiting == 0
    assert client.offloaded > 0 and len(client.store) == client.offloaded
    assert engine.scheduler.waiting_for_memory == 0


def test_every_tier_full_makes_work_wait_and_nothing_deadlocks():
    prompts = _prompts()
    reference = tiny_engine(num_blocks=512)
    for rid, prompt in prompts.items():
        reference.add_request(_req(rid, prompt))
    expected = run_to_end(reference)

    # 12 requests of 8-9 blocks each against 24 device blocks, 2 host slots and 3 disk blocks
    client = LocalTierClient(host_bytes=2 * BLOCK_BYTES, disk_bytes=3 * BLOCK_BYTES)
    engine = tiny_engine(num_blocks=24, max_seqs=12, tier=TierLink(client))
    for rid, prompt in prompts.items():
        engine.add_request(_req(rid, prompt))
    waited = 0
    got: dict[str, list[int]] = {}
    for _ in range(5000):
        if not engine.has_work():
            break
        for out in engine.step():
            got.setdefault(out.request_id, []).extend(out.token_ids)
        waited = max(waited, engine.scheduler.waiting_for_memory)
        client.store.run_once()  # the migrator's rounds, in step with us
    assert not engine.has_work(), "the engine stopped making progress"
    assert got == expected  # every request finished, exactly
    assert waited > 0  # the node manager saw the memory signal
    store = client.store
    # the tiny tiers overflowed: blocks sank to disk and the disk tier dropped its LRU ones
    assert store.counters.demotions > 0 and store.counters.disk_evictions > 0
    assert store.pinned_blocks() == 0 and store.reserved_bytes() == 0
    assert store.alloc.bytes_used <= 2 * BLOCK_BYTES
