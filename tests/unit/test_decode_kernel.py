"""The fused CPU decode-attention kernel against the torch path it replaces."""

import pytest
import torch

from strata.engine import kernels
from strata.engine.attention import AttentionMetadata, SeqSlice, _attend
from strata.engine.engine import EngineRequest
from strata.engine.sequence import SamplingParams
from tests.engine_helpers import run_to_end, tiny_engine

OPS = kernels.load()
pytestmark = pytest.mark.skipif(
    OPS is None,
    reason="the C++ decode kernel could not be built here (no compiler or a build "
    "error; see the warning logged by strata.engine.kernels.load)",
)

BLOCK = 16
LENS = [1, 15, 16, 17, 300]


def _case(heads, kv_heads, dim, dtype, seed=0, lens=LENS):
    """Random caches and a decode group whose block tables are shuffled block ids."""
    gen = torch.Generator().manual_seed(seed)
    num_blocks = sum(-(-n // BLOCK) for n in lens) + 3
    perm = torch.randperm(num_blocks, generator=gen).tolist()
    slices, used = [], 0
    for i, n in enumerate(lens):
        nb = -(-n // BLOCK)
        slices.append(SeqSlice(start=i, num_new=1, context_len=n, block_ids=perm[used : used + nb]))
        used += nb
    meta = AttentionMetadata.build(slices, BLOCK, "cpu")
    q = torch.randn(len(lens), heads, dim, generator=gen).to(dtype)
    k = torch.randn(kv_heads, num_blocks, BLOCK, dim, generator=gen).to(dtype)
    v = torch.randn(kv_heads, num_blocks, BLOCK, dim, generator=gen).to(dtype)
    return q, k, v, meta.groups[0]


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("gqa,dim", [(1, 64), (4, 72), (6, 128)])
def test_kernel_matches_torch_attend(dtype, tol, gqa, dim):
    torch.set_num_threads(1)
    kv_heads = 2
    q, k, v, group = _case(gqa * kv_heads, kv_heads, dim, dtype)
    scale = dim**-0.5
    want = _attend(q, k, v, group, scale, gqa).float()
    got = OPS.decode_attention(q, k, v, group.block_tables, group.context_lens, scale)
    assert got.dtype == dtype and got.shape == q.shape
    torch.testing.assert_close(got.float(), want, atol=tol, rtol=tol)
    # a context of one key returns that key's value exactly (up to the output rounding)
    first = group.block_tables[0, 0]
    expect = v[:, first, 0].repeat_interleave(gqa, dim=0)
    torch.testing.assert_close(got[0].float(), expect.float(), atol=tol, rtol=0)


def _on_two_threads_and_one(kv_heads, gqa, dtype, seed, lens):
    """The torch path's output (float32), then the kernel's on two threads and on one, for a
    random case of head_dim 64."""
    q, k, v, group = _case(gqa * kv_heads, kv_heads, 64, dtype, seed=seed, lens=lens)
    scale = 64**-0.5
    want = _attend(q, k, v, group, scale, gqa).float()
    torch.set_num_threads(2)
    try:
        two = OPS.decode_attention(q, k, v, group.block_tables, group.context_lens, scale)
    finally:
        torch.set_num_threads(1)
    one = OPS.decode_attention(q, k, v, group.block_tables, group.context_lens, scale)
    return want, two, one


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_a_long_context_split_over_threads_matches_the_torch_path(dtype, tol):
    """Two threads, one sequence of three kv heads: too few items for the threads, so each
    context is cut into chunks merged by their log sum exps (lengths not a multiple of a chunk
    or a block, and one short context that stays whole)."""
    want, split, whole = _on_two_threads_and_one(3, 3, dtype, seed=5, lens=[2900, 40])
    torch.testing.assert_close(split.float(), want, atol=tol, rtol=tol)
    torch.testing.assert_close(split.float(), whole.float(), atol=tol, rtol=tol)
    if dtype == torch.float32:  # the long context was cut: the same sums in another order
        assert not torch.equal(split[0], whole[0])


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_a_step_too_large_for_one_thread_is_split_by_pairs_and_matches(dtype, tol):
    """Two threads, enough (sequence, kv head) pairs to keep both busy and more key rows than
    the kernel runs on the calling thread: each pair whole on the pool, the same numbers as one
    thread computes them (the pairs are independent, so bit for bit)."""
    want, pooled, alone = _on_two_threads_and_one(2, 3, dtype, seed=7, lens=[700, 650, 33, 900])
    torch.testing.assert_close(pooled.float(), want, atol=tol, rtol=tol)
    assert torch.equal(pooled, alone)


def test_kernel_refuses_a_context_longer_than_its_block_table():
    torch.set_num_threads(1)
    q, k, v, group = _case(4, 2, 64, torch.float32)
    too_long = group.context_lens.clone()
    too_long[0] = group.block_tables.shape[1] * BLOCK + 1
    with pytest.raises(RuntimeError, match="context length"):
        OPS.decode_attention(q, k, v, group.block_tables, too_long, 0.125)


def test_engine_config_names_the_kernel_choice():
    from strata.engine.engine import EngineConfig

    with pytest.raises(ValueError, match="attention_kernel must be 'cpp' or 'torch'"):
        EngineConfig(attention_kernel="cuda")
    assert tiny_engine().native_attention is True
    assert tiny_engine(attention_kernel="torch").native_attention is False


def _greedy_tokens(kernel: str):
    engine = tiny_engine(max_batched_tokens=16, attention_kernel=kernel)
    prompts = {"a": list(range(40, 77)), "b": list(range(100, 111)), "c": [7, 8, 9]}
    for rid, prompt in prompts.items():
        engine.add_request(
            EngineRequest(rid, prompt, SamplingParams(max_tokens=12, ignore_eos=True))
        )
    return run_to_end(engine)


def test_engine_greedy_tokens_are_the_same_with_and_without_the_kernel(monkeypatch):
    torch_tokens = _greedy_tokens("torch")
    calls = []
    real = kernels.load()
    monkeypatch.setattr(kernels, "load", lambda: calls.append(1) or real)
    cpp_tokens = _greedy_tokens("cpp")
    assert calls, "the engine never called the kernel"
    assert cpp_tokens == torch_tokens
    assert sorted(cpp_tokens) == ["a", "b", "c"] and all(len(t) == 12 for t in cpp_tokens.values())
