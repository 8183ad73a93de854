"""PrefixHasher: the gateway's hashes are the blocks the worker's engine caches for the same
request (dummy model, a BPE GGUF, the default model's tokenizer); unknown models, bad prompts,
background loading and the LRU of tokenizers."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest
import torch
from gguf import GGUFReader

from strata.engine.bpe_tokenizer import BpeTokenizer
from strata.engine.byte_tokenizer import ByteTokenizer
from strata.engine.engine import EngineConfig, EngineRequest, LLMEngine
from strata.engine.gguf_loader import _metadata, default_model_path
from strata.engine.prompt import prompt_ids
from strata.engine.registry import DEFAULT_MODEL, load_model
from strata.engine.sequence import SamplingParams
from strata.gateway import prefix_hashes
from strata.gateway.prefix_hashes import PrefixHasher, PromptHashes
from strata.kvtier.hashing import HashKeys, chain_hashes
from tests.engine_helpers import run_to_end
from tests.unit.test_gguf_loader import write_tiny_gguf

PROMPT = "The tiered KV store keeps hot blocks on the device and cold ones below. " * 2
CHAT = [("system", "You are terse."), ("user", "Where do cold KV blocks go, and why? " * 2)]


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def engine_for(model: str) -> LLMEngine:
    return LLMEngine(
        load_model(model),
        EngineConfig(
            block_size=16, num_blocks=64, max_batched_tokens=256, attention_kernel="torch"
        ),
    )


def run_on_engine(
    engine: LLMEngine,
    request_id: str,
    tenant: str,
    prompt: str = "",
    messages=(),
    prefix_public: bool = False,
) -> list[int]:
    """Serve the request as the worker does; returns its prompt ids."""
    ids = prompt_ids(engine.tokenizer, prompt, list(messages))
    engine.add_request(
        EngineRequest(
            request_id,
            ids,
            SamplingParams(max_tokens=2),
            tenant=tenant,
            prefix_public=prefix_public,
        )
    )
    run_to_end(engine)
    return ids


def cached(engine: LLMEngine, hashes: list[int]) -> list[bool]:
    return [engine.pool.lookup(h) is not None for h in hashes]


async def test_dummy_model_hashes_are_the_blocks_the_engine_caches():
    hasher = PrefixHasher()
    assert await hasher.load("dummy-tiny") is True
    engine = engine_for("dummy-tiny")

    ids = run_on_engine(engine, "a", "acme", prompt=PROMPT)
    got = await hasher.hash_prompt("dummy-tiny", "acme", False, PROMPT, [])
    assert (got.tokens, len(got.hashes)) == (len(ids), (len(ids) - 1) // 16) == (144, 8)
    assert cached(engine, got.hashes) == [True] * 8

    chat_ids = run_on_engine(engine, "b", "acme", messages=CHAT)
    chat = await hasher.hash_prompt("dummy-tiny", "acme", False, "", CHAT)
    assert (chat.tokens, len(chat.hashes)) == (len(chat_ids), (len(chat_ids) - 1) // 16)
    assert cached(engine, chat.hashes) == [True] * len(chat.hashes)

    # another tenant's blocks differ unless the prefix is public, then they are the same for all
    other = await hasher.hash_prompt("dummy-tiny", "globex", False, PROMPT, [])
    assert cached(engine, other.hashes) == [False] * 8
    run_on_engine(engine, "c", "acme", prompt=PROMPT, prefix_public=True)
    public = await hasher.hash_prompt("dummy-tiny", "globex", True, PROMPT, [])
    assert cached(engine, public.hashes) == [True] * 8


async def test_long_prompts_hash_off_the_loop_to_the_same_chain(monkeypatch):
    """A prompt over INLINE_CHARS is hashed in a thread, a short one on the event loop: the
    same chain either way, and the blocks the engine caches."""
    hasher = PrefixHasher()
    assert await hasher.load("dummy-tiny") is True
    engine = engine_for("dummy-tiny")
    long = PROMPT * 3
    assert len(long) > prefix_hashes.INLINE_CHARS >= len(PROMPT)
    ids = run_on_engine(engine, "a", "acme", prompt=long)
    threaded = await hasher.hash_prompt("dummy-tiny", "acme", False, long, [])
    assert threaded.tokens == len(ids)
    assert cached(engine, threaded.hashes) == [True] * ((len(ids) - 1) // 16)
    monkeypatch.setattr(prefix_hashes, "INLINE_CHARS", len(long))
    assert await hasher.hash_prompt("dummy-tiny", "acme", False, long, []) == threaded


async def test_bpe_gguf_hashes_are_the_blocks_the_engine_caches(tmp_path):
    path = str(tmp_path / "tiny-llama.gguf")
    write_tiny_gguf(tmp_path / "tiny-llama.gguf")
    hasher = PrefixHasher()
    assert await hasher.load(path) is True
    engine = engine_for(path)
    ids = run_on_engine(engine, "a", "acme", messages=CHAT)
    got = await hasher.hash_prompt(path, "acme", False, "", CHAT)
    assert got.tokens == len(ids)
    assert len(got.hashes) == (len(ids) - 1) // 16 > 2
    assert cached(engine, got.hashes) == [True] * len(got.hashes)


@pytest.mark.slow
async def test_default_model_hashes_match_the_workers_tokenizer():
    hasher = PrefixHasher()
    assert await hasher.load(DEFAULT_MODEL) is True
    # the tokenizer load_gguf builds for the worker, from the file's whole metadata
    worker_tok = BpeTokenizer.from_gguf_metadata(_metadata(GGUFReader(default_model_path())))
    keys = HashKeys.for_request(DEFAULT_MODEL, "acme", False)
    for prompt, messages in ((PROMPT, []), ("", CHAT)):
        ids = prompt_ids(worker_tok, prompt, messages)
        got = await hasher.hash_prompt(DEFAULT_MODEL, "acme", False, prompt, messages)
        assert got == PromptHashes(len(ids), chain_hashes(ids[:-1], 16, keys))
        assert len(got.hashes) >= 2


@dataclass
class Named:
    name: str
    tokenizer: object


class Loader:
    """Counts loads; knows the models it was given, raises `error` for one named 'broken'."""

    def __init__(self, *known: str, error: Exception | None = None) -> None:
        self.known = known
        self.error = error
        self.calls: list[str] = []

    def __call__(self, model: str) -> Named:
        self.calls.append(model)
        if model == "broken" and self.error is not None:
            raise self.error
        if model not in self.known:
            raise ValueError(f"unknown model {model!r}")
        return Named(model, ByteTokenizer(512))


async def test_unknown_model_sends_no_hashes_and_is_logged_once(caplog):
    loader = Loader()
    hasher = PrefixHasher(loader=loader)
    with caplog.at_level(logging.WARNING, logger="strata.gateway.prefix_hashes"):
        assert await hasher.load("llama-9000") is False
        assert await hasher.load("llama-9000") is False
        hasher.ensure_loading("llama-9000")
        await hasher.close()
    assert loader.calls == ["llama-9000"]
    assert [r.getMessage() for r in caplog.records] == [
        "no tokenizer for model 'llama-9000' (unknown model 'llama-9000'); its requests are "
        "routed without prefix hashes"
    ]
    assert await hasher.hash_prompt("llama-9000", "acme", False, PROMPT, []) is None


async def test_tokenizers_load_in_the_background_and_first_requests_go_unhashed():
    loader = Loader("m")
    hasher = PrefixHasher(loader=loader)
    assert await hasher.hash_prompt("m", "acme", False, "x" * 40, []) is None
    hasher.ensure_loading("m")
    hasher.ensure_loading("m")  # one load under way is enough
    await hasher.close()
    assert loader.calls == ["m"]
    got = await hasher.hash_prompt("m", "acme", False, "x" * 40, [])
    assert got == PromptHashes(40, chain_hashes([120] * 39, 16, HashKeys("m", "t:acme")))
    assert len(got.hashes) == 2


async def test_a_prompt_that_does_not_tokenize_goes_unhashed():
    hasher = PrefixHasher(loader=Loader("m"))
    await hasher.load("m")
    assert await hasher.hash_prompt("m", "acme", False, "", [("wizard", "hi")]) is None
    assert await hasher.hash_prompt("m", "acme", False, "", []) is None


async def test_an_unexpected_loader_failure_is_logged_with_its_error_and_not_retried(caplog):
    loader = Loader(error=RuntimeError("tokenizer.json is corrupt"))
    hasher = PrefixHasher(loader=loader)
    with caplog.at_level(logging.ERROR, logger="strata.gateway.prefix_hashes"):
        hasher.ensure_loading("broken")
        await hasher.close()
        hasher.ensure_loading("broken")
    assert loader.calls == ["broken"]
    (record,) = caplog.records
    assert record.getMessage() == (
        "loading the tokenizer of model 'broken' failed; its requests "
        "are routed without prefix hashes"
    )
    assert str(record.exc_info[1]) == "tokenizer.json is corrupt"


async def test_least_recently_used_tokenizers_are_dropped():
    loader = Loader("a", "b", "c")
    hasher = PrefixHasher(max_models=2, loader=loader)
    await hasher.load("a")
    await hasher.load("b")
    assert await hasher.hash_prompt("a", "t", False, "hi", []) is not None  # a is fresh again
    await hasher.load("c")
    assert hasher.loaded_models() == ["a", "c"]
    assert await hasher.hash_prompt("b", "t", False, "hi", []) is None
    await hasher.load("b")
    assert loader.calls == ["a", "b", "c", "b"]
    assert hasher.loaded_models() == ["c", "b"]
