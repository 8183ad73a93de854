"""The prompt's block hash chain, computed at the gateway exactly as the decode worker computes it,
so that the scheduler can route a request to a node that already holds its prefix.

The worker tokenizes with strata.engine.prompt.prompt_ids and hashes every full block of the
prompt but its last token (whose logits must be recomputed) with strata.kvtier.hashing; this
module does the same with the same tokenizer, read without the model's weights.

Tokenizers load in the background, never on a request's path: a model's first requests go
unhashed (routed by load alone, as when no node holds anything), and a model is only looked up
after the scheduler has routed a request for it, so a tenant's made-up model name never makes
the gateway open files. A model whose tokenizer cannot be loaded is remembered as such (and
logged once); its requests are routed without hashes. At most `max_models` tokenizers are kept,
least recently used first out.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from strata.core.blocks import DEFAULT_BLOCK_SIZE
from strata.engine.prompt import prompt_ids
from strata.engine.tokenizer import Tokenizer
from strata.engine.tokenizer_loader import load_tokenizer
from strata.kvtier.hashing import HashKeys, chain_hashes

log = logging.getLogger(__name__)

MAX_MODELS = 8
# Prompts up to this many characters (text and messages together) are hashed on the event loop:
# tokenizing them takes tens of microseconds, less than a hand-off to a thread and back.
INLINE_CHARS = 256


class ModelTokenizer(Protocol):
    """What a tokenizer loader returns (strata.engine.tokenizer_loader.NamedTokenizer); read
    only."""

    @property
    def name(self) -> str:
        """The engine's model name, the model key of block hashes."""
        ...

    @property
    def tokenizer(self) -> Tokenizer: ...


def load_engine_tokenizer(model: str) -> ModelTokenizer:
    # tokenizer_loader imports no torch: the gateway tokenizes without the engine's weight code.
    return load_tokenizer(model)


@dataclass(slots=True, frozen=True)
class PromptHashes:
    tokens: int  # prompt length in tokens, as the worker will count it
    hashes: list[int]  # one per full block of the prompt without its last token


# Errors a loader raises for a model it cannot give a tokenizer for: an unknown name, a missing
# or unreadable file, a checkpoint whose tokenizer is not supported.
_LOAD_ERRORS = (ValueError, KeyError, OSError)


class PrefixHasher:
    def __init__(
        self,
        max_models: int = MAX_MODELS,
        loader: Callable[[str], ModelTokenizer] = load_engine_tokenizer,
    ) -> None:
        if max_models <= 0:
            raise ValueError(f"max_models must be positive, got {max_models}")
        self.max_models = max_models
        self._loader = loader
        self._tokenizers: OrderedDict[str, ModelTokenizer | None] = OrderedDict()
        self._loading: dict[str, asyncio.Task[bool]] = {}

    async def hash_prompt(
        self,
        model: str,
        tenant: str,
        prefix_public: bool,
        prompt: str,
        messages: Sequence[tuple[str, str]],
        block_size: int = DEFAULT_BLOCK_SIZE,
    ) -> PromptHashes | None:
        """The prompt's length and hash chain in blocks of `block_size` (what the model's
        workers report), or None when the model's tokenizer is not loaded (yet, or ever) or
        the prompt does not tokenize: the worker reports bad prompts."""
        named = self._tokenizers.get(model)
        if named is None:
            return None
        self._tokenizers.move_to_end(model)
        if len(prompt) + sum(len(role) + len(text) for role, text in messages) <= INLINE_CHARS:
            return self._hash(named, tenant, prefix_public, prompt, messages, block_size)
        # Off the event loop: a long prompt takes milliseconds to tokenize and hash.
        return await asyncio.to_thread(
            self._hash, named, tenant, prefix_public, prompt, messages, block_size
        )

    def ensure_loading(self, model: str) -> None:
        """Start loading the model's tokenizer in the background unless known or under way."""
        if model in self._tokenizers or model in self._loading:
            return
        task = asyncio.get_running_loop().create_task(self.load(model))
        self._loading[model] = task
        task.add_done_callback(lambda t: self._loaded(model, t))

    async def load(self, model: str) -> bool:
        """Load the model's tokenizer now; False (logged once) when it cannot be loaded."""
        if model in self._tokenizers:
            return self._tokenizers[model] is not None
        try:
            named: ModelTokenizer | None = await asyncio.to_thread(self._loader, model)
        except _LOAD_ERRORS as err:
            log.warning(
                "no tokenizer for model %r (%s); its requests are routed without prefix hashes",
                model,
                err,
            )
            named = None
        self._remember(model, named)
        return named is not None

    def count_tokens(self, model: str, messages: Sequence[tuple[str, str]]) -> int | None:
        """The chat messages' length in tokens as the model's template renders them, or None
        without the model's tokenizer."""
        named = self._tokenizers.get(model)
        if named is None:
            return None
        tok = named.tokenizer
        return len(tok.encode(tok.apply_chat_template(list(messages))))

    def token_texts(self, model: str, ids: Sequence[int]) -> list[str] | None:
        """Each token's own text (for logprobs), or None without the model's tokenizer."""
        named = self._tokenizers.get(model)
        if named is None:
            return None
        tok = named.tokenizer
        return [tok.decode([i]) for i in ids]

    def loaded_models(self) -> list[str]:
        """Models with a tokenizer, least recently used first."""
        return [m for m, named in self._tokenizers.items() if named is not None]

    async def close(self) -> None:
        """Wait for loads under way (a load in its thread cannot be interrupted); a failed one
        was logged when it failed."""
        await asyncio.gather(*self._loading.values(), return_exceptions=True)

    def _loaded(self, model: str, task: asyncio.Task[bool]) -> None:
        self._loading.pop(model, None)
        if not task.cancelled() and task.exception() is not None:
            # A loader failing in a way `load` does not expect: say so loudly once, and do not
            # try again on every request.
            log.error(
                "loading the tokenizer of model %r failed; its requests are routed "
                "without prefix hashes",
                model,
                exc_info=task.exception(),
            )
            self._remember(model, None)

    def _remember(self, model: str, named: ModelTokenizer | None) -> None:
        self._tokenizers[model] = named
        self._tokenizers.move_to_end(model)
        while len(self._tokenizers) > self.max_models:
            self._tokenizers.popitem(last=False)

    def _hash(
        self,
        named: ModelTokenizer,
        tenant: str,
        prefix_public: bool,
        prompt: str,
        messages: Sequence[tuple[str, str]],
        block_size: int,
    ) -> PromptHashes | None:
        try:
            ids = prompt_ids(named.tokenizer, prompt, messages)
        except ValueError as err:
            log.debug(
                "prompt for %s does not tokenize (%s): routed without prefix hashes",
                named.name,
                err,
            )
            return None
        keys = HashKeys.for_request(named.name, tenant, prefix_public)
        return PromptHashes(len(ids), chain_hashes(ids[: len(ids) - 1], block_size, keys))
