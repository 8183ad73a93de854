"""docker-compose.yml: valid for the compose tool at hand, and consistent with the code it runs.

The structural checks read the services' own config.py files at test time, so a setting added
to a service without compose (or a typo in compose) fails here rather than at `compose up`.
"""

from __future__ import annotations

import importlib
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from strata.core import defaults

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
STRATA_SERVICES = ("gateway", "scheduler", "node", "kvstore", "placement", "metrics")
COLLECTOR = "otel-collector:4317"
DEFAULT_PORTS = {
    "GATEWAY": defaults.GATEWAY_ADDR,
    "GATEWAY_HTTP": defaults.GATEWAY_HTTP_ADDR,
    "NODE_PROMETHEUS": defaults.NODE_PROMETHEUS_ADDR,
    "KVSTORE_PROMETHEUS": defaults.KVSTORE_PROMETHEUS_ADDR,
    "SCHEDULER_PROMETHEUS": defaults.SCHEDULER_PROMETHEUS_ADDR,
    "PLACEMENT_PROMETHEUS": defaults.PLACEMENT_PROMETHEUS_ADDR,
    "METRICS_PROMETHEUS": defaults.METRICS_PROMETHEUS_ADDR,
    "SCHEDULER": defaults.SCHEDULER_ADDR,
    "NODE": defaults.NODE_ADDR,
    "KVSTORE": defaults.KVSTORE_ADDR,
    "PLACEMENT": defaults.PLACEMENT_ADDR,
    "METRICS": defaults.METRICS_ADDR,
    "OTLP": defaults.OTLP_ADDR,
}
SETTINGS = {
    "gateway": "GatewayConfig",
    "scheduler": "SchedulerConfig",
    "node": "NodeConfig",
    "kvstore": "KVStoreConfig",
    "placement": "PlacementConfig",
    "metrics": "MetricsConfig",
}
# Left at their defaults in compose on purpose: the internal credential check is on unless a
# test turns it off; compose's healthchecks run inside the container with the credential, so no
# plaintext health port (Kubernetes' grpc probes use one). A service given STRATA_SECRETS_DIR
# needs a data directory only if it keeps data of its own, so compose may leave it out there.
LEFT_AT_DEFAULT = {"STRATA_INTERNAL_AUTH", "STRATA_HEALTH_BIND"}
OPTIONAL_WITH_SECRETS_DIR = {"STRATA_DATA_DIR"}


class _UniqueKeys(yaml.SafeLoader):
    """A YAML loader that refuses a mapping naming one key twice (PyYAML keeps the last)."""


def _unique_mapping(loader: _UniqueKeys, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # `<<: *anchor`: merged keys may be overridden
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep)


_UniqueKeys.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


@pytest.fixture(scope="module")
def compose() -> dict:
    """The compose file, refused when a mapping names a key twice (the later would win)."""
    return yaml.load(COMPOSE.read_text(), Loader=_UniqueKeys)  # noqa: S506 (a SafeLoader)


def env(compose: dict, service: str) -> dict[str, str]:
    return {k: str(v) for k, v in compose["services"][service].get("environment", {}).items()}


def port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def _validator() -> list[str] | None:
    docker = shutil.which("docker")
    if (
        docker
        and subprocess.run(
            [docker, "compose", "version"], capture_output=True, timeout=60
        ).returncode
        == 0
    ):
        return [docker, "compose", "-f", str(COMPOSE), "config", "-q"]
    legacy = shutil.which("docker-compose")
    if legacy:
        return [legacy, "-f", str(COMPOSE), "config", "-q"]
    return None


def test_compose_file_passes_the_compose_tool() -> None:
    command = _validator()
    if command is None:
        pytest.skip(
            "neither `docker compose` nor `docker-compose` is installed; "
            ".ci/run installs Debian's docker-compose"
        )
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{' '.join(command[:2])} rejected the file:\n{result.stderr}"


def test_file_has_no_compose_v2_only_keys(compose: dict) -> None:
    # docker-compose 1.29 rejects a top-level `name:`; 2.4 is the newest format it reads with
    # depends_on conditions, and Compose v2 accepts it.
    assert "name" not in compose
    assert compose["version"] == "2.4"


def test_strata_services_run_from_one_image(compose: dict) -> None:
    for name in STRATA_SERVICES:
        service = compose["services"][name]
        assert service["build"] == {"context": ".", "dockerfile": "deploy/docker/Dockerfile"}, name
        assert service["image"] == "strata:dev", name
        assert service["command"] == ["python", "-m", f"services.{name}"], name


@pytest.mark.parametrize("name", STRATA_SERVICES)
def test_environment_is_exactly_what_the_settings_read(compose: dict, name: str) -> None:
    # Every setting the service reads is spelled out in compose (so the file documents the
    # deployment), and nothing compose sets is read by nobody.
    settings = getattr(importlib.import_module(f"services.{name}.config"), SETTINGS[name])
    expected = set(settings.env_names()) - LEFT_AT_DEFAULT
    got = set(env(compose, name))
    if "STRATA_SECRETS_DIR" in got:
        expected -= OPTIONAL_WITH_SECRETS_DIR - got
    assert got - expected == set(), f"{name}: compose sets {sorted(got - expected)}, read by nobody"
    assert expected - got == set(), f"{name}: compose does not set {sorted(expected - got)}"


