"""The fused SwiGLU activation against F.silu(gate) * up."""

import pytest
import torch
import torch.nn.functional as F

from strata.engine.model import _SWIGLU_SOURCE, silu_mul
from tests.engine_helpers import extra_kernel_ops


def _ops():
    return extra_kernel_ops(_SWIGLU_SOURCE, "swiglu", "strata_swiglu")


@pytest.mark.parametrize("rows", [1, 5, 33])
def test_float32_matches_torch_to_its_exp_error(rows):
    ops = _ops()
    gate_up = torch.randn(rows, 2 * 1536, generator=torch.Generator().manual_seed(rows)) * 4
    gate, up = gate_up.chunk(2, dim=-1)
    want = F.silu(gate) * up
    got = ops.silu_mul(gate_up)
    assert got.shape == (rows, 1536)
    assert torch.allclose(got, want, rtol=1e-6, atol=1e-7)
    assert torch.equal(silu_mul(gate_up), got)  # the model's silu_mul takes the kernel


def test_bfloat16_rounds_the_activation_then_the_product():
    ops = _ops()
    gate_up = (torch.randn(4, 2 * 960, generator=torch.Generator().manual_seed(0)) * 3).bfloat16()
    gate, up = gate_up.chunk(2, dim=-1)
    want = F.silu(gate).mul_(up).float()
    got = ops.silu_mul(gate_up).float()
    assert float(((got - want).abs() / want.abs().clamp_min(1e-3)).max()) <= 2**-7
    assert float((got == want).float().mean()) > 0.97


def test_large_and_tiny_gates_stay_finite():
    ops = _ops()
    gate_up = torch.tensor([[-1000.0, -20.0, 0.0, 20.0, 1000.0] + [1.0] * 5])
    got = ops.silu_mul(gate_up)
    assert torch.isfinite(got).all()
    assert torch.allclose(got, F.silu(gate_up[:, :5]), atol=1e-6)
