"""Plain indexes of a snapshot: objects by name, pods by node and by label, events by the object they
are about, ... for the joins and the facts both. No clock and no threshold: what a rule would call
good or bad stays in the facts.

`indexes(snap)` builds them once per snapshot, each on its first use, and again when one of the
snapshot's lists was replaced or grew (the join adds vLLM servers). Those under "linked" read what
diag.link.join fills in (a server's pod, a pod's workload, a Ray node's pod): ask them after the join.
"""

from __future__ import annotations

from functools import cached_property

from diag.snapshot.gpu_resources import is_gpu_node
from diag.snapshot.model import GPU, Event, Node, Pod, RayClusterSpec, RayNode, Service, Snapshot, VllmServer, Workload

LabelKey = tuple[str, str, str]  # (namespace, label key, label value)


def indexes(snap: Snapshot) -> Indexes:
    lists = _lists(snap)
    cached = snap._indexes
    if cached is None or not _same(cached[0], lists):
        cached = snap._indexes = (lists, Indexes(snap))
    return cached[1]


class Indexes:
    def __init__(self, snap: Snapshot) -> None:
        self._snap = snap

    @cached_property
    def nodes(self) -> dict[str, Node]:
        """By name, the last listed of each."""
        return {n.name: n for n in self._snap.nodes}

    @cached_property
    def gpu_nodes(self) -> list[Node]:
        return [n for n in self._snap.nodes if is_gpu_node(n)]

    @cached_property
    def pods_on_node(self) -> dict[str, list[Pod]]:
        """By the name of the node they were placed on, in listing order."""
        found: dict[str, list[Pod]] = {}
        for pod in self._snap.pods:
            if pod.node_name:
                found.setdefault(pod.node_name, []).append(pod)
        return found

    @cached_property
    def pods_by_label(self) -> dict[LabelKey, list[Pod]]:
        found: dict[LabelKey, list[Pod]] = {}
        for pod in self._snap.pods:
            for key, value in pod.labels.items():
                found.setdefault((pod.namespace, key, value), []).append(pod)
        return found

    @cached_property
    def workloads_by_label(self) -> dict[LabelKey, list[Workload]]:
        """By the labels of their pod template."""
        found: dict[LabelKey, list[Workload]] = {}
        for workload in self._snap.workloads:
            for key, value in workload.template_labels.items():
                found.setdefault((workload.namespace, key, value), []).append(workload)
        return found

    @cached_property
    def events_about(self) -> dict[tuple[str, str | None, str], list[Event]]:
        """By the object they are about: (involved kind, namespace, name)."""
        found: dict[tuple[str, str | None, str], list[Event]] = {}
        for event in self._snap.events:
            found.setdefault((event.involved_kind, event.namespace, event.involved_name), []).append(event)
        return found

    @cached_property
    def pods_of_ray_cluster(self) -> dict[tuple[str, str], list[Pod]]:
        """By (namespace, KubeRay cluster), from their ray.io/cluster label."""
        found: dict[tuple[str, str], list[Pod]] = {}
        for pod in self._snap.pods:
            if pod.ray_cluster:
                found.setdefault((pod.namespace, pod.ray_cluster), []).append(pod)
        return found

    @cached_property
    def rayservices_owning(self) -> dict[tuple[str, str], list[RayClusterSpec]]:
        """(namespace, RayCluster) -> the RayService that created it: KubeRay names its clusters
        <rayservice>-<random suffix>. Each cluster is matched against its own namespace's RayServices."""
        services: dict[str, list[RayClusterSpec]] = {}
        for spec in self._snap.ray_clusters:
            if spec.kind == "RayService":
                services.setdefault(spec.namespace, []).append(spec)
        return {
            (c.namespace, c.name): owners
            for c in self._snap.ray_clusters
            if c.kind == "RayCluster"
            if (owners := [s for s in services.get(c.namespace, []) if c.name.startswith(s.name + "-")])
        }

    @cached_property
    def services(self) -> dict[str, Service]:
        """By "namespace/name", the first listed of each."""
        found: dict[str, Service] = {}
        for svc in self._snap.services:
            found.setdefault(f"{svc.namespace}/{svc.name}", svc)
        return found

    @cached_property
    def ray_clusters(self) -> dict[tuple[str, str], RayClusterSpec]:
        """RayClusters and RayServices by (namespace, name), the first listed of each."""
        found: dict[tuple[str, str], RayClusterSpec] = {}
        for cluster in self._snap.ray_clusters:
            found.setdefault((cluster.namespace, cluster.name), cluster)
        return found

    @cached_property
    def gpu_places(self) -> dict[str, list[int]]:
        """The places in the snapshot's GPU list of each GPU, by UUID, else host/index (as vLLM servers name them)."""
        found: dict[str, list[int]] = {}
        for place, gpu in enumerate(self._snap.gpus):
            found.setdefault(gpu.uuid or f"{gpu.host}/{gpu.index}", []).append(place)
        return found

    @cached_property
    def gpus_of_host(self) -> dict[str, list[GPU]]:
        """By the host their capture names (its file stem)."""
        found: dict[str, list[GPU]] = {}
        for gpu in self._snap.gpus:
            found.setdefault(gpu.host, []).append(gpu)
        return found

    # ----------------------------------------------------------------------- linked

    @cached_property
    def gpus_on_node(self) -> dict[str, list[GPU]]:
        """By the Kubernetes node the join placed them on."""
        found: dict[str, list[GPU]] = {}
        for gpu in self._snap.gpus:
            if gpu.node:
                found.setdefault(gpu.node, []).append(gpu)
        return found

    @cached_property
    def servers(self) -> dict[str, VllmServer]:
        """vLLM servers by name, the last listed of each."""
        return {s.name: s for s in self._snap.vllm_servers}

    @cached_property
    def servers_in_pod(self) -> dict[str, list[VllmServer]]:
        """By pod key."""
        found: dict[str, list[VllmServer]] = {}
        for server in self._snap.vllm_servers:
            if server.pod and (pod := self._snap.pod(server.pod)) is not None:
                found.setdefault(pod.key, []).append(server)
        return found

    @cached_property
    def servers_of_workload(self) -> dict[tuple[str, str | None], list[VllmServer]]:
        """By (namespace, the workload of their pod)."""
        found: dict[tuple[str, str | None], list[VllmServer]] = {}
        for server in self._snap.vllm_servers:
            if server.pod and (pod := self._snap.pod(server.pod)) is not None:
                found.setdefault((pod.namespace, pod.workload_name), []).append(server)
        return found

    @cached_property
    def servers_of_ray_cluster(self) -> dict[tuple[str, str], list[VllmServer]]:
        """By (namespace, the KubeRay cluster of their pod)."""
        found: dict[tuple[str, str], list[VllmServer]] = {}
        for server in self._snap.vllm_servers:
            if server.pod and (pod := self._snap.pod(server.pod)) is not None and pod.ray_cluster:
                found.setdefault((pod.namespace, pod.ray_cluster), []).append(server)
        return found

    @cached_property
    def vllm_pods_in(self) -> dict[str, list[Pod]]:
        """The pods vLLM servers run in, by namespace."""
        found: dict[str, list[Pod]] = {}
        for key in self.servers_in_pod:
            if (pod := self._snap.pod(key)) is not None:
                found.setdefault(pod.namespace, []).append(pod)
        return found

    @cached_property
    def ray_node_in_pod(self) -> dict[str, RayNode]:
        """The first Ray node of each pod key."""
        found: dict[str, RayNode] = {}
        for node in self._snap.ray_nodes:
            if node.pod:
                found.setdefault(node.pod, node)
        return found


def _lists(snap: Snapshot) -> tuple[tuple[list, int], ...]:
    return tuple(
        (items, len(items))
        for items in (
            snap.pods,
            snap.events,
            snap.nodes,
            snap.services,
            snap.workloads,
            snap.ray_clusters,
            snap.ray_nodes,
            snap.gpus,
            snap.vllm_servers,
        )
    )


def _same(built: tuple[tuple[list, int], ...], now: tuple[tuple[list, int], ...]) -> bool:
    return all(a is b and m == n for (a, m), (b, n) in zip(built, now, strict=True))
