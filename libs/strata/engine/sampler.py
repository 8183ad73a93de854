"""Token sampling for one step's batch of logits.

Per row, in order: repetition penalty (prompt and output tokens), frequency and presence
penalties (output tokens), then greedy argmax, or temperature, top-k, top-p, min-p and a draw
from the request's own generator (seeded requests are reproducible whatever else is batched with
them). Logprobs are those of the model's raw distribution, before any adjustment. A batch whose
rows are all plain greedy takes one argmax for the whole batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from strata.engine.sequence import SamplingParams


@dataclass(slots=True)
class Sampled:
    token_id: int
    logprob: float | None = None
    top: list[tuple[int, float]] | None = None


class SeqSampler:
    """Sampling state of one sequence; its generator makes a seeded request reproducible."""

    __slots__ = ("params", "generator", "num_prompt")

    def __init__(self, params: SamplingParams, num_prompt: int):
        self.params = params
        self.num_prompt = num_prompt
        self.generator: torch.Generator | None = None
        if params.temperature > 0:
            self.generator = torch.Generator()
            if params.seed is not None:
                self.generator.manual_seed(params.seed)
            else:
                self.generator.seed()

    def sample(self, logits: torch.Tensor, history: list[int]) -> Sampled:
        """logits: [vocab] float32 on the CPU. history: prompt and generated ids so far."""
        p = self.params
        raw = logits
        logits = logits.clone()
        if p.repetition_penalty and p.repetition_penalty != 1.0 and history:
            seen = torch.tensor(sorted(set(history)), dtype=torch.int64)
            vals = logits[seen]
            logits[seen] = torch.where(vals > 0, vals / p.repetition_penalty,
                                       vals * p.repetition_penalty)
        output = history[self.num_prompt:]
        if (p.frequency_penalty or p.presence_penalty) and output:
            ids, counts = torch.tensor(output, dtype=torch.int64).unique(return_counts=True)
            logits[ids] -= p.frequency_penalty * counts.float() + p.presence_penalty
        if p.temperature <= 0:
            token = int(torch.argmax(logits))
        else:
            token = self._draw(logits / p.temperature)
        if not p.logprobs:
            return Sampled(token)
        logprobs = torch.log_softmax(raw, dim=-1)
        top = torch.topk(logprobs, p.logprobs)
        return Sampled(token, float(logprobs[token]),
                       list(zip(top.indices.tolist(), top.values.tolist())))

    def _draw(self, logits: torch.Tensor) -> int:
        p = self.params
        if p.top_k and p.top_k < logits.numel():
            kth = torch.topk(logits, p.top_k).values[-1]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        if 0 < p.top_p < 1:
            sorted_probs, order = torch.sort(probs, descending=True)
            drop = torch.cumsum(sorted_probs, dim=-1) - sorted_probs > p.top_p
            sorted_probs[drop] = 0  # keeps the smallest set whose mass reaches top_p
            probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
        if p.min_p > 0:
            probs = probs.masked_fill(probs < p.min_p * probs.max(), 0.0)
        return int(torch.multinomial(probs / probs.sum(), 1, generator=self.generator))


def sample_batch(logits: torch.Tensor, samplers: list[SeqSampler],
                 histories: list[list[int]]) -> list[Sampled]:
    """One token per row of logits [B, vocab]."""
    if all(s.params.is_plain_greedy for s in samplers):
        # fp32 argmax: faster on CPU than on bf16, and identical
        return [Sampled(t) for t in torch.argmax(logits.float(), dim=-1).tolist()]
    cpu = logits.float().cpu()
    return [s.sample(cpu[i], h) for i, (s, h) in enumerate(zip(samplers, histories))]
