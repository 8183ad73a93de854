"""The fused rotary + KV-cache write against apply_rotary and store_kv, bit for bit."""

import pytest
import torch

from strata.engine.attention import (
    _ROPE_SOURCE,
    AttentionMetadata,
    SeqSlice,
    kv_cache_shape,
    rotate_and_store,
)
from strata.engine.config import ModelConfig
from strata.engine.rope import RotaryCache
from tests.engine_helpers import extra_kernel_ops

HEADS, KV_HEADS, DIM, BLOCK = 6, 2, 64, 4


def _ops():
    return extra_kernel_ops(_ROPE_SOURCE, "rotary_kv", "strata_rope")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("tokens", [1, 9])
def test_native_rotation_and_store_equal_the_torch_path(dtype, tokens):
    _ops()
    cfg = ModelConfig(
        name="t",
        vocab_size=8,
        hidden_size=HEADS * DIM,
        intermediate_size=8,
        num_layers=1,
        num_heads=HEADS,
        num_kv_heads=KV_HEADS,
        max_position_embeddings=64,
        rope_theta=10000.0,
    )
    gen = torch.Generator().manual_seed(tokens)
    qkv = torch.randn(tokens, (HEADS + 2 * KV_HEADS) * DIM, generator=gen).to(dtype)
    positions = torch.arange(5, 5 + tokens)
    cos, sin = RotaryCache(cfg, torch.device("cpu"), dtype).get(positions)
    blocks = [7, 2, 9, 0, 4]  # scattered, so slots cross blocks out of order
    outs = []
    for native in (True, False):
        cache = torch.zeros(kv_cache_shape(1, KV_HEADS, 10, BLOCK, DIM), dtype=dtype)[0]
        meta = AttentionMetadata.build(
            [SeqSlice(0, tokens, 5 + tokens, blocks)], BLOCK, "cpu", native=native
        )
        q = rotate_and_store(qkv, cos, sin, cache[0], cache[1], meta, HEADS)
        outs.append((q, cache))
    (q_native, cache_native), (q_torch, cache_torch) = outs
    assert q_native.shape == (tokens, HEADS, DIM)
    assert torch.equal(q_native, q_torch)
    assert torch.equal(cache_native, cache_torch)
    assert cache_native.abs().sum() > 0


def test_refuses_a_qkv_that_does_not_fit_the_heads():
    _ops()
    ops = torch.ops.strata_rope
    cache = torch.zeros(2, 4, BLOCK, DIM)
    with pytest.raises(RuntimeError, match="qkv has 600 columns"):
        ops.rotary_kv(
            torch.zeros(1, 600),
            torch.zeros(1, DIM),
            torch.zeros(1, DIM),
            cache,
            cache.clone(),
            torch.zeros(1, dtype=torch.int64),
            HEADS,
        )
