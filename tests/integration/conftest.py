"""One stack per test module: the compose services as processes, serving a dummy model."""

import pytest

from tests.integration.stack import ComposeStack

# Small KV pool (256 blocks of 16 tokens) so that tests can force evictions to the KV tier store.
STACK_OVERRIDES = {
    "placement": {"STRATA_MODELS": "dummy-tiny", "STRATA_REPLAN_INTERVAL_S": "1.0"},
    "node": {"STRATA_TORCH_THREADS": "1", "STRATA_KV_BLOCKS": "256",
             "STRATA_MAX_BATCHED_TOKENS": "256"},
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    data = tmp_path_factory.mktemp("stack")
    s = ComposeStack(data_dir=data, db_url=f"sqlite+aiosqlite:///{data}/strata.db",
                     overrides=STACK_OVERRIDES)
    try:
        s.start()
        yield s
    except BaseException:
        print(s.logs())
        raise
    finally:
        s.stop()
