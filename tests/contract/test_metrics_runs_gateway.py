"""The gateway tags a request with the caller's evaluation run (`x-strata-run-id` metadata ->
span attribute strata.run.id, which the store turns into requests.run_id), refuses a malformed
run id with a reason, and records the request's inter-token gap percentiles on its span."""

import grpc
import pytest

from strata.telemetry import names
from tests.contract.helpers import global_spans, spans_named
from tests.contract.test_gateway_service import (  # noqa: F401
    GAP_S,
    auth,
    collect,
    env,
    request,
    rpc_error,
)


async def test_run_id_metadata_lands_on_the_span_with_itl_percentiles(env):  # noqa: F811
    exporter = global_spans()
    metadata = (*auth(env.key), (names.RUN_ID_METADATA, "42"))
    chunks = await collect(env.gateway, request(), metadata)
    assert len(chunks) == 3
    (span,) = spans_named(exporter, names.SPAN_GATEWAY_GENERATE)
    assert span.attributes[names.RUN_ID] == 42
    # Three one-token chunks GAP_S apart: two gaps of about GAP_S each.
    for key in (names.ITL_P50_MS, names.ITL_P95_MS, names.ITL_P99_MS):
        assert GAP_S * 1000 * 0.9 <= span.attributes[key] <= GAP_S * 1000 * 5
    assert span.attributes[names.ITL_P50_MS] <= span.attributes[names.ITL_P99_MS]


async def test_untagged_requests_carry_no_run(env):  # noqa: F811
    exporter = global_spans()
    await collect(env.gateway, request(), auth(env.key))
    (span,) = spans_named(exporter, names.SPAN_GATEWAY_GENERATE)
    assert names.RUN_ID not in span.attributes


@pytest.mark.parametrize("value", ["abc", "0", "-3", "1.5"])
async def test_a_malformed_run_id_is_refused_before_any_work(env, value):  # noqa: F811
    err = await rpc_error(
        collect(env.gateway, request(), (*auth(env.key), (names.RUN_ID_METADATA, value)))
    )
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.details() == (
        f"x-strata-run-id must be the positive run id that Metrics.StartRun returned, got {value!r}"
    )
    assert env.node.submits == []
