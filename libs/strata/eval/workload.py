"""The replayable request list: a trace scaled to the target, mapped to tenants, turned into text.

Scaling (documented here because every report quotes it):

    send_at  = arrival_s / time_scale                            (time_scale 10 = ten times faster)
    prompt   = clip(ceil(prompt_tokens / length_scale), 1, max_prompt)
    output   = clip(ceil(output_tokens / length_scale), 1, max_output)
    block    = max(1, round(trace_block_tokens / length_scale))  (Mooncake: 512 -> 128 at 4)

One length divisor for prompt and output keeps the trace's prompt:output ratio; the clips keep
prompt + output inside a small model's context (the defaults, 1024 + 256, fit every model the
engine ships). The window (max_requests, max_duration_s) applies to the scaled time axis.

Token synthesis: the gateway takes text, so each request becomes a text whose token count for the
target model is known. Dummy models use a byte tokenizer, where one ASCII letter is one token. For
BPE models the text is words of WORDS, each with a leading space; on SmolLM2's tokenizer (the
default model) each " word" is one token and the pre-tokenizer never merges across a space, so
N words are exactly N tokens. On another BPE vocabulary that is an approximation, which is why the
replay records the prompt_tokens the server reports back.

Shared prefixes: hash id h always becomes the same block of text (drawn from a generator seeded
with (seed, h)), so requests with equal leading hash ids get equal leading token blocks and the
server's prefix cache can really share them. The rest of a prompt (and every prompt of a trace
without hash ids) is drawn from a generator seeded with (seed, request index): unique per request.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from strata.eval.traces import MOONCAKE_BLOCK_TOKENS, TraceRequest

DEFAULT_MAX_PROMPT = 1024
DEFAULT_MAX_OUTPUT = 256

# One token each, with a leading space, in SmolLM2's vocabulary (tests/unit/test_eval_workload.py
# checks every word against the real tokenizer).
WORDS = tuple(
    """
    that with from this have your their they will which more other about were also them into
    these some when time under there than over know people like year such been help what
    would need through work most many used only first child system between learn where could
    health should well every high world even form water sign just make years data call then
    result those each because effect while process during found count long after return read
    using lead fact test life very being find right person back both follow does grow much
    main before level study great food start good might school within class often around
    made said show same power design again small allow care less example down take support
    human treat state called point number build play though body must plan common want three
    cell pass social method known real without public still change better hand another
    report place present project list product feel light become energy open mean keep others
    best include direct various name history create perform home proper stand move among
    mark house river table green music paper garden window animal bread story money night
    morning friend family city country street market letter field stone cloud summer winter
    spring forest island ocean mountain valley bridge road train plane horse bird fish tree
    flower apple orange yellow black white purple silver golden simple quick quiet early
    later young strong clear heavy happy bright warm cold dark fresh sweet round short
    little large model value order group local total final basic
""".split()
)
LETTERS = tuple("abcdefghijklmnopqrstuvwxyz")


@dataclass(slots=True, frozen=True)
class Scaling:
    time_scale: float = 1.0
    length_scale: float = 1.0
    max_prompt: int = DEFAULT_MAX_PROMPT
    max_output: int = DEFAULT_MAX_OUTPUT
    trace_block_tokens: int = MOONCAKE_BLOCK_TOKENS

    def __post_init__(self) -> None:
        for name in ("time_scale", "length_scale"):
            value = getattr(self, name)
            if not value > 0 or math.isinf(value):
                raise ValueError(f"{name} must be a positive number, got {value}")
        for name in ("max_prompt", "max_output", "trace_block_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")

    def send_at(self, arrival_s: float) -> float:
        return arrival_s / self.time_scale

    def prompt_tokens(self, tokens: int) -> int:
        return _scale(tokens, self.length_scale, self.max_prompt)

    def output_tokens(self, tokens: int) -> int:
        return _scale(tokens, self.length_scale, self.max_output)

    @property
    def block_tokens(self) -> int:
        return max(1, round(self.trace_block_tokens / self.length_scale))


def _scale(tokens: int, divisor: float, cap: int) -> int:
    return min(cap, max(1, math.ceil(tokens / divisor)))


@dataclass(slots=True, frozen=True)
class Window:
    """Which part of a trace to send: at most max_requests, up to max_duration_s (scaled time)."""

    max_requests: int | None = None
    max_duration_s: float | None = None

    def __post_init__(self) -> None:
        if self.max_requests is not None and self.max_requests < 1:
            raise ValueError(f"max_requests must be at least 1, got {self.max_requests}")
        if self.max_duration_s is not None and not self.max_duration_s > 0:
            raise ValueError(f"max_duration_s must be positive, got {self.max_duration_s}")


@dataclass(slots=True, frozen=True)
class TenantKey:
    """An API key to send with, the label it appears under in results, and its share of traffic."""

    label: str
    api_key: str
    weight: float = 1.0

    def __post_init__(self) -> None:
        if not self.api_key:
            raise ValueError(f"tenant {self.label!r} has an empty API key")
        if not self.weight > 0 or math.isinf(self.weight):
            raise ValueError(
                f"the weight of tenant {self.label!r} must be positive, got {self.weight}"
            )


def parse_tenants(spec: str) -> tuple[list[TenantKey], bool]:
    """`key1,key2` (round-robin) or `alice=key1:3,bob=key2:1` (weighted); returns (keys, weighted).

    An entry is `[label=]key[:weight]`; a key without a label is shown as key1, key2, ... so that
    keys never reach result files. Weighted mapping applies when any entry gives a weight.
    """
    keys: list[TenantKey] = []
    weighted = False
    for i, entry in enumerate(e.strip() for e in spec.split(",")):
        if not entry:
            raise ValueError(
                f"--tenants entry {i + 1} is empty; give [label=]key[:weight] "
                f"entries separated by commas"
            )
        label, has_label, rest = entry.partition("=")
        if not has_label:
            label, rest = f"key{i + 1}", entry
        key, has_weight, raw_weight = rest.partition(":")
        weight = 1.0
        if has_weight:
            weighted = True
            try:
                weight = float(raw_weight)
            except ValueError:
                raise ValueError(
                    f"--tenants entry {label!r}: the weight after ':' must be a "
                    f"number, got {raw_weight!r}"
                ) from None
        keys.append(TenantKey(label.strip(), key.strip(), weight))
    labels = [k.label for k in keys]
    if len(set(labels)) != len(labels):
        raise ValueError(f"--tenants labels must be unique, got {', '.join(labels)}")
    return keys, weighted


class TenantMapper:
    """Assigns each request a key: by the trace's own tenant name when a label matches it, else
    round-robin over the keys, or (weighted) a draw from the injected RNG by the keys' weights."""

    def __init__(
        self, keys: Sequence[TenantKey], *, weighted: bool = False, rng: random.Random | None = None
    ) -> None:
        if not keys:
            raise ValueError("tenant mapping needs at least one API key")
        if weighted and rng is None:
            raise ValueError("weighted tenant mapping needs an RNG")
        self._keys = list(keys)
        self._by_label = {k.label: k for k in keys}
        self._weights = [k.weight for k in keys]
        self._weighted = weighted
        self._rng = rng
        self._next = 0

    def assign(self, trace_tenant: str = "") -> TenantKey:
        if trace_tenant in self._by_label:
            return self._by_label[trace_tenant]
        if self._weighted:
            assert self._rng is not None, "__init__ refuses a weighted mapping without an RNG"
            return self._rng.choices(self._keys, weights=self._weights)[0]
        key = self._keys[self._next % len(self._keys)]
        self._next += 1
        return key


