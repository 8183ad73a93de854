"""Quantized weights: GGUF blocks decode exactly, and the native kernel multiplies as torch does."""

import gguf
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType as T

from strata.engine import kernels
from strata.engine.quant import QuantizedWeight, dequantize, from_gguf, native

ROWS, COLS = 37, 512  # rows not a multiple of the kernel's tile of 4


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(2)


def _floats(rows=ROWS, cols=COLS, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 0.05, (rows, cols)).astype(np.float32)


def _q4_k_blocks(rows: int, cols: int, seed: int = 1) -> np.ndarray:
    """Random Q4_K super-blocks (gguf-py cannot quantize to Q4_K): any scale and quant bits are
    valid once d and dmin are finite halves."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, (rows * cols // 256, 144), dtype=np.uint8)
    halves = rng.uniform(1e-4, 1e-2, (blocks.shape[0], 2)).astype(np.float16)
    blocks[:, 0:4] = halves.view(np.uint8).reshape(-1, 4)
    return blocks.reshape(rows, -1)


def _gguf(qtype: T, rows=ROWS, cols=COLS) -> np.ndarray:
    if qtype == T.Q4_K:
        return _q4_k_blocks(rows, cols)
    return gguf.quants.quantize(_floats(rows, cols), qtype)


@pytest.mark.parametrize("qtype", [T.Q4_0, T.Q4_1, T.Q4_K, T.Q8_0])
def test_gguf_blocks_decode_bit_for_bit_as_gguf_does(qtype):
    raw = _gguf(qtype)
    weight = from_gguf(raw, qtype, (ROWS, COLS))
    want = torch.from_numpy(gguf.quants.dequantize(raw, qtype).reshape(ROWS, COLS).copy())
    assert weight.shape == (ROWS, COLS)
    assert weight.bits == (8 if qtype == T.Q8_0 else 4)
    assert torch.equal(dequantize(weight), want)
    # 0.75 bytes a weight for 4 bits, 1.125 for 8: scales and offsets in float32
    assert weight.nbytes == ROWS * COLS * (1.125 if qtype == T.Q8_0 else 0.75)


def test_row_selection_and_stacking_keep_rows_whole():
    a = from_gguf(_gguf(T.Q4_1), T.Q4_1, (ROWS, COLS))
    b = from_gguf(_gguf(T.Q4_1, rows=5), T.Q4_1, (5, COLS))
    order = torch.randperm(ROWS, generator=torch.Generator().manual_seed(0))
    assert torch.equal(dequantize(a.rows(order)), dequantize(a)[order])
    stacked = QuantizedWeight.stack([a, b])
    assert torch.equal(dequantize(stacked), torch.cat([dequantize(a), dequantize(b)]))
    q8 = from_gguf(_gguf(T.Q8_0), T.Q8_0, (ROWS, COLS))
    with pytest.raises(ValueError, match="same format"):
        QuantizedWeight.stack([a, q8])


def test_a_type_without_an_in_memory_format_or_a_ragged_row_is_refused():
    with pytest.raises(ValueError, match="Q5_0 has no quantized in-memory format"):
        from_gguf(np.zeros((1, 22), np.uint8), T.Q5_0, (1, 32))
    with pytest.raises(ValueError, match="Q4_K needs columns in multiples of 256"):
        from_gguf(np.zeros((1, 72), np.uint8), T.Q4_K, (1, 128))


def _ops():
    if kernels.load() is None:
        pytest.skip("the native kernels did not build here (no C++ compiler)")
    ops = native.load()
    assert ops is not None, "the quantized kernel failed to build (see the log)"
    return ops


@pytest.mark.parametrize("qtype", [T.Q4_1, T.Q4_K, T.Q8_0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_native_dequantize_equals_the_torch_decoder_exactly(qtype, dtype):
    ops = _ops()
    w = from_gguf(_gguf(qtype), qtype, (ROWS, COLS))
    got = ops.dequantize(w.data, w.bits, dtype)
    assert got.dtype == dtype and torch.equal(got, dequantize(w, dtype))


@pytest.mark.parametrize("qtype", [T.Q4_0, T.Q4_1, T.Q4_K, T.Q8_0])
@pytest.mark.parametrize("rows", [0, 1, 2, 3, 4, 5, 8, 9, 15, 16, 40, 48, 60])
def test_native_linear_matches_the_widened_matrix(qtype, rows):
    """Under 48 rows (float32) the fused decode-and-multiply accumulates in float32 in another
    order than MKL, so it agrees to float32 rounding; from 48 rows on it is the same matmul, bit
    for bit. No rows (a prefill chunk without logits) is an empty result."""
    ops = _ops()
    w = from_gguf(_gguf(qtype), qtype, (ROWS, COLS))
    x = torch.randn(rows, COLS, generator=torch.Generator().manual_seed(rows))
    got = ops.linear(x, w.data, w.bits)
    want = F.linear(x, dequantize(w))
    assert got.shape == (rows, ROWS) and got.dtype == torch.float32
    if rows == 0:
        return
    if rows >= 48:
        assert torch.equal(got, want)
        return
    scale = (x.abs() @ dequantize(w).abs().T).clamp_min(1e-6)
    if rows <= 2 and _int16_rows():
        # x rounded to 16 bits per block of 32: exactly the product of the rounded x, to float32
        # rounding, and within the rounding's bound of the float product
        rounded = _round_int16(x)
        exact = F.linear(rounded.double(), dequantize(w).double())
        assert float(((got.double() - exact).abs() / scale).max()) < 1e-5
        bound = _int16_bound(x, dequantize(w)) + 1e-5 * scale
        assert bool(((got - want).abs() <= bound).all())
    else:
        assert float(((got - want).abs() / scale).max()) < 1e-5


@pytest.mark.parametrize("qtype", [T.Q4_1, T.Q8_0])
@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
@pytest.mark.parametrize("rows", [1, 2, 3])
def test_native_linear_keeps_a_non_finite_x_non_finite(qtype, bad, rows):
    """An inf or a NaN in x makes its row's products non-finite, as the float product does; the
    16-bit rounding of one or two rows must not turn it into a finite number."""
    ops = _ops()
    w = from_gguf(_gguf(qtype), qtype, (ROWS, COLS))
    x = torch.randn(rows, COLS, generator=torch.Generator().manual_seed(rows))
    x[0, 40] = bad
    got = ops.linear(x, w.data, w.bits)
    assert not bool(torch.isfinite(got[0]).any())
    assert bool(torch.isfinite(got[1:]).all())


@pytest.mark.parametrize("weight_rows", [38, 39, 41])
@pytest.mark.parametrize("rows", [1, 2])
def test_native_linear_covers_every_tail_of_its_row_walk(weight_rows, rows):
    """The one- and two-row product walks weight rows four, two and one at a time: a matrix whose
    rows leave a tail of two or three gets the same products as the widened matrix."""
    ops = _ops()
    for qtype in (T.Q4_1, T.Q8_0):
        w = from_gguf(_gguf(qtype, weight_rows), qtype, (weight_rows, COLS))
        x = torch.randn(rows, COLS, generator=torch.Generator().manual_seed(weight_rows))
        got = ops.linear(x, w.data, w.bits)
        want = F.linear(x, dequantize(w))
        bound = _int16_bound(x, dequantize(w)) if _int16_rows() else 0
        scale = (x.abs() @ dequantize(w).abs().T).clamp_min(1e-6)
        assert bool(((got - want).abs() <= bound + 1e-5 * scale).all())


def _int16_rows() -> bool:
    """Whether the kernel rounds one or two rows of x to 16-bit integers (its AVX2 build)."""
    flags = kernels.cpu_flags()
    return "avx2" in flags and "fma" in flags and "avx512f" not in flags


def _round_int16(x: torch.Tensor) -> torch.Tensor:
    """x rounded as the kernel rounds it: per block of 32, to multiples of max |x| / 32767."""
    blocks = x.double().reshape(x.shape[0], -1, 32)
    step = blocks.abs().amax(-1, keepdim=True) / 32767
    safe = torch.where(step > 0, step, torch.ones_like(step))
    return (torch.round(blocks / safe) * step).reshape(x.shape)


def _int16_bound(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The most that rounding x to 16 bits can move x @ w^T: half a step per value of x."""
    half_step = x.reshape(x.shape[0], -1, 32).abs().amax(-1, keepdim=True) / 32767 / 2
    return half_step.expand(-1, -1, 32).reshape(x.shape) @ w.abs().T


