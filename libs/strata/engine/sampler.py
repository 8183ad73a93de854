"""Token sampling for one step's batch of logits.

Per row, in order: repetition penalty (prompt and output tokens), frequency and presence
penalties (output tokens), then greedy argmax, or temperature, top-k, top-p, min-p and a draw
from the request's own generator (one uniform number a token, `draw`; seeded requests are
reproducible whatever else is batched with them). Logprobs are those of the model's raw
distribution, before any adjustment. A batch whose rows are all plain greedy takes one argmax
for the whole batch.

Numerical safety: every value the gateway admits samples without inf or nan. Adjusted logits
are made finite (nan out, +inf to the dtype's largest value) and shifted so that their maximum
is 0 before the temperature divides them, so a temperature as small as a float allows gives the
argmax (ties shared), never inf - inf. A temperature below GREEDY_EPS is greedy, as in vLLM. A
row the model itself left without one finite logit cannot be sampled: `SamplingError`, which the
engine turns into that request's failure alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from strata.engine import kernels
from strata.engine.sequence import GREEDY_EPS, SamplingParams

_ROW_MAX_SOURCE = Path(kernels.__file__).with_name("row_max.cpp")

NO_FINITE_LOGIT = "the model produced no finite logit for this request's next token"


class SamplingError(ValueError):
    """A row cannot be sampled (the model produced no finite logit for it)."""


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
        if params.temperature >= GREEDY_EPS:
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
            logits[seen] = torch.where(
                vals > 0, vals / p.repetition_penalty, vals * p.repetition_penalty
            )
        output = history[self.num_prompt :]
        if (p.frequency_penalty or p.presence_penalty) and output:
            ids, counts = torch.tensor(output, dtype=torch.int64).unique(return_counts=True)
            logits[ids] -= p.frequency_penalty * counts.float() + p.presence_penalty
        logits = torch.nan_to_num(logits, nan=float("-inf"), posinf=torch.finfo(logits.dtype).max)
        top = logits.max()
        if not torch.isfinite(top):
            raise SamplingError(NO_FINITE_LOGIT)
        if p.temperature < GREEDY_EPS:
            token = int(torch.argmax(logits))
        else:
            token = self._draw((logits - top) / p.temperature)
        if not p.logprobs:
            return Sampled(token)
        logprobs = torch.log_softmax(raw, dim=-1)
        best = torch.topk(logprobs, p.logprobs)
        return Sampled(
            token, float(logprobs[token]), list(zip(best.indices.tolist(), best.values.tolist()))
        )

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
        # The maximum was shifted to 0, so its probability is at least 1/vocab and the sum is
        # positive whatever top-k, top-p and min-p removed.
        return draw(probs, self.generator)


def draw(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    """An index of the 1-D `probs` (non-negative, positive sum, not necessarily normalized)
    drawn with probability proportional to its entry, from one uniform number of `generator`:
    the first index whose running sum passes that fraction of the total (inverse CDF, summed
    in float64). Never an index of probability 0."""
    cdf = torch.cumsum(probs, 0, dtype=torch.float64)
    u = torch.rand(1, generator=generator, dtype=torch.float64)
    index = int(torch.searchsorted(cdf, u * cdf[-1], right=True))
    if index >= probs.numel():  # u x total rounded up to the total itself
        index = int(torch.nonzero(probs).max())
    return index


def sample_batch(
    logits: torch.Tensor, samplers: list[SeqSampler], histories: list[list[int]]
) -> list[Sampled | SamplingError]:
    """One token per row of logits [B, vocab], or the row's SamplingError: a row that cannot be
    sampled fails alone, the others are sampled as if it were not there."""
    if all(s.params.is_plain_greedy for s in samplers):
        best, tokens = row_max(logits)
        # A nan maximum (torch.max propagates nan) or an all -inf row has nothing to pick.
        usable = (best > float("-inf")).tolist()
        return [
            Sampled(t) if ok else SamplingError(NO_FINITE_LOGIT)
            for t, ok in zip(tokens.tolist(), usable)
        ]
    cpu = logits.float().cpu()
    return [_sample_row(s, cpu[i], h) for i, (s, h) in enumerate(zip(samplers, histories))]


def load_row_max_kernel():
    """torch.ops.strata_greedy (kernels/row_max.cpp), built or loaded from the cache, or None
    where it cannot be (a failure is logged once)."""
    return kernels.load_extra(_ROW_MAX_SOURCE, "row_max", "strata_greedy", "strata greedy kernel")


def row_max(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """torch.max(logits.float(), dim=-1) of logits [B, vocab]: each row's maximum as float32 and
    the index of its first occurrence (nan and its index where the row holds one). One C++ pass
    over float32 or bfloat16 rows on the CPU where the kernel builds, with no float32 copy."""
    if logits.device.type == "cpu" and logits.dtype in (torch.float32, torch.bfloat16):
        ops = load_row_max_kernel()
        if ops is not None:
            return ops.row_max(logits)
    return torch.max(logits.float(), dim=-1)


def _sample_row(
    sampler: SeqSampler, logits: torch.Tensor, history: list[int]
) -> Sampled | SamplingError:
    try:
        return sampler.sample(logits, history)
    except SamplingError as err:
        return err
