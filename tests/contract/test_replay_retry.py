"""The replay client's opt-in retry of refusals, against an in-process fake Gateway and Metrics.

The fake refuses by prompt: "twice" is refused on its first two calls (RESOURCE_EXHAUSTED with
retry-after-ms 100), "always" on every call (retry-after-ms 200), "nohint" once without a hint,
"late" after one token; anything else is served at once (one token per requested token).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import grpc
import pytest

from strata.client.replay import ReplayConfig, RetryPolicy, replay
from strata.eval.workload import WorkloadRequest
from strata.rpc.server import Registration, start_server
from strata.telemetry.names import RETRY_AFTER_METADATA
from strata.v1 import (
    common_pb2,
    gateway_pb2,
    gateway_pb2_grpc,
    metrics_pb2,
    metrics_pb2_grpc,
)

RUN_ID = 7
TOKEN_S = 0.02


class RefusingGateway(gateway_pb2_grpc.GatewayServicer):
    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.times: dict[str, list[float]] = {}

    async def Generate(self, request, context):
        prompt = request.prompt
        self.calls[prompt] += 1
        self.times.setdefault(prompt, []).append(time.perf_counter())
        hint = {"twice": "100" if self.calls[prompt] <= 2 else None, "always": "200"}.get(prompt)
        if hint is not None:
            context.set_trailing_metadata(((RETRY_AFTER_METADATA, hint),))
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED, f"tenant over its share; retry in {hint} ms"
            )
        if prompt == "nohint":
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "over its share")
        for i in range(request.max_tokens):
            await asyncio.sleep(TOKEN_S)
            if prompt == "late" and i == 1:
                context.set_trailing_metadata(((RETRY_AFTER_METADATA, "10"),))
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "preempted")
            yield gateway_pb2.GenerateResponse(
                request_id=f"{prompt}-{self.calls[prompt]}", text="x", token_ids=[120]
            )
        yield gateway_pb2.GenerateResponse(
            request_id=f"{prompt}-{self.calls[prompt]}",
            finish_reason=common_pb2.FINISH_REASON_LENGTH,
            usage=common_pb2.Usage(prompt_tokens=len(prompt), completion_tokens=request.max_tokens),
        )


class Metrics(metrics_pb2_grpc.MetricsServicer):
    async def StartRun(self, request, context):
        return metrics_pb2.RunInfo(run_id=RUN_ID, name=request.name, kind=request.kind)

    async def FinishRun(self, request, context):
        return metrics_pb2.RunInfo(run_id=request.run_id)


@pytest.fixture
async def gateway():
    fake = RefusingGateway()
    running = await start_server(
        [
            Registration(
                add=lambda s: gateway_pb2_grpc.add_GatewayServicer_to_server(fake, s),
                service_name=gateway_pb2.DESCRIPTOR.services_by_name["Gateway"].full_name,
            ),
            Registration(
                add=lambda s: metrics_pb2_grpc.add_MetricsServicer_to_server(Metrics(), s),
                service_name=metrics_pb2.DESCRIPTOR.services_by_name["Metrics"].full_name,
            ),
        ]
    )
    yield fake, running.address
    await running.stop(0)


def _workload(*prompts: str) -> list[WorkloadRequest]:
    return [
        WorkloadRequest(
            index=i,
            send_at_s=0.0,
            prompt=p,
            prompt_tokens=len(p),
            max_tokens=3,
            tenant="t",
            api_key="k",
        )
        for i, p in enumerate(prompts)
    ]


async def test_refusals_are_retried_after_the_hint_until_give_up(gateway, tmp_path):
    fake, address = gateway
    config = ReplayConfig(
        model="m",
        gateway=address,
        metrics=address,
        out_dir=str(tmp_path),
        retry=RetryPolicy(give_up_s=0.5),
    )
    result = await replay(_workload("twice", "always", "nohint", "late", "plain"), config)
    by_prompt = dict(zip(("twice", "always", "nohint", "late", "plain"), result.records))

    # served on the third call, 100 ms after each refusal; latency from the first attempt
    twice = by_prompt["twice"]
    assert (twice.status, twice.output_tokens, twice.request_id) == ("OK", 3, "twice-3")
    gaps = [b - a for a, b in zip(fake.times["twice"], fake.times["twice"][1:])]
    assert gaps == pytest.approx([0.1, 0.1], abs=0.05)
    assert twice.ttft_s == pytest.approx(0.2 + TOKEN_S, abs=0.06)
    assert twice.e2e_s == pytest.approx(0.2 + 3 * TOKEN_S, abs=0.08)
    assert [b - a for a, b in zip(result.attempts[0], result.attempts[0][1:])] == pytest.approx(
        [0.1, 0.1], abs=0.05
    )

    # refused at 0, 0.2 and 0.4 s; a fourth attempt at 0.6 s would pass give_up_s: it stands
    always = by_prompt["always"]
    assert fake.calls["always"] == 3
    assert (always.status, always.ttft_s, always.e2e_s) == ("RESOURCE_EXHAUSTED", None, None)
    assert always.error == "tenant over its share; retry in 200 ms"
    assert always.finished_s - always.sent_s == pytest.approx(0.4, abs=0.06)
    assert len(result.attempts[1]) == 3

    # without a hint, and after output, a refusal is final
    assert (fake.calls["nohint"], by_prompt["nohint"].status) == (1, "RESOURCE_EXHAUSTED")
    assert result.attempts[2] == [pytest.approx(by_prompt["nohint"].sent_s)]
    assert (fake.calls["late"], by_prompt["late"].status, by_prompt["late"].output_tokens) == (
        1,
        "RESOURCE_EXHAUSTED",
        1,
    )
    assert 3 not in result.attempts
    assert (fake.calls["plain"], by_prompt["plain"].status) == (1, "OK")
    assert 4 not in result.attempts
    assert (result.summary.succeeded, result.summary.errors) == (2, {"RESOURCE_EXHAUSTED": 3})


async def test_without_a_retry_policy_a_refusal_is_final(gateway, tmp_path):
    fake, address = gateway
    config = ReplayConfig(model="m", gateway=address, metrics=address, out_dir=str(tmp_path))
    result = await replay(_workload("twice", "plain"), config)
    assert [(r.status, r.output_tokens) for r in result.records] == [
        ("RESOURCE_EXHAUSTED", 0),
        ("OK", 3),
    ]
    assert fake.calls == Counter({"twice": 1, "plain": 1})
    assert list(result.attempts) == [0]


async def test_a_floor_on_the_wait_spaces_retries_given_a_short_hint(gateway, tmp_path):
    fake, address = gateway
    config = ReplayConfig(
        model="m",
        gateway=address,
        metrics=address,
        out_dir=str(tmp_path),
        retry=RetryPolicy(give_up_s=0.7, min_wait_s=0.3),
    )
    result = await replay(_workload("twice", "always"), config)
    # hints of 100 and 200 ms, a floor of 300: attempts at 0, 0.3 and 0.6 s; "twice" is served
    # on its third, "always" refused on each, and a fourth at 0.9 s would pass give_up_s
    twice, always = result.records
    assert fake.calls == Counter({"twice": 3, "always": 3})
    for prompt in ("twice", "always"):
        times = fake.times[prompt]
        assert [b - a for a, b in zip(times, times[1:])] == pytest.approx([0.3, 0.3], abs=0.05)
    assert (twice.status, twice.ttft_s) == ("OK", pytest.approx(0.6 + TOKEN_S, abs=0.06))
    assert always.status == "RESOURCE_EXHAUSTED"
    assert [len(result.attempts[i]) for i in (0, 1)] == [3, 3]
