"""Tiny random models for engine tests (fast on 2 cores)."""

import torch

from strata.engine.byte_tokenizer import ByteTokenizer
from strata.engine.config import ModelConfig
from strata.engine.engine import EngineConfig, LLMEngine
from strata.engine.loaded import LoadedModel
from strata.engine.model import LlamaModel


def tiny_loaded(seed: int = 0, vocab: int = 300) -> LoadedModel:
    cfg = ModelConfig(name="tiny", vocab_size=vocab, hidden_size=64, intermediate_size=128,
                      num_layers=2, num_heads=4, num_kv_heads=2, max_position_embeddings=512,
                      tie_word_embeddings=True)
    gen = torch.Generator().manual_seed(seed)
    with torch.device("meta"):
        shapes = LlamaModel(cfg).hf_tensor_shapes()
    weights = {}
    for name, shape in shapes.items():
        if name.endswith("layernorm.weight") or name == "model.norm.weight":
            weights[name] = torch.ones(shape)
        else:
            weights[name] = torch.randn(shape, generator=gen) * 0.2
    return LoadedModel(cfg, weights, ByteTokenizer(vocab))


def tiny_engine(num_blocks=64, block_size=4, max_batched_tokens=64, max_seqs=8, tier=None,
                seed=0, attention_kernel="cpp") -> LLMEngine:
    torch.set_num_threads(1)
    return LLMEngine(tiny_loaded(seed), EngineConfig(
        block_size=block_size, num_blocks=num_blocks, max_batched_tokens=max_batched_tokens,
        max_seqs=max_seqs, attention_kernel=attention_kernel), tier=tier)


def run_to_end(engine: LLMEngine, max_steps: int = 10_000) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for _ in range(max_steps):
        if not engine.has_work():
            return out
        for o in engine.step():
            out.setdefault(o.request_id, []).extend(o.token_ids)
    raise AssertionError("engine did not finish")


class LocalTierClient:
    """The TierClient interface over an in-process HostTier (no gRPC), for engine unit tests."""

    def __init__(self, capacity_bytes: int = 1 << 30):
        from strata.kvtier.host_tier import HostTier

        self.tier = HostTier(capacity_bytes)
        self.offloaded = 0
        self.gets = 0

    def put_async(self, block_hash, data, layout):
        from strata.kvtier.hashing import checksum
        from strata.kvtier.host_tier import StoredBlock

        self.tier.put(StoredBlock(block_hash, layout, data, checksum(data)))
        self.offloaded += 1

    def lookup(self, hashes):
        return self.tier.prefix_len(hashes)

    def get(self, hashes):
        from strata.kvtier.client import FetchedBlock

        self.gets += 1
        return [FetchedBlock(b.block_hash, b.data, b.layout) for b in self.tier.get_prefix(hashes)]
