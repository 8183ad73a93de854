"""The greedy pick's C++ row maximum against torch.max(x.float(), dim=-1)."""

import pytest
import torch

from strata.engine.sampler import _ROW_MAX_SOURCE, row_max
from tests.engine_helpers import extra_kernel_ops


def _ops():
    return extra_kernel_ops(_ROW_MAX_SOURCE, "row_max", "strata_greedy")


def _logits(rows, vocab, dtype, seed):
    x = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed)).to(dtype)
    if vocab > 3:
        x[0, 1] = x[0, vocab - 2] = 1e4  # a tie: the first index wins
    if rows > 1:
        x[1] = float("-inf")  # nothing finite: -inf at index 0
    if rows > 2:
        x[2, vocab // 2] = float("nan")  # nan propagates, at its index
        x[2, vocab - 1] = float("nan")
    if rows > 3:
        x[3] = 0.0  # all equal
    if rows > 4:
        x[4, vocab - 1] = 1e4  # the maximum last, past the whole blocks
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows,vocab", [(1, 1), (5, 7), (6, 256), (9, 257), (17, 32000)])
def test_matches_torch_max_of_the_float32_rows(dtype, rows, vocab):
    ops = _ops()
    x = _logits(rows, vocab, dtype, seed=rows * vocab)
    want_values, want_index = torch.max(x.float(), dim=-1)
    values, index = ops.row_max(x)
    assert values.dtype == torch.float32 and index.dtype == torch.int64
    assert torch.equal(index, want_index)
    torch.testing.assert_close(values, want_values, rtol=0, atol=0, equal_nan=True)
    got_values, got_index = row_max(x)  # the sampler's row_max takes the kernel
    assert torch.equal(got_index, index) and torch.equal(got_values.isnan(), values.isnan())


def test_a_strided_view_and_a_wrong_shape():
    ops = _ops()
    x = _logits(8, 600, torch.float32, seed=3)[:, ::2]
    assert torch.equal(ops.row_max(x)[1], torch.max(x, dim=-1)[1])
    with pytest.raises(RuntimeError, match=r"expected logits \[rows, vocab\]"):
        ops.row_max(torch.zeros(3))
    with pytest.raises(RuntimeError, match="supports float32 and bfloat16"):
        ops.row_max(torch.zeros(2, 3, dtype=torch.float64))
