"""Failover resume: a request that a second worker continues after the first failed mid-stream.

The output tokens the first worker streamed extend the prompt, so the second worker's first
step samples the token after them; their KV usually comes back from the prefix cache or the KV
tier store, which makes that prefill cheap. They count against max_tokens and in usage as output:

    prompt ids          | resumed ids (streamed by the failed worker) | new output ...
    <- prompt_tokens -> | <------------- completion_tokens ------------------------->
    <------- engine prompt (num_resumed at its end) -------------->| max_tokens - resumed

Greedy requests continue exactly as one worker would have; a sampled request continues with a
fresh draw from its seed, still a sample of the same distribution.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from strata.engine.detokenizer import Detokenizer
from strata.engine.engine import EngineRequest, RequestOutput
from strata.engine.sequence import FinishReason
from strata.engine.tokenizer import Tokenizer


def resume(
    req: EngineRequest, resume_ids: Sequence[int], vocab_size: int, tokenizer: Tokenizer
) -> EngineRequest | RequestOutput:
    """`req` continued after `resume_ids`, or its final output when they already reached
    max_tokens. Raises ValueError with a sentence the caller can act on."""
    ids = [int(t) for t in resume_ids]
    bad = next((t for t in ids if not 0 <= t < vocab_size), None)
    if bad is not None:
        raise ValueError(
            f"resume_output_ids holds token id {bad}, outside the model's "
            f"vocabulary (0..{vocab_size - 1})"
        )
    max_tokens = req.params.max_tokens
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
    if len(ids) >= max_tokens:
        # The failed worker streamed every token but not its final chunk: finish now, releasing
        # the text it still held back (a partial stop string) exactly as it would have.
        detok = Detokenizer(tokenizer, req.params.stop)
        detok.prime(ids)
        return RequestOutput(
            request_id=req.request_id,
            text=detok.flush(),
            token_ids=[],
            finished=True,
            finish_reason=FinishReason.LENGTH,
            prompt_tokens=len(req.prompt_ids),
            completion_tokens=len(ids),
        )
    return replace(
        req,
        prompt_ids=[*req.prompt_ids, *ids],
        params=replace(req.params, max_tokens=max_tokens - len(ids)),
        num_resumed=len(ids),
    )
