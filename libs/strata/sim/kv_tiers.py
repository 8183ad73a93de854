"""One simulated node's KV blocks outside its device pools: the host and disk tiers of its KV tier
store, and which blocks the node holds anywhere (what it reports to the global scheduler).

    worker device pools (each SimReplica's BlockPool)
        | evicted block (BlockPool.on_evict)          ^ prefix loaded at admission, handed over
        v                                             |   (one copy per block per node)
    host tier  --demote, lowest TierPolicy priority first-->  disk tier  --LRU drop--> gone

It does with block hashes what strata.kvtier.tiered_store.TieredStore does with bytes, counted in
blocks: an evicted block is written to the host tier, making room first by demoting the
lowest-priority unpinned host block (`_make_room`); above the high watermark the migrator's pass
demotes the lowest-priority blocks no live request is about to read down to the low watermark,
run at once where the store's migrator runs within its interval; the disk tier drops its least
recently used block (as strata.kvtier.disk_tier does: puts and reads refresh a block), or a
node without a disk tier drops the demoted block. The order is the store's own objects': the
heat table (strata.kvtier.heat) and a TierPolicy (strata.policy.kv_tiering), nothing
re-implemented. Prefetch takes live references as the store's does. Not modelled: the store's
early promotion of prefetched disk blocks (a disk hit is priced at the disk's bandwidth when it
is loaded), the transient host slot a promotion takes during a load, the slots writers reserve
ahead, and pulls from another node's store (a route decision's kv_source).

Node presence is strata.kvtier.presence.NodePresence, fed like the store feeds it (every device
pool's commits and evictions, every tier entry), and drained into the scheduler's
strata.policy.kv_index.PrefixIndex like services/kvstore/events.py reports it.

Writes arrive from the replicas' pool hooks stamped with the virtual time the engine makes them
and are applied in time order before anything reads the store: a fast-forward stretch applies
its steps' evictions replica by replica after the fact, and the node's replicas take turns on one
GPU, so the order of the calls alone is not the order of the events.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass

from strata.kvtier.heat import HeatTable
from strata.kvtier.presence import NodePresence
from strata.kvtier.tiered_store import Tier
from strata.policy.kv_index import PrefixIndex
from strata.policy.kv_tiering import TierPolicy, make_policy


@dataclass(slots=True, frozen=True)
class KVTierSpec:
    """Every node's tiers below the device pools (SimConfig.kv_tiers).

    Capacities are in blocks of any model; a load costs a block's bytes (the model's
    ModelSpec.kv_block_bytes) over the bandwidth of the tier holding it, from there into a
    worker's device pool (for disk: read, checksum and copy together).
    """

    host_blocks: int
    host_bytes_per_s: float
    disk_blocks: int = 0  # 0: no disk tier (a demoted block leaves the node)
    disk_bytes_per_s: float = 0.0
    policy: str = "heat"  # strata.policy.kv_tiering.POLICIES, the store's default
    high_watermark: float = 0.90  # the store's defaults (services/kvstore/config.py)
    low_watermark: float = 0.75
    half_life_s: float = 60.0

    def __post_init__(self) -> None:
        if self.host_blocks < 1 or not self.host_bytes_per_s > 0:
            raise ValueError(
                f"the host tier needs at least 1 block and a positive bandwidth, "
                f"got {self.host_blocks} blocks at {self.host_bytes_per_s} B/s"
            )
        if self.disk_blocks < 0 or (self.disk_blocks and not self.disk_bytes_per_s > 0):
            raise ValueError(
                f"a disk tier needs a non-negative size and a positive bandwidth, "
                f"got {self.disk_blocks} blocks at {self.disk_bytes_per_s} B/s"
            )
        if not 0 < self.low_watermark < self.high_watermark <= 1:
            raise ValueError(
                f"need 0 < low_watermark < high_watermark <= 1, got "
                f"{self.low_watermark}, {self.high_watermark}"
            )
        if not self.half_life_s > 0:
            raise ValueError(f"half_life_s must be positive, got {self.half_life_s}")
        make_policy(self.policy)  # an unknown name fails here, naming the known ones

    def bytes_per_s(self, tier: Tier) -> float:
        return self.host_bytes_per_s if tier is Tier.HOST else self.disk_bytes_per_s


@dataclass(slots=True)
class TierCounters:
    offloaded: int = 0  # evicted device blocks written to the host tier
    duplicates: int = 0  # evicted blocks the tiers already held
    refused: int = 0  # evicted blocks dropped: every host block pinned
    demotions: int = 0  # host -> disk
    host_drops: int = 0  # demoted out of host with no disk tier: gone from the node
    disk_drops: int = 0  # the disk tier's LRU: gone from the node
    loaded_host: int = 0  # blocks loaded into a device pool, by the tier they were in
    loaded_disk: int = 0
    declined: int = 0  # prefixes found but recomputed: the engine's costs said so


class _Op(enum.IntEnum):
    COMMIT = 0  # a device pool published a block
    EVICT = 1  # a device pool evicted a block: the worker offloads it
    HAND_OVER = 2  # a loaded block is a device pool's now: the tier frees its copy


class NodeKV:
    """A node's presence set and, given a KVTierSpec, its host and disk tiers."""

    def __init__(self, spec: KVTierSpec | None) -> None:
        self.spec = spec
        self.policy = make_policy(spec.policy) if spec is not None else None
        self.heat = HeatTable(spec.half_life_s if spec is not None else 60.0)
        self.presence = NodePresence()
        self.counters = TierCounters()
        self.host: dict[int, None] = {}
        self.disk: OrderedDict[int, None] = OrderedDict()  # least recently used first
        self.pinned: dict[int, int] = {}  # hash -> loads under way
        self.workers: set[str] = set()
        self.sequence = 0  # the last KV report sent
        self._reset = True  # the next report carries the whole set
        self._ops: list[tuple[float, int, _Op, str, int]] = []
        self._n = 0

    # -- writes from the workers' pools (stamped, applied in time order) ------------------------
    def _write(self, now: float, op: _Op, worker: str, block_hash: int) -> None:
        self._n += 1
        self._ops.append((now, self._n, op, worker, block_hash))

    def committed(self, now: float, worker: str, block_hash: int) -> None:
        self._write(now, _Op.COMMIT, worker, block_hash)

    def evicted(self, now: float, worker: str, block_hash: int) -> None:
        self._write(now, _Op.EVICT, worker, block_hash)

    def settle(self) -> None:
        """Apply the writes made so far, in the order of their times."""
        if not self._ops:
            return
        ops, self._ops = sorted(self._ops), []
        for now, _, op, worker, h in ops:
            if op is _Op.COMMIT:
                self.presence.device_update(worker, [h], [], False)
            elif op is _Op.EVICT:
                # The worker notes the eviction, then writes the block (TierLink.offload).
                self.presence.device_update(worker, [], [h], False)
                if self.spec is not None:
                    self._put(h, now)
            else:
                self._unpin(h)
                self._remove(h)

    # -- workers -------------------------------------------------------------------------------
    def connect(self, worker: str) -> None:
        self.workers.add(worker)

    def disconnect_others(self, live: set[str]) -> None:
        """Workers that left the node took their device blocks with them."""
        for worker in self.workers - live:
            self.settle()
            self.presence.device_update(worker, [], [], True)
            self.workers.discard(worker)

    # -- reads and the engine's calls ----------------------------------------------------------
    def holds(self, block_hash: int) -> bool:
        """The block is somewhere on the node (a device pool or a tier)."""
        self.settle()
        return block_hash in self.presence

    def prefetch(self, hashes: list[int], now: float) -> None:
        """An admitted request will read this prefix: reference its stored leading blocks."""
        self.settle()
        for h in hashes:
            if h not in self.host and h not in self.disk:
                break
            self.heat.add_ref(h, now)

    def acquire(self, hashes: list[int], now: float) -> list[Tier]:
        """The tiers of the longest stored prefix of `hashes`, pinned until released."""
        self.settle()
        tiers = []
        for h in hashes:
            if h in self.host:
                tiers.append(Tier.HOST)
            elif h in self.disk:
                tiers.append(Tier.DISK)
            else:
                break
            self.heat.touch(h, now)
            self.heat.drop_ref(h)
            self.pinned[h] = self.pinned.get(h, 0) + 1
        return tiers

    def release(self, hashes: list[int], now: float, moved: bool) -> None:
        """End a load: `moved`, the blocks are in a device pool now (the tiers free their
        copies once the writes before it are applied); otherwise they stay."""
        for h in hashes:
            if moved:
                self._write(now, _Op.HAND_OVER, "", h)
            else:
                self._unpin(h)
                if h in self.disk:
                    self.disk.move_to_end(h)  # a disk read refreshes the block

    def tier_blocks(self) -> tuple[int, int]:
        """(host blocks, disk blocks)."""
        self.settle()
        return len(self.host), len(self.disk)

    def report(self, node_id: str, index: PrefixIndex) -> None:
        """One KV events report to the scheduler's prefix index (services/kvstore/events.py):
        the whole set first and whenever the index asks, changes otherwise, none when idle."""
        self.settle()
        reset = self._reset
        stored, removed = (self.presence.snapshot(), []) if reset else self.presence.drain()
        if not reset and not stored and not removed:
            return
        self.sequence += 1
        # The node id stands for the store's address: nothing is pulled across nodes here.
        self._reset = index.apply(node_id, node_id, self.sequence, reset, stored, removed)

    # -- the tiers -----------------------------------------------------------------------------
    def _put(self, h: int, now: float) -> None:
        spec = self.spec
        assert spec is not None  # only a node with tiers writes to them
        if h in self.host or h in self.disk:
            self.heat.touch(h, now)
            self.counters.duplicates += 1
            return
        if len(self.host) >= spec.host_blocks and not self._make_room(now):
            self.counters.refused += 1
            return
        self.host[h] = None
        self.heat.touch(h, now)
        self.presence.add(h)
        self.counters.offloaded += 1
        if len(self.host) > spec.high_watermark * spec.host_blocks:
            self._demote_to(spec.low_watermark * spec.host_blocks, now)

    def _priority(self, policy: TierPolicy, h: int, now: float) -> float:
        heat = self.heat.get(h)
        if heat is None:
            heat = self.heat.touch(h, now)
        return policy.priority(heat, now)

    def _make_room(self, now: float) -> bool:
        """Demote the lowest-priority unpinned host block (TieredStore._make_room)."""
        movable = [h for h in self.host if h not in self.pinned]
        if not movable:
            return False
        policy = self.policy
        assert policy is not None  # only a node with tiers demotes
        self._demote(min(movable, key=lambda h: self._priority(policy, h, now)))
        return True

    def _demote_to(self, target: float, now: float) -> None:
        """The migrator's pass (TieredStore._demote_to): blocks a live request is about to
        read stay, however cold."""
        policy = self.policy
        assert policy is not None  # only a node with tiers demotes
        victims = sorted(
            (h for h in self.host if h not in self.pinned and not self._live(h)),
            key=lambda h: self._priority(policy, h, now),
        )
        for h in victims:
            if len(self.host) <= target:
                break
            self._demote(h)

    def _live(self, h: int) -> bool:
        heat = self.heat.get(h)
        return heat is not None and heat.live_refs > 0

    def _demote(self, h: int) -> None:
        spec = self.spec
        assert spec is not None  # only a node with tiers demotes
        del self.host[h]
        if not spec.disk_blocks:
            self._forget(h)
            self.counters.host_drops += 1
            return
        if len(self.disk) >= spec.disk_blocks:
            victim = next((d for d in self.disk if d not in self.pinned), None)
            if victim is None:  # every disk block is being loaded: nothing can go there
                self._forget(h)
                self.counters.host_drops += 1
                return
            del self.disk[victim]
            self._forget(victim)
            self.counters.disk_drops += 1
        self.disk[h] = None
        self.counters.demotions += 1

    def _remove(self, h: int) -> None:
        if h in self.host:
            del self.host[h]
        elif h in self.disk:
            del self.disk[h]
        else:
            return
        self._forget(h)

    def _forget(self, h: int) -> None:
        self.heat.forget(h)
        self.presence.remove(h)

    def _unpin(self, h: int) -> None:
        n = self.pinned.get(h, 0)
        if n > 1:
            self.pinned[h] = n - 1
        else:
            self.pinned.pop(h, None)
