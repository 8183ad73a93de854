"""Service configuration: a missing or malformed setting fails at start, naming the variable
and the flag."""

import json

import pytest

from services.gateway.config import GatewayConfig
from services.node.config import NodeConfig
from services.worker.config import WorkerConfig
from strata.core.settings import ConfigError


def test_worker_requires_its_bind_address(monkeypatch):
    monkeypatch.delenv("STRATA_WORKER_BIND", raising=False)
    with pytest.raises(
        ConfigError, match=r"STRATA_WORKER_BIND \(--worker-bind\): required but not set"
    ):
        WorkerConfig.from_env()


def test_malformed_numbers_name_the_variable(monkeypatch):
    monkeypatch.setenv("STRATA_WORKER_BIND", "127.0.0.1:1")
    monkeypatch.setenv("STRATA_KV_CACHE_BYTES", "lots")
    with pytest.raises(
        ConfigError,
        match=r"STRATA_KV_CACHE_BYTES \(--kv-cache-bytes\): "
        r"Input should be a valid integer.*got 'lots'",
    ):
        WorkerConfig.from_env()
    monkeypatch.setenv("STRATA_KV_CACHE_BYTES", "1000")
    monkeypatch.setenv("STRATA_BLOCK_SIZE", "12")
    with pytest.raises(ConfigError, match="block_size must be a positive power of two, got 12"):
        WorkerConfig.from_env()
    monkeypatch.setenv("STRATA_RATE_LIMIT_RPS", "fast")
    with pytest.raises(
        ConfigError,
        match=r"STRATA_RATE_LIMIT_RPS \(--rate-limit-rps\): "
        r"Input should be a valid number",
    ):
        GatewayConfig.from_env()
    monkeypatch.setenv("STRATA_BLOCK_SIZE", "16")
    monkeypatch.setenv("STRATA_NODE_MEMORY_BYTES", "0")
    with pytest.raises(
        ConfigError,
        match=r"STRATA_NODE_MEMORY_BYTES \(--node-memory-bytes\): "
        r"Input should be greater than or equal to 1, got '0'",
    ):
        NodeConfig.from_env()


def test_node_hands_its_engine_settings_to_its_workers(monkeypatch):
    monkeypatch.setenv("STRATA_KV_BLOCKS", "64")
    monkeypatch.setenv("STRATA_TORCH_THREADS", "3")
    monkeypatch.setenv("STRATA_KVSTORE_ADDR", "127.0.0.1:9")
    monkeypatch.setenv("STRATA_INTERNAL_AUTH", "false")
    node = NodeConfig.from_env()
    payload = json.dumps(
        {
            **node.worker_settings(),
            "worker_bind": "127.0.0.1:5",
            "model": "dummy-tiny",
            "replica_id": "r7",
        }
    )
    worker = WorkerConfig.model_validate_json(payload)
    assert (worker.kv_blocks, worker.torch_threads) == (64, 3)
    assert worker.kvstore_addr == "127.0.0.1:9"
    assert worker.engine_values() == node.engine_values()
    assert (worker.model, worker.replica_id, worker.internal_auth) == ("dummy-tiny", "r7", False)


def test_flags_override_variables_and_help_lists_every_setting(monkeypatch, capsys):
    from services.scheduler.config import SchedulerConfig
    from strata.core.settings import SettingsError, load

    monkeypatch.setenv("STRATA_NODE_TTL_S", "9")
    cfg = load(SchedulerConfig, "prog", ["--node-ttl-s", "12"])
    assert cfg.node_ttl_s == 12.0
    with pytest.raises(SystemExit) as done:
        load(SchedulerConfig, "prog", ["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    for name in SchedulerConfig.model_fields:
        assert "--" + name.replace("_", "-") in out
        assert "STRATA_" + name.upper() in out
    with pytest.raises(SettingsError) as bad:
        load(SchedulerConfig, "prog", ["--node-ttl-s", "soon"])
    assert bad.value.code == 2
    assert "STRATA_NODE_TTL_S (--node-ttl-s)" in capsys.readouterr().err


def test_scheduler_home_settings_reach_the_scheduler_or_turn_homes_off(monkeypatch):
    from services.scheduler.config import SchedulerConfig
    from strata.core.settings import load
    from strata.policy.scheduling.homes import HomeSettings

    monkeypatch.setenv("STRATA_ROUTE_HOME_SLACK_S", "2.5")
    cfg = load(SchedulerConfig, "prog", ["--route-home-ttft-fraction", "0.5"])
    assert cfg.settings().homes == HomeSettings(slack_s=2.5, ttft_fraction=0.5)
    assert not cfg.settings().homes.guests  # a home with a guarantee serves its owner only
    monkeypatch.setenv("STRATA_ROUTE_HOME_GUESTS", "true")
    assert load(SchedulerConfig, "prog", []).settings().homes.guests
    monkeypatch.setenv("STRATA_ROUTE_HOMES", "false")
    off = load(SchedulerConfig, "prog", [])
    assert off.settings().homes is None


def test_print_config_masks_secrets(monkeypatch, capsys):
    from services.gateway.config import GatewayConfig as Config
    from strata.core.settings import load

    with pytest.raises(SystemExit) as done:
        load(Config, "prog", ["--print-config"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "STRATA_GATEWAY_BIND=" in out


def test_print_config_masks_a_database_password(monkeypatch, capsys):
    from services.metrics.config import MetricsConfig
    from strata.core.settings import load

    monkeypatch.setenv("STRATA_DB_URL", "postgresql+psycopg2://strata:hunter2@db:5432/strata")
    with pytest.raises(SystemExit):
        load(MetricsConfig, "prog", ["--print-config"])
    out = capsys.readouterr().out
    assert "hunter2" not in out
    assert "STRATA_DB_URL=postgresql+psycopg2://strata:***@db:5432/strata" in out


SERVICES = {"gateway": "GatewayConfig", "scheduler": "SchedulerConfig", "node": "NodeConfig",
            "kvstore": "KVStoreConfig", "placement": "PlacementConfig",
            "metrics": "MetricsConfig", "worker": "WorkerConfig"}  # fmt: skip


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_every_service_help_lists_every_setting_and_starts_nothing(name, tmp_path):
    import importlib
    import os
    import subprocess
    import sys
    from pathlib import Path

    settings = getattr(importlib.import_module(f"services.{name}.config"), SERVICES[name])
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATA_")}
    env["STRATA_DATA_DIR"] = str(tmp_path)  # nothing may be written there
    done = subprocess.run([sys.executable, "-m", f"services.{name}", "--help"], cwd=root,
                          env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    flat = " ".join(done.stdout.split())
    for field, var in zip(settings.model_fields, settings.env_names()):
        assert "--" + field.replace("_", "-") in flat, field
        assert f"[{var}]" in flat, var
    assert list(tmp_path.iterdir()) == []
