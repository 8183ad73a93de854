"""Token sampling: greedy, temperature, top-k, top-p, repetition penalty, per-request seeds."""

from __future__ import annotations

import torch

from strata.engine.sequence import SamplingParams


class SeqSampler:
    """Sampling state of one sequence; its generator makes a seeded request reproducible."""

    __slots__ = ("params", "generator")

    def __init__(self, params: SamplingParams):
        self.params = params
        self.generator: torch.Generator | None = None
        if params.temperature > 0:
            self.generator = torch.Generator()
            if params.seed is not None:
                self.generator.manual_seed(params.seed)
            else:
                self.generator.seed()

    def sample(self, logits: torch.Tensor, history: list[int]) -> int:
        """logits: [vocab] float32 on any device. history: prompt and generated ids so far."""
        p = self.params
        logits = logits.float().cpu()
        if p.repetition_penalty and p.repetition_penalty != 1.0 and history:
            seen = torch.tensor(sorted(set(history)), dtype=torch.int64)
            vals = logits[seen]
            logits[seen] = torch.where(vals > 0, vals / p.repetition_penalty,
                                       vals * p.repetition_penalty)
        if p.temperature <= 0:
            return int(torch.argmax(logits))
        logits = logits / p.temperature
        if p.top_k and p.top_k < logits.numel():
            kth = torch.topk(logits, p.top_k).values[-1]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        if 0 < p.top_p < 1:
            sorted_probs, order = torch.sort(probs, descending=True)
            cum = torch.cumsum(sorted_probs, dim=-1)
            drop = cum - sorted_probs > p.top_p       # keep the smallest set reaching top_p
            sorted_probs[drop] = 0
            probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
            probs = probs / probs.sum()
        return int(torch.multinomial(probs, 1, generator=self.generator))
