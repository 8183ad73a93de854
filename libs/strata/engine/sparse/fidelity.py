"""Side-by-side runs of the dense and the sparse decode path, for fidelity and latency figures.

`teacher_forced` feeds one prompt and a fixed continuation through an idle engine's model twice,
one token per decode step: once dense, once with the sparse path on, both from the same
prefilled prompt (with torch_dense, a third time: dense through the other attention code).
Every run sees the same tokens (teacher forcing): step t feeds continuation[t] and predicts the
token after it from the same history, so the runs compare token by token:

    dense_logits[t], sparse_logits[t]        next-token logits (top-1 agreement, KL, ...)
    sparse_steps[t, l]                       whether layer l of step t took the sparse path
    cosine[t, l]                             layer l's attention output, sparse run against
                                             full attention on the sparse run's own cache
    cosine_selected[t, l]                    the same before the trust check's fallbacks
    fell_back[t, l, h], estimate, left_out   the trust check per KV head, its estimate of the
                                             mass left out and the true mass (per query head)
    dense_seconds[t], sparse_seconds[t]      wall time of each decode step (probe=False only:
                                             the probe computes full attention too)
    dense_torch_logits[t]                    torch_dense=True only: the dense run again, its
                                             decode attention through the pure-torch path
                                             instead of the fused CPU kernel

The last is the noise floor of the comparison: the fused kernel and the torch path compute the
same attention exactly, in a different order and with different intermediate roundings (the
kernel keeps scores, probabilities and sums in float32; torch's matrix products round the scores
and read the probabilities in the cache's dtype), so the two dense runs' top-1 disagreements are
what float rounding alone flips.

A step the sparse path does not take (context below min_context, or a budget that covers the
whole context) has no probe entry: its cosine is 1 and nothing fell back.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from strata.engine.attention import AttentionMetadata, SeqSlice
from strata.engine.engine import LLMEngine
from strata.engine.sparse.decode import LayerProbe

_DENSE_ID = "__fidelity-dense"
_SPARSE_ID = "__fidelity-sparse"


@dataclass(slots=True)
class TeacherForced:
    dense_logits: torch.Tensor  # [T, V] float32
    sparse_logits: torch.Tensor  # [T, V] float32
    sparse_steps: torch.Tensor  # [T, L] bool
    cosine: torch.Tensor  # [T, L] float32
    cosine_selected: torch.Tensor  # [T, L] float32
    fell_back: torch.Tensor  # [T, L, KVH] bool
    estimate: torch.Tensor  # [T, L, KVH, G] float32 (0 where the step was dense)
    left_out: torch.Tensor  # [T, L, KVH, G] float32
    dense_seconds: list[float]
    sparse_seconds: list[float]
    dense_torch_logits: torch.Tensor | None = None  # [T, V] float32 (torch_dense=True)

    @property
    def top1_agreement(self) -> float:
        return (self.dense_logits.argmax(-1) == self.sparse_logits.argmax(-1)).float().mean().item()

    @property
    def dense_floor(self) -> float | None:
        """Top-1 agreement of the dense run with itself through the torch path (None: not run)."""
        if self.dense_torch_logits is None:
            return None
        return (
            (self.dense_logits.argmax(-1) == self.dense_torch_logits.argmax(-1))
            .float()
            .mean()
            .item()
        )

    @property
    def fallback_rate(self) -> float:
        """Fallbacks per sparse layer step (a layer step with any KV head group recomputed)."""
        steps = int(self.sparse_steps.sum())
        return float(self.fell_back.any(-1)[self.sparse_steps].sum()) / steps if steps else 0.0


def teacher_forced(
    engine: LLMEngine,
    prompt_ids: list[int],
    continuation: list[int],
    probe: bool = True,
    torch_dense: bool = False,
) -> TeacherForced:
    """Run prompt + continuation dense and sparse on an idle engine built with a SparseConfig.

    torch_dense: also run the dense side through the pure-torch decode attention, from the same
    prefilled prompt (the engine must decode through its fused kernel, or there is nothing to
    compare it with)."""
    sparse = engine.sparse
    if sparse is None:
        raise ValueError("teacher_forced needs an engine built with EngineConfig.sparse")
    if engine.has_work():
        raise ValueError("teacher_forced needs an idle engine: its blocks are borrowed")
    if not prompt_ids or not continuation:
        raise ValueError("teacher_forced needs a prompt and a continuation of at least a token")
    if torch_dense and not engine.native_attention:
        raise ValueError(
            "torch_dense compares the fused CPU attention kernel with the torch "
            "path, and this engine has no kernel to compare: build it with "
            "EngineConfig.attention_kernel 'cpp' on a CPU where the kernel compiles"
        )
    bs = engine.config.block_size
    total = len(prompt_ids) + len(continuation)
    if total > engine.max_context:
        raise ValueError(
            f"prompt plus continuation ({total} tokens) exceeds the model's "
            f"context of {engine.max_context}"
        )
    blocks = engine.pool.allocate(-(-total // bs))
    if blocks is None:
        raise ValueError(
            f"the engine's pool lacks the {-(-total // bs)} blocks {total} tokens need"
        )
    cfg = engine.loaded.config
    layers, kv_heads = cfg.num_layers, cfg.num_kv_heads
    group = cfg.num_heads // kv_heads
    steps = len(continuation)
    probes: list[list[LayerProbe]] = []
    sparse.register(_DENSE_ID, False)
    sparse.register(_SPARSE_ID, True)
    saved_probe = sparse.probe
    try:
        _prefill(engine, _DENSE_ID, prompt_ids, blocks)
        prompt_blocks = blocks[: len(prompt_ids) // bs + 1]
        held = engine.kv[:, :, :, prompt_blocks].clone()
        native = engine.native_attention
        dense_logits, dense_s = _decode(engine, _DENSE_ID, prompt_ids, continuation, blocks, native)
        engine.kv[:, :, :, prompt_blocks] = held
        torch_logits = None
        if torch_dense:
            torch_logits, _ = _decode(engine, _DENSE_ID, prompt_ids, continuation, blocks, False)
            engine.kv[:, :, :, prompt_blocks] = held
        if probe:
            sparse.probe = lambda p: probes[-1].append(p)
        sparse_logits, sparse_s = _decode(
            engine, _SPARSE_ID, prompt_ids, continuation, blocks, native, probes if probe else None
        )
    finally:
        sparse.probe = saved_probe
        sparse.forget(_DENSE_ID)
        sparse.forget(_SPARSE_ID)
        engine.pool.free(blocks)
    taken = torch.zeros(steps, layers, dtype=torch.bool)
    cosine = torch.ones(steps, layers)
    cosine_sel = torch.ones(steps, layers)
    fell = torch.zeros(steps, layers, kv_heads, dtype=torch.bool)
    estimate = torch.zeros(steps, layers, kv_heads, group)
    left = torch.zeros(steps, layers, kv_heads, group)
    for t, step in enumerate(probes):
        for p in step:
            taken[t, p.layer] = True
            cosine[t, p.layer] = F.cosine_similarity(
                p.used.flatten().float(), p.dense.flatten().float(), dim=0
            )
            cosine_sel[t, p.layer] = F.cosine_similarity(
                p.sparse.flatten().float(), p.dense.flatten().float(), dim=0
            )
            fell[t, p.layer] = p.fell_back[0].cpu()
            estimate[t, p.layer] = p.estimate[0].float().cpu()
            left[t, p.layer] = p.left_out[0].float().cpu()
    return TeacherForced(
        dense_logits,
        sparse_logits,
        taken,
        cosine,
        cosine_sel,
        fell,
        estimate,
        left,
        dense_s,
        sparse_s,
        torch_logits,
    )


def _run(
    engine: LLMEngine, request_id: str, ids: list[int], start: int, blocks: list[int], native: bool
) -> torch.Tensor:
    """Compute tokens ids (positions start..) into the cache; logits of the last one [V].

    native: decode attention through the fused CPU kernel (the engine's own choice, unless a
    run asks for the torch path)."""
    sparse = engine.sparse
    assert sparse is not None, "teacher_forced runs only engines with a sparse decoder"
    dev = engine.device
    slices = [SeqSlice(0, len(ids), start + len(ids), blocks)]
    meta = AttentionMetadata.build(slices, engine.config.block_size, dev, native)
    decodes = meta.groups[0] if meta.groups[0].queries == 1 else None
    meta.sparse = sparse.plan(engine.kv, [request_id], slices, decodes, native)
    logits = engine.model(
        torch.tensor(ids, dtype=torch.int64, device=dev),
        torch.arange(start, start + len(ids), device=dev),
        engine.kv,
        meta,
        torch.tensor([len(ids) - 1], dtype=torch.int64, device=dev),
    )
    return logits[0].float().cpu()


def _prefill(engine: LLMEngine, request_id: str, prompt: list[int], blocks: list[int]) -> None:
    chunk = engine.config.max_batched_tokens
    for start in range(0, len(prompt), chunk):
        _run(
            engine,
            request_id,
            prompt[start : start + chunk],
            start,
            blocks,
            engine.native_attention,
        )


def _decode(
    engine: LLMEngine,
    request_id: str,
    prompt: list[int],
    continuation: list[int],
    blocks: list[int],
    native: bool,
    probes: list[list[LayerProbe]] | None = None,
) -> tuple[torch.Tensor, list[float]]:
    """Feed the continuation one token per step; logits after each [T, V] and step seconds."""
    out, seconds = [], []
    for t, token in enumerate(continuation):
        if probes is not None:
            probes.append([])
        began = time.perf_counter()
        out.append(_run(engine, request_id, [token], len(prompt) + t, blocks, native))
        seconds.append(time.perf_counter() - began)
    return torch.stack(out), seconds