class TokenText(Protocol):
    """Texts that are exactly one token each for some family of tokenizers (read only)."""

    @property
    def name(self) -> str: ...

    @property
    def pieces(self) -> tuple[str, ...]: ...


@dataclass(slots=True, frozen=True)
class ByteText:
    name: str = "bytes"
    pieces: tuple[str, ...] = LETTERS


@dataclass(slots=True, frozen=True)
class WordText:
    name: str = "words"
    pieces: tuple[str, ...] = tuple(" " + w for w in WORDS)


def text_for_model(model: str) -> TokenText:
    """Byte letters for the engine's dummy models (byte tokenizer), words for any other model."""
    return ByteText() if model.startswith("dummy-") else WordText()


class PromptSynth:
    """Prompts of an exact token count, hash-id blocks shared, everything else unique."""

    def __init__(self, text: TokenText, block_tokens: int, seed: int) -> None:
        if block_tokens < 1:
            raise ValueError(f"block_tokens must be at least 1, got {block_tokens}")
        self.text = text
        self.block_tokens = block_tokens
        self.seed = seed

    def pieces(self, index: int, tokens: int, hash_ids: Sequence[int] = ()) -> list[str]:
        """The `tokens` one-token pieces of request `index`: first the hash ids' blocks (the last
        one cut short when the prompt ends inside it), then unique filler."""
        out: list[str] = []
        for h in hash_ids:
            if len(out) >= tokens:
                break
            out.extend(self._draw(f"block:{h}", min(self.block_tokens, tokens - len(out))))
        if len(out) < tokens:
            out.extend(self._draw(f"request:{index}", tokens - len(out)))
        return out

    def prompt(self, index: int, tokens: int, hash_ids: Sequence[int] = ()) -> str:
        return "".join(self.pieces(index, tokens, hash_ids))

    def _draw(self, key: str, count: int) -> list[str]:
        # random.Random seeds a str through SHA-512: the same on every run and platform, and
        # independent of PYTHONHASHSEED.
        return random.Random(f"{self.seed}:{key}").choices(self.text.pieces, k=count)


@dataclass(slots=True, frozen=True)
class WorkloadRequest:
    """One request as the replay sends it. prompt_tokens is the synthesized length (exact for the
    byte and default tokenizers); the server's own count comes back in the usage."""

    index: int
    send_at_s: float
    prompt: str
    prompt_tokens: int
    max_tokens: int
    tenant: str
    api_key: str
    sla_class: str = ""
    trace_tenant: str = ""
    shared_blocks: int = 0


def build_workload(
    requests: Sequence[TraceRequest],
    scaling: Scaling,
    window: Window,
    tenants: TenantMapper,
    synth: PromptSynth,
) -> list[WorkloadRequest]:
    """The window of `requests` (in arrival order), scaled, assigned to tenants, as text."""
    out: list[WorkloadRequest] = []
    for request in sorted(requests, key=lambda r: r.arrival_s):
        if window.max_requests is not None and len(out) >= window.max_requests:
            break
        send_at = scaling.send_at(request.arrival_s)
        if window.max_duration_s is not None and send_at > window.max_duration_s:
            break
        prompt_tokens = scaling.prompt_tokens(request.prompt_tokens)
        key = tenants.assign(request.tenant)
        index = len(out)
        out.append(
            WorkloadRequest(
                index=index,
                send_at_s=send_at,
                prompt=synth.prompt(index, prompt_tokens, request.hash_ids),
                prompt_tokens=prompt_tokens,
                max_tokens=scaling.output_tokens(request.output_tokens),
                tenant=key.label,
                api_key=key.api_key,
                sla_class=request.sla_class,
                trace_tenant=request.tenant,
                shared_blocks=min(
                    len(request.hash_ids), math.ceil(prompt_tokens / synth.block_tokens)
                ),
            )
        )
    return out
