"""The sparse decode path on CUDA (skipped without a GPU): compensation of the left-out mass runs
on the device, matches the CPU's torch path and is exact for uniform attention, and the engine's
sparse decode on the long-context dummy stays as close to dense as on the CPU."""

import pytest
import torch

from strata.engine.attention import AttentionMetadata, SeqSlice
from strata.engine.dummy import load_dummy
from strata.engine.engine import EngineConfig, LLMEngine
from strata.engine.sparse import SparseConfig, SparseDecoder
from strata.engine.sparse.fidelity import teacher_forced

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]

BS, KVH, G, DIM, NB = 16, 2, 2, 8, 48
ROWS = [("a", list(range(0, 20)), 19 * BS + 4), ("b", list(range(20, 40)), 20 * BS)]


def _sparse_step(kv: torch.Tensor, q: torch.Tensor, compensate: bool) -> torch.Tensor:
    dev = kv.device
    cfg = SparseConfig(
        enabled=True,
        min_context=1,
        budget_blocks=8,
        sink_blocks=1,
        window_blocks=2,
        threshold=1.0,
        compensate=compensate,
    )
    dec = SparseDecoder(cfg, 1, KVH, NB, BS, DIM, dev, torch.float32)
    dec.index.summarize(kv, list(range(NB)))
    for rid, _, _ in ROWS:
        dec.register(rid, True)
    slices = [SeqSlice(i, 1, n, table) for i, (_, table, n) in enumerate(ROWS)]
    meta = AttentionMetadata.build(slices, BS, dev)
    plan = dec.plan(kv, [rid for rid, _, _ in ROWS], slices, meta.groups[0], False)
    return plan.attend(q, kv[0, 0], kv[0, 1], meta.groups[0], DIM**-0.5, 0, lambda g: None)


def test_compensation_on_cuda_matches_the_cpu_and_is_exact_for_uniform_attention():
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(4)
    kv = torch.zeros(1, 2, KVH, NB, BS, DIM)
    kv[0, 0] = torch.randn(KVH, 1, 1, DIM, generator=gen)  # one key per head: uniform
    kv[0, 1] = (
        torch.randn(KVH, NB, BS, DIM, generator=gen)
        + torch.arange(NB, dtype=torch.float32)[None, :, None, None] * 0.5
    )
    q = torch.randn(len(ROWS), KVH * G, DIM, generator=gen)
    want = torch.stack(
        [
            torch.stack(
                [kv[0, 1, h // G, table].reshape(-1, DIM)[:n].mean(0) for h in range(KVH * G)]
            )
            for _, table, n in ROWS
        ]
    )
    on = _sparse_step(kv.cuda(), q.cuda(), True)
    assert on.device.type == "cuda"
    assert torch.allclose(on.cpu(), want, rtol=0, atol=1e-4)
    assert torch.allclose(on.cpu(), _sparse_step(kv, q, True), rtol=0, atol=1e-5)
    off = _sparse_step(kv.cuda(), q.cuda(), False)
    assert (off.cpu() - want).abs().max() > 1.0


def test_cuda_sparse_decode_on_the_long_context_dummy_tracks_dense():
    loaded = load_dummy("dummy-long")
    e = LLMEngine(
        loaded,
        EngineConfig(
            num_blocks=160,
            max_batched_tokens=1024,
            device="cuda",
            dtype="float32",
            sparse=SparseConfig(
                enabled=True, min_context=1024, budget_fraction=0.25, threshold=1.0
            ),
        ),
    )
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 512, (2048,), generator=gen).tolist()
    tf = teacher_forced(e, ids, torch.randint(0, 512, (8,), generator=gen).tolist())
    assert bool(tf.sparse_steps.all())
    assert float(tf.cosine_selected.min()) >= 0.999
    assert tf.top1_agreement == 1.0
