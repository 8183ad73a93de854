"""The same engine on CUDA (skipped without a GPU): parity in fp32, sane bf16/fp16, batching."""

import pytest
import torch

from strata.engine.engine import EngineConfig, EngineRequest, LLMEngine
from strata.engine.sequence import SamplingParams
from tests.engine_helpers import run_to_end, tiny_loaded

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]

PROMPT = list(range(40, 77))


def _engine(device, dtype, **kw):
    return LLMEngine(
        tiny_loaded(), EngineConfig(block_size=16, num_blocks=64, device=device, dtype=dtype, **kw)
    )


def _greedy(engine, prompts, max_tokens=16):
    for i, p in enumerate(prompts):
        engine.add_request(
            EngineRequest(f"r{i}", list(p), SamplingParams(max_tokens=max_tokens, ignore_eos=True))
        )
    return run_to_end(engine)


def test_cuda_fp32_matches_cpu_fp32():
    torch.set_num_threads(1)
    prompts = [PROMPT, list(range(100, 111)), list(range(5, 70))]
    assert _greedy(_engine("cuda", "float32"), prompts) == _greedy(
        _engine("cpu", "float32"), prompts
    )


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_cuda_half_precision_logits_stay_close_to_fp32(dtype):
    from strata.engine.attention import AttentionMetadata, SeqSlice

    ref = _engine("cuda", "float32")
    half = _engine("cuda", dtype)
    ids = torch.tensor(PROMPT, device="cuda")
    out = []
    for e in (ref, half):
        meta = AttentionMetadata.build(
            [SeqSlice(0, len(PROMPT), len(PROMPT), [3, 1, 2])], 16, "cuda"
        )
        out.append(
            e.model(
                ids,
                torch.arange(len(PROMPT), device="cuda"),
                e.kv,
                meta,
                torch.arange(len(PROMPT), device="cuda"),
            ).float()
        )
    cos = torch.nn.functional.cosine_similarity(out[0], out[1], dim=-1)
    assert cos.min() > 0.99


def test_cuda_bf16_serves_a_batch_to_completion():
    engine = _engine("cuda", "bfloat16", max_batched_tokens=256)
    got = _greedy(engine, [list(range(i, i + 30)) for i in range(12)], max_tokens=32)
    assert sorted(got) == sorted(f"r{i}" for i in range(12))
    assert all(len(v) == 32 for v in got.values())
    assert engine.pool.num_free == engine.pool.num_blocks
