"""dtype "auto": a float checkpoint's own dtype; quantized weights in bfloat16 where native."""

from dataclasses import replace

import gguf
import pytest
import torch

from strata.engine import compute_dtype
from strata.engine.engine import EngineConfig, LLMEngine
from strata.engine.gguf_loader import load_gguf
from strata.engine.quant import QuantizedWeight
from tests.engine_helpers import tiny_loaded
from tests.unit.test_gguf_loader import write_tiny_gguf

CPU = torch.device("cpu")


@pytest.fixture
def quantized(tmp_path):
    write_tiny_gguf(tmp_path / "m.gguf", qtype=gguf.GGMLQuantizationType.Q8_0)
    loaded = load_gguf(tmp_path / "m.gguf")
    assert loaded.dtype == torch.float32
    assert any(isinstance(w, QuantizedWeight) for w in loaded.weights.values())
    return loaded


@pytest.mark.parametrize("native", [True, False])
def test_quantized_weights_compute_in_bfloat16_only_where_it_is_native(
    quantized, monkeypatch, native
):
    monkeypatch.setattr(compute_dtype, "native_bf16", lambda device: native)
    want = torch.bfloat16 if native else torch.float32
    assert compute_dtype.auto_dtype(quantized, CPU) == want
    torch.set_num_threads(1)
    engine = LLMEngine(quantized, EngineConfig(block_size=4, num_blocks=16))
    assert engine.dtype == want and engine.kv.dtype == want
    # an explicit dtype is taken as given
    assert (
        LLMEngine(quantized, EngineConfig(block_size=4, num_blocks=16, dtype="float32")).dtype
        == torch.float32
    )


@pytest.mark.parametrize("native", [True, False])
def test_float_checkpoints_keep_their_own_dtype(monkeypatch, native):
    monkeypatch.setattr(compute_dtype, "native_bf16", lambda device: native)
    loaded = tiny_loaded()
    assert compute_dtype.auto_dtype(loaded, CPU) == torch.float32
    half = replace(
        loaded,
        weights={k: v.to(torch.bfloat16) for k, v in loaded.weights.items()},
        dtype=torch.bfloat16,
    )
    assert compute_dtype.auto_dtype(half, CPU) == torch.bfloat16


def test_native_bf16_on_the_cpu_is_onednns_bfloat16_path():
    from strata.engine.packed_linear import ONEDNN_BF16

    assert compute_dtype.native_bf16(CPU) is ONEDNN_BF16
    assert compute_dtype.native_bf16(torch.device("meta")) is False
