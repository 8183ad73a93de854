"""The gateway's Prometheus metrics, recorded by the request pipeline for every front (gRPC and
the OpenAI HTTP API) and served at the HTTP port's /metrics.

    strata_gateway_requests_total{model, tenant, sla_class, outcome, reason}
        outcome: finished | rejected | errored | cancelled; reason: the finish reason (stop,
        length), the refusal's cause (rate, burst, pool_full, sla, partition, unauthenticated,
        invalid) or the error's gRPC code
    strata_gateway_sla_met_total{model, tenant, sla_class}     finished within every target
    strata_gateway_prompt_tokens_total{model}, ..._generation_tokens_total{model},
    strata_gateway_cached_prompt_tokens_total{model}
    strata_gateway_time_to_first_token_seconds{model, sla_class}      histogram
    strata_gateway_inter_token_latency_seconds{model, sla_class}      histogram, per gap
    strata_gateway_e2e_request_latency_seconds{model, sla_class}      histogram

Cardinality is bounded: `tenant` is a label only for tenants that exist (a deleted tenant's
series are removed by `forget_tenant`; a request without a valid key counts under tenant ""),
model names come from routed requests (the pool's models), and no request id is a label.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from strata.core.tenant_policy import TenantPolicy

# Buckets as vLLM's (seconds), so that dashboards built for it read these alike.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
               10.0, 20.0, 40.0, 80.0)  # fmt: skip
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
               120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip


class GatewayMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "strata_gateway_requests",
            "Requests by outcome (finished, rejected, errored, cancelled) and reason",
            ("model", "tenant", "sla_class", "outcome", "reason"),
            registry=r,
        )
        self.sla_met = Counter(
            "strata_gateway_sla_met",
            "Requests that finished within every target of their SLA class",
            ("model", "tenant", "sla_class"),
            registry=r,
        )
        self.prompt_tokens = Counter(
            "strata_gateway_prompt_tokens", "Prompt tokens of finished requests", ("model",),
            registry=r,
        )  # fmt: skip
        self.cached_tokens = Counter(
            "strata_gateway_cached_prompt_tokens",
            "Prompt tokens whose KV came from a cache",
            ("model",),
            registry=r,
        )
        self.generation_tokens = Counter(
            "strata_gateway_generation_tokens", "Generated tokens streamed", ("model",),
            registry=r,
        )  # fmt: skip
        self.ttft = Histogram(
            "strata_gateway_time_to_first_token_seconds",
            "From arrival at the gateway to the first token",
            ("model", "sla_class"),
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "strata_gateway_inter_token_latency_seconds",
            "Between token-carrying chunks of a stream",
            ("model", "sla_class"),
            buckets=ITL_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "strata_gateway_e2e_request_latency_seconds",
            "From arrival at the gateway to the last chunk",
            ("model", "sla_class"),
            buckets=E2E_BUCKETS,
            registry=r,
        )
        # tenant -> the (counter, labels) series it has, to remove when it is deleted
        self._series: dict[str, set[tuple[Counter, tuple[str, ...]]]] = {}

    def _count(self, counter: Counter, tenant: str, *labels: str) -> None:
        counter.labels(*labels).inc()
        self._series.setdefault(tenant, set()).add((counter, labels))

    def finished(
        self,
        model: str,
        policy: TenantPolicy,
        reason: str,
        ttft_s: float,
        gaps_s: list[float],
        e2e_s: float,
        tokens: tuple[int, int, int],
    ) -> None:
        """A request that streamed to its end: `tokens` = (prompt, generated, cached)."""
        tenant, cls = policy.tenant, policy.sla_class
        self._count(self.requests, tenant, model, tenant, cls, "finished", reason)
        prompt, generated, cached = tokens
        self.prompt_tokens.labels(model).inc(prompt)
        self.generation_tokens.labels(model).inc(generated)
        self.cached_tokens.labels(model).inc(cached)
        self.ttft.labels(model, cls).observe(ttft_s)
        itl = self.itl.labels(model, cls)
        for gap in gaps_s:
            itl.observe(gap)
        self.e2e.labels(model, cls).observe(e2e_s)
        tpot_ms = (e2e_s - ttft_s) * 1000 / (generated - 1) if generated > 1 else None
        late = (policy.ttft_ms is not None and ttft_s * 1000 > policy.ttft_ms) or (
            policy.tpot_ms is not None and tpot_ms is not None and tpot_ms > policy.tpot_ms
        )
        if not late:
            self._count(self.sla_met, tenant, model, tenant, cls)

    def ended(self, model: str, tenant: str, sla_class: str, outcome: str, reason: str) -> None:
        """A request that did not finish: rejected, errored or cancelled, and why."""
        self._count(self.requests, tenant, model, tenant, sla_class, outcome, reason)

    def forget_tenant(self, tenant: str) -> None:
        """Remove a deleted tenant's series."""
        for counter, labels in self._series.pop(tenant, set()):
            counter.remove(*labels)

    def render(self) -> bytes:
        return generate_latest(self.registry)
