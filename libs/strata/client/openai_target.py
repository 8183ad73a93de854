"""The replay's OpenAI-HTTP target: each request as a streamed `POST <url>/v1/completions` to any
OpenAI-compatible server (Strata's gateway, vLLM, SGLang, llama.cpp's server), measured by the
same client-side layer as the gRPC target (strata.eval.client_metrics).

The prompt is sent as text with `max_tokens`, `ignore_eos` (vLLM's extension; servers without
it answer to EOS) and `stream_options.include_usage`, so the record's token counts are the
server's. TTFT is the first chunk of a choice; ITL the gaps between them (a finishing chunk
without text is not a token).
A 429 before any token, or a 503 with a `Retry-After` hint (the server shed it: Strata's answer
when no replica can meet the class's target), is a refusal with that hint (retried when the
replay's policy says so). A 400 whose error code is `sla_infeasible` (Strata: the request's own
prefill misses its class's TTFT target even on an idle replica) is recorded as
FAILED_PRECONDITION, as the gRPC target records that refusal; any other status is recorded as
`HTTP_<status>` with the server's message.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx2

from strata.eval.client_metrics import ClientRecord
from strata.eval.workload import WorkloadRequest
from strata.telemetry.names import RUN_ID_METADATA

REFUSED = "RESOURCE_EXHAUSTED"  # the status a 429 is recorded as, as the gRPC target's
INFEASIBLE = "FAILED_PRECONDITION"  # the status an `sla_infeasible` 400 is recorded as
INFEASIBLE_CODE = "sla_infeasible"  # strata.gateway.openai_api's error code for that refusal


class OpenAITarget:
    def __init__(self, url: str, model: str, timeout_s: float, ignore_eos: bool = True) -> None:
        self.endpoint = url.rstrip("/") + "/v1/completions"
        self.model = model
        self.timeout_s = timeout_s
        self.ignore_eos = ignore_eos
        # An open loop has as many requests in flight as the server lets queue: no pool cap.
        self._client = httpx2.AsyncClient(
            timeout=httpx2.Timeout(timeout_s),
            limits=httpx2.Limits(max_connections=None, max_keepalive_connections=64),
        )

    async def attempt(
        self,
        request: WorkloadRequest,
        run_id: int,
        record: ClientRecord,
        sent: float,
        clock: Callable[[], float],
    ) -> tuple[int, bool, float | None]:
        """One call streamed into `record` (latencies from `sent`); returns the tokens
        received, whether it was refused before any token, and the hint in seconds."""
        body = {
            "model": self.model,
            "prompt": request.prompt,
            "max_tokens": request.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            "ignore_eos": self.ignore_eos,
        }
        headers = {"authorization": f"Bearer {request.api_key}"}
        if run_id:
            headers[RUN_ID_METADATA] = str(run_id)
        chunks = 0
        last = sent
        try:
            async with self._client.stream(
                "POST", self.endpoint, json=body, headers=headers
            ) as response:
                if response.status_code != 200:
                    text = (await response.aread()).decode(errors="replace")
                    hint = response.headers.get("retry-after")
                    refused = shed(response.status_code, hint)
                    record.status, record.error = _failure(response.status_code, text, refused)
                    return 0, refused, _retry_after_s(hint) if refused else None
                async for line in response.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    data = line[len("data: ") :]
                    if data == "[DONE]":
                        break
                    chunk = json.loads(data)
                    if "error" in chunk:
                        record.status = "STREAM_ERROR"
                        record.error = str(chunk["error"].get("message", ""))
                        break
                    now = clock()
                    record.request_id = chunk.get("id", record.request_id)
                    for choice in chunk.get("choices") or ():
                        # A chunk per decoded token, its text possibly empty (a token that
                        # completes no character yet): it counts for TTFT and ITL.
                        if "text" in choice and (choice["text"] or not choice.get("finish_reason")):
                            chunks += 1
                            if record.ttft_s is None:
                                record.ttft_s = now - sent
                            else:
                                record.itl_s.append(now - last)
                            last = now
                        if choice.get("finish_reason"):
                            record.finish_reason = str(choice["finish_reason"])
                    used = chunk.get("usage")
                    if used:
                        record.prompt_tokens = int(used.get("prompt_tokens") or 0)
                        record.output_tokens = int(used.get("completion_tokens") or 0)
                        details = used.get("prompt_tokens_details") or {}
                        record.cached_tokens = int(details.get("cached_tokens") or 0)
            if record.ok:
                record.e2e_s = clock() - sent
        except httpx2.TimeoutException:
            record.status, record.error = "DEADLINE_EXCEEDED", "no answer within the deadline"
        except (httpx2.HTTPError, json.JSONDecodeError) as err:
            record.status, record.error = "UNAVAILABLE", f"{type(err).__name__}: {err}"
        return (record.output_tokens or chunks), False, None

    async def close(self) -> None:
        await self._client.aclose()


def shed(status: int, retry_after: str | None) -> bool:
    """Whether an HTTP error answer is the server shedding the request (a refusal, as
    RESOURCE_EXHAUSTED is on gRPC): 429, or 503 with a Retry-After hint (Strata's answer when no
    replica can meet the class's target now). A 503 without a hint is the server unavailable."""
    return status == 429 or (status == 503 and retry_after is not None)


def _failure(status: int, text: str, refused: bool) -> tuple[str, str]:
    """(the record's status, the server's message) for an HTTP error answer."""
    try:
        error = json.loads(text)["error"]
        message, code = str(error["message"]), error.get("code")
    except (ValueError, KeyError, TypeError, AttributeError):
        message, code = text[:500], None
    if refused:
        return REFUSED, message
    if status == 400 and code == INFEASIBLE_CODE:
        return INFEASIBLE, message
    return f"HTTP_{status}", message


def _retry_after_s(value: str | None) -> float | None:
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and seconds >= 0 else None
