"""bfloat16 linear layers through weights laid out for oneDNN once (strata.engine.packed_linear):
the same numbers as F.linear, bit for bit, and a weight changed or replaced is packed again."""

import pytest
import torch
import torch.nn.functional as F

from strata.engine import kernels, packed_linear
from strata.engine.packed_linear import Packs

needs_onednn_bf16 = pytest.mark.skipif(
    not packed_linear.available(torch.zeros(1, dtype=torch.bfloat16)),
    reason="oneDNN's packed linear ops are not in this torch build, or this CPU lacks "
    "its bfloat16 path (AVX-512 or AVX-NE-CONVERT)",
)


@needs_onednn_bf16
@pytest.mark.parametrize("rows", [2, 4, 33])
@pytest.mark.parametrize("bias", [False, True])
def test_packed_bfloat16_linear_equals_f_linear_bit_for_bit(rows, bias):
    gen = torch.Generator().manual_seed(rows)
    w = torch.randn(96, 64, generator=gen).bfloat16()
    b = torch.randn(96, generator=gen).bfloat16() if bias else None
    x = torch.randn(rows, 64, generator=gen).bfloat16()
    packs = Packs()
    assert torch.equal(packs.linear("w", x, w, b), F.linear(x, w, b))
    assert torch.equal(packs.linear("w", x, w, b), F.linear(x, w, b))  # the kept copy


@needs_onednn_bf16
@pytest.mark.parametrize("cols", [64, 72])  # whole 32-column steps, and a remainder
def test_one_row_goes_through_the_row_kernel_within_one_bfloat16_rounding(cols):
    if kernels.load() is None:
        pytest.skip("the native kernels did not build here (no C++ compiler)")
    gen = torch.Generator().manual_seed(cols)
    w = torch.randn(96, cols, generator=gen).bfloat16()
    x = torch.randn(1, cols, generator=gen).bfloat16()
    packs = Packs()
    got = packs.linear("w", x, w)
    exact = F.linear(x.float(), w.float())
    assert got.dtype == torch.bfloat16 and not packs._slots  # nothing packed for one row
    assert bool(((got.float() - exact).abs() <= exact.abs() * 2**-8 + 1e-4).all())
    sums = packs.linear("w", x, w, float_sums=True)  # the same sums before their rounding
    assert sums.dtype == torch.float32 and torch.equal(sums.to(torch.bfloat16), got)
    assert bool(((sums - exact).abs() <= exact.abs() * 1e-5 + 1e-5).all())
    with_bias = packs.linear("w", x, w, torch.ones(96).bfloat16())  # a bias: oneDNN's way
    assert torch.equal(with_bias, F.linear(x, w, torch.ones(96).bfloat16()))


