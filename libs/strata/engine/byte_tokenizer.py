"""A byte-level tokenizer for dummy models: no vocabulary file, every text encodes.

Id layout (vocab_size >= 260; ids past the specials exist only so a model's vocabulary can be
larger than the tokenizer's, as real checkpoints often pad theirs):

    0 .. 255     one UTF-8 byte each
    256          <|bos|>
    257          <|eos|>
    258          <|im_start|>
    259          <|im_end|>
    260 .. V-1   padding rows: a random model may sample them; they decode to nothing
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from strata.engine.chat_template import CHATML_TEMPLATE, ChatTemplate

SPECIAL_TOKENS = ("<|bos|>", "<|eos|>", "<|im_start|>", "<|im_end|>")
_FIRST_SPECIAL = 256
MIN_VOCAB_SIZE = _FIRST_SPECIAL + len(SPECIAL_TOKENS)
_SPECIAL_IDS = {token: _FIRST_SPECIAL + i for i, token in enumerate(SPECIAL_TOKENS)}
_SPECIAL_SPLIT = re.compile("(" + "|".join(re.escape(t) for t in SPECIAL_TOKENS) + ")")


class ByteTokenizer:
    """UTF-8 bytes as ids, four ChatML-style specials, and a ChatML chat template.

    End of generation is either `<|eos|>` or `<|im_end|>` (the end of a chat turn).
    """

    __slots__ = ("vocab_size", "eos_token_ids", "bos_token_id", "_template")

    def __init__(self, vocab_size: int = 512) -> None:
        if vocab_size < MIN_VOCAB_SIZE:
            raise ValueError(
                f"a byte tokenizer needs vocab_size >= {MIN_VOCAB_SIZE} (256 bytes + "
                f"{len(SPECIAL_TOKENS)} special tokens), got {vocab_size}"
            )
        self.vocab_size = vocab_size
        self.bos_token_id: int | None = _SPECIAL_IDS["<|bos|>"]
        self.eos_token_ids: tuple[int, ...] = (_SPECIAL_IDS["<|eos|>"], _SPECIAL_IDS["<|im_end|>"])
        self._template = ChatTemplate(CHATML_TEMPLATE, bos_token="<|bos|>", eos_token="<|eos|>")

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for piece in _SPECIAL_SPLIT.split(text):
            special = _SPECIAL_IDS.get(piece)
            if special is not None:
                ids.append(special)
            else:
                ids.extend(piece.encode("utf-8"))
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        if all(0 <= i < _FIRST_SPECIAL for i in ids):  # the common case, on the decode hot path
            return bytes(ids).decode("utf-8", errors="replace")
        parts: list[str] = []
        pending = bytearray()
        for raw in ids:
            i = int(raw)
            if 0 <= i < _FIRST_SPECIAL:
                pending.append(i)
                continue
            if pending:
                parts.append(pending.decode("utf-8", errors="replace"))
                pending.clear()
            if _FIRST_SPECIAL <= i < MIN_VOCAB_SIZE:
                parts.append(SPECIAL_TOKENS[i - _FIRST_SPECIAL])
            elif not MIN_VOCAB_SIZE <= i < self.vocab_size:
                raise ValueError(
                    f"token id {i} is outside the vocabulary (0..{self.vocab_size - 1})"
                )
        if pending:
            parts.append(pending.decode("utf-8", errors="replace"))
        return "".join(parts)

    def apply_chat_template(self, messages: Sequence[tuple[str, str]]) -> str:
        return self._template.render(messages)
