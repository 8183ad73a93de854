"""kernels/prefix_softmax.cpp: a prefill tile's scores to probabilities, against the torch
expression it stands in for (widen, scale, add the additive causal mask, softmax, round), and
the tiled prefill through it against the dense reference."""

import pytest
import torch

from strata.engine import attention
from strata.engine.attention import _SOFTMAX_SOURCE, AttentionMetadata, paged_attention
from tests.engine_helpers import extra_kernel_ops
from tests.unit.test_attention_tiles import BLOCK, _reference, _step


def _ops():
    return extra_kernel_ops(_SOFTMAX_SOURCE, "prefix_softmax", "strata_softmax")


def _torch_way(scores: torch.Tensor, visible: torch.Tensor, scale: float) -> torch.Tensor:
    """attention._attend's expression: keys past a row's visible prefix masked with -inf."""
    kvh, s, rows, keys = scores.shape
    n = visible.shape[1]
    mask = torch.where(torch.arange(keys)[None, None, :] < visible[:, :, None], 0.0, -torch.inf)
    x = scores.float().clone().mul_(scale).view(kvh, s, rows // n, n, keys)
    x = x.add_(mask[None, :, None])
    return torch.softmax(x, dim=-1).to(scores.dtype).view(kvh, s, rows, keys)


def _case(seed: int, dtype: torch.dtype, kvh=3, seqs=2, groups=3, n=5, keys=37):
    gen = torch.Generator().manual_seed(seed)
    scores = (torch.randn(kvh, seqs, groups * n, keys, generator=gen) * 6).to(dtype)
    visible = torch.randint(1, keys + 1, (seqs, n), generator=gen)
    visible[0, 0] = 1  # a row that sees only its first key
    visible[-1, -1] = keys  # and one that sees them all
    return scores, visible


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_float32_rows_match_the_torch_expression(seed):
    ops = _ops()
    scores, visible = _case(seed, torch.float32)
    got = ops.prefix_softmax(scores, visible, 0.37)
    want = _torch_way(scores, visible, 0.37)
    assert got.dtype == torch.float32 and got.shape == scores.shape
    assert torch.allclose(got, want, rtol=1e-6, atol=1e-7)
    # a key past a row's prefix gets exactly zero, and every row sums to one
    assert bool((got[want == 0] == 0).all())
    assert torch.allclose(got.double().sum(-1), torch.ones(got.shape[:-1], dtype=torch.float64))


def test_bfloat16_rows_round_as_the_torch_expression_does():
    ops = _ops()
    scores, visible = _case(7, torch.bfloat16, keys=454, n=16)
    got = ops.prefix_softmax(scores, visible, 0.125).float()
    want = _torch_way(scores, visible, 0.125).float()
    # the same float32 probabilities up to exp's last bits, each rounded to bfloat16 once
    assert float((got - want).abs().max()) <= 2**-8 * float(want.abs().max())
    assert float((got == want).float().mean()) > 0.97
    assert bool((got[want == 0] == 0).all())


def test_large_scores_do_not_overflow():
    ops = _ops()
    scores = torch.tensor([[[[1000.0, -1000.0, 999.0, 0.0]]]])
    got = ops.prefix_softmax(scores, torch.tensor([[3]]), 1.0)
    assert torch.allclose(got, _torch_way(scores, torch.tensor([[3]]), 1.0), atol=1e-7)
    assert float(got[0, 0, 0, 3]) == 0.0


def test_bad_input_is_refused_with_a_reason():
    ops = _ops()
    scores, visible = _case(0, torch.float32)
    with pytest.raises(RuntimeError, match="sees no key"):
        ops.prefix_softmax(scores, torch.zeros_like(visible), 1.0)
    with pytest.raises(RuntimeError, match="whole groups"):
        ops.prefix_softmax(scores, visible[:, :4], 1.0)
    with pytest.raises(RuntimeError, match="float32 or bfloat16"):
        ops.prefix_softmax(scores.double(), visible, 1.0)
    with pytest.raises(RuntimeError, match="sequences"):
        ops.prefix_softmax(scores, visible[:1], 1.0)


@pytest.mark.parametrize("tile_bytes", [1, 1 << 30])
def test_tiled_prefill_through_the_kernel_equals_the_dense_reference(monkeypatch, tile_bytes):
    _ops()
    torch.set_num_threads(1)
    monkeypatch.setattr(attention, "TILE_SCORE_BYTES", tile_bytes)
    monkeypatch.setattr(attention, "TILE_MIN_QUERIES", 3)
    monkeypatch.setattr(attention, "fused_prefill", lambda q: False)
    slices, q, k, v = _step([(0, 37), (21, 16), (5, 29)])
    calls = []
    real = attention.load_softmax_kernel
    monkeypatch.setattr(attention, "load_softmax_kernel", lambda: calls.append(1) or real())
    meta = AttentionMetadata.build(slices, BLOCK, "cpu", native=True)
    got = paged_attention(q, None, None, k, v, meta, 0.3)
    assert calls  # the prefill group's probabilities went through the kernel
    want = _reference(slices, q, k, v, 0.3)
    assert torch.allclose(got.double(), want, atol=1e-5, rtol=1e-5)


def test_visible_is_each_querys_causal_prefix_within_its_context():
    slices, *_ = _step([(0, 7), (9, 4)])
    (group,) = AttentionMetadata.build(slices, BLOCK, "cpu").groups
    allowed = group.allowed[:, 0]  # [S, Q, keys]
    assert torch.equal(group.visible, allowed.sum(-1))
    # and the visible keys are a prefix: none allowed past it
    keys = torch.arange(allowed.shape[-1])
    assert torch.equal(allowed, keys[None, None, :] < group.visible[:, :, None])
