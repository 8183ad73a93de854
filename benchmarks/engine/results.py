"""Typed results of each benchmark phase, and their JSON form.

Standard library only: the vLLM runner imports this module from its own virtual environment.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields


@dataclass(slots=True)
class OfflineResult:
    """One system generating a fixed set of prompts to a fixed length, all submitted at once."""

    system: str  # "strata", "transformers", "vllm"
    dtype: str  # "bfloat16" or "float32"
    mode: str  # "batch" (64 prompts) or "single" (1 prompt)
    requests: int
    prompt_tokens: int
    output_tokens: int
    seconds: float  # generation wall time only: no load, no warm-up
    setup: str = ""  # how the system batched (max_seqs, static batch size ...)
    token_ids: list[list[int]] = field(default_factory=list)  # greedy outputs, for agreement

    @property
    def output_tok_s(self) -> float:
        return self.output_tokens / self.seconds

    def to_dict(self) -> dict:
        d = asdict(self)
        d["output_tok_s"] = self.output_tok_s
        return d

    @classmethod
    def from_dict(cls, d: dict) -> OfflineResult:
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


@dataclass(slots=True)
class LatencySummary:
    p50: float
    p95: float
    p99: float
    mean: float
    count: int


@dataclass(slots=True)
class RateResult:
    """One offered Poisson rate against the worker: what came back and how fast."""

    rate: float  # offered requests per second
    sent: int
    completed: int  # finished with a final chunk before the drain deadline
    cancelled: int  # still running at the drain deadline, then cancelled
    failed: int  # ended with a gRPC error
    seconds: float  # first send to last completion (or the drain deadline)
    output_tokens: int  # streamed tokens of completed requests
    ttft_ms: LatencySummary | None
    tpot_ms: LatencySummary | None
    e2e_ms: LatencySummary | None

    @property
    def achieved_req_s(self) -> float:
        return self.completed / self.seconds if self.seconds > 0 else 0.0

    @property
    def output_tok_s(self) -> float:
        return self.output_tokens / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["achieved_req_s"] = self.achieved_req_s
        d["output_tok_s"] = self.output_tok_s
        return d

    @classmethod
    def from_dict(cls, d: dict) -> RateResult:
        kw = {f.name: d[f.name] for f in fields(cls) if f.name in d}
        for key in ("ttft_ms", "tpot_ms", "e2e_ms"):
            if kw.get(key) is not None:
                kw[key] = LatencySummary(**kw[key])
        return cls(**kw)


def write_json(path: str | os.PathLike[str], payload: object) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(payload, f, indent=1)
        f.write("\n")


def read_json(path: str | os.PathLike[str]) -> object:
    with open(path, encoding="utf-8") as f:
        return json.load(f)
