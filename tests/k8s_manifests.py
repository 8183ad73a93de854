"""Rendered Kubernetes manifests as the tests read them: `render` runs `kubectl kustomize` on a
kustomization (skipping the test without kubectl), `Manifests` looks documents up and tells what
a container sees: its environment with ConfigMaps, Secrets, the downward API and $(VAR)
references resolved, and which containers an address reaches through Services, per-pod DNS
names or the pod's loopback.
"""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet")
POD_IP = "192.0.2.10"  # what status.podIP stands for when an environment is resolved here
_UNITS = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}


@dataclass(frozen=True)
class Container:
    """One container (or init container) of a workload's pod template."""

    workload: dict
    spec: dict

    @property
    def name(self) -> str:
        return self.spec["name"]

    @property
    def pod(self) -> dict:
        return self.workload["spec"]["template"]["spec"]

    def port(self, ref: str | int) -> int | None:
        """The container port `ref` (a number or a port name) names, None if not declared."""
        for p in self.spec.get("ports", []):
            if ref in (p["containerPort"], p.get("name")):
                return p["containerPort"]
        return None

    def mounts(self) -> dict[str, dict]:
        return {m["mountPath"]: m for m in self.spec.get("volumeMounts", [])}

    def volume(self, name: str) -> dict:
        """The pod volume `name`; a StatefulSet's claim template as a persistentVolumeClaim."""
        for v in self.pod.get("volumes", []):
            if v["name"] == name:
                return v
        for claim in self.workload["spec"].get("volumeClaimTemplates", []):
            if claim["metadata"]["name"] == name:
                return {"name": name, "persistentVolumeClaim": claim}
        raise AssertionError(f"{self.name}: no volume {name}")


class Manifests:
    """The documents of one rendered kustomization."""

    def __init__(self, docs: list[dict]):
        self.docs = docs

    def of(self, kind: str) -> list[dict]:
        return [d for d in self.docs if d["kind"] == kind]

    def find(self, kind: str, name: str) -> dict | None:
        return next((d for d in self.of(kind) if d["metadata"]["name"] == name), None)

    def get(self, kind: str, name: str) -> dict:
        doc = self.find(kind, name)
        assert doc is not None, f"no {kind} {name}"
        return doc

    def workloads(self) -> list[dict]:
        return [d for d in self.docs if d["kind"] in WORKLOADS]

    def containers(self, workload: dict | None = None) -> list[Container]:
        out = []
        for w in [workload] if workload else self.workloads():
            pod = w["spec"]["template"]["spec"]
            out += [Container(w, c) for c in pod.get("initContainers", []) + pod["containers"]]
        return out

    def container(self, name: str) -> Container:
        (found,) = [c for c in self.containers() if c.name == name]
        return found

    def selected(self, selector: dict) -> list[dict]:
        """The workloads whose pods carry every label of `selector` (none for an empty one)."""
        return [
            w
            for w in self.workloads()
            if selector and selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()
        ]

    def _data(self, kind: str, name: str) -> dict[str, str]:
        doc = self.get(kind, name)
        data = dict(doc.get("stringData", {}))
        for key, value in doc.get("data", {}).items():
            data[key] = base64.b64decode(value).decode() if kind == "Secret" else value
        return data

    def env(self, c: Container) -> dict[str, str]:
        """The container's environment as its process sees it (a StatefulSet's first pod)."""
        out: dict[str, str] = {}
        for source in c.spec.get("envFrom", []):
            out |= self._data("ConfigMap", source["configMapRef"]["name"])
        for var in c.spec.get("env", []):
            if "value" in var:
                value = re.sub(r"\$\((\w+)\)", lambda m: out.get(m[1], m[0]), var["value"])
            elif "secretKeyRef" in (ref := var["valueFrom"]):
                value = self._data("Secret", ref["secretKeyRef"]["name"])[
                    ref["secretKeyRef"]["key"]
                ]
            elif "configMapKeyRef" in ref:
                value = self._data("ConfigMap", ref["configMapKeyRef"]["name"])[
                    ref["configMapKeyRef"]["key"]
                ]
            else:
                value = {"metadata.name": pod_name(c.workload), "status.podIP": POD_IP}[
                    ref["fieldRef"]["fieldPath"]
                ]
            out[var["name"]] = value
        return out

    def reach(self, client: Container, address: str) -> list[tuple[Container, int]]:
        """The containers, with their ports, that a connection from `client` to `address`
        reaches: the client's own pod for 127.0.0.1, one StatefulSet replica for
        `<set>-<ordinal>.<headless service>`, else the pods a Service selects."""
        host, port = address.rsplit(":", 1)
        if host == "127.0.0.1":
            targets = [(c, int(port)) for c in self.containers(client.workload)]
        elif match := re.fullmatch(r"([a-z0-9-]+)-(\d+)\.([a-z0-9-]+)", host):
            sts = self.get("StatefulSet", match[1])
            service = self.get("Service", match[3])
            assert sts["spec"]["serviceName"] == match[3], address
            assert service["spec"]["clusterIP"] == "None", f"{address}: per-pod names need headless"
            assert int(match[2]) < sts["spec"]["replicas"], f"{address}: no such replica"
            assert sts in self.selected(service["spec"]["selector"]), address
            targets = [(c, int(port)) for c in self.containers(sts)]
        else:
            service = self.get("Service", host)
            (entry,) = [p for p in service["spec"]["ports"] if p["port"] == int(port)]
            target = entry.get("targetPort", entry["port"])
            targets = [
                (c, c.port(target) or 0)
                for w in self.selected(service["spec"]["selector"])
                for c in self.containers(w)
            ]
        return [(c, p) for c, p in targets if c.port(p) is not None]


def pod_name(workload: dict) -> str:
    """The name of the workload's first pod: a StatefulSet's ordinal 0."""
    name = workload["metadata"]["name"]
    return f"{name}-0" if workload["kind"] == "StatefulSet" else f"{name}-<hash>"


def port_of(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def quantity(value: str) -> int:
    """A Kubernetes byte quantity ('1200Mi', '8Gi', '1024') in bytes."""
    for unit, factor in _UNITS.items():
        if value.endswith(unit):
            return int(value[: -len(unit)]) * factor
    return int(value)


def render(path: Path) -> Manifests:
    """`kubectl kustomize path`; skips the calling test when kubectl is not installed."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: the Kubernetes manifests cannot be rendered")
    result = subprocess.run(
        [kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=240
    )
    assert result.returncode == 0, f"kubectl kustomize {path} failed:\n{result.stderr}"
    return Manifests([d for d in yaml.safe_load_all(result.stdout) if d])
