"""The simulator's requests: trace or synthetic requests (strata.eval.traces, synthetic) scaled
exactly as the replay client scales them (strata.eval.workload.Scaling and Window), and the
token ids a simulated engine sequence carries.

Token ids stand in for text: the simulated engine runs the real block pool and prefix cache,
which only compare token ids. A trace hash id h becomes `block_tokens` copies of one id drawn
from h, so requests with equal leading hash ids share their leading blocks as they would in a
replay; the rest of a prompt is one id unique to the request, so it shares nothing. A request's
prompt block hashes are the ones the gateway sends the scheduler for it
(strata.gateway.prefix_hashes), so routing by prefix sees what the engines' pools hold.

Rate scaling (`superpose`) keeps a trace's duration and multiplies its rate: k copies of the
trace, each shifted circularly by a random offset within the trace's span. Sizes keep their
distribution, the load its level within the hour; a fraction of a copy takes that fraction of
the shifted copy's requests at random.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from strata.eval.traces import TraceRequest
from strata.eval.workload import Scaling, Window
from strata.kvtier.hashing import HashKeys, chain_hashes

OUTPUT_TOKEN = 1  # the id every simulated output token gets
_ID_SPACE = 1 << 29  # two ranges of ids, both within int32 (the block hash packs int32)


@dataclass(slots=True, frozen=True)
class SimRequest:
    index: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int  # the greedy answer's length: the engine stops after this many
    model: str
    tenant: str = "sim"
    sla_class: str = ""
    hash_ids: tuple[int, ...] = ()
    block_tokens: int = 0  # tokens per trace hash id after scaling

    def prompt_ids(self) -> list[int]:
        ids: list[int] = []
        for h in self.hash_ids:
            if len(ids) >= self.prompt_tokens:
                break
            token = 2 + (h * 2654435761) % _ID_SPACE
            ids.extend([token] * min(self.block_tokens, self.prompt_tokens - len(ids)))
        if len(ids) < self.prompt_tokens:
            ids.extend([_ID_SPACE + 2 + self.index % _ID_SPACE] * (self.prompt_tokens - len(ids)))
        return ids

    def prefix_hashes(self, block_size: int) -> list[int]:
        """The prompt's block hash chain as the gateway computes it: every full block of the
        prompt but its last token, keyed by model and tenant (no prefix is public here)."""
        ids = self.prompt_ids()
        return chain_hashes(
            ids[: len(ids) - 1], block_size, HashKeys.for_request(self.model, self.tenant, False)
        )


def sim_requests(
    requests: Sequence[TraceRequest],
    scaling: Scaling,
    window: Window,
    model: str,
    tenants: Sequence[str] = ("sim",),
) -> list[SimRequest]:
    """The window of `requests` scaled like a replay; a request without its own model or tenant
    gets `model` and the tenants round-robin (in arrival order)."""
    if not tenants:
        raise ValueError("give at least one tenant name")
    out: list[SimRequest] = []
    for request in sorted(requests, key=lambda r: r.arrival_s):
        if window.max_requests is not None and len(out) >= window.max_requests:
            break
        at = scaling.send_at(request.arrival_s)
        if window.max_duration_s is not None and at > window.max_duration_s:
            break
        index = len(out)
        out.append(
            SimRequest(
                index=index,
                arrival_s=at,
                prompt_tokens=scaling.prompt_tokens(request.prompt_tokens),
                output_tokens=scaling.output_tokens(request.output_tokens),
                model=request.model or model,
                tenant=request.tenant or tenants[index % len(tenants)],
                sla_class=request.sla_class,
                hash_ids=request.hash_ids,
                block_tokens=scaling.block_tokens,
            )
        )
    return out


def superpose(
    requests: Sequence[TraceRequest], factor: float, rng: random.Random
) -> list[TraceRequest]:
    """`factor` times the rate over the same span (see the module docstring), by arrival."""
    if not factor > 0 or math.isinf(factor):
        raise ValueError(f"the rate factor must be a positive number, got {factor}")
    if not requests:
        return []
    start = min(r.arrival_s for r in requests)
    span = max(r.arrival_s for r in requests) - start
    out: list[TraceRequest] = []
    whole = math.floor(factor)
    copies = whole + (1 if factor > whole else 0)
    for copy in range(copies):
        offset = 0.0 if copy == 0 else rng.uniform(0.0, span)
        keep = 1.0 if copy < whole else factor - whole
        for r in requests:
            if keep < 1.0 and rng.random() >= keep:
                continue
            shifted = r.arrival_s - start + offset
            if shifted > span:
                shifted -= span
            # Hash ids are per copy: a copy is other users sending the same sizes.
            ids = tuple(h * copies + copy for h in r.hash_ids)
            out.append(replace(r, arrival_s=start + shifted, hash_ids=ids))
    out.sort(key=lambda r: r.arrival_s)
    return out
