"""Stacks for integration tests: the compose services as processes."""

import contextlib

import pytest

from benchmarks.common.stack import ComposeStack

# dummy-tiny with a small KV pool (256 blocks of 16 tokens) so that tests can force evictions
# to the KV tier store; replanning every second so the model is placed quickly.
DUMMY_OVERRIDES = {
    "placement": {"STRATA_MODELS": "dummy-tiny", "STRATA_REPLAN_INTERVAL_S": "1.0"},
    "node": {
        "STRATA_TORCH_THREADS": "1",
        "STRATA_KV_BLOCKS": "256",
        "STRATA_MAX_BATCHED_TOKENS": "256",
    },
}


@contextlib.contextmanager
def running_stack(data_dir, overrides, replicas=None):
    s = ComposeStack(
        data_dir=data_dir,
        db_url=f"sqlite+aiosqlite:///{data_dir}/strata.db",
        overrides=overrides,
        replicas=replicas or {},
    )
    try:
        s.start()
        yield s
    except BaseException:
        print(s.logs())
        raise
    finally:
        s.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with running_stack(tmp_path_factory.mktemp("stack"), DUMMY_OVERRIDES) as s:
        yield s
