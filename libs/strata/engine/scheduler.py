"""The batch scheduler: continuous batching with chunked prefill under a per-step token budget.

Each step: running sequences first (decodes cost one token, unfinished prefills a chunk), in
priority order, then waiting sequences while budget, sequence slots and blocks last; except that
a started prefill of a class below the best waiting sequence's goes after that admission, with
the budget left (prefill is served by class, a step at a time). A waiting
sequence first takes whatever prefix the device cache or the KV tier store already holds. When a
running sequence needs a block and none is free, the lowest-priority, latest-arrived running
sequence is preempted: its blocks are freed but its full blocks keep their hashes, so they stay in
the device prefix cache until memory pressure evicts them, and eviction writes them to the KV tier
store (swap-out). On resumption the prefix comes back from the device cache, or from the tier when
the engine's measured costs say loading beats recomputing (costs.py), and the rest is recomputed.

Admission keeps FIFO order within a priority. A waiting sequence that cannot be admitted (no
sequence slot, or no free block) preempts running sequences of strictly lower priority, lowest
priority and latest arrival first, until it fits: the node manager sends a request beyond the
worker's slots with a higher class's priority exactly when that class would otherwise miss its
target. Equal priorities never preempt each other at admission, and a class whose sequence was
preempted admits nothing more in that step, so the victim is not overtaken by its own class.
Imports no torch.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from strata.engine.block_pool import BlockPool
from strata.engine.sequence import FinishReason, Sequence, Status
from strata.kvtier.hashing import ROOT_HASH, block_hash, chain_hashes


class TierLoader(Protocol):
    def load(self, seq: Sequence, hashes: list[int]) -> int:
        """Load the longest available prefix of `hashes` from the lower tiers into newly
        allocated device blocks appended to seq.block_ids; return how many were loaded."""
        ...


@dataclass(slots=True)
class ScheduledSeq:
    seq: Sequence
    num_new: int  # tokens computed for this sequence in this step
    sample: bool  # the step completes the sequence's known tokens: sample one


@dataclass(slots=True)
class StepPlan:
    scheduled: list[ScheduledSeq]
    preempted: list[Sequence]

    @property
    def num_tokens(self) -> int:
        return sum(s.num_new for s in self.scheduled)


class Scheduler:
    def __init__(
        self,
        pool: BlockPool,
        max_batched_tokens: int,
        max_seqs: int,
        tier: TierLoader | None = None,
        clock: Callable[[], float] | None = None,
    ):
        self.pool = pool
        self.block_size = pool.block_size
        self.max_batched_tokens = max_batched_tokens
        self.max_seqs = max_seqs
        self.tier = tier
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.preemptions = 0
        self.priority_preemptions = 0  # of them, running sequences displaced at admission
        # Waiting requests held back at the last admission because no device block was free
        # (0 once one is admitted again): the node manager's signal that this worker is full.
        self.waiting_for_memory = 0

    # -- membership ----------------------------------------------------------------------------
    def add(self, seq: Sequence) -> None:
        seq.status = Status.WAITING
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def queued_by_class(self) -> dict[int, int]:
        """Tokens not yet computed (prompts still to prefill, one per decoding sequence), by
        the priority of their sequences; the values sum to the engine's queued tokens."""
        out: dict[int, int] = {}
        for seq in self.waiting:
            out[seq.priority] = out.get(seq.priority, 0) + seq.num_pending
        for seq in self.running:
            out[seq.priority] = out.get(seq.priority, 0) + seq.num_pending
        return out

    def find(self, request_id: str) -> Sequence | None:
        for seq in self.running:
            if seq.request_id == request_id:
                return seq
        for seq in self.waiting:
            if seq.request_id == request_id:
                return seq
        return None

    def finish(self, seq: Sequence, reason: FinishReason) -> None:
        """Retire a sequence (finished or aborted) and give its blocks back."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.pool.free(seq.block_ids)
        seq.block_ids = []
        seq.status = Status.FINISHED
        seq.finish_reason = reason

    # -- one step ------------------------------------------------------------------------------
    def schedule(self, budget: int | None = None) -> StepPlan:
        """The next step: decodes first, then prefill chunks, within `budget` tokens (at most
        max_batched_tokens; None: max_batched_tokens). Prefill goes by class: a started prefill
        of a class below the best waiting sequence's yields the budget to that sequence's
        admission and takes what is left after it, so a higher class's first token waits for
        no lower class's prompt but the step under way."""
        budget = self.max_batched_tokens if budget is None else min(budget, self.max_batched_tokens)
        scheduled: list[ScheduledSeq] = []
        preempted: list[Sequence] = []
        # Decodes first: a long prompt's chunks must never take the budget from decoding tokens.
        self.running.sort(key=lambda s: (s.num_pending > 1, s.sort_key()))
        top = max((s.priority for s in self.waiting), default=None)
        now: list[Sequence] = []
        later: list[Sequence] = []
        for seq in self.running:
            yields = top is not None and seq.num_pending > 1 and seq.priority < top
            (later if yields else now).append(seq)
        budget = self._serve(now, budget, scheduled, preempted)
        if not preempted:
            budget = self._admit(budget, scheduled, preempted)
        self._serve(later, budget, scheduled, preempted)
        return StepPlan(scheduled, preempted)

    def _serve(
        self,
        seqs: list[Sequence],
        budget: int,
        scheduled: list[ScheduledSeq],
        preempted: list[Sequence],
    ) -> int:
        """Schedule the running `seqs` in order while budget lasts; a sequence short of a block
        preempts the lowest running one (itself, when that is it). Returns the budget left."""
        for seq in seqs:
            if budget <= 0:
                break
            if seq.status is not Status.RUNNING:
                continue  # preempted earlier in this step
            n = min(seq.num_pending, budget)
            while not self._grow(seq, n):
                victim = max(self.running, key=Sequence.sort_key)
                budget += self._take_back(victim, scheduled)  # already scheduled: take it back
                self._preempt(victim)
                preempted.append(victim)
                if victim is seq:
                    break
            else:
                scheduled.append(ScheduledSeq(seq, n, n == seq.num_pending))
                budget -= n
        return budget

    def _admit(self, budget: int, scheduled: list[ScheduledSeq], preempted: list[Sequence]) -> int:
        """Admit waiting sequences in class order while budget, slots and blocks last; returns
        the budget left."""
        displaced: int | None = None  # the highest priority preempted by this admission
        for seq in sorted(self.waiting, key=Sequence.sort_key):
            if budget <= 0 or (displaced is not None and seq.priority <= displaced):
                return budget
            lower = [s for s in self.running if s.priority < seq.priority]
            if len(self.running) >= self.max_seqs and not lower:
                return budget
            if seq.num_computed == 0 and not seq.block_ids:
                self._take_cached_prefix(seq)
            n = min(seq.num_pending, budget)
            need = self._blocks_needed(seq, n)
            # Preempting is only worth it when the lower sequences' blocks can cover the need:
            # an upper bound, since a block shared with another sequence is not freed.
            if need > self.pool.num_free + sum(len(s.block_ids) for s in lower):
                self._release_prefix(seq)
                self.waiting_for_memory = len(self.waiting)
                return budget  # no memory: keep FIFO order within a priority, admit nothing more
            while len(self.running) >= self.max_seqs or not self._grow(seq, n):
                if not lower:
                    self._release_prefix(seq)
                    self.waiting_for_memory = len(self.waiting)
                    return budget
                victim = max(lower, key=Sequence.sort_key)
                lower.remove(victim)
                budget += self._take_back(victim, scheduled)
                self._preempt(victim)
                self.priority_preemptions += 1
                preempted.append(victim)
                displaced = (
                    victim.priority if displaced is None else max(displaced, victim.priority)
                )
            self.waiting_for_memory = 0
            self.waiting.remove(seq)
            seq.status = Status.RUNNING
            self.running.append(seq)
            scheduled.append(ScheduledSeq(seq, n, n == seq.num_pending))
            budget -= n
        return budget

    @staticmethod
    def _take_back(seq: Sequence, scheduled: list[ScheduledSeq]) -> int:
        """Drop a sequence from this step's plan; the budget its tokens had taken."""
        for item in scheduled:
            if item.seq is seq:
                scheduled.remove(item)
                return item.num_new
        return 0

    def _blocks_needed(self, seq: Sequence, n: int) -> int:
        return max(0, -(-(seq.num_computed + n) // self.block_size) - len(seq.block_ids))

    def _grow(self, seq: Sequence, n: int) -> bool:
        need = self._blocks_needed(seq, n)
        if need == 0:
            return True
        blocks = self.pool.allocate(need)
        if blocks is None:
            return False
        seq.block_ids.extend(blocks)
        return True

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.pool.free(seq.block_ids)
        seq.block_ids, seq.block_hashes, seq.num_computed = [], [], 0
        seq.status = Status.WAITING
        seq.num_preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(seq)

    def _take_cached_prefix(self, seq: Sequence) -> None:
        # The last token is always recomputed: its logits are needed to sample the next one.
        hashes = chain_hashes(
            seq.token_ids[: len(seq.token_ids) - 1], self.block_size, seq.hash_keys
        )
        hit = 0
        for h in hashes:
            block_id = self.pool.lookup(h)
            if block_id is None:
                break
            self.pool.acquire_cached(block_id)
            seq.block_ids.append(block_id)
            hit += 1
        seq.block_hashes = hashes[:hit]
        loaded = self.tier.load(seq, hashes[hit:]) if self.tier and hit < len(hashes) else 0
        seq.block_hashes = hashes[: hit + loaded]
        seq.num_computed = (hit + loaded) * self.block_size
        if seq.num_preemptions == 0:
            seq.num_cached_prompt = hit * self.block_size
            seq.num_tier_prompt = loaded * self.block_size

    def _release_prefix(self, seq: Sequence) -> None:
        """Undo _take_cached_prefix for a sequence that could not be admitted after all."""
        self.pool.free(seq.block_ids)
        seq.block_ids, seq.block_hashes, seq.num_computed = [], [], 0

    # -- after the model ran -------------------------------------------------------------------
    def advance(self, item: ScheduledSeq) -> None:
        """Mark a step's tokens computed and publish newly filled blocks to the prefix cache."""
        seq = item.seq
        seq.num_computed += item.num_new
        full = seq.num_computed // self.block_size
        parent = seq.block_hashes[-1] if seq.block_hashes else ROOT_HASH
        for idx in range(len(seq.block_hashes), full):
            start = idx * self.block_size
            parent = block_hash(
                parent, seq.token_ids[start : start + self.block_size], seq.hash_keys
            )
            seq.block_hashes.append(parent)
            self.pool.commit(seq.block_ids[idx], parent)
