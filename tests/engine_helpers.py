"""Tiny random models for engine tests (fast on 2 cores)."""

import torch

from strata.engine.byte_tokenizer import ByteTokenizer
from strata.engine.config import ModelConfig
from strata.engine.engine import EngineConfig, LLMEngine
from strata.engine.loaded import LoadedModel
from strata.engine.model import LlamaModel


def tiny_loaded(seed: int = 0, vocab: int = 300) -> LoadedModel:
    cfg = ModelConfig(
        name="tiny",
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
    )
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


def tiny_engine(
    num_blocks=64,
    block_size=4,
    max_batched_tokens=64,
    max_seqs=8,
    tier=None,
    seed=0,
    attention_kernel="cpp",
) -> LLMEngine:
    torch.set_num_threads(1)
    return LLMEngine(
        tiny_loaded(seed),
        EngineConfig(
            block_size=block_size,
            num_blocks=num_blocks,
            max_batched_tokens=max_batched_tokens,
            max_seqs=max_seqs,
            attention_kernel=attention_kernel,
        ),
        tier=tier,
    )


def run_to_end(engine: LLMEngine, max_steps: int = 10_000) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for _ in range(max_steps):
        if not engine.has_work():
            return out
        for o in engine.step():
            out.setdefault(o.request_id, []).extend(o.token_ids)
    raise AssertionError("engine did not finish")


class LocalTierClient:
    """The TierClient interface over an in-process TieredStore (real shared-memory segment in a
    temp folder, real directory and migrations; no gRPC), for engine unit tests."""

    def __init__(self, host_bytes: int = 64 << 20, disk_bytes: int = 0):
        import tempfile
        import time

        from strata.kvtier.disk_tier import DiskTier
        from strata.kvtier.shm_segment import ShmSegment
        from strata.kvtier.tiered_store import TieredStore
        from strata.policy.kv_tiering import HeatPolicy

        self._dir = tempfile.TemporaryDirectory(prefix="strata-kv-test-")
        seg = ShmSegment(f"{self._dir.name}/seg", host_bytes, create=True)
        disk = DiskTier(f"{self._dir.name}/disk", disk_bytes) if disk_bytes else None
        self.store = TieredStore(seg, min(host_bytes, 16 << 20), disk, HeatPolicy(), time.monotonic)
        self.segment = seg
        self.offloaded = 0
        self.dropped = 0
        self.prefetched = 0
        self.gets = 0
        self.prefetches: list[list[int]] = []

    shared_memory = True

    def prepare(self, nbytes):
        pass

    def take_slot(self, nbytes):
        slots = self.store.reserve(nbytes, 1)
        if not slots:
            self.dropped += 1
            return None
        return slots[0], self.segment.read(slots[0].offset, nbytes)

    def commit_slot(self, slot, block_hash, layout, nbytes):
        from strata.kvtier.hashing import checksum

        crc = checksum(self.segment.read(slot.offset, nbytes))
        stored, dups, _ = self.store.commit([(slot, block_hash, layout, crc)], [])
        self.offloaded += stored + dups

    def note_device(self, stored, removed):
        self.store.note_device("test", stored, removed, reset=False)

    def prefetch(self, hashes, peer=""):
        self.prefetches.append(list(hashes))
        self.prefetched += self.store.prefetch(hashes)[1]

    def acquire(self, hashes):
        from strata.kvtier.client import FetchedBlock

        self.gets += 1
        pinned, lease, _ = self.store.acquire(hashes, promote=True)
        return [
            FetchedBlock(p.block_hash, self.segment.read(p.offset, p.nbytes), p.layout, p.checksum)
            for p in pinned
        ], lease

    def release(self, lease_id, moved):
        self.store.release([lease_id], moved)


def extra_kernel_ops(source, stem: str, namespace: str):
    """torch.ops.<namespace> from a kernel source beside the base kernel. Skips the test where
    no kernel builds at all (no C++ compiler); where the base kernel builds, this one must too."""
    import pytest

    from strata.engine import kernels

    if kernels.load() is None:
        pytest.skip("the native kernels did not build here (no C++ compiler)")
    ops = kernels.load_extra(source, stem, namespace, f"strata {stem} kernel")
    assert ops is not None, f"the {stem} kernel failed to build (see the log)"
    return ops