def test_native_linear_in_bfloat16_rounds_only_its_float32_result():
    ops = _ops()
    w = from_gguf(_gguf(T.Q4_1), T.Q4_1, (ROWS, COLS))
    for rows in (3, 16, 31):  # under 32 rows of bfloat16 the fused kernel multiplies
        x = torch.randn(rows, COLS, generator=torch.Generator().manual_seed(rows))
        x = x.to(torch.bfloat16)
        got = ops.linear(x, w.data, w.bits)
        exact = F.linear(x.float(), dequantize(w))
        assert got.dtype == torch.bfloat16
        # one bfloat16 rounding of a float32 result: within 2**-8 relative (plus float32 noise)
        assert bool(((got.float() - exact).abs() <= exact.abs() * 2**-8 + 1e-5).all())
        sums = ops.linear(x, w.data, w.bits, True)  # float_sums: that result, unrounded
        assert sums.dtype == torch.float32 and torch.equal(sums.to(torch.bfloat16), got)
        assert bool(((sums - exact).abs() <= exact.abs() * 1e-5 + 1e-5).all())


def test_native_linear_of_many_bfloat16_rows_is_the_widened_bfloat16_matmul():
    ops = _ops()
    w = from_gguf(_gguf(T.Q4_K), T.Q4_K, (ROWS, COLS))
    x = torch.randn(32, COLS, generator=torch.Generator().manual_seed(32)).to(torch.bfloat16)
    got = ops.linear(x, w.data, w.bits)
    assert torch.equal(got, F.linear(x, dequantize(w, torch.bfloat16)))
    assert torch.equal(ops.linear(x, w.data, w.bits, True), got)  # no float32 sums to keep


def test_native_linear_refuses_mismatched_shapes_with_a_reason():
    ops = _ops()
    w = from_gguf(_gguf(T.Q8_0), T.Q8_0, (ROWS, COLS))
    with pytest.raises(RuntimeError, match="x has 256 columns, the matrix 512"):
        ops.linear(torch.zeros(1, 256), w.data, w.bits)
    with pytest.raises(RuntimeError, match="bits must be 4 or 8"):
        ops.linear(torch.zeros(1, COLS), w.data, 3)
    q4 = from_gguf(_gguf(T.Q4_1), T.Q4_1, (ROWS, COLS))
    with pytest.raises(RuntimeError, match="not whole 36-byte blocks of 8-bit weights"):
        ops.linear(torch.zeros(1, COLS), q4.data, 8)