@pytest.mark.parametrize("x_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("rows", [1, 3, 9, 130])
def test_the_row_kernel_sums_to_float32_rounding_for_any_shape(x_dtype, rows):
    """Both of the kernel's paths (bfloat16 x in pairs where the CPU has AVX512_BF16, x widened
    to float32 otherwise, and from kGemmRows rows the weight widened once for sgemm), weight rows
    not a multiple of its groups, columns not a multiple of its vectors: float32 sums within
    float32 rounding of the exact product, the rounded result their rounding."""
    ops = packed_linear.load_row_kernel()
    if ops is None:
        pytest.skip("the native kernels did not build here (no C++ compiler)")
    gen = torch.Generator().manual_seed(rows)
    for n, cols in ((7, 33), (98, 512), (5, 1536)):
        w = torch.randn(n, cols, generator=gen).bfloat16()
        x = torch.randn(rows, cols, generator=gen).bfloat16().to(x_dtype)
        exact = x.double() @ w.double().t()
        bound = x.double().abs() @ w.double().abs().t()  # what float32 rounding scales with
        sums = ops.linear(x, w, True)
        assert sums.dtype == torch.float32 and sums.shape == (rows, n)
        assert bool(((sums.double() - exact).abs() <= bound * 2e-6).all())
        rounded = ops.linear(x, w, False)
        assert rounded.dtype == x_dtype and torch.equal(rounded, sums.to(x_dtype))


def test_float32_goes_through_f_linear_unless_packing_or_the_row_kernel_pays(monkeypatch):
    # an AVX-512 CPU: MKL's sgemm is as fast as the packed product there; without the float32
    # row kernel (F32_ROWS off), and past F32_ROW_MAX rows with it, F.linear multiplies
    monkeypatch.setattr(packed_linear, "PACK_FLOAT32", False)
    monkeypatch.setattr(packed_linear, "F32_ROWS", False)
    w, x = torch.randn(8, 4), torch.randn(2, 4)
    packs = Packs()
    assert torch.equal(packs.linear("w", x, w), F.linear(x, w))
    assert not packs._slots
    monkeypatch.setattr(packed_linear, "F32_ROWS", True)
    many = torch.randn(packed_linear.F32_ROW_MAX + 1, 4)
    assert packs.route("w", torch.float32, many.shape[0], w) == (packed_linear.LINEAR, w)
    assert torch.equal(packs.linear("w", many, w), F.linear(many, w))


@pytest.mark.parametrize("rows", [1, 3, 64])
def test_a_few_float32_rows_go_through_the_f32_row_kernel_to_float32_rounding(monkeypatch, rows):
    """Weight rows not a multiple of its groups of four, columns not a multiple of its vectors,
    a non-contiguous x: within float32 rounding of the exact product; with a bias, F.linear."""
    if packed_linear.load_f32_kernel() is None:
        pytest.skip("the native kernels did not build here (no C++ compiler)")
    monkeypatch.setattr(packed_linear, "F32_ROWS", True)
    gen = torch.Generator().manual_seed(rows)
    packs = Packs()
    for n, cols in ((7, 33), (98, 512), (5, 1536), (1, 3)):
        w = torch.randn(n, cols, generator=gen)
        x = torch.randn(cols, rows, generator=gen).t()  # rows x cols, not contiguous
        assert packs.route("w", x.dtype, rows, w) == (packed_linear.F32_ROW, w)
        got = packs.linear("w", x, w)
        exact = x.double() @ w.double().t()
        bound = x.double().abs() @ w.double().abs().t()  # what float32 rounding scales with
        assert got.dtype == torch.float32 and got.shape == (rows, n)
        assert bool(((got.double() - exact).abs() <= bound * 2e-6).all())
        b = torch.randn(n, generator=gen)
        assert packs.route("w", x.dtype, rows, w, b) == (packed_linear.LINEAR, w)
        assert torch.equal(packs.linear("w", x, w, b), F.linear(x, w, b))
    assert not packs._slots


@pytest.mark.skipif(not packed_linear.ONEDNN, reason="no oneDNN packed linear ops in this torch")
# fewer rows than the layout's PACK_ROWS, as many, and more
@pytest.mark.parametrize("rows", [1, 2, 16, 33])
@pytest.mark.parametrize("bias", [False, True])
def test_packed_float32_linear_agrees_with_f_linear_to_float32_rounding(monkeypatch, rows, bias):
    # an AVX2-only CPU packs float32 (PACK_FLOAT32), with no float32 row kernel (F32_ROWS);
    # forced here so every host runs the path
    monkeypatch.setattr(packed_linear, "PACK_FLOAT32", True)
    monkeypatch.setattr(packed_linear, "F32_ROWS", False)
    gen = torch.Generator().manual_seed(rows)
    w = torch.randn(96, 576, generator=gen)
    b = torch.randn(96, generator=gen) if bias else None
    x = torch.randn(rows, 576, generator=gen)
    packs = Packs()
    got = packs.linear("w", x, w, b)
    exact = F.linear(x.double(), w.double(), None if b is None else b.double())
    assert got.dtype == torch.float32 and "w" in packs._slots
    assert torch.allclose(got.double(), exact, rtol=1e-5, atol=1e-4)
    w.mul_(2)  # changed in place: packed again
    assert torch.allclose(packs.linear("w", x, w, b), F.linear(x, w, b), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("rows", [1, 2, 17])
def test_bfloat16_goes_through_the_row_kernel_where_the_cpu_has_no_onednn_bfloat16_path(
    monkeypatch, rows
):
    # an AVX2-only CPU: _reorder_linear_weight raises there, so nothing may be packed, and
    # F.linear's bfloat16 product is slow; with a bias it still goes through F.linear
    ops = packed_linear.load_row_kernel()
    if ops is None:
        pytest.skip("the native kernels did not build here (no C++ compiler)")
    monkeypatch.setattr(packed_linear, "ONEDNN_BF16", False)
    gen = torch.Generator().manual_seed(rows)
    w = torch.randn(8, 40, generator=gen).bfloat16()
    x = torch.randn(rows, 40, generator=gen).bfloat16()
    packs = Packs()
    assert packs.route("w", x.dtype, rows, w) == (packed_linear.BF16_ROW, w)
    assert torch.equal(packs.linear("w", x, w), ops.linear(x, w, False))
    b = torch.ones(8).bfloat16()
    assert torch.equal(packs.linear("w", x, w, b), F.linear(x, w, b))
    assert not packs._slots


@needs_onednn_bf16
def test_a_weight_changed_in_place_or_replaced_is_packed_again():
    w = torch.randn(16, 8).bfloat16()
    x = torch.randn(3, 8).bfloat16()
    packs = Packs()
    packs.linear("w", x, w)
    w.mul_(2)  # in place: the version counter moves
    assert torch.equal(packs.linear("w", x, w), F.linear(x, w))
    other = torch.randn(16, 8).bfloat16()  # another tensor under the same name
    assert torch.equal(packs.linear("w", x, other), F.linear(x, other))


@needs_onednn_bf16
def test_the_engine_model_gives_the_same_logits_packed_or_not(monkeypatch):
    from strata.engine.attention import AttentionMetadata, SeqSlice
    from strata.engine.dummy import load_dummy
    from strata.engine.model import build_model

    torch.set_num_threads(1)
    loaded = load_dummy("dummy-tiny")
    cfg = loaded.config
    model = build_model(cfg, loaded.weights, torch.device("cpu"), torch.bfloat16)
    kv = torch.zeros(cfg.num_layers, 2, cfg.num_kv_heads, 8, 16, cfg.head_dim, dtype=torch.bfloat16)
    ids = torch.randint(0, cfg.vocab_size, (20,), generator=torch.Generator().manual_seed(3))

    def logits() -> torch.Tensor:
        kv.zero_()
        meta = AttentionMetadata.build([SeqSlice(0, 20, 20, [3, 1])], 16, "cpu")
        return model(ids, torch.arange(20), kv, meta, torch.arange(20))

    packed = logits()
    assert set(model.layers[0].packs._slots) == {"qkv", "o", "gate_up", "down"}
    assert set(model.packs._slots) == {"head"}
    monkeypatch.setattr(packed_linear, "available", lambda weight: False)
    assert torch.equal(packed, logits())


def test_row_classes_follow_the_route_thresholds():
    top = packed_linear.F32_ROW_MAX
    assert [packed_linear.row_class(r) for r in (1, 2, top, top + 1, 4096)] == [0, 1, 1, 2, 2]
