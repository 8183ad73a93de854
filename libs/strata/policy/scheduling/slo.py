"""SLO-aware batching: whether a replica takes one more request without its running decodes
missing their TPOT targets, and how large a prefill chunk a step may carry beside them.

Every running request decodes in every step, so a step's time is every running request's time
per output token. A replica's decode load is priced with its worker's step line (learned online,
strata.core.step_model):

    step_s(B, K, c)   a step of B one-token decodes reading K keys in all, beside a prefill
                      chunk of c tokens

A request may join when the step with it added, its context counted at its largest (prompt +
max_tokens: conservative, and known before it runs), stays within the tightest TPOT target of
the requests that would be running (its own included):

    step_s(B + 1, K + context, 0) <= tightest TPOT x headroom

Requests without a TPOT target (best effort) join only where this holds for the others, so
they never slow an SLA class past its target; a replica running nothing always takes one
request (alone it is served as well as it can be: refusing would not make it faster).

A step's prefill chunk aims at every prompt token pending (at most the step's room and the
step cap). Where that step fits what the running decodes allow, the largest chunk within it
goes. Where it does not, the step runs the decodes alone and the chunk waits for a later step
that their unspent slack pays for, when that is sooner than feeding it in chunks within the
limit (`defer_pays`). A step's cost is concave in its tokens (the line's fixed cost for carrying
a chunk), so a prompt fed one block a step beside decodes pays that cost for every block.
Otherwise the largest chunk within the limit goes, at least one block, so prefill always
progresses, except where the prompts prefilling are all of a class below a running decode with
a TPOT target and even one block would take the step past that decode's target itself
(`defers_block`): there the decodes run alone until their slack pays for the block, since a
block forced into every step would hold a higher class's gaps above its target for as long as
a lower class's prompt prefills. In the engine (running_budget) each decode allows its
step_allowance_ms: a TPOT target is judged on the mean gap between tokens, so a decode that has
been faster than its target lends the step part of the time it left unspent. The scheduler's
estimates (`prefill_s`) walk the same rule from the slack the decodes lent when their worker
last reported (decode_allowance_ms), or from none where prompts are queued ahead (they spend
it first) or decodes joined since (they start with none). A chunk attends over the prompt's
tokens computed before it (`history`), as the worker's step meter counts its keys.

Without a step line (a worker that reported none yet) the batch cap alone rules. Pure: the
node manager's dispatcher, the global scheduler and the simulator call the same functions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from collections.abc import Sequence as SizedSeq
from dataclasses import dataclass
from typing import Protocol

from strata.core.profile import PREFILL_RATE_CHUNK
from strata.core.step_model import StepLine

HEADROOM = 0.9  # of the tightest TPOT target a step may take (the line is an estimate)
SLACK_SPENT = 0.5  # of a decode's unspent TPOT slack one step may take (the rest: a buffer)


@dataclass(slots=True, frozen=True)
class DecodeLoad:
    """What runs on a replica: its sequences, their keys at their largest, and the tightest
    TPOT target among them (None: none is judged on TPOT)."""

    seqs: int = 0
    context_tokens: int = 0
    tightest_tpot_ms: float | None = None

    @classmethod
    def of(cls, requests: Iterable[tuple[int, float | None]]) -> DecodeLoad:
        """From (context tokens at their largest, TPOT target in ms or None) per request."""
        load = cls()
        for context, tpot_ms in requests:
            load = load.plus(context, tpot_ms)
        return load

    def plus(self, context_tokens: int, tpot_ms: float | None) -> DecodeLoad:
        tightest = self.tightest_tpot_ms
        if tpot_ms is not None and tpot_ms > 0:
            tightest = tpot_ms if tightest is None else min(tightest, tpot_ms)
        return DecodeLoad(self.seqs + 1, self.context_tokens + context_tokens, tightest)

    def merged(self, other: DecodeLoad) -> DecodeLoad:
        targets = [t for t in (self.tightest_tpot_ms, other.tightest_tpot_ms) if t is not None]
        return DecodeLoad(
            self.seqs + other.seqs,
            self.context_tokens + other.context_tokens,
            min(targets) if targets else None,
        )


def step_ms(line: StepLine, load: DecodeLoad, prefill_tokens: int = 0, history: int = 0) -> float:
    """A step of `load`'s decodes beside a prefill chunk of `prefill_tokens` with `history`
    tokens of its prompt computed before it, in ms."""
    return 1000.0 * line.decode_step_s(load.seqs, load.context_tokens, prefill_tokens, history)


def fits(
    line: StepLine | None,
    load: DecodeLoad,
    context_tokens: int,
    tpot_ms: float | None,
    headroom: float = HEADROOM,
) -> bool:
    """Whether a request of `context_tokens` (prompt + max_tokens) and TPOT target `tpot_ms`
    may join `load` (module docstring)."""
    if line is None or load.seqs == 0:
        return True
    after = load.plus(context_tokens, tpot_ms)
    if after.tightest_tpot_ms is None:
        return True
    return step_ms(line, after) <= after.tightest_tpot_ms * headroom


def step_limit_ms(
    load: DecodeLoad, cap_ms: float | None, headroom: float = HEADROOM
) -> float | None:
    """The longest step beside `load`'s decodes: their tightest TPOT target x headroom, and at
    most the step cap `cap_ms` (None: none); None when neither bounds it."""
    tpot = None if load.tightest_tpot_ms is None or load.seqs == 0 else load.tightest_tpot_ms
    limits = [x for x in (None if tpot is None else tpot * headroom, cap_ms) if x is not None]
    return min(limits) if limits else None


def chunk_budget(
    line: StepLine | None,
    load: DecodeLoad,
    max_tokens: int,
    block_size: int,
    headroom: float = HEADROOM,
    history: int = 0,
    limit_ms: float | None = None,
) -> int:
    """Prefill tokens one step may carry beside `load`'s decodes, for a prompt with `history`
    tokens computed before the chunk: at most `max_tokens`, at least one block, else the
    largest multiple of `block_size` keeping the step within `limit_ms` (None: the tightest
    TPOT target x headroom; `max_tokens` when no decode has one)."""
    if line is None:
        return max_tokens
    if limit_ms is None:
        if load.tightest_tpot_ms is None or load.seqs == 0:
            return max_tokens
        limit_ms = load.tightest_tpot_ms * headroom
    if step_ms(line, load, max_tokens, history) <= limit_ms:
        return max_tokens
    lo, hi = 0, max_tokens // block_size  # in blocks: lo fits (or is the floor), hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if step_ms(line, load, mid * block_size, history) <= limit_ms:
            lo = mid
        else:
            hi = mid
    return max(block_size, lo * block_size)


def defers_block(
    line: StepLine | None,
    load: DecodeLoad,
    block_size: int,
    limit_ms: float | None,
    history: int = 0,
) -> bool:
    """Whether a step beside `load`'s decodes should carry no prefill: one block (of a prompt
    with `history` tokens computed) would take it past both `limit_ms` and the decodes'
    tightest TPOT target itself, while the decodes alone stay within the limit. A block
    within the target goes through (a step past the headroom but within the target keeps
    every gap within it). False without a line, a limit or decodes (nothing to protect), and
    where the decodes alone exceed the limit (deferring would not save their target, only
    stall the prompt)."""
    if line is None or limit_ms is None or load.seqs == 0:
        return False
    ceiling = max(limit_ms, load.tightest_tpot_ms or 0.0)
    return step_ms(line, load, block_size, history) > ceiling and step_ms(line, load) <= limit_ms


def step_token_budget(
    line: StepLine | None,
    decodes: Iterable[tuple[int, float | None]],
    max_tokens: int,
    block_size: int,
    headroom: float = HEADROOM,
    history: int = 0,
    limit_ms: float | None = None,
    pending: int = 0,
    cap_ms: float | None = None,
    defer: bool = False,
) -> int:
    """An engine step's token budget: one token for each decoding sequence (given as its
    context and TPOT target), and beside them a prefill chunk for prompts with `pending` tokens
    left (0: as many as the step takes) and `history` tokens computed (the most of any prompt
    part-way through its prefill). The chunk it aims for is all of them, at most the step's
    room and the largest within the step cap `cap_ms` (None: none):

    - where that chunk's step fits `limit_ms` (None: the decodes' tightest target x headroom),
      the largest chunk within the limit goes;
    - else, where the decodes alone fit the limit, none: the decodes run alone, their unspent
      slack grows (step_allowance_ms), and the whole chunk goes in a later step that the slack
      pays for. A step's cost is concave in its tokens (a fixed cost for carrying a chunk, the
      line's group cost), so a prompt fed one block a step beside decodes pays that cost for
      every block: fewer, larger chunks reach its first token sooner, at the same mean gap;
    - else, with `defer` (the prompts are of a class below the decodes'), none where one block
      would break the decodes' target itself (defers_block): a block forced into every step
      would hold a higher class's gaps above its target while a lower class's prompt prefills;
    - else (the decodes alone miss the limit: waiting would not save their target, only stall
      the prompt) the largest chunk within the limit, at least one block.

    `max_tokens` when no decode has a target and no limit is given."""
    load = DecodeLoad.of(decodes)
    if line is None or (load.tightest_tpot_ms is None and limit_ms is None):
        return max_tokens
    if limit_ms is None and load.tightest_tpot_ms is not None:
        limit_ms = load.tightest_tpot_ms * headroom
    room = max_tokens - load.seqs
    within = load.seqs + chunk_budget(line, load, room, block_size, headroom, history, limit_ms)
    if load.seqs == 0 or limit_ms is None:
        return within
    want = min(pending, room) if pending > 0 else room
    if cap_ms is not None:
        want = min(want, chunk_budget(line, load, want, block_size, headroom, history, cap_ms))
    if want <= 0 or step_ms(line, load, want, history) <= limit_ms:
        return within
    if load.tightest_tpot_ms is not None and defer_pays(
        line, load, want, history, limit_ms, load.tightest_tpot_ms * headroom, block_size, headroom
    ):
        return load.seqs
    if defer and defers_block(line, load, block_size, limit_ms, history):
        return load.seqs
    return within


def _slack_waits(took_ms: float, limit_ms: float, per_ms: float, decode_ms: float) -> int:
    """Decode-only steps of `decode_ms` until a step of `took_ms` fits the limit: each leaves
    per_ms less its time unspent, and the limit grows by SLACK_SPENT of that
    (step_allowance_ms)."""
    return math.ceil((took_ms - limit_ms) / (SLACK_SPENT * (per_ms - decode_ms)))


def defer_pays(
    line: StepLine,
    load: DecodeLoad,
    want: int,
    history: int,
    limit_ms: float,
    per_ms: float,
    block_size: int,
    headroom: float = HEADROOM,
) -> bool:
    """Whether a chunk of `want` tokens (over `history`) whose step passes `limit_ms` reaches
    its end sooner by waiting for it (_slack_waits decode-only steps beside `load`, per_ms
    being the tightest target x headroom) than in chunks within the limit, a step each.
    False where the decodes alone pass the limit or leave no slack (waiting would stall the
    prompt and save no target)."""
    decode_ms = step_ms(line, load)
    if decode_ms > limit_ms or decode_ms >= per_ms:
        return False
    took = step_ms(line, load, want, history)
    waits = _slack_waits(took, limit_ms, per_ms, decode_ms)
    chunk = chunk_budget(line, load, want, block_size, headroom, history, limit_ms)
    forced = math.ceil(want / chunk) * step_ms(line, load, chunk, history)
    return waits * decode_ms + took < forced


def step_allowance_ms(
    tpot_ms: float, outputs: int, decoding_s: float | None, headroom: float = HEADROOM
) -> float:
    """The longest next step a decode lends the prefill beside it: it has sampled `outputs`
    tokens, the first `decoding_s` seconds ago (None: none yet), and its TPOT, the mean gap
    between its tokens as its class judges it, is to stay within tpot_ms x headroom. Its
    earlier outputs - 1 gaps left `unspent` = per x (outputs - 1) - decoding_s of that
    (per = tpot_ms x headroom); the step may take per plus SLACK_SPENT of it (the rest stays
    a buffer for steps the line under-prices), and never less than per (no slack: the bound
    of one gap)."""
    per = tpot_ms * headroom
    if decoding_s is None or outputs < 1:
        return per
    return max(per, per + SLACK_SPENT * (per * (outputs - 1) - 1000.0 * decoding_s))


class RunningSeq(Protocol):
    """What running_budget reads of an engine's running sequence (strata.engine.sequence)."""

    @property
    def token_ids(self) -> SizedSeq[int]: ...
    @property
    def num_computed(self) -> int: ...
    @property
    def num_pending(self) -> int: ...
    @property
    def num_output(self) -> int: ...
    @property
    def tpot_ms(self) -> float | None: ...
    @property
    def first_token_at(self) -> float | None: ...
    @property
    def priority(self) -> int: ...


def decode_allowance_ms(
    running: Iterable[RunningSeq], now: float, headroom: float = HEADROOM
) -> float | None:
    """The longest step the decodes among `running` allow now (the clock of their
    first_token_at): the least step_allowance_ms of those with a TPOT target; None where none
    has one. At least the tightest target x headroom; above it by what their unspent slack
    lends the prefill beside them."""
    limit: float | None = None
    for s in running:
        if s.num_pending > 1 or not s.tpot_ms:
            continue
        at = s.first_token_at
        allowed = step_allowance_ms(
            s.tpot_ms, s.num_output, None if at is None else now - at, headroom
        )
        limit = allowed if limit is None else min(limit, allowed)
    return limit


def running_budget(
    line: StepLine | None,
    running: Iterable[RunningSeq],
    now: float,
    max_tokens: int,
    block_size: int,
    headroom: float = HEADROOM,
    cap_ms: float | None = None,
    waiting: Iterable[RunningSeq] = (),
) -> int:
    """The next step's token budget for an engine's `running` sequences at `now` (the clock
    of their first_token_at), its `waiting` ones queued for a first step: a token for each
    decode, and beside them a prefill chunk sized by step_token_budget for every prompt token
    pending (running and waiting), within what every decode with a TPOT target allows
    (step_allowance_ms: its mean gap kept within the target, not each step) and the step cap
    `cap_ms` (strata.policy.scheduling.step_cap; None: none), priced over the history of the
    prompt furthest through its prefill."""
    running = list(running)
    decodes: list[tuple[int, float | None]] = []
    history = pending = 0
    prefill_class: int | None = None  # the best class prefilling
    decode_class: int | None = None  # the best class decoding with a TPOT target
    for s in running:
        if s.num_pending > 1:
            history = max(history, s.num_computed)
            pending += s.num_pending
            prefill_class = s.priority if prefill_class is None else max(prefill_class, s.priority)
            continue
        decodes.append((len(s.token_ids), s.tpot_ms))
        if s.tpot_ms:
            decode_class = s.priority if decode_class is None else max(decode_class, s.priority)
    limit = decode_allowance_ms(running, now, headroom)
    pending += sum(s.num_pending for s in waiting)
    if cap_ms is not None:
        limit = cap_ms if limit is None else min(limit, cap_ms)
    defer = prefill_class is not None and decode_class is not None and prefill_class < decode_class
    return step_token_budget(
        line,
        decodes,
        max_tokens,
        block_size,
        headroom,
        history=history,
        limit_ms=limit,
        pending=pending,
        cap_ms=cap_ms,
        defer=defer,
    )


def tpot_capacity(line: StepLine | None, load: DecodeLoad, headroom: float = HEADROOM) -> int:
    """How many of `load`'s sequences the engine runs at once within their tightest TPOT
    target (each with the load's mean context): all of them without a line or a target, at
    least one."""
    if line is None or load.tightest_tpot_ms is None or load.seqs <= 1:
        return load.seqs
    limit_ms = load.tightest_tpot_ms * headroom
    n = load.seqs
    while n > 1 and step_ms(line, _share(load, n)) > limit_ms:
        n -= 1
    return n


def _share(load: DecodeLoad, n: int) -> DecodeLoad:
    """n of `load`'s sequences, each with its mean context."""
    if n >= load.seqs:
        return load
    return DecodeLoad(n, load.context_tokens * n // max(1, load.seqs), load.tightest_tpot_ms)


def engine_share(
    line: StepLine | None, held: DecodeLoad, cap: int | None, headroom: float = HEADROOM
) -> DecodeLoad:
    """What of `held` (a replica's requests, in its engine or waiting for a slot) runs in the
    engine: at most `cap` (None: no cap) and at most its tpot_capacity."""
    running = tpot_capacity(line, held, headroom)
    if cap is not None:
        running = min(running, cap)
    return _share(held, running)


def prefill_s(
    line: StepLine | None,
    beside: DecodeLoad,
    tokens: int,
    block_size: int,
    headroom: float = HEADROOM,
    max_chunk: int = 0,
    lent_ms: float = 0.0,
) -> float:
    """Seconds a prefill of `tokens` takes beside the decodes of `beside`, as the engine's
    step_token_budget feeds it (each step's chunk at most the engine's `max_chunk` tokens a
    step, 0: no cap, less the decodes' tokens; each attending over the chunks before it), the
    decodes starting with the slack that lets their first step take `lent_ms` beyond their
    tightest target x headroom (decode_allowance_ms less that; 0: no unspent slack, fresh,
    conservative), which the prompt's chunks spend first; 0 without a line or tokens:
    a prompt admitted beside decodes with a TPOT target reaches its first token no sooner than
    this. Step by step: a chunk whose step fits the decodes' allowance goes; one that does not
    waits the decode-only steps whose slack pays for it, where that is sooner
    (defer_pays); else the rest goes in chunks within the target (chunk_budget), each its
    own step."""
    if line is None or tokens <= 0:
        return 0.0
    block = max(1, block_size)
    most = tokens if max_chunk <= 0 else max(block, min(tokens, max_chunk - beside.seqs))
    target = beside.tightest_tpot_ms if beside.seqs else None
    per = None if target is None else target * headroom
    seconds, done, unspent = 0.0, 0, max(0.0, lent_ms) / SLACK_SPENT
    decode_ms = step_ms(line, beside)
    while per is not None and done < tokens:
        want = min(tokens - done, most)
        limit = per + SLACK_SPENT * max(0.0, unspent)
        took = step_ms(line, beside, want, done)
        if took > limit:
            if not defer_pays(line, beside, want, done, limit, per, block, headroom):
                break
            waits = _slack_waits(took, limit, per, decode_ms)
            seconds += waits * decode_ms / 1000.0
            unspent += waits * (per - decode_ms)
        seconds += took / 1000.0
        unspent += per - took
        done += want
    if done >= tokens:
        return seconds
    # The rest in chunks within the target, each a step over the chunks before it: chunk i
    # (from 0) attends over done + i x chunk keys of history.
    left = tokens - done
    chunk = chunk_budget(line, beside, min(left, most), block, headroom)
    full, rest = divmod(left, chunk)
    history_keys = chunk * chunk * full * (full - 1) // 2 + rest * full * chunk + done * left
    seconds += full * step_ms(line, beside, chunk) / 1000.0
    seconds += line.prefill_attend_s * history_keys
    if rest:
        seconds += step_ms(line, beside, rest) / 1000.0
    return seconds


def slot_wait_s(
    line: StepLine | None,
    held: DecodeLoad,
    cap: int | None,
    queued: int,
    context_tokens: int,
    tpot_ms: float | None,
    turnover_s: float,
    passes: int = 0,
) -> float:
    """Seconds until a request (of `context_tokens`, TPOT target `tpot_ms`) gets an engine slot
    on a replica whose node holds `held` for it (in its engine, and past what the engine runs
    (engine_share: the cap and the TPOT targets) waiting) with `queued` more waiting ahead:
    none when it fits now with nobody ahead; else a slot frees every `turnover_s`
    (strata.policy.scheduling.slots), and everyone ahead (+ 1 when it would not fit beside the
    others) must get one first; of those waiting past what the engine runs, `passes` are of
    lower classes it goes before. 0 while nothing is measured (no claim)."""
    if held.seqs == 0 or turnover_s <= 0:
        return 0.0
    in_engine = engine_share(line, held, cap)
    fits_now = (
        (cap is None or held.seqs < cap)
        and in_engine.seqs == held.seqs
        and fits(line, in_engine, context_tokens, tpot_ms)
    )
    waiting = max(0, held.seqs - in_engine.seqs - passes)
    need = queued + waiting + (0 if fits_now else 1)
    return need * turnover_s


def solo_prefill_s(
    line: StepLine | None, tokens: int, block_size: int, max_chunk: int = 0
) -> float:
    """A prompt of `tokens` alone on an idle replica, in chunks of at most `max_chunk` tokens
    (prefill_s beside nothing; 0 without a line)."""
    return prefill_s(line, DecodeLoad(), tokens, block_size, max_chunk=max_chunk)


def line_prefill_rate(
    line: StepLine | None, block_size: int, max_chunk: int = 0, tokens: int = PREFILL_RATE_CHUNK
) -> float:
    """Tokens per second of a `tokens`-token prompt prefilled alone, as the line prices it (0
    without a line): the prefill throughput a replica reports before its engine has measured
    one, so that routing and admission price the queue from the first request on (with the
    conservative prior of a model without a profile, conservatively)."""
    seconds = solo_prefill_s(line, tokens, block_size, max_chunk)
    return tokens / seconds if seconds > 0 else 0.0
