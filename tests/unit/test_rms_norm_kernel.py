"""The fused RMSNorm kernel against the torch expression it replaces."""

import pytest
import torch

from strata.engine.model import _NORM_SOURCE, add_rms_norm, rms_norm
from tests.engine_helpers import extra_kernel_ops


def _torch_rms_norm(x, weight, eps):
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(weight.dtype)


def _ops():
    return extra_kernel_ops(_NORM_SOURCE, "rms_norm", "strata_norm")


@pytest.mark.parametrize("rows", [1, 3, 40])
def test_float32_rows_match_the_torch_expression(rows):
    ops = _ops()
    gen = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 576, generator=gen) * 3
    w = torch.randn(576, generator=gen)
    got = ops.rms_norm(x, w, 1e-5)
    want = _torch_rms_norm(x, w, 1e-5)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-6)
    assert torch.equal(rms_norm(x, w, 1e-5), got)  # the model's rms_norm takes the kernel


def test_bfloat16_rounds_as_the_torch_expression():
    """Both round the normalized row to bfloat16, then the product: results differ at most where
    the float32 sums differ in their last bit, by one bfloat16 step."""
    ops = _ops()
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(8, 960, generator=gen) * 2).bfloat16()
    w = torch.randn(960, generator=gen).bfloat16()
    got, want = ops.rms_norm(x, w, 1e-6).float(), _torch_rms_norm(x, w, 1e-6).float()
    assert got.dtype == torch.float32
    assert float(((got - want).abs() / want.abs().clamp_min(1e-3)).max()) <= 2**-7
    assert float((got == want).float().mean()) > 0.97


def test_a_float32_stream_under_a_bfloat16_weight_rounds_as_the_torch_expression():
    """The residual stream of a bfloat16 model stays float32: the kernel adds the bfloat16
    residual into it in float32 and returns the normalized row in the weight's dtype."""
    ops = _ops()
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(5, 576, generator=gen) * 3
    res = torch.randn(5, 576, generator=gen).bfloat16()
    w = torch.randn(576, generator=gen).bfloat16()
    got, want = ops.rms_norm(x, w, 1e-5), _torch_rms_norm(x, w, 1e-5)
    assert got.dtype == torch.bfloat16
    assert (
        float(((got.float() - want.float()).abs() / want.float().abs().clamp_min(1e-3)).max())
        <= 2**-7
    )
    assert torch.equal(rms_norm(x, w, 1e-5), got)  # the model's rms_norm takes the kernel
    summed = x + res
    normed = add_rms_norm(x, res, w, 1e-5)
    assert x.dtype == torch.float32 and torch.equal(x, summed)
    assert normed.dtype == torch.bfloat16


def test_refuses_a_weight_of_another_dtype_or_size():
    ops = _ops()
    with pytest.raises(RuntimeError, match="share a dtype"):
        ops.rms_norm(torch.zeros(2, 8, dtype=torch.bfloat16), torch.zeros(8), 1e-6)
    with pytest.raises(RuntimeError, match="weight must be contiguous \\[hidden\\]"):
        ops.rms_norm(torch.zeros(2, 8), torch.zeros(4), 1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_add_rms_norm_adds_in_place_then_normalizes(dtype):
    _ops()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(3, 576, generator=gen).to(dtype)
    res = torch.randn(3, 576, generator=gen).to(dtype)
    w = torch.randn(576, generator=gen).to(dtype)
    summed = x + res
    got = add_rms_norm(x, res, w, 1e-5)
    assert torch.equal(x, summed)  # the residual stream, updated in place, exactly as torch adds
    want = _torch_rms_norm(summed, w, 1e-5).float()
    assert float(((got.float() - want).abs() / want.abs().clamp_min(1e-3)).max()) <= 2**-7
