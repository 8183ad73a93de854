"""The gateway's Prometheus metrics (strata.gateway.metrics): what a finished request adds, the
SLA-met count against the class's targets, and a deleted tenant's series removed."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from strata.core.tenant_policy import TenantPolicy
from strata.gateway.metrics import GatewayMetrics


def samples(m: GatewayMetrics) -> dict:
    out = {}
    for fam in text_string_to_metric_families(m.render().decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_finished_requests_count_tokens_latencies_and_the_sla():
    m = GatewayMetrics()
    std = TenantPolicy("acme", "standard", 1, 2000.0, 200.0)
    m.finished("llm", std, "stop", 0.5, [0.1, 0.1], 0.7, (20, 3, 16))  # within both targets
    m.finished("llm", std, "length", 2.5, [0.1], 2.6, (20, 2, 0))  # TTFT past 2 s
    m.ended("llm", "acme", "standard", "rejected", "sla")
    s = samples(m)
    labels = (("model", "llm"), ("sla_class", "standard"), ("tenant", "acme"))
    assert s[("strata_gateway_sla_met_total", labels)] == 1
    assert s[("strata_gateway_prompt_tokens_total", (("model", "llm"),))] == 40
    assert s[("strata_gateway_generation_tokens_total", (("model", "llm"),))] == 5
    assert s[("strata_gateway_cached_prompt_tokens_total", (("model", "llm"),))] == 16
    ttft = (("model", "llm"), ("sla_class", "standard"))
    assert s[("strata_gateway_time_to_first_token_seconds_count", ttft)] == 2
    assert s[("strata_gateway_inter_token_latency_seconds_count", ttft)] == 3
    rejected = (*labels[:1], ("outcome", "rejected"), ("reason", "sla"), *labels[1:])
    assert s[("strata_gateway_requests_total", tuple(sorted(rejected)))] == 1


def test_a_deleted_tenants_series_are_removed():
    m = GatewayMetrics()
    m.finished("llm", TenantPolicy("gone", "batch"), "stop", 0.1, [], 0.2, (1, 1, 0))
    m.ended("llm", "kept", "batch", "errored", "internal")
    m.forget_tenant("gone")
    text = m.render().decode()
    assert 'tenant="gone"' not in text and 'tenant="kept"' in text
    m.forget_tenant("never-seen")  # nothing to remove: no error
