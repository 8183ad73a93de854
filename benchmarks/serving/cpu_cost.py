"""What a request costs each service in CPU time: sequential 4-token gRPC requests through the
gateway, each service's CPU seconds over them (the node manager's process without its decode
worker, the worker apart; the metrics collector ingests the request's spans) per request. On a
2-core machine one service's CPU time is the others' wait, so this is where the path's time
goes when the machine is the bottleneck."""

from __future__ import annotations

import time
from dataclasses import dataclass

from benchmarks.common.cpu import tree_cpu_s
from benchmarks.common.procs import worker_pid
from benchmarks.common.stack import ComposeStack
from benchmarks.serving.path import PROMPT, worker_address
from strata.client.sdk import Client


@dataclass(slots=True, frozen=True)
class CpuCost:
    wall_ms: float  # per request, sequential
    by_service_ms: dict[str, float]  # CPU per request

    @property
    def total_ms(self) -> float:
        return sum(self.by_service_ms.values())


def cpu_per_request(
    stack: ComposeStack, key: str, model: str, requests: int = 100, max_tokens: int = 4
) -> CpuCost:
    pids = {n: p.proc.pid for n, p in stack.processes.items() if p.proc is not None}
    worker = worker_pid(pids["node"], worker_address(stack, model))

    def snapshot() -> dict[str, float]:
        cpu = {name: tree_cpu_s({pid}) for name, pid in pids.items()}
        cpu["worker"] = tree_cpu_s({worker})
        cpu["node"] -= cpu["worker"]
        return cpu

    with Client(stack.addr("gateway"), key) as client:

        def one() -> None:
            for _ in client.generate(model, PROMPT, max_tokens=max_tokens, ignore_eos=True):
                pass

        for _ in range(10):
            one()
        before, t0 = snapshot(), time.perf_counter()
        for _ in range(requests):
            one()
        wall, after = time.perf_counter() - t0, snapshot()
    return CpuCost(
        wall * 1000 / requests,
        {name: (after[name] - before[name]) * 1000 / requests for name in after},
    )
