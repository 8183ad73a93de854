"""A byte-level BPE tokenizer built from a checkpoint's own metadata, on Rust `tokenizers`.

Two sources: a GGUF file's `tokenizer.ggml.*` metadata (vocabulary, merges, token types, special
ids, pre-tokenizer name), and a Hugging Face folder's `tokenizer.json` + `tokenizer_config.json`.
The GGUF path builds the same tokenizer transformers builds from a GGUF (its GPT2Tokenizer plus
the file's control tokens as specials), so ids match `AutoTokenizer.from_pretrained(...,
gguf_file=...)` exactly.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

from strata.engine.chat_template import ChatTemplate

# llama.cpp token types (tokenizer.ggml.token_type)
_CONTROL = 3
_USER_DEFINED = 4

# Tokens that end a turn or a document in the common chat formats. A chat model must stop on its
# end-of-turn token even when the checkpoint names a different one as EOS.
_END_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>")

# Split regexes for `tokenizer.ggml.pre` values whose merges were learned on a custom split; the
# values mapped to None use GPT-2's own ByteLevel regex (SmolLM's vocabulary has no merge that
# joins a digit to anything, so GPT-2's split gives the same ids as llama.cpp's digit split).
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
PRE_TOKENIZER_SPLITS: dict[str, str | None] = {
    "gpt2": None,
    "smollm": None,
    "llama-bpe": _LLAMA3_SPLIT,
    "llama3": _LLAMA3_SPLIT,
    "llama-v3": _LLAMA3_SPLIT,
    "qwen2": _QWEN2_SPLIT,
}


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable spelling of each byte: the alphabet byte-level vocabularies use."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars)}


def _pre_tokenizer(pre: str) -> pre_tokenizers.PreTokenizer:
    if pre not in PRE_TOKENIZER_SPLITS:
        raise ValueError(
            f"tokenizer.ggml.pre {pre!r} is not supported; supported: "
            f"{', '.join(sorted(PRE_TOKENIZER_SPLITS))}"
        )
    split = PRE_TOKENIZER_SPLITS[pre]
    if split is None:
        return pre_tokenizers.ByteLevel(add_prefix_space=False)
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(split), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


def _eos_ids(primary: int | None, backend: Tokenizer) -> tuple[int, ...]:
    ids = [primary] if primary is not None else []
    for token in _END_TOKENS:
        token_id = backend.token_to_id(token)
        if token_id is not None and token_id not in ids:
            ids.append(token_id)
    if not ids:
        raise ValueError(
            "the checkpoint names no end-of-sequence token and has none of "
            f"{', '.join(_END_TOKENS)}; generation could never stop"
        )
    return tuple(ids)


class BpeTokenizer:
    """A `tokenizers.Tokenizer` behind the engine's Tokenizer protocol.

    `encode` never adds BOS: chat templates write their own. `bos_token_id` is set only when the
    checkpoint asks for a BOS in front of raw text, for callers that tokenize without a template.
    `decode` keeps special tokens, as transformers' `decode` does by default.
    """

    __slots__ = ("vocab_size", "eos_token_ids", "bos_token_id", "_backend", "_template")

    def __init__(
        self,
        backend: Tokenizer,
        eos_token_ids: Sequence[int],
        bos_token_id: int | None,
        chat_template: ChatTemplate,
    ) -> None:
        self._backend = backend
        self._template = chat_template
        self.vocab_size = backend.get_vocab_size(with_added_tokens=True)
        self.eos_token_ids = tuple(eos_token_ids)
        self.bos_token_id = bos_token_id

    @classmethod
    def from_gguf_metadata(cls, metadata: Mapping[str, Any]) -> BpeTokenizer:
        """Build from GGUF key/value metadata (full key names, values already decoded)."""
        kind = metadata.get("tokenizer.ggml.model")
        if kind != "gpt2":
            raise ValueError(
                f"only byte-level BPE GGUF tokenizers (tokenizer.ggml.model 'gpt2') "
                f"are supported, this checkpoint has {kind!r}"
            )
        tokens: list[str] = list(metadata["tokenizer.ggml.tokens"])
        merges = [tuple(m.split(" ")) for m in metadata["tokenizer.ggml.merges"]]
        types: list[int] = list(metadata.get("tokenizer.ggml.token_type") or [])
        spelling = _bytes_to_unicode()
        alphabet = set(spelling.values())
        # A token written outside the byte alphabet is a literal string; respell it byte-wise
        # so the BPE model can reach it.
        vocab = {
            t if set(t) <= alphabet else "".join(spelling[b] for b in t.encode()): i
            for i, t in enumerate(tokens)
        }
        backend = Tokenizer(
            models.BPE(
                vocab=vocab,
                merges=merges,
                dropout=None,
                continuing_subword_prefix="",
                end_of_word_suffix="",
                fuse_unk=False,
            )
        )
        backend.pre_tokenizer = _pre_tokenizer(str(metadata.get("tokenizer.ggml.pre", "gpt2")))
        backend.decoder = decoders.ByteLevel()
        # A control token spelled outside the byte alphabet is a llama.cpp mislabel; adding it
        # would grow the vocabulary past the model's embedding rows.
        backend.add_special_tokens(
            [
                AddedToken(t, normalized=False, special=True)
                for t, ttype in zip(tokens, types)
                if ttype == _CONTROL and set(t) <= alphabet
            ]
        )
        # user-defined tokens (`<think>`) are matched whole, as llama.cpp does, but not special
        backend.add_tokens(
            [
                AddedToken(t, normalized=False, special=False)
                for t, ttype in zip(tokens, types)
                if ttype == _USER_DEFINED and t in vocab
            ]
        )

        bos = metadata.get("tokenizer.ggml.bos_token_id")
        eos = metadata.get("tokenizer.ggml.eos_token_id")
        add_bos = bool(metadata.get("tokenizer.ggml.add_bos_token", False))
        template = ChatTemplate(
            metadata.get("tokenizer.chat_template"),
            bos_token=tokens[bos] if bos is not None else None,
            eos_token=tokens[eos] if eos is not None else None,
        )
        return cls(backend, _eos_ids(eos, backend), bos if add_bos else None, template)

    @classmethod
    def from_tokenizer_json(cls, path: str | Path) -> BpeTokenizer:
        """Build from a Hugging Face folder (or its tokenizer.json) and tokenizer_config.json."""
        path = Path(path)
        folder = path if path.is_dir() else path.parent
        json_path = folder / "tokenizer.json" if path.is_dir() else path
        if not json_path.is_file():
            raise FileNotFoundError(f"no tokenizer.json at {json_path}")
        backend = Tokenizer.from_file(str(json_path))
        config_path = folder / "tokenizer_config.json"
        config = json.loads(config_path.read_text()) if config_path.is_file() else {}
        bos_token = _token_text(config.get("bos_token"))
        eos_token = _token_text(config.get("eos_token"))
        template = config.get("chat_template")
        if isinstance(template, list):  # named templates: [{"name": "default", "template": ...}]
            template = next((t["template"] for t in template if t.get("name") == "default"), None)
        jinja_path = folder / "chat_template.jinja"
        if template is None and jinja_path.is_file():
            template = jinja_path.read_text()
        bos = backend.token_to_id(bos_token) if bos_token else None
        eos = backend.token_to_id(eos_token) if eos_token else None
        add_bos = bool(config.get("add_bos_token", False))
        return cls(
            backend,
            _eos_ids(eos, backend),
            bos if add_bos else None,
            ChatTemplate(template, bos_token=bos_token, eos_token=eos_token),
        )

    def encode(self, text: str) -> list[int]:
        return self._backend.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self._backend.decode([int(i) for i in ids], skip_special_tokens=False)

    def apply_chat_template(self, messages: Sequence[tuple[str, str]]) -> str:
        return self._template.render(messages)

    def token_to_id(self, token: str) -> int | None:
        return self._backend.token_to_id(token)

    def save(self, path: str | Path) -> None:
        """Write the backend as a tokenizer.json (the chat template is not part of it)."""
        self._backend.save(str(path))


def _token_text(token: object) -> str | None:
    """tokenizer_config.json spells a token as a string or as an AddedToken dict."""
    if isinstance(token, dict):
        return token.get("content")
    return token if isinstance(token, str) else None
