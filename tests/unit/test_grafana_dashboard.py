"""deploy/: the Prometheus scrape configuration and the Grafana dashboard agree with the code.

Every scrape target is a compose service at the port its Prometheus bind uses; every metric a
dashboard query names is one the services export (their names read from the source, with the
suffixes the exposition adds); the provisioning points Grafana at both. `promtool check config`
runs when the Debian prometheus package is installed.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DASHBOARD = DEPLOY / "grafana/dashboards/strata.json"
PROMETHEUS = DEPLOY / "prometheus/prometheus.yml"
SOURCES = [
    ROOT / "libs/strata/gateway/metrics.py",
    *sorted((ROOT / "services").glob("*/prom.py")),
]
SUFFIXES = ("", "_total", "_bucket", "_count", "_sum")


def exported() -> set[str]:
    names = set()
    for path in SOURCES:
        names |= set(re.findall(r'"(strata_[a-z_]+)"', path.read_text()))
    return {n + s for n in names for s in SUFFIXES}


def queried() -> set[str]:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert exprs, "the dashboard has no queries"
    return {m for e in exprs for m in re.findall(r"\b(strata_[a-z_]+)\b", e)}


def test_every_dashboard_query_names_an_exported_metric():
    missing = queried() - exported()
    assert not missing, f"the dashboard queries metrics no service exports: {sorted(missing)}"


def test_the_dashboard_is_well_formed_for_provisioning():
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] and dash["title"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for p in dash["panels"]:
        assert p["datasource"]["uid"] == "strata-prometheus", p["title"]
    sources = yaml.safe_load(
        (DEPLOY / "grafana/provisioning/datasources/prometheus.yml").read_text()
    )
    assert sources["datasources"][0]["uid"] == "strata-prometheus"
    assert sources["datasources"][0]["url"] == "http://prometheus:9090"


def test_prometheus_scrapes_every_service_where_compose_serves_its_metrics():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    config = yaml.safe_load(PROMETHEUS.read_text())
    targets = {
        t for job in config["scrape_configs"] for s in job["static_configs"] for t in s["targets"]
    }
    expected = set()
    for name in ("gateway", "scheduler", "node", "kvstore", "placement", "metrics"):
        binds = [
            v for k, v in compose[name]["environment"].items()
            if k.endswith(("_PROMETHEUS_BIND", "_HTTP_BIND"))
        ]  # fmt: skip
        assert len(binds) == 1, name
        expected.add(f"{name}:{str(binds[0]).rsplit(':', 1)[1]}")
    assert targets == expected
    mounts = compose["prometheus"]["volumes"]
    assert any(m.startswith("./deploy/prometheus/prometheus.yml:") for m in mounts)


def test_promtool_accepts_the_configuration():
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt install prometheus)")
    done = subprocess.run(
        [promtool, "check", "config", str(PROMETHEUS)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