def test_compose_settings_validate(compose: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in STRATA_SERVICES:
        settings = getattr(importlib.import_module(f"services.{name}.config"), SETTINGS[name])
        for key in settings.env_names():
            monkeypatch.delenv(key, raising=False)
        for key, value in env(compose, name).items():
            monkeypatch.setenv(key, value)
        monkeypatch.chdir(ROOT)
        settings.from_env()


def test_every_service_exports_spans_to_the_collector(compose: dict) -> None:
    for name in STRATA_SERVICES:
        assert env(compose, name)["STRATA_OTLP_ENDPOINT"] == COLLECTOR, name


def test_binds_use_the_shared_default_ports_and_addresses_point_at_them(compose: dict) -> None:
    binds = {}
    for name in STRATA_SERVICES:
        for key, value in env(compose, name).items():
            if match := re.fullmatch(r"STRATA_(\w+)_BIND", key):
                assert value.startswith("0.0.0.0:"), f"{name}.{key} must listen on all interfaces"
                assert port(value) == port(DEFAULT_PORTS[match[1]]), f"{name}.{key}"
                binds[match[1]] = (name, port(value))
    assert set(binds) == set(DEFAULT_PORTS)
    for name in STRATA_SERVICES:
        for key, value in env(compose, name).items():
            if match := re.fullmatch(r"STRATA_(\w+)_ADDR", key):
                owner, bind_port = binds[match[1]]
                assert value == f"{owner}:{bind_port}", f"{name}.{key}"
    assert env(compose, "node")["STRATA_NODE_ADVERTISE"] == f"node:{binds['NODE'][1]}"
    assert "50051:50051" in compose["services"]["gateway"]["ports"]
    assert "8000:8000" in compose["services"]["gateway"]["ports"]


def test_healthchecks_probe_each_service_and_gate_its_dependents(compose: dict) -> None:
    for name in STRATA_SERVICES:
        bind = next(v for k, v in env(compose, name).items() if k == f"STRATA_{name.upper()}_BIND")
        internal = [] if name == "gateway" else ["--internal"]  # the cluster credential
        assert compose["services"][name]["healthcheck"]["test"] == [
            "CMD",
            "python",
            "-m",
            "strata.client.healthcheck",
            *internal,
            f"127.0.0.1:{port(bind)}",
        ]
    for name, service in compose["services"].items():
        for dependency, rule in service.get("depends_on", {}).items():
            assert dependency in compose["services"], f"{name} depends on unknown {dependency}"
            if rule["condition"] == "service_healthy":
                assert "healthcheck" in compose["services"][dependency], (name, dependency)


def test_metrics_store_is_the_compose_postgres(compose: dict) -> None:
    url = urlsplit(env(compose, "metrics")["STRATA_DB_URL"])
    pg = env(compose, "postgres")
    assert url.scheme == "postgresql+asyncpg"
    assert (url.hostname, url.port) == ("postgres", 5432)
    assert (url.username, url.password, url.path) == (
        pg["POSTGRES_USER"],
        pg["POSTGRES_PASSWORD"],
        f"/{pg['POSTGRES_DB']}",
    )
    assert compose["services"]["metrics"]["depends_on"]["postgres"] == {
        "condition": "service_healthy"
    }


def test_collector_sends_the_traces_pipeline_to_jaeger_and_metrics(compose: dict) -> None:
    collector = compose["services"]["otel-collector"]
    mounted = {v.split(":")[1]: v.split(":")[0] for v in collector["volumes"]}
    config_path = collector["command"][0].removeprefix("--config=")
    assert mounted[config_path] == "./deploy/otel-collector.yaml"
    config = yaml.safe_load((ROOT / "deploy" / "otel-collector.yaml").read_text())

    assert config["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"] == "0.0.0.0:4317"
    pipeline = config["service"]["pipelines"]["traces"]
    assert pipeline["receivers"] == ["otlp"]
    assert pipeline["processors"] == ["batch"]
    exporters = {config["exporters"][e]["endpoint"]: e for e in pipeline["exporters"]}
    otlp_port = port(env(compose, "metrics")["STRATA_OTLP_BIND"])
    assert set(exporters) == {"jaeger:4317", f"metrics:{otlp_port}"}
    for name in exporters.values():
        assert name.split("/")[0] == "otlp"
    # Jaeger is a plaintext sink; the metrics collector hop carries the cluster credential,
    # and the receiver takes only exporters with a certificate the cluster CA signed.
    assert config["exporters"][exporters["jaeger:4317"]]["tls"] == {"insecure": True}
    to_metrics = config["exporters"][exporters[f"metrics:{otlp_port}"]]
    assert to_metrics["tls"] == {
        "ca_file": "/secrets/ca.pem",
        "cert_file": "/secrets/otel-collector.pem",
        "key_file": "/secrets/otel-collector-key.pem",
    }
    assert to_metrics["headers"] == {"x-strata-internal": "${file:/secrets/internal_token}"}
    assert (
        config["receivers"]["otlp"]["protocols"]["grpc"]["tls"]["client_ca_file"]
        == "/secrets/ca.pem"
    )
    assert "strata-secrets:/secrets:ro" in collector["volumes"]
    assert env(compose, "jaeger")["COLLECTOR_OTLP_ENABLED"] == "true"
    assert "16686:16686" in compose["services"]["jaeger"]["ports"]
