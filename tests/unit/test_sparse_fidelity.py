"""teacher_forced's dense noise floor: with torch_dense the dense side runs a second time through
the pure-torch decode attention from the same prefilled prompt, giving exactly the logits an
engine built on the torch path computes, and leaving the dense and sparse runs untouched."""

from __future__ import annotations

import pytest
import torch

from strata.engine import kernels
from strata.engine.dummy import load_dummy
from strata.engine.engine import EngineConfig, LLMEngine
from strata.engine.sparse import SparseConfig
from strata.engine.sparse.fidelity import TeacherForced, teacher_forced

BLOCKS = 120
SPARSE = SparseConfig(enabled=False, min_context=512, budget_fraction=0.25, threshold=1.0)


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny():
    return load_dummy("dummy-tiny")


def ids(n: int, seed: int) -> list[int]:
    return torch.randint(0, 512, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def engine(loaded, kernel: str) -> LLMEngine:
    # 600 prompt tokens prefill in chunks of 512 and 88: no chunk is a one-token decode
    return LLMEngine(
        loaded,
        EngineConfig(
            num_blocks=BLOCKS,
            max_batched_tokens=512,
            dtype="bfloat16",
            attention_kernel=kernel,
            sparse=SPARSE,
        ),
    )


def test_torch_dense_is_the_torch_engines_dense_run_and_leaves_the_others_alone(tiny):
    if kernels.load() is None:
        pytest.skip("the fused CPU kernel did not build: there is nothing to compare")
    prompt, cont = ids(600, 1), ids(8, 2)
    e = engine(tiny, "cpp")
    plain = teacher_forced(e, prompt, cont)
    steps_before = e.sparse.stats.layer_steps
    tf = teacher_forced(e, prompt, cont, torch_dense=True)
    # the extra dense run neither moves the sparse counters nor touches the other runs' numbers
    assert e.sparse.stats.layer_steps - steps_before == 8 * 2
    assert torch.equal(tf.dense_logits, plain.dense_logits)
    assert torch.equal(tf.sparse_logits, plain.sparse_logits)
    assert e.pool.num_free == BLOCKS and not e.has_work()
    reference = teacher_forced(engine(tiny, "torch"), prompt, cont)
    assert torch.equal(tf.dense_torch_logits, reference.dense_logits)
    # the same attention rounded differently: close, not identical
    assert not torch.equal(tf.dense_torch_logits, tf.dense_logits)
    assert torch.allclose(tf.dense_torch_logits, tf.dense_logits, atol=0.1)
    same = tf.dense_logits.argmax(-1) == tf.dense_torch_logits.argmax(-1)
    assert tf.dense_floor == same.float().mean().item()
    assert plain.dense_floor is None


def test_torch_dense_needs_an_engine_on_the_fused_kernel(tiny):
    e = engine(tiny, "torch")
    with pytest.raises(ValueError, match="attention_kernel 'cpp'"):
        teacher_forced(e, ids(600, 1), ids(2, 2), torch_dense=True)
    assert e.pool.num_free == BLOCKS


def test_dense_floor_counts_the_steps_whose_top_token_is_the_same_both_ways():
    dense = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    other = torch.tensor([[0.0, 1.0], [0.4, 0.6], [0.1, 0.9], [0.8, 0.2]])
    empty = torch.zeros(4, 1)
    tf = TeacherForced(
        dense,
        dense,
        empty.bool(),
        empty,
        empty,
        empty.bool(),
        empty,
        empty,
        [],
        [],
        dense_torch_logits=other,
    )
    assert tf.dense_floor == 0.75
    assert tf.top1_agreement == 1.0
