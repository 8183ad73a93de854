"""deploy/k8s: every overlay renders, validates against the Kubernetes API schemas, and runs
what docker-compose.yml runs.

Each overlay is rendered once with `kubectl kustomize` (the tests skip without kubectl) and
checked against the schemas kubernetes-validate ships (strict: an unknown field fails), against
docker-compose.yml (same images, commands and settings; addresses are Kubernetes names by
design) and against the code (the settings each service reads, the ports it binds, the health
service names it registers). No cluster is involved: what only a cluster shows is listed in
deploy/README.md.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from strata.core import defaults
from strata.rpc.server import serve_until_signal
from strata.v1 import gateway_pb2, kvstore_pb2, metrics_pb2, node_pb2, placement_pb2, scheduler_pb2
from tests.k8s_manifests import Container, Manifests, port_of, quantity, render
from tests.unit.test_compose import LEFT_AT_DEFAULT, SETTINGS, STRATA_SERVICES

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
OVERLAYS = ("cpu", "gpu")
# Rendered and validated like the overlays: the CPU overlay with an external database.
EXAMPLES = ("external-db",)
# The newest Kubernetes whose schemas kubernetes-validate==1.37.0 ships.
KUBERNETES_VERSION = "1.37.0"
THIRD_PARTY = ("otel-collector", "jaeger", "postgres")
HEALTH_NAMES = {
    "gateway": gateway_pb2.DESCRIPTOR.services_by_name["Gateway"].full_name,
    "scheduler": scheduler_pb2.DESCRIPTOR.services_by_name["Scheduler"].full_name,
    "node": node_pb2.DESCRIPTOR.services_by_name["NodeManager"].full_name,
    "kvstore": kvstore_pb2.DESCRIPTOR.services_by_name["KVStore"].full_name,
    "placement": placement_pb2.DESCRIPTOR.services_by_name["Placement"].full_name,
    "metrics": metrics_pb2.DESCRIPTOR.services_by_name["Metrics"].full_name,
}
# How long a service's server finishes calls in flight on SIGTERM when it has no drain setting.
SERVER_STOP_GRACE_S = inspect.signature(serve_until_signal).parameters["grace"].default
# Node settings overlays/gpu sets on purpose (the GPU, its memory); every other value is compose's.
GPU_SETTINGS = {
    "STRATA_DEVICE",
    "STRATA_DTYPE",
    "STRATA_ATTENTION_KERNEL",
    "STRATA_NODE_MEMORY_BYTES",
    "STRATA_KV_CACHE_BYTES",
}
# The plaintext health-only port kubelet's grpc probes ask (strata.rpc.server's health_bind):
# set on Kubernetes only; compose's healthchecks run inside the container with the credential.
HEALTH_BIND = "STRATA_HEALTH_BIND"
K8S_ONLY = {HEALTH_BIND}
PROBES = ("startupProbe", "readinessProbe", "livenessProbe")
CLUSTER_SECRETS = "strata-cluster-secrets"
ADMIN_KEY_SECRET = "strata-admin-key"
DB_SECRET = "strata-db"


@pytest.fixture(scope="module")
def rendered() -> dict[str, Manifests]:
    paths = {o: K8S / "overlays" / o for o in OVERLAYS} | {
        e: K8S / "examples" / e for e in EXAMPLES
    }
    return {name: render(path) for name, path in paths.items()}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def compose_env(compose: dict, service: str) -> dict[str, str]:
    return {k: str(v) for k, v in compose["services"][service].get("environment", {}).items()}


def owners(compose: dict) -> dict[str, tuple[str, int]]:
    """STRATA_<X>_BIND's X -> (the compose service that binds it, its port)."""
    out = {}
    for name in STRATA_SERVICES:
        for key, value in compose_env(compose, name).items():
            if match := re.fullmatch(r"STRATA_(\w+)_BIND", key):
                out[match[1]] = (name, port_of(value))
    return out


def is_address(key: str) -> bool:
    return key.endswith(("_ADDR", "_ADVERTISE"))


@pytest.mark.parametrize("name", OVERLAYS + EXAMPLES)
def test_every_document_validates_against_the_kubernetes_schemas(
    rendered: dict[str, Manifests], name: str
) -> None:
    failures = []
    for doc in rendered[name].docs:
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except (kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError) as e:
            path = ".".join(str(p) for p in getattr(e, "path", ()))
            failures.append(f"{doc['kind']}/{doc['metadata']['name']} {path}: {e.message}")
    assert failures == []


