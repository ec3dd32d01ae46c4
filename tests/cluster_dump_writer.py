"""Writes a fixture bundle's Kubernetes lists and logs as `kubectl cluster-info dump --output-directory`
does (k8s.io/kubectl/pkg/cmd/clusterinfo/clusterinfo_dump.go): nodes.json, then per namespace the
typed lists (their items without kind or apiVersion, as the API server lists them), printed by kubectl's
JSON printer (four-space indent), and <namespace>/<pod>/logs.txt with every container's log between
kubectl's START and END lines."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

# the dump's files of one namespace, in kubectl's order, with the list kind of each
NAMESPACED = (
    ("events", "EventList", "v1"),
    ("replication-controllers", "ReplicationControllerList", "v1"),
    ("services", "ServiceList", "v1"),
    ("daemonsets", "DaemonSetList", "apps/v1"),
    ("deployments", "DeploymentList", "apps/v1"),
    ("replicasets", "ReplicaSetList", "apps/v1"),
    ("pods", "PodList", "v1"),
)

# (namespace, pod, container) -> the log kubectl gets, or None where the fixture has none
LogOf = Callable[[str, str, str], "str | None"]


def typed_list(kind: str, api_version: str, items: list[dict]) -> str:
    bare = [{k: v for k, v in item.items() if k not in ("kind", "apiVersion")} for item in items]
    doc = {"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": "48213"}, "items": bare}
    return json.dumps(doc, indent=4) + "\n"


def container_block(namespace: str, pod: str, container: str, log: str) -> str:
    """kubectl writes the END line right after the log, whether or not the log ends its last line."""
    where = f"container {container} of pod {namespace}/{pod}"
    return f"==== START logs for {where} ====\n{log}==== END logs for {where} ====\n"


def write_dump(bundle: Path, dest: Path, namespaces: list[str] | None = None, log_of: LogOf | None = None) -> Path:
    """`namespaces`: those dumped (--namespaces), default every namespace of the bundle's lists (-A).
    `log_of`: the log of a container, default the bundle's k8s/logs/<pod>.log (or <pod>.<container>.log)."""
    k8s = bundle / "k8s"
    lists = {name: json.loads((k8s / f"{name}.json").read_text())["items"] if (k8s / f"{name}.json").exists() else []
             for name, _, _ in NAMESPACED}  # fmt: skip
    dest.mkdir(parents=True)
    (dest / "nodes.json").write_text(
        typed_list("NodeList", "v1", json.loads((k8s / "nodes.json").read_text())["items"])
    )
    if namespaces is None:
        namespaces = sorted({i["metadata"]["namespace"] for items in lists.values() for i in items})
    log_of = log_of or (lambda ns, pod, container: _fixture_log(k8s / "logs", pod, container))
    for ns in namespaces:
        (dest / ns).mkdir()
        for name, kind, api_version in NAMESPACED:
            items = [i for i in lists[name] if i["metadata"].get("namespace") == ns]
            (dest / ns / f"{name}.json").write_text(typed_list(kind, api_version, items))
        for pod in (p for p in lists["pods"] if p["metadata"]["namespace"] == ns):
            name = pod["metadata"]["name"]
            (dest / ns / name).mkdir()
            containers = pod["spec"].get("initContainers", []) + pod["spec"]["containers"]
            text = "".join(container_block(ns, name, c["name"], log_of(ns, name, c["name"]) or "") for c in containers)
            (dest / ns / name / "logs.txt").write_text(text)
    return dest


def _fixture_log(logs: Path, pod: str, container: str) -> str | None:
    for stem in (f"{pod}.{container}", pod):
        if (logs / f"{stem}.log").exists():
            return (logs / f"{stem}.log").read_text()
    return None
