"""The prompt-length estimate used before a prompt is tokenized: about four characters a token.

The gateway sends it to the scheduler when the model's tokenizer is not loaded yet, and the node
manager falls back to it when a request carries no estimate; both use this one function, so
routing and queueing price an unhashed prompt alike.
"""

from __future__ import annotations

from collections.abc import Iterable

CHARS_PER_TOKEN = 4


def estimate_tokens(prompt: str, message_contents: Iterable[str] = ()) -> int:
    return (len(prompt) + sum(len(c) for c in message_contents)) // CHARS_PER_TOKEN
