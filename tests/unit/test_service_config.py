"""Service configuration: a missing or malformed setting fails at start, naming the variable."""

import pytest

from services.gateway.config import GatewayConfig
from services.node.config import NodeConfig
from services.worker.config import WorkerConfig
from strata.envconfig import ConfigError


def test_worker_requires_its_bind_address(monkeypatch):
    monkeypatch.delenv("STRATA_WORKER_BIND", raising=False)
    with pytest.raises(ConfigError, match="STRATA_WORKER_BIND is required but not set"):
        WorkerConfig.from_env()


def test_malformed_numbers_name_the_variable(monkeypatch):
    monkeypatch.setenv("STRATA_WORKER_BIND", "127.0.0.1:1")
    monkeypatch.setenv("STRATA_KV_CACHE_BYTES", "lots")
    with pytest.raises(ConfigError, match="STRATA_KV_CACHE_BYTES must be an integer, got 'lots'"):
        WorkerConfig.from_env()
    monkeypatch.setenv("STRATA_KV_CACHE_BYTES", "1000")
    monkeypatch.setenv("STRATA_BLOCK_SIZE", "12")
    with pytest.raises(ConfigError, match="block_size must be a positive power of two, got 12"):
        WorkerConfig.from_env()
    monkeypatch.setenv("STRATA_RATE_LIMIT_RPS", "fast")
    with pytest.raises(ConfigError, match="STRATA_RATE_LIMIT_RPS must be a number"):
        GatewayConfig.from_env()
    monkeypatch.setenv("STRATA_NODE_MEMORY_BYTES", "0")
    with pytest.raises(ConfigError, match="STRATA_NODE_MEMORY_BYTES must be at least 1, got 0"):
        NodeConfig.from_env()


def test_node_passes_engine_settings_to_its_workers(monkeypatch):
    monkeypatch.setenv("STRATA_KV_BLOCKS", "64")
    monkeypatch.setenv("STRATA_TORCH_THREADS", "3")
    monkeypatch.setenv("STRATA_KVSTORE_ADDR", "127.0.0.1:9")
    env = NodeConfig.from_env().worker_env()
    assert env["STRATA_KV_BLOCKS"] == "64"
    assert env["STRATA_TORCH_THREADS"] == "3"
    assert env["STRATA_KVSTORE_ADDR"] == "127.0.0.1:9"
