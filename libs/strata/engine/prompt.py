"""Turn a request's prompt or chat messages into token ids with the model's own template."""

from __future__ import annotations

from collections.abc import Sequence

from strata.engine.tokenizer import Tokenizer

ROLES = ("system", "user", "assistant", "tool")


def prompt_ids(tokenizer: Tokenizer, prompt: str, messages: Sequence[tuple[str, str]]) -> list[int]:
    """Exactly one of prompt / messages must be given; ValueError says what is wrong."""
    if prompt and messages:
        raise ValueError("give either prompt or messages, not both")
    if messages:
        for i, (role, _) in enumerate(messages):
            if role not in ROLES:
                raise ValueError(
                    f"messages[{i}].role must be one of {', '.join(ROLES)}, got {role!r}"
                )
        return tokenizer.encode(tokenizer.apply_chat_template(list(messages)))
    if not prompt:
        raise ValueError("the request has neither a prompt nor messages")
    return tokenizer.encode(prompt)
