"""The tokenizer contract the engine relies on, and the incremental detokenizer.

Implementations: `ByteTokenizer` (dummy models) and the BPE tokenizer built from a checkpoint's
metadata (GGUF or tokenizer.json).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Tokenizer(Protocol):
    """Text <-> token ids for one model.

    Invariants: `encode` recognises the model's special tokens (e.g. `<|im_start|>`) as single ids;
    `decode(encode(s)) == s` for any text without special tokens; `eos_token_ids` is not empty.
    """

    vocab_size: int
    eos_token_ids: tuple[int, ...]
    bos_token_id: int | None

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def apply_chat_template(self, messages: Sequence[tuple[str, str]]) -> str:
        """Render (role, content) pairs as one prompt that ends ready for the assistant's turn."""
        ...
