"""strata.engine.profiler on a tiny random model: every grid shape is measured as the step it
names, on an engine with the threads asked for, and the profile describes what was measured."""

import torch

from strata.core.profile import prefill_keys
from strata.engine.engine import EngineConfig
from strata.engine.profiler import ProfileGrid, profile_engine
from tests.engine_helpers import tiny_loaded

GRID = ProfileGrid(
    prefill_tokens=(16, 32),
    prefill_contexts=(0, 40),
    decode_batches=(1, 4),
    decode_contexts=(16, 64),
    mixed=((2, 16, 16),),
    repeats=1,
    decode_steps=2,
)


def test_profile_measures_each_grid_shape():
    config = EngineConfig(
        block_size=16, num_blocks=64, max_batched_tokens=64, max_seqs=8, attention_kernel="torch"
    )
    profile = profile_engine(tiny_loaded(), config, threads=1, grid=GRID)
    assert torch.get_num_threads() == 1
    shapes = [
        (m.kind, m.tokens, m.sampled, m.prefill_keys, m.decode_keys, m.context)
        for m in profile.measurements
    ]
    assert shapes == [
        ("prefill", 16, 0, prefill_keys(1, 16, 16, 16), 0.0, 0),
        ("prefill", 16, 0, prefill_keys(1, 16, 56, 16), 0.0, 40),
        ("prefill", 32, 0, prefill_keys(1, 32, 32, 16), 0.0, 0),
        ("prefill", 32, 0, prefill_keys(1, 32, 72, 16), 0.0, 40),
        # decodes: two steps at context C+1 and C+2, so C + 1.5 keys per sequence on average
        ("decode", 1, 1, 0.0, 17.5, 18),
        ("decode", 1, 1, 0.0, 65.5, 66),
        ("decode", 4, 4, 0.0, 70.0, 18),
        ("decode", 4, 4, 0.0, 262.0, 66),
        ("mixed", 18, 2, prefill_keys(1, 16, 16, 16), 34.0, 16),
    ]
    assert all(m.seconds > 0 and len(m.samples) >= 1 for m in profile.measurements)
    assert profile.fit_error.points == 9
    assert (profile.model, profile.dtype, profile.threads) == ("tiny", "float32", 1)
    # 2 layers x (K and V) x 2 KV heads x head_dim 16 x 4 bytes
    assert profile.kv_bytes_per_token == 2 * 2 * 2 * 16 * 4
    assert profile.max_context == 512
    assert profile.engine["max_batched_tokens"] == 64
    assert profile.overheads.add_s > 0
    assert profile.machine["cpu_count"] >= 1
