"""Incremental detokenization with stop strings.

Text is released only when it is final: never half a UTF-8 character (the tokenizer's decode
yields U+FFFD for an incomplete byte sequence at the end) and never the beginning of what might
become a stop string; a stop string itself is never released.
"""

from __future__ import annotations

from collections.abc import Iterable

from strata.engine.tokenizer import Tokenizer


class Detokenizer:
    def __init__(self, tokenizer: Tokenizer, stop: tuple[str, ...]):
        self.tokenizer = tokenizer
        self.stop = stop
        self.ids: list[int] = []
        self.text = ""  # all decoded text so far (final part only)
        self.emitted = 0  # chars of self.text already released
        self._prefix_offset = 0
        self._read_offset = 0
        self.stopped = False

    def add(self, token_id: int) -> str:
        """Append one generated token; return newly released text."""
        self.ids.append(token_id)
        prefix = self.tokenizer.decode(self.ids[self._prefix_offset : self._read_offset])
        full = self.tokenizer.decode(self.ids[self._prefix_offset :])
        if full.endswith("\ufffd") or len(full) <= len(prefix):
            return self._release(final=False)
        self.text += full[len(prefix) :]
        self._prefix_offset = self._read_offset
        self._read_offset = len(self.ids)
        return self._release(final=False)

    def prime(self, ids: Iterable[int]) -> None:
        """Replay output tokens another worker already streamed (failover resume), dropping the
        text they release: the client has it. Being deterministic, the replay leaves exactly that
        worker's state (a held-back partial UTF-8 character or stop-string prefix included), so
        the next release continues the text where the client's copy stopped, nothing repeated
        and nothing missing."""
        for token_id in ids:
            self.add(token_id)

    def flush(self) -> str:
        """At the end: release whatever is held back (a partial stop-string match)."""
        return self._release(final=True)

    def _release(self, final: bool) -> str:
        if self.stopped:
            return ""
        for s in self.stop:
            at = self.text.find(s, max(0, self.emitted - len(s) + 1))
            if at != -1:
                self.stopped = True
                self.text = self.text[:at]
                out = self.text[self.emitted :]
                self.emitted = len(self.text)
                return out
        end = len(self.text)
        if not final:
            for s in self.stop:  # hold back a tail that could still grow into a stop string
                for k in range(min(len(s) - 1, end - self.emitted), 0, -1):
                    if s.startswith(self.text[end - k :]):
                        end = min(end, len(self.text) - k)
                        break
        out = self.text[self.emitted : end]
        self.emitted = end
        return out