def test_prometheus_autoscaler_example_validates_and_targets_the_gateway() -> None:
    (hpa,) = yaml.safe_load_all((K8S / "examples" / "hpa-prometheus.yaml").read_text())
    kubernetes_validate.validate(hpa, KUBERNETES_VERSION, strict=True)
    base = {d["kind"]: d for d in yaml.safe_load_all((K8S / "base" / "gateway.yaml").read_text())}
    assert hpa["metadata"]["name"] == base["HorizontalPodAutoscaler"]["metadata"]["name"]
    assert (
        hpa["spec"]["scaleTargetRef"] == base["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]
    )
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_service_runs_composes_image_and_command(
    rendered: dict[str, Manifests], compose: dict, overlay: str
) -> None:
    m = rendered[overlay]
    for name in STRATA_SERVICES:
        c, service = m.container(name), compose["services"][name]
        cuda = overlay == "gpu" and name == "node"
        assert c.spec["image"] == service["image"] + ("-cuda" if cuda else ""), name
        assert c.spec["command"] == service["command"], name
        assert "args" not in c.spec, name
    for name in THIRD_PARTY:
        c, service = m.container(name), compose["services"][name]
        assert c.spec["image"] == service["image"], name
        # compose's `command` replaces the image's CMD, which is a container's `args`.
        assert c.spec.get("args") == service.get("command"), name
        assert "command" not in c.spec, name


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("name", STRATA_SERVICES)
def test_environment_is_composes_and_read_by_the_service(
    rendered: dict[str, Manifests], compose: dict, overlay: str, name: str
) -> None:
    c = rendered[overlay].container(name)
    got = rendered[overlay].env(c)
    settings = getattr(importlib.import_module(f"services.{name}.config"), SETTINGS[name])
    strata = {k for k in got if k.startswith("STRATA_")}
    assert strata - set(settings.env_names()) == set(), f"{name}: read by nobody"
    # Compose leaves the Kubernetes-only settings at their defaults; every other one it sets.
    assert K8S_ONLY <= LEFT_AT_DEFAULT
    assert strata - K8S_ONLY == set(compose_env(compose, name)), f"{name}: not compose's settings"
    # Anything else only feeds a $(VAR) reference (the pod IP into an advertised address).
    raw = " ".join(v.get("value", "") for v in c.spec.get("env", []))
    for helper in set(got) - strata:
        assert f"$({helper})" in raw, f"{name}: {helper} is set but used by nothing"

    expected = compose_env(compose, name)
    differs = {k for k in strata - K8S_ONLY if not is_address(k) and got[k] != expected[k]}
    if overlay == "gpu" and name == "node":
        assert differs <= GPU_SETTINGS
        assert got["STRATA_DEVICE"].startswith("cuda")
    else:
        assert differs == set(), {k: (got[k], expected[k]) for k in differs}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_third_party_environment_is_composes(
    rendered: dict[str, Manifests], compose: dict, overlay: str
) -> None:
    for name in THIRD_PARTY:
        got = rendered[overlay].env(rendered[overlay].container(name))
        expected = compose_env(compose, name)
        assert {k: got.get(k) for k in expected} == expected, name


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_settings_validate(
    rendered: dict[str, Manifests], overlay: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    for name in STRATA_SERVICES:
        settings = getattr(importlib.import_module(f"services.{name}.config"), SETTINGS[name])
        for key in settings.env_names():
            monkeypatch.delenv(key, raising=False)
        for key, value in rendered[overlay].env(rendered[overlay].container(name)).items():
            monkeypatch.setenv(key, value)
        settings.from_env()


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_addresses_reach_the_service_that_binds_them(
    rendered: dict[str, Manifests], compose: dict, overlay: str
) -> None:
    m, binds = rendered[overlay], owners(compose)
    schedulers = m.get("StatefulSet", "scheduler")["spec"]["replicas"]
    every_scheduler = {
        f"scheduler-{i}.scheduler:{binds['SCHEDULER'][1]}" for i in range(schedulers)
    }
    for name in STRATA_SERVICES:
        c = m.container(name)
        env = m.env(c)
        for key, value in env.items():
            if key == HEALTH_BIND:
                continue  # no compose service owns it: test_probes_ask_the_plaintext_health_port
            if match := re.fullmatch(r"STRATA_(\w+)_BIND", key):
                assert value == f"0.0.0.0:{binds[match[1]][1]}", f"{name}.{key}"
                assert c.port(port_of(value)) is not None, f"{name} does not declare {key}"
            if key == "STRATA_OTLP_ENDPOINT":
                owner, addresses = ("otel-collector", 4317), [value]
            elif match := re.fullmatch(r"STRATA_(\w+)_ADDR", key):
                owner, addresses = binds[match[1]], value.split(",")
            else:
                continue
            for address in addresses:
                hit = {(t.name, p) for t, p in m.reach(c, address)}
                assert owner in hit, f"{name}.{key}={address} reaches {hit}, not {owner}"
            if key == "STRATA_SCHEDULER_ADDR":
                # Heartbeats and KV events go to each scheduler: every replica must be listed.
                assert set(addresses) == every_scheduler, f"{name}.{key}"
    assert m.get("Service", "scheduler")["spec"]["publishNotReadyAddresses"] is True
    for name, key in (("node", "STRATA_NODE_ADVERTISE"), ("kvstore", "STRATA_KVSTORE_ADVERTISE")):
        c = m.container(name)
        (var,) = [v for v in c.spec["env"] if v["name"] == key]
        helper = re.fullmatch(r"\$\((\w+)\):(\d+)", var["value"])
        assert helper and int(helper[2]) == binds[name.upper()][1], f"{name}.{key}"
        (ip,) = [v for v in c.spec["env"] if v["name"] == helper[1]]
        assert ip["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"


def health_port(m: Manifests, c: Container) -> int:
    """The port of the container's plaintext health-only server (STRATA_HEALTH_BIND)."""
    host, port = m.env(c)[HEALTH_BIND].rsplit(":", 1)
    assert host == "0.0.0.0", f"{c.name}: kubelet probes the pod's IP"
    return int(port)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_probes_ask_the_plaintext_health_port(rendered: dict[str, Manifests], overlay: str) -> None:
    """Kubelet's grpc probe speaks plaintext and presents no certificate: every Strata probe
    asks the health-only port of STRATA_HEALTH_BIND (the internal ports speak mutual TLS only,
    the gateway's public one TLS when configured), readiness for the service's own name."""
    m = rendered[overlay]
    for name in STRATA_SERVICES:
        c = m.container(name)
        env = m.env(c)
        health = health_port(m, c)
        assert c.port(health) == health, f"{name} does not declare its health port {health}"
        binds = {port_of(v) for k, v in env.items() if k.endswith("_BIND") and k != HEALTH_BIND}
        assert health not in binds, f"{name}: the health port is one of its other ports"
        for other in m.containers(c.workload):
            if other.name != name:
                assert other.port(health) is None, f"{name} and {other.name} share {health}"
        for kind in PROBES:
            probe = c.spec[kind]
            handlers = {"exec", "httpGet", "tcpSocket", "grpc"} & set(probe)
            assert handlers == {"grpc"}, f"{name}.{kind}: {handlers}, not a native grpc probe"
            assert probe["grpc"]["port"] == health, f"{name}.{kind}"
            want = HEALTH_NAMES[name] if kind == "readinessProbe" else ""
            assert probe["grpc"].get("service", "") == want, f"{name}.{kind}"
        # Only kubelet needs the port: no Service routes to it.
        for service in m.of("Service"):
            if c.workload in m.selected(service["spec"].get("selector", {})):
                for entry in service["spec"]["ports"]:
                    target = entry.get("targetPort", entry["port"])
                    assert c.port(target) != health, f"Service {service['metadata']['name']}"
    for name in THIRD_PARTY:
        c = m.container(name)
        for kind in ("readinessProbe", "livenessProbe"):
            probe = c.spec[kind]
            for how in ("tcpSocket", "httpGet", "grpc"):
                if how in probe:
                    assert c.port(probe[how]["port"]) is not None, f"{name}.{kind}"


@pytest.mark.parametrize("overlay", OVERLAYS + EXAMPLES)
def test_services_select_pods_that_declare_their_target_ports(
    rendered: dict[str, Manifests], overlay: str
) -> None:
    m = rendered[overlay]
    for service in m.of("Service"):
        name = service["metadata"]["name"]
        pods = m.selected(service["spec"].get("selector", {}))
        assert pods, f"Service {name} selects no pod template"
        for entry in service["spec"]["ports"]:
            target = entry.get("targetPort", entry["port"])
            for w in pods:
                assert any(c.port(target) for c in m.containers(w)), (name, target)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_collector_runs_composes_pipeline_into_services_that_exist(
    rendered: dict[str, Manifests], compose: dict, overlay: str
) -> None:
    m = rendered[overlay]
    collector = m.container("otel-collector")
    config_path = Path(collector.spec["args"][0].removeprefix("--config="))
    mount = collector.mounts()[str(config_path.parent)]
    config_map = collector.volume(mount["name"])["configMap"]["name"]
    config = yaml.safe_load(m.get("ConfigMap", config_map)["data"][config_path.name])
    assert config == yaml.safe_load((ROOT / "deploy" / "otel-collector.yaml").read_text())
    receiver = config["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    assert collector.port(port_of(receiver)) is not None
    for exporter in config["service"]["pipelines"]["traces"]["exporters"]:
        address = config["exporters"][exporter]["endpoint"]
        assert m.reach(collector, address), f"{exporter}: {address} reaches no container"
    assert {t.name for t, _ in m.reach(collector, "jaeger:4317")} == {"jaeger"}
    otlp = port_of(compose_env(compose, "metrics")["STRATA_OTLP_BIND"])
    assert {t.name for t, _ in m.reach(collector, f"metrics:{otlp}")} == {"metrics"}
    jaeger_ui = compose["services"]["jaeger"]["ports"][0].split(":")[1]
    assert m.reach(collector, f"jaeger:{jaeger_ui}")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_prometheus_finds_every_target_compose_scrapes(
    rendered: dict[str, Manifests], overlay: str
) -> None:
    m = rendered[overlay]
    scrape = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    targets = [
        t for job in scrape["scrape_configs"] for s in job["static_configs"] for t in s["targets"]
    ]
    announced: set[tuple[str, int]] = set()
    for w in m.workloads():
        notes = w["spec"]["template"]["metadata"].get("annotations", {})
        if notes.get("prometheus.io/scrape") == "true":
            assert notes["prometheus.io/path"] == "/metrics"
            port = int(notes["prometheus.io/port"])
            announced |= {(c.name, port) for c in m.containers(w) if c.port(port)}
    for service in m.of("Service"):
        notes = service["metadata"].get("annotations", {})
        if notes.get("prometheus.io/scrape") == "true":
            assert notes["prometheus.io/path"] == "/metrics"
            port = int(notes["prometheus.io/port"])
            address = f"{service['metadata']['name']}:{port}"
            # A Service's name resolves alike in every pod: any client will do.
            announced |= {(c.name, p) for c, p in m.reach(m.containers()[0], address)}
    for target in targets:
        name, port = target.split(":")
        assert (name, int(port)) in announced, f"Prometheus would not find {target}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_only_the_gpu_overlay_gives_node_pods_a_gpu(
    rendered: dict[str, Manifests], overlay: str
) -> None:
    m = rendered[overlay]
    for c in m.containers():
        gpus = {
            part: c.spec["resources"][part].get("nvidia.com/gpu") for part in ("requests", "limits")
        }
        if overlay == "gpu" and c.name == "node":
            assert gpus == {"requests": "1", "limits": "1"}
            assert c.pod["nodeSelector"], "GPU node pods must be placed on GPU nodes"
            assert any(t["key"] == "nvidia.com/gpu" for t in c.pod["tolerations"])
        else:
            assert gpus == {"requests": None, "limits": None}, c.name
    dockerfile = (ROOT / "deploy" / "docker" / "Dockerfile.cuda").read_text()
    assert "whl/cpu" not in dockerfile and "['gpu']" in dockerfile


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_replicas_disruption_budgets_and_one_planner(
    rendered: dict[str, Manifests], overlay: str
) -> None:
    m = rendered[overlay]
    gateway, scheduler = m.get("Deployment", "gateway"), m.get("StatefulSet", "scheduler")
    assert gateway["spec"]["replicas"] >= 2 and scheduler["spec"]["replicas"] >= 2
    for w in (gateway, scheduler):
        budgets = [
            b
            for b in m.of("PodDisruptionBudget")
            if w in m.selected(b["spec"]["selector"]["matchLabels"])
        ]
        (budget,) = budgets
        assert 1 <= budget["spec"]["minAvailable"] < w["spec"]["replicas"]
    (hpa,) = m.of("HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == "gateway"
    assert hpa["spec"]["minReplicas"] >= 2
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    planner = m.get("Deployment", "placement")
    assert planner["spec"]["replicas"] == 1
    assert planner["spec"]["strategy"] == {"type": "Recreate"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pods_run_as_non_root_within_limits(rendered: dict[str, Manifests], overlay: str) -> None:
    m = rendered[overlay]
    for w in m.workloads():
        pod = w["spec"]["template"]["spec"]
        name = w["metadata"]["name"]
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert isinstance(pod["securityContext"]["runAsUser"], int), name
        assert pod["securityContext"]["runAsUser"] > 0, name
        assert pod["automountServiceAccountToken"] is False, name
        for c in m.containers(w):
            context = c.spec["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, c.name
            assert context["readOnlyRootFilesystem"] is True, c.name
            for part in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c.spec["resources"][part]), (c.name, part)


def prestop_s(c: Container) -> int:
    hook = c.spec["lifecycle"]["preStop"]
    if "sleep" in hook:
        return hook["sleep"]["seconds"]
    command = hook["exec"]["command"]
    assert command[0] == "sleep", command
    return int(command[1])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_termination_grace_covers_pause_and_drain(
    rendered: dict[str, Manifests], compose: dict, overlay: str
) -> None:
    m = rendered[overlay]
    for w in m.workloads():
        pod = w["spec"]["template"]["spec"]
        sidecars = [c for c in pod.get("initContainers", []) if c.get("restartPolicy") == "Always"]
        for spec in pod["containers"]:
            c = Container(w, spec)
            grace = SERVER_STOP_GRACE_S
            if c.name in STRATA_SERVICES:
                grace = float(m.env(c).get("STRATA_SHUTDOWN_GRACE_S", grace))
            # Sidecars stop after the main containers, within the same period.
            needed = prestop_s(c) + grace + SERVER_STOP_GRACE_S * len(sidecars)
            assert pod["terminationGracePeriodSeconds"] >= needed, c.name
            period = compose["services"][c.name].get("stop_grace_period", "0s")
            assert pod["terminationGracePeriodSeconds"] >= int(period.removesuffix("s")), c.name


def admits_outside(rule: dict) -> bool:
    sources = rule.get("from")
    return not sources or any("namespaceSelector" in s or "ipBlock" in s for s in sources)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_only_the_gateway_ports_are_reachable_from_outside_the_namespace(
    rendered: dict[str, Manifests], overlay: str
) -> None:
    m = rendered[overlay]
    gateway = m.container("gateway")
    public = {
        port_of(m.env(gateway)[k]) for k in ("STRATA_GATEWAY_BIND", "STRATA_GATEWAY_HTTP_BIND")
    }
    health = {health_port(m, m.container(name)) for name in STRATA_SERVICES}
    covered = False
    for policy in m.of("NetworkPolicy"):
        spec = policy["spec"]
        assert "Ingress" in spec["policyTypes"]
        if spec["podSelector"] == {}:
            covered = True  # every pod of the namespace is isolated for ingress
        for rule in spec.get("ingress", []):
            if not admits_outside(rule):
                assert rule["from"] == [{"podSelector": {}}], policy["metadata"]["name"]
                continue
            assert m.selected(spec["podSelector"]["matchLabels"]) == [gateway.workload]
            assert rule.get("ports"), f"{policy['metadata']['name']} admits every port"
            ports = {p["port"] for p in rule["ports"]}
            assert ports == public, policy["metadata"]["name"]
            # The plaintext health ports are for kubelet, which probes from the node.
            assert not ports & health, policy["metadata"]["name"]
    assert covered


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_node_pod_shares_shm_with_its_kv_store_and_keeps_the_disk_tier(
    rendered: dict[str, Manifests], overlay: str
) -> None:
    m = rendered[overlay]
    node, kvstore = m.container("node"), m.container("kvstore")
    assert node.workload is kvstore.workload and node.workload["kind"] == "StatefulSet"
    assert kvstore.spec["restartPolicy"] == "Always"  # a sidecar: up before, down after the node
    kv_env, node_env = m.env(kvstore), m.env(node)
    assert kv_env["STRATA_KVSTORE_NODE_ID"] == node_env["STRATA_NODE_ID"] == "node-0"

    shm = kv_env["STRATA_KVSTORE_SHM_DIR"]
    assert node.mounts()[shm]["name"] == kvstore.mounts()[shm]["name"]
    volume = kvstore.volume(kvstore.mounts()[shm]["name"])["emptyDir"]
    assert volume["medium"] == "Memory"
    assert quantity(volume["sizeLimit"]) >= int(kv_env["STRATA_KVSTORE_HOST_BYTES"])

    def persistent(c: Container, path: str) -> None:
        mounted = [p for p in c.mounts() if Path(path).is_relative_to(p)]
        assert mounted, f"{c.name}: {path} is on no volume"
        volume = c.volume(c.mounts()[max(mounted, key=len)]["name"])
        assert "persistentVolumeClaim" in volume or "hostPath" in volume, path

    persistent(kvstore, kv_env["STRATA_KVSTORE_DISK_DIR"])
    persistent(node, node_env["STRATA_NODE_STATE_DIR"])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_secrets_are_mounted_where_compose_mounts_them(
    rendered: dict[str, Manifests], compose: dict, overlay: str
) -> None:
    m = rendered[overlay]
    mounted = {
        v.split(":")[1]
        for v in compose["services"]["gateway"]["volumes"]
        if v.startswith("strata-secrets:")
    }
    (path,) = mounted
    for name in (*STRATA_SERVICES, "otel-collector"):
        c = m.container(name)
        mount = c.mounts()[path]
        assert mount["readOnly"] is True, name
        assert c.volume(mount["name"])["secret"]["secretName"] == CLUSTER_SECRETS, name
        if name in STRATA_SERVICES:
            assert m.env(c)["STRATA_SECRETS_DIR"] == path
    gateway = m.container("gateway")
    key_file = str(Path(m.env(gateway)["STRATA_DATA_DIR"]) / defaults.ADMIN_KEY_FILE)
    mount = gateway.mounts()[key_file]
    assert gateway.volume(mount["name"])["secret"]["secretName"] == ADMIN_KEY_SECRET
    assert mount["subPath"] == defaults.ADMIN_KEY_FILE and mount["readOnly"] is True
    for name in ("gateway", "metrics"):
        (var,) = [v for v in m.container(name).spec["env"] if v["name"] == "STRATA_DB_URL"]
        assert var["valueFrom"]["secretKeyRef"] == {"name": DB_SECRET, "key": "url"}, name


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_metrics_store_is_the_in_cluster_postgres(
    rendered: dict[str, Manifests], overlay: str
) -> None:
    m = rendered[overlay]
    metrics = m.container("metrics")
    url = urlsplit(m.env(metrics)["STRATA_DB_URL"])
    postgres = m.container("postgres")
    pg = m.env(postgres)
    assert (url.username, url.password, url.path) == (
        pg["POSTGRES_USER"],
        pg["POSTGRES_PASSWORD"],
        f"/{pg['POSTGRES_DB']}",
    )
    assert {t.name for t, _ in m.reach(metrics, f"{url.hostname}:{url.port}")} == {"postgres"}
    persistent = [c["metadata"]["name"] for c in postgres.workload["spec"]["volumeClaimTemplates"]]
    data = [p for p, mount in postgres.mounts().items() if mount["name"] in persistent]
    assert data and Path(pg["PGDATA"]).is_relative_to(data[0])


def test_external_db_example_drops_the_in_cluster_postgres(rendered: dict[str, Manifests]) -> None:
    m = rendered["external-db"]
    assert m.find("StatefulSet", "postgres") is None and m.find("Service", "postgres") is None
    assert m.find("Secret", DB_SECRET) is None and m.find("Secret", "strata-postgres") is None
    for name in ("gateway", "metrics"):
        (var,) = [v for v in m.container(name).spec["env"] if v["name"] == "STRATA_DB_URL"]
        assert var["valueFrom"]["secretKeyRef"] == {"name": DB_SECRET, "key": "url"}, name
