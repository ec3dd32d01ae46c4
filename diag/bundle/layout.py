"""The bundle's Kubernetes lists, one row each: where the file is, what reads it, what writes it, and
the command that makes it by hand. Loading (diag/bundle/load.py), the gaps (diag/verdict/coverage.py)
and the collector (diag/collect/kubernetes.py) read this table; a new list is one row here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from diag.parsers import kubernetes
from diag.snapshot.model import Snapshot


@dataclass(frozen=True)
class KubeList:
    kind: str  # the collector's name for it, and kubectl's where `kubectl_kind` is empty
    load: Callable[[Snapshot, str], None] | None  # the parser's answer into the snapshot; None: loaded apart
    scope: Literal["namespace", "all"]  # listed in the target's namespace(s), or across all of them
    # a gap only where Ray runs on Kubernetes (the KubeRay lists), whose "skipped" (no CRDs) is an answer
    kuberay: bool = False
    # stands for another list where that one could not be read (EndpointSlices for Endpoints)
    instead_of: str | None = None
    kubectl_kind: str = ""

    @property
    def path(self) -> str:
        return f"k8s/{self.kind}.json"

    def kubectl(self, namespaces: str) -> str:
        """The command that writes this file by hand; `namespaces` is `-n <ns>` or `-A`."""
        where = "-A" if self.scope == "all" else namespaces
        where = "" if self.kind == "nodes" else f" {where}"
        return f"kubectl get {self.kubectl_kind or self.kind}{where} -o json > {self.path}"


KUBE_LISTS = (
    KubeList("pods", lambda s, t: s.pods.extend(kubernetes.parse_pods(t)), "namespace"),
    KubeList("nodes", lambda s, t: s.nodes.extend(kubernetes.parse_nodes(t)), "all"),
    KubeList("events", lambda s, t: s.events.extend(kubernetes.parse_events(t)), "namespace"),
    KubeList("services", lambda s, t: s.services.extend(kubernetes.parse_services(t)), "namespace"),
    KubeList("endpoints", None, "namespace"),
    KubeList("endpointslices", None, "namespace", instead_of="endpoints"),
    KubeList("deployments", lambda s, t: s.workloads.extend(kubernetes.parse_workloads(t, "Deployment")), "namespace"),
    KubeList(
        "statefulsets", lambda s, t: s.workloads.extend(kubernetes.parse_workloads(t, "StatefulSet")), "namespace"
    ),
    KubeList("hpa", lambda s, t: s.hpas.extend(kubernetes.parse_hpas(t)), "namespace"),
    KubeList("daemonsets", lambda s, t: s.daemonsets.extend(kubernetes.parse_daemonsets(t)), "all"),
    KubeList(
        "rayclusters",
        lambda s, t: s.ray_clusters.extend(kubernetes.parse_rayclusters(t)),
        "namespace",
        True,
        kubectl_kind="rayclusters.ray.io",
    ),
    KubeList(
        "rayservices",
        lambda s, t: s.ray_clusters.extend(kubernetes.parse_rayservices(t)),
        "namespace",
        True,
        kubectl_kind="rayservices.ray.io",
    ),
)
BY_PATH = {row.path: row for row in KUBE_LISTS}
