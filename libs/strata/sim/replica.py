"""A simulated decode worker: the engine's own batch scheduler, block pool and sequences, stepped
on a virtual clock with step times from an engine profile.

Exact stepping mirrors LLMEngine.step: Scheduler.schedule() plans the step, the profile prices
it, and at its end every scheduled item is advanced (Scheduler.advance) and each sampling
sequence gets one token; a sequence that has its trace's output length is finished
(Scheduler.finish). Nothing of the scheduler is re-implemented.

Fast-forward covers a stretch in which the batch cannot change: nothing waiting (or nothing
that could be admitted, and nothing that outranks a running sequence), every running
sequence one decode token behind, the pool able to give every block the stretch's steps ask for,
and no sequence finishing before the stretch's last step. Its k steps are priced at once (the
decode keys grow by the batch size each step, so the times are a closed form) and their effects
are applied when needed: the blocks the k steps allocate, in the order exact stepping would
allocate them (step by step, sequences in the scheduler's order), each after the sequence's
previous block is published (Scheduler.advance up to the step before, as the engine publishes it
before it plans the next step), the tokens, the remaining block hashes and the finishes at the
last step. An arrival routed to the replica before the stretch ends cuts it: the steps already
started are applied and exact stepping resumes after the one in progress, as the engine would
take the arrival in after it. Reads in between (heartbeats, node samples) see the state the
exact steps would have shown.

Connected to its node's KV (`connect`, strata.sim.tier_link), the replica's pool reports its
commits and evictions to the node, and with tiers the scheduler loads stored prefixes through its
TierLoader hook: the step that admits a request pays the load (strata.sim.tier_link says how).
A stretch admits nothing, so it loads nothing; its evictions reach the node stamped with the
start of the step that makes them, and `sync` makes those of the steps started so far before a
read of the node's blocks (a KV report, a node sample). A waiting request whose first block is
anywhere on the node may be admitted by a load, so it stops a stretch as a device hit does.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from strata.core.blocks import DEFAULT_BLOCK_SIZE
from strata.core.counters import EngineCounters
from strata.core.profile import StepCosts, StepShape, step_shape
from strata.core.step_model import prior_from_costs
from strata.engine.block_pool import BlockPool
from strata.engine.scheduler import ScheduledSeq, Scheduler, StepPlan
from strata.engine.sequence import FinishReason, SamplingParams, Sequence
from strata.kvtier.hashing import ROOT_HASH, HashKeys, block_hash, chain_hashes
from strata.policy.scheduling.slo import running_budget
from strata.policy.scheduling.step_cap import StepCap
from strata.sim.kv_tiers import NodeKV
from strata.sim.tier_link import SimTierLink
from strata.sim.workload import OUTPUT_TOKEN, SimRequest

MIN_STRETCH_STEPS = 2  # a stretch of one step is an exact step


@dataclass(slots=True, frozen=True)
class EngineLimits:
    """The worker's engine settings that shape scheduling (strata.engine.engine.EngineConfig)."""

    num_blocks: int
    block_size: int = DEFAULT_BLOCK_SIZE
    max_batched_tokens: int = 2048
    max_seqs: int = 32
    max_context: int = 2048

    def __post_init__(self) -> None:
        if (
            min(
                self.num_blocks,
                self.block_size,
                self.max_batched_tokens,
                self.max_seqs,
                self.max_context,
            )
            < 1
        ):
            raise ValueError(f"engine limits must all be positive, got {self}")

    def problem(self, prompt: int, output: int) -> str | None:
        """Why the engine's validate() would refuse the request, or None."""
        if prompt + output > self.max_context:
            return (
                f"prompt ({prompt} tokens) plus max_tokens ({output}) exceeds the model's "
                f"context of {self.max_context} tokens"
            )
        need = -(-(prompt + output) // self.block_size)
        if need > self.num_blocks:
            return (
                f"the request needs {need} KV blocks but this worker has "
                f"{self.num_blocks}; shorten the prompt or max_tokens"
            )
        return None


@dataclass(slots=True)
class Active:
    """A request inside a replica: its engine sequence and its timeline (virtual seconds)."""

    request: SimRequest
    seq: Sequence
    arrival_s: float  # when the gateway received it
    first_token_s: float | None = None
    end_s: float = 0.0  # when its last token was sampled


@dataclass(slots=True)
class Stretch:
    """A replica's part of a fast-forward stretch: `steps` decode steps of one batch.

    Its own step j (1-based) lasts first_s + growth_s * (j - 1). On a GPU it shares, its steps
    take turns with the other replicas' (round-robin, one step each per round), so its step ends
    follow a quadratic in j too: end(j) = end1_s + gap_s * (j - 1) + gap_growth_s * (j - 1) *
    (j - 2) / 2. Alone on its GPU: end1_s = start + first_s, gap_s = first_s + growth_s,
    gap_growth_s = growth_s.
    """

    steps: int
    batch: int
    first_s: float  # duration of the replica's first step
    growth_s: float  # each later step of it is this much longer
    order: list[Active]  # the scheduler's order
    allocs: list[tuple[int, int]]  # (step, index in order) of every block allocation
    alloc_steps: list[int] = field(default_factory=list)  # the allocations' steps, sorted
    end1_s: float = 0.0
    gap_s: float = 0.0
    gap_growth_s: float = 0.0
    done: int = 0  # allocations already made (sync, or a cut's apply)
    base: list[int] = field(default_factory=list)  # each sequence's computed tokens at start

    def end_of(self, j: int) -> float:
        """End of step j (1..steps)."""
        x = j - 1
        return self.end1_s + self.gap_s * x + self.gap_growth_s * x * (x - 1) / 2

    def duration(self, j: int) -> float:
        return self.first_s + self.growth_s * (j - 1)

    def start_of(self, j: int) -> float:
        return self.end_of(j) - self.duration(j)

    def busy_of(self, m: int) -> float:
        """Engine time of the first m steps."""
        return m * self.first_s + self.growth_s * m * (m - 1) / 2

    def _count(
        self, t: float, inclusive: bool, at: Callable[[int], float], q0: float, q1: float
    ) -> int:
        """How many of steps 1..steps have at(j) < t (<= when inclusive), where at(j) =
        q0 + q1 (j - 1) + gap_growth_s (j - 1)(j - 2) / 2 grows with j: the quadratic's root,
        then settled against at() itself so rounding cannot move a boundary."""
        q2 = self.gap_growth_s
        x = t - q0
        if x < 0:
            i = 0
        elif q2 > 0:
            b = q1 - q2 / 2
            i = 1 + int((-b + math.sqrt(max(0.0, b * b + 2 * q2 * x))) / q2)
        elif q1 > 0:
            i = 1 + int(x / q1)
        else:
            i = self.steps
        i = min(max(i, 0), self.steps)

        def before(k: int) -> bool:
            v = at(k)
            return v < t or (inclusive and v == t)

        while i > 0 and not before(i):
            i -= 1
        while i < self.steps and before(i + 1):
            i += 1
        return i

    def count_before(self, t: float, inclusive: bool) -> int:
        """Steps whose start is before t (or at t when inclusive)."""
        return self._count(
            t, inclusive, self.start_of, self.end1_s - self.first_s, self.gap_s - self.growth_s
        )

    def ended_by(self, t: float) -> int:
        return self._count(t, True, self.end_of, self.end1_s, self.gap_s)

    def allocated_by(self, step: int) -> int:
        """Blocks the stretch's first `step` steps allocate."""
        return bisect.bisect_right(self.alloc_steps, step)


def shared_factor(share: float, busy: int) -> float:
    """How much of a step's own time it holds its GPU for while `busy` replicas (itself
    included) have work there: s + (1 - s) / n, s the profile's co-location share for the
    step's kind (decode, or prefill for a step with a prefill chunk).

    The node starts one step at a time, round-robin over its busy replicas; a step holds the
    GPU for its hold, while the step itself lasts its own time (the replica starts its next step
    only after that). With equal steps d and every hold s d + (1 - s) d / n, each replica's step
    period is max(d, n hold) = d (1 + s (n - 1)), strata.policy.placement.capacity's
    d_k + s sum_{j != k} d_j. s = 1 is strict turns (a step holds the GPU for all of itself);
    s = 0 lets equal engines each step at their own pace, and no step is ever shorter than
    alone. Between unequal steps the holds are an approximation on the safe side: a short step
    beside a long one waits out the long one's hold, where the share alone (capacity.py) would
    have it wait s of the long step."""
    if busy <= 1:
        return 1.0
    return share + (1.0 - share) / busy


class SimReplica:
    def __init__(
        self,
        replica_id: str,
        model: str,
        node_id: str,
        limits: EngineLimits,
        costs: StepCosts,
        share: float = 1.0,
        prefill_share: float = 1.0,
    ) -> None:
        self.replica_id = replica_id
        self.model = model
        self.node_id = node_id
        self.limits = limits
        self.costs = costs
        # The step line its worker would report once it has learned it: the profile's own.
        self.line = prior_from_costs(costs)
        self._targets = 0  # requests with a TPOT target added, ever (0: no budget to compute)
        self.cap = StepCap()  # as its worker's: the TTFT targets of the requests it took
        self.share = share  # co-location shares (shared_factor)
        self.prefill_share = prefill_share
        self.ready_at = 0.0  # when its last step ends (its next may start)
        self._own_end = 0.0  # the planned step's own end
        self._pool_now = 0.0
        self.pool = BlockPool(limits.num_blocks, limits.block_size, clock=self._pool_clock)
        self.scheduler = Scheduler(self.pool, limits.max_batched_tokens, limits.max_seqs)
        self.active: dict[int, Active] = {}  # by id(seq)
        self.counters = EngineCounters()
        self.stretch: Stretch | None = None
        self._unstamped: list[Sequence] = []
        self._plan: StepPlan | None = None
        self._step_start = 0.0
        self.link: SimTierLink | None = None
        # Called with a request's Active and the time of its first token (its node's front
        # records the wait: strata.policy.scheduling.delays).
        self.on_first_token: Callable[[Active, float], None] | None = None

    def _pool_clock(self) -> float:
        return self._pool_now

    def connect(self, node: NodeKV, block_bytes: int) -> None:
        """Join the node's KV before serving, as a worker starts with its node's tier link: the
        pool's events go to the node, and with tiers the scheduler loads through the link."""
        if self.link is not None:
            return
        self.link = SimTierLink(node, self.replica_id, self.pool, block_bytes)
        self.pool.on_evict = self.link.offload
        self.pool.on_commit = self.link.committed
        if node.spec is not None:
            self.scheduler.tier = self.link

    # -- membership ----------------------------------------------------------------------------
    def add(
        self,
        request: SimRequest,
        arrival_s: float,
        now: float,
        priority: int = 0,
        tpot_ms: float | None = None,
        ttft_ms: float | None = None,
    ) -> None:
        """A request reaches the worker at `now`. The engine takes adds in between steps and
        stamps them then (Sequence.arrival, hence queue_ms and the scheduling order), so the
        stamp is set when the replica next plans a step (take_adds)."""
        seq = Sequence(
            request_id=str(request.index),
            token_ids=request.prompt_ids(),
            num_prompt=request.prompt_tokens,
            params=SamplingParams(max_tokens=request.output_tokens, ignore_eos=True),
            hash_keys=HashKeys.for_request(self.model, request.tenant, False),
            priority=priority,
            arrival=now,
            tpot_ms=tpot_ms,
        )
        self.active[id(seq)] = Active(request, seq, arrival_s)
        if tpot_ms is not None:
            self._targets += 1
        self.cap.note(ttft_ms, priority, now)
        self.scheduler.add(seq)
        self._unstamped.append(seq)

    def take_adds(self, now: float) -> None:
        """Stamp the adds since the last step as the engine would at `now`: a microsecond
        apart in add order, as its successive monotonic() reads are."""
        for k, seq in enumerate(self._unstamped):
            seq.arrival = now + k * 1e-6
            if self.scheduler.tier is not None:
                self._prefetch(seq)
        self._unstamped.clear()

    def _prefetch(self, seq: Sequence) -> None:
        """The engine's add_request asks the tier for the prefix the device pool lacks."""
        missing = self.pool.missing_suffix(
            chain_hashes(
                seq.token_ids[: len(seq.token_ids) - 1], self.limits.block_size, seq.hash_keys
            )
        )
        if missing:
            link = self.link
            assert link is not None  # the scheduler has a tier only through the link
            link.prefetch(missing)

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    def _budget(self, now: float) -> int | None:
        """The worker's step budget at `now` (strata.policy.scheduling.slo.running_budget, with
        its step cap): None, the engine's maximum, unless some request has a TPOT target or a
        step cap holds."""
        cap_ms = self.cap.cap_ms(now, self.scheduler.running)
        if not self._targets and cap_ms is None:
            return None
        return running_budget(
            self.line,
            self.scheduler.running,
            now,
            self.limits.max_batched_tokens,
            self.limits.block_size,
            cap_ms=cap_ms,
            waiting=self.scheduler.waiting,
        )

    # -- exact stepping ------------------------------------------------------------------------
    def begin_step(self, now: float, busy: int = 1) -> float | None:
        """Plan a step at `now`, `busy` replicas of the GPU (this one included) having work;
        how long it holds the GPU (shared_factor), or None when nothing could be scheduled."""
        link = self.link
        if link is not None:
            link.now = now
        self.take_adds(now)
        plan = self.scheduler.schedule(self._budget(now))
        if not plan.scheduled:
            return None
        for item in plan.scheduled:
            if item.seq.first_scheduled is None:
                item.seq.first_scheduled = now
        self._plan, self._step_start = plan, now
        seconds = self.costs.seconds(self.shape(plan.scheduled))
        if link is not None:
            link.costs.observe_step(plan.num_tokens, seconds)
            seconds += link.take_load_s()
        self._own_end = now + seconds
        if busy > 1:
            decode = all(i.num_new == 1 for i in plan.scheduled)
            seconds *= shared_factor(self.share if decode else self.prefill_share, busy)
        return seconds

    def shape(self, items: list[ScheduledSeq]) -> StepShape:
        # Priced before the step runs: a sequence's context then grows by the step's tokens.
        return step_shape(
            ((i.num_new, i.sample, i.seq.num_computed + i.num_new) for i in items),
            self.limits.block_size,
        )

    def end_step(self, now: float) -> list[Active]:
        """Apply the planned step when its hold of the GPU ends at `now`, its tokens stamped at
        the step's own end; returns the requests it finished."""
        plan, self._plan = self._plan, None
        assert plan is not None, "end_step without a planned step"
        now = self.ready_at = max(now, self._own_end)
        self._pool_now = now
        if self.link is not None:
            self.link.now = now
        for item in plan.scheduled:
            self.scheduler.advance(item)
        finished = []
        for item in plan.scheduled:
            if item.sample and self._append(item.seq, now):
                finished.append(self.active.pop(id(item.seq)))
        c = self.counters
        c.steps += 1
        c.step_tokens += plan.num_tokens
        c.step_token_budget += self.limits.max_batched_tokens
        c.busy_seconds += now - self._step_start
        return finished

    def _append(self, seq: Sequence, now: float) -> bool:
        """One sampled token at `now`; True when that finished the sequence."""
        seq.token_ids.append(OUTPUT_TOKEN)
        active = self.active[id(seq)]
        if active.first_token_s is None:
            active.first_token_s = seq.first_token_at = now
            if self.on_first_token is not None:
                self.on_first_token(active, now)
        if seq.num_output >= seq.params.max_tokens:
            active.end_s = now
            self._retire(seq)
            return True
        return False

    def _retire(self, seq: Sequence) -> None:
        self.counters.prompt_tokens += seq.num_prompt
        self.counters.prefix_hit_tokens += seq.num_cached_prompt
        self.counters.tier_hit_tokens += seq.num_tier_prompt
        self.scheduler.finish(seq, FinishReason.LENGTH)

    # -- fast-forward --------------------------------------------------------------------------
    def plan_stretch(self) -> Stretch | None:
        """A stretch this replica could fast-forward now (its timing not set yet), or None.
        No side effects on the scheduler: start_stretch commits it."""
        s = self.scheduler
        if self._unstamped:
            return None  # an add since the last step: the batch may change at the next
        if not s.running or len(s.running) > s.max_batched_tokens:
            return None
        if s.waiting and max(q.priority for q in s.waiting) > min(q.priority for q in s.running):
            return None  # admission may preempt a lower class: the batch may change
        blocked = self._admission_blocked() if s.waiting else "none"
        if blocked is None:
            return None
        steps = s.running[0].params.max_tokens - s.running[0].num_output
        context = 0
        for seq in s.running:
            if seq.num_pending != 1:
                return None
            steps = min(steps, seq.params.max_tokens - seq.num_output)
            context += seq.num_computed + 1
        if steps < MIN_STRETCH_STEPS:
            return None
        order = sorted(s.running, key=Sequence.sort_key)
        bs = self.limits.block_size
        allocs: list[tuple[int, int]] = []
        for idx, seq in enumerate(order):
            # Step j computes position num_computed + j - 1; a position at a block start needs
            # a new block (the sequence holds exactly the blocks its computed tokens fill).
            allocs.extend((j, idx) for j in range((-seq.num_computed) % bs + 1, steps + 1, bs))
        allocs.sort()
        free = self.pool.num_free
        if len(allocs) > free:
            steps = allocs[free][0] - 1  # the step whose allocation would fail runs exactly
            if steps < MIN_STRETCH_STEPS:
                return None
            allocs = allocs[:free]
        if blocked == "memory":
            # The head's admission fails already at step 1, after the decodes' own blocks, and
            # free blocks only fall during a stretch: it fails at every step, as exact stepping
            # would find (and say, in waiting_for_memory) each time.
            first = sum(1 for j, _ in allocs if j == 1)
            if self._head_need() <= free - first:
                return None
        batch = len(order)
        c = self.costs
        return Stretch(
            steps,
            batch,
            c.decode_seconds(batch, context),
            c.decode_attend_s * batch,
            [self.active[id(q)] for q in order],
            allocs,
            [j for j, _ in allocs],
            base=[q.num_computed for q in order],
        )

    def start_stretch(
        self, st: Stretch, steps: int, end1_s: float, gap_s: float, gap_growth_s: float
    ) -> None:
        """Commit a planned stretch: its first `steps` steps (at most as planned), timed."""
        st.steps = steps
        st.allocs = [a for a in st.allocs if a[0] <= steps]
        st.alloc_steps = [j for j, _ in st.allocs]
        st.end1_s, st.gap_s, st.gap_growth_s = end1_s, gap_s, gap_growth_s
        if self.scheduler.waiting and self._admission_blocked() == "memory":
            self.scheduler.waiting_for_memory = len(self.scheduler.waiting)
        self.stretch = st

    def _head_need(self) -> int:
        """Blocks the first waiting sequence (scheduler order) would ask for next to a full
        batch of decodes."""
        s = self.scheduler
        head = min(s.waiting, key=Sequence.sort_key)
        n = min(head.num_pending, s.max_batched_tokens - len(s.running))
        return -(-n // self.limits.block_size)

    def _admission_blocked(self) -> str | None:
        """Why no waiting sequence can join the batch during a stretch, or None when one may.

        "full": every sequence slot or the whole token budget is taken by decodes, so the
        scheduler admits nothing and touches nothing. "memory": the head has no prefix in the
        device cache, so its failed admission leaves the pool as it was; whether it fails is
        checked against the stretch's allocations (plan_stretch).
        """
        s = self.scheduler
        if len(s.running) >= s.max_seqs or len(s.running) >= s.max_batched_tokens:
            return "full"
        head = min(s.waiting, key=Sequence.sort_key)
        if head.num_computed or head.block_ids:
            return None
        bs = self.limits.block_size
        if len(head.token_ids) - 1 >= bs:
            first = block_hash(ROOT_HASH, head.token_ids[:bs], head.hash_keys)
            if self.pool.lookup(first) is not None:
                return None
            # Elsewhere on the node it may reach the tiers during the stretch, if not there yet.
            if self.scheduler.tier is not None:
                link = self.link
                assert link is not None  # the scheduler has a tier only through the link
                if link.node.holds(first):
                    return None
        return "memory"

    def apply_started(self, now: float) -> int:
        """Apply the stretch's steps started before `now` (an arrival cut it) and end it;
        returns how many. None finishes a sequence: a stretch is cut before its last step."""
        st = self.stretch
        assert st is not None, "no stretch to cut"
        m = st.count_before(now, inclusive=False)
        finished = self._apply(st, m)
        assert not finished, "a stretch is cut only before its last step"
        self.stretch = None
        return m

    def finish_stretch(self) -> list[Active]:
        """Apply a stretch that ran to its end; returns the requests it finished."""
        st = self.stretch
        assert st is not None, "no stretch to finish"
        finished = self._apply(st, st.steps)
        self.stretch = None
        return finished

    def _apply(self, st: Stretch, m: int) -> list[Active]:
        if m == 0:
            return []
        self._allocate(st, st.allocated_by(m))
        end = self.ready_at = st.end_of(m)
        self._pool_now = end
        link = self.link
        if link is not None:
            link.now = end
            for j in range(1, m + 1):
                link.costs.observe_step(st.batch, st.duration(j))
        first_end = st.end_of(1)
        for idx, active in enumerate(st.order):
            self._advance_to(st, idx, m)
            if active.first_token_s is None:
                active.first_token_s = active.seq.first_token_at = first_end
                if self.on_first_token is not None:
                    self.on_first_token(active, first_end)
        finished = []
        for active in st.order:
            if active.seq.num_output >= active.seq.params.max_tokens:
                active.end_s = end
                self._retire(active.seq)
                finished.append(self.active.pop(id(active.seq)))
        c = self.counters
        c.steps += m
        c.step_tokens += st.batch * m
        c.step_token_budget += self.limits.max_batched_tokens * m
        c.busy_seconds += st.busy_of(m)
        return finished

    def _allocate(self, st: Stretch, upto: int) -> None:
        """Make the stretch's allocations up to the upto-th (whole steps), in exact stepping's
        order. A sequence needs a block at step j because its last one filled at the end of
        step j - 1: those blocks are published first, as the engine publishes them before it
        plans step j, so an eviction and a publication of one hash (two requests with equal
        prompts) happen in the engine's order. The pool's clock reads the end of step j - 1,
        as it does when exact stepping plans step j."""
        link = self.link
        allocs = st.allocs
        k = st.done
        while k < upto:
            j = allocs[k][0]
            group = k
            while group < upto and allocs[group][0] == j:
                group += 1
            if j > 1:
                self._pool_now = st.end_of(j - 1)
                if link is not None:
                    link.now = self._pool_now
                for _, idx in allocs[k:group]:
                    self._advance_to(st, idx, j - 1)
            if link is not None:
                link.now = st.start_of(j)
            for _, idx in allocs[k:group]:
                ids = self.pool.allocate(1)
                assert ids is not None  # plan_stretch kept the allocations within the free blocks
                st.order[idx].seq.block_ids.extend(ids)
            k = group
        st.done = max(st.done, upto)

    def _advance_to(self, st: Stretch, idx: int, steps: int) -> None:
        """Apply the stretch's first `steps` steps to its idx-th sequence: their tokens, and
        the blocks they fill published (Scheduler.advance)."""
        seq = st.order[idx].seq
        n = steps - (seq.num_computed - st.base[idx])
        if n <= 0:
            return
        seq.token_ids.extend([OUTPUT_TOKEN] * (n - 1))
        self.scheduler.advance(ScheduledSeq(seq, n, True))
        seq.token_ids.append(OUTPUT_TOKEN)

    def sync(self, now: float) -> None:
        """Make the allocations of the stretch's steps started by `now` (their evictions reach
        the node's tiers and presence), before a read of the node's blocks at `now`."""
        st = self.stretch
        if st is not None:
            self._allocate(st, st.allocated_by(st.count_before(now, inclusive=True)))

    # -- reads ---------------------------------------------------------------------------------
    def free_blocks(self, now: float) -> int:
        st = self.stretch
        if st is None:
            return self.pool.num_free
        return self.pool.num_free - (
            st.allocated_by(st.count_before(now, inclusive=True)) - st.done
        )

    def used_blocks(self, now: float) -> int:
        """Device blocks holding data. Mid-stretch, a block the stretch allocated counts as
        newly used even when it held a cached prefix before (already counted): the pool's free
        order, which says which it was, is private to it; exact at the stretch's ends."""
        return self.pool.num_used + (self.pool.num_free - self.free_blocks(now))

    def queued_tokens(self) -> int:
        s = self.scheduler
        return sum(q.num_pending for q in s.waiting) + sum(q.num_pending for q in s.running)

    def counters_at(self, now: float) -> EngineCounters:
        """The counters as a worker would report them at `now` (a stretch's steps ended by
        then included)."""
        c = self.counters
        st = self.stretch
        e = 0 if st is None else st.ended_by(now)
        return replace(
            c,
            steps=c.steps + e,
            step_tokens=c.step_tokens + (st.batch * e if st is not None else 0),
            step_token_budget=c.step_token_budget + self.limits.max_batched_tokens * e,
            busy_seconds=c.busy_seconds + (st.busy_of(e) if st is not None else 0.0),
        )
