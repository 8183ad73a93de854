"""strata.telemetry.prometheus: families built on the service's loop at each scrape, served over
HTTP by prometheus-client's thread; a bad bind says what to do."""

from __future__ import annotations

import asyncio
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from strata.telemetry.prometheus import MetricsEndpoint, counter, gauge, open_endpoint


async def test_a_scrape_reads_the_services_state_on_its_loop():
    state = {"queued": 3, "done": 7}
    seen_on = []

    def build():
        seen_on.append(asyncio.get_running_loop())
        yield gauge("strata_test_queued", "Queued", ("pool",), [(("a",), state["queued"])])
        yield counter("strata_test_done", "Done", (), [((), state["done"])])

    endpoint = MetricsEndpoint("127.0.0.1:0", build)
    try:
        url = f"http://127.0.0.1:{endpoint.port}/metrics"
        text = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=240).read())
        families = {f.name: f for f in text_string_to_metric_families(text.decode())}
        assert families["strata_test_queued"].samples[0].value == 3
        assert families["strata_test_queued"].samples[0].labels == {"pool": "a"}
        assert families["strata_test_done"].samples[0].value == 7
        assert seen_on == [asyncio.get_running_loop()]  # built on this loop, not the HTTP thread
    finally:
        endpoint.close()


async def test_an_empty_bind_turns_metrics_off_and_a_bad_one_is_refused():
    assert open_endpoint("") is None
    with pytest.raises(ValueError, match="host:port"):
        MetricsEndpoint("nonsense")
    taken = MetricsEndpoint("127.0.0.1:0", lambda: [])
    try:
        with pytest.raises(RuntimeError, match="free the port"):
            MetricsEndpoint(f"127.0.0.1:{taken.port}", lambda: [])
    finally:
        taken.close()
