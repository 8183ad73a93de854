"""Which node holds which KV blocks: the global scheduler's prefix index, fed by KV events.

Each node's KV tier store reports the changes to its block set (any tier, device included) as
numbered reports; the index answers "how many leading blocks of this prompt's hash chain does a
node hold" for routing, and "which other node holds the longest prefix" for cross-node pulls.

    report n:   stored {a, b}, removed {}       node n1: {a, b}
    report n+1: stored {c},    removed {a}      node n1: {b, c}
    report n+3: (n+2 lost)                      ignored, need_reset: the store sends its whole
                                                set with reset=True and the next number it likes

Block hashes are chained (strata.kvtier.hashing), so a node holding hash i of a prompt's chain
holds the same tokens as any other node holding it; the leading run of held hashes is the part
of the prompt that node need not prefill.

Memory: one entry per (node, block) the nodes report, about 150 bytes each in CPython (the
node's set plus the hash -> holders map), so it is bounded by what the nodes' stores can hold
(their tier capacities in blocks), never by traffic. A node's entries go when the scheduler's
registry expires the node (`forget`) or when the node resets its set.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass, field


@dataclass(slots=True, frozen=True)
class KVSource:
    """A node whose KV tier store holds `blocks` leading blocks of a prompt, to pull from."""

    node_id: str
    address: str  # the node's KV tier store
    blocks: int


@dataclass(slots=True)
class NodeBlocks:
    store_address: str
    sequence: int  # the last report applied
    hashes: set[int] = field(default_factory=set)


@dataclass(slots=True)
class PrefixIndex:
    _nodes: dict[str, NodeBlocks] = field(default_factory=dict)
    _holders: dict[int, set[str]] = field(default_factory=dict)

    def apply(
        self,
        node_id: str,
        store_address: str,
        sequence: int,
        reset: bool,
        stored: Iterable[int],
        removed: Iterable[int],
    ) -> bool:
        """Apply one report; True means "send your whole set" (the report was ignored).

        A reset replaces the node's set with `stored` and takes any sequence number. Otherwise
        the report must be the one after the last applied: an unknown node or a gap (a lost
        report) asks for a reset, and a repeat of the last one (a retry whose answer was lost)
        is ignored without asking. Within one report `stored` is applied before `removed`, so
        a hash in both counts as gone: a node wrongly believed to hold a block attracts requests
        it then has to recompute, a block wrongly believed gone only loses a preference.
        """
        node = self._nodes.get(node_id)
        if reset:
            if node is not None:
                self._drop_all(node_id, node)
            node = self._nodes[node_id] = NodeBlocks(store_address, sequence)
        elif node is None or sequence != node.sequence + 1:
            # Keep what was known until the reset arrives: mostly right beats empty.
            return node is None or sequence != node.sequence
        node.store_address = store_address or node.store_address
        node.sequence = sequence
        for h in stored:
            if h not in node.hashes:
                node.hashes.add(h)
                self._holders.setdefault(h, set()).add(node_id)
        for h in removed:
            if h in node.hashes:
                node.hashes.discard(h)
                self._unhold(h, node_id)
        return False

    def forget(self, node_id: str) -> None:
        """Drop everything known about a node (the registry expired it)."""
        node = self._nodes.pop(node_id, None)
        if node is not None:
            self._drop_all(node_id, node)

    def leading_blocks(self, node_id: str, hashes: Sequence[int]) -> int:
        """How many leading hashes of the chain `hashes` the node holds."""
        node = self._nodes.get(node_id)
        if node is None:
            return 0
        n = 0
        for h in hashes:
            if h not in node.hashes:
                break
            n += 1
        return n

    def prefix_depths(self, hashes: Sequence[int]) -> dict[str, int]:
        """Leading blocks held by every node that holds at least the first one.

        One walk down the chain, narrowing the set of nodes still matching, so the cost is the
        matched depth times the number of matching nodes, not the number of nodes.
        """
        depths: dict[str, int] = {}
        if not hashes:
            return depths
        alive = set(self._holders.get(hashes[0], ()))
        depth = 0
        for h in hashes:
            holders = self._holders.get(h)
            still = alive & holders if holders else set()
            for node_id in alive - still:
                depths[node_id] = depth
            alive = still
            if not alive:
                return depths
            depth += 1
        for node_id in alive:
            depths[node_id] = depth
        return depths

    def best_source(
        self, hashes: Sequence[int], exclude_node: str = "", among: Container[str] | None = None
    ) -> KVSource | None:
        """The node other than `exclude_node` holding the longest prefix of `hashes`.

        Only nodes that reported a store address can serve blocks; `among` narrows the choice
        (the scheduler passes its live nodes). Equal depths go to the lowest node id, so every
        scheduler replica names the same source. None when no such node holds the first block.
        """
        best: KVSource | None = None
        for node_id, depth in sorted(self.prefix_depths(hashes).items()):
            if node_id == exclude_node or (among is not None and node_id not in among):
                continue
            address = self._nodes[node_id].store_address
            if address and (best is None or depth > best.blocks):
                best = KVSource(node_id, address, depth)
        return best

    def node_ids(self) -> list[str]:
        return sorted(self._nodes)

    def blocks(self, node_id: str) -> int:
        node = self._nodes.get(node_id)
        return len(node.hashes) if node is not None else 0

    def _drop_all(self, node_id: str, node: NodeBlocks) -> None:
        for h in node.hashes:
            self._unhold(h, node_id)
        node.hashes.clear()

    def _unhold(self, h: int, node_id: str) -> None:
        holders = self._holders[h]
        holders.discard(node_id)
        if not holders:
            del self._holders[h]
