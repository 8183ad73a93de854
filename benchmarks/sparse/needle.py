"""Needle in a haystack: a prompt of an exact token length with a needle at a given depth, and
the scoring of the model's answer.

The prompt is built from token ids, not text, so its length is exact:

    [chat template up to the user's text, preamble][haystack ... needle ... haystack]
    [question, template up to the assistant's turn, the answer's first words]

The needle goes in the way the `needlehaystack` tester puts it: at `depth` percent of the
haystack's tokens, moved back to just after the nearest sentence end ('.'), or last at 100%.
Preamble, question and the answer's first words follow RULER's single-needle template: told
beforehand that a number is hidden, SmolLM2-135M finds it at 8k at most depths (without the
preamble it found it only at the very end), and with the answer begun it only has to copy the
number, which is what retrieval is about.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from strata.engine.tokenizer import Tokenizer

PREAMBLE = (
    "A special magic number is hidden within the following text. Make sure to memorize "
    "it. I will quiz you about the number afterwards.\n"
)
NEEDLE = " The special magic number is {number}."
QUESTION = "What is the special magic number mentioned in the provided text?"
ANSWER_PREFIX = "The special magic number mentioned in the provided text is"
_SENTINEL = "\u2063DOCUMENT\u2063"
_NUMBER = re.compile(r"\d[\d,]*")


@dataclass(slots=True, frozen=True)
class ChatPieces:
    """Token ids around the haystack: the template's head and the question's tail."""

    head: list[int]
    tail: list[int]


@dataclass(slots=True, frozen=True)
class NeedlePrompt:
    ids: list[int]
    expected: str  # the number the answer must give
    depth: float  # requested, percent of the haystack
    needle_at: int  # haystack tokens before the needle
    haystack_tokens: int  # haystack tokens in the prompt, the needle excluded

    @property
    def placed_depth(self) -> float:
        """Where the needle landed, percent of the haystack (after the move back)."""
        return 100.0 * self.needle_at / self.haystack_tokens


def chat_pieces(
    tokenizer: Tokenizer,
    question: str = QUESTION,
    answer_prefix: str = ANSWER_PREFIX,
    preamble: str = PREAMBLE,
) -> ChatPieces:
    """Split the model's chat template around the document; the tail ends inside the answer."""
    rendered = tokenizer.apply_chat_template([("user", preamble + _SENTINEL + "\n\n" + question)])
    before, after = rendered.split(_SENTINEL)
    return ChatPieces(head=tokenizer.encode(before), tail=tokenizer.encode(after + answer_prefix))


def insert_at_depth(
    context: Sequence[int], needle: Sequence[int], depth: float, sentence_ends: frozenset[int]
) -> tuple[list[int], int]:
    """context with needle inserted at `depth` percent, moved back to just after a sentence end
    (or to the start); at 100 the needle goes last. Returns (ids, index of the needle)."""
    if not 0.0 <= depth <= 100.0:
        raise ValueError(f"depth must be between 0 and 100 percent, got {depth}")
    if depth == 100.0:
        return [*context, *needle], len(context)
    at = int(len(context) * depth / 100.0)
    while at > 0 and context[at - 1] not in sentence_ends:
        at -= 1
    return [*context[:at], *needle, *context[at:]], at


def build_prompt(
    pieces: ChatPieces,
    haystack: Sequence[int],
    needle: Sequence[int],
    expected: str,
    depth: float,
    length: int,
    sentence_ends: frozenset[int],
) -> NeedlePrompt:
    """A prompt of exactly `length` tokens: as much haystack as fits around the needle."""
    room = length - len(pieces.head) - len(pieces.tail) - len(needle)
    if room <= 0:
        raise ValueError(
            f"a {length}-token prompt leaves no room for the haystack: the "
            f"template and question take {len(pieces.head) + len(pieces.tail)} "
            f"tokens and the needle {len(needle)}"
        )
    if room > len(haystack):
        raise ValueError(
            f"the haystack has {len(haystack)} tokens; a {length}-token prompt needs {room}"
        )
    body, at = insert_at_depth(haystack[:room], needle, depth, sentence_ends)
    ids = [*pieces.head, *body, *pieces.tail]
    return NeedlePrompt(ids=ids, expected=expected, depth=depth, needle_at=at, haystack_tokens=room)


def needle_number(rng: random.Random, digits: int = 7) -> str:
    """A number of `digits` digits with no leading zero."""
    return str(rng.randrange(10 ** (digits - 1), 10**digits))


def first_number(text: str) -> str | None:
    """The first number in text, thousands separators removed ("4,821,305" -> "4821305")."""
    m = _NUMBER.search(text)
    return m.group(0).rstrip(",").replace(",", "") if m else None


def is_correct(answer: str, expected: str) -> bool:
    """The answer's first number is exactly the needle's (a longer or shorter one is wrong)."""
    return first_number(answer) == expected
