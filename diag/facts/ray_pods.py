"""What the Kubernetes side says about a Ray cluster: which KubeRay pods form it, the GPU settings
that reach `ray start` (rayStartParams, the generated command, GPU-hiding environment), the Ray
version each pod runs (image tag, or Ray's own version-mismatch error in its log)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from diag.facts.kubernetes_containers import GPU_VISIBILITY_ENV, NO_GPU_VALUES
from diag.snapshot.model import Container, Pod, RayClusterSpec, Snapshot

# KubeRay starts Ray in the pod's first container (utils.RayContainerIndex): its bash -c argument is the
# `ray start` line KubeRay generated, or the user's own when the command already runs ray start.
_NUM_GPUS_FLAG = re.compile(r"--num-gpus[= ]+['\"]?(?P<value>[^\s'\"]+)")
# Ray itself counts no GPU when CUDA_VISIBLE_DEVICES is empty or "NoDevFiles" (ray/_private/accelerators/nvidia_gpu.py).
RAY_NO_CUDA_DEVICES = ("", "NoDevFiles")
# rayproject/ray:2.46.0-py311-gpu, rayproject/ray-ml:2.9.3-gpu, rayproject/ray-llm:2.46.0-py311-cu124
_RAY_IMAGE = re.compile(r"(?:^|/)ray(?:-ml|-llm)?:(?P<version>\d+\.\d+\.\d+)")
# ray/_private/worker.py check_version_info: the RuntimeError a node raises when it joins a cluster of another version.
_VERSION_MISMATCH = re.compile(
    r"Version mismatch: The cluster was started with:\s*Ray: (?P<cluster_ray>\S+)\s*Python: (?P<cluster_py>\S+)\s*"
    r"This process on (?P<where>.+?) was started with:\s*Ray: (?P<own_ray>\S+)\s*Python: (?P<own_py>\S+)"
)


def _version_mismatch(text: str | None) -> re.Match[str] | None:
    # the regex's own prefix search is several times slower than str's, and a fleet's logs are 50 MB
    if not text or "Version mismatch: " not in text:
        return None
    return _VERSION_MISMATCH.search(text)


@dataclass
class RayPodGroup:
    """The pods of one KubeRay cluster (label ray.io/cluster), head first."""

    namespace: str
    cluster: str
    heads: list[Pod]
    workers: list[Pod]

    @property
    def link(self) -> str:
        return f"raycluster:{self.namespace}/{self.cluster}"


def ray_pod_groups(snap: Snapshot) -> list[RayPodGroup]:
    groups: dict[tuple[str, str], RayPodGroup] = {}
    for pod in snap.pods:
        if not pod.ray_cluster:
            continue
        group = groups.setdefault((pod.namespace, pod.ray_cluster), RayPodGroup(pod.namespace, pod.ray_cluster, [], []))
        (group.heads if pod.ray_node_type == "head" else group.workers).append(pod)
    return list(groups.values())


def ray_container(pod: Pod) -> Container | None:
    return pod.containers[0] if pod.containers else None


def pod_brief(pod: Pod) -> str:
    ready = pod.conditions.get("Ready", {}).get("status", "?")
    waiting = next((c.state_reason for c in pod.containers if c.state_reason), None)
    return f"{pod.key} ({pod.ray_node_type or 'ray'}): {pod.phase or 'phase unknown'}, Ready={ready}" + (
        f", {waiting}" if waiting else ""
    )


# --------------------------------------------------------------------------- GPUs hidden from Ray


def gpu_overrides(pod: Pod, snap: Snapshot) -> list[str]:
    """Every setting on the way from the pod's GPU limit to `ray start` that can make Ray count fewer GPUs."""
    found = []
    spec, group = _cluster_spec(pod, snap)
    if spec is not None:
        params = spec.head_ray_start_params if pod.ray_node_type == "head" else _group_params(spec, group)
        if params is not None and "num-gpus" in params:
            where = "headGroupSpec" if pod.ray_node_type == "head" else f"workerGroupSpecs[{group}]"
            found.append(
                f'{spec.kind} {spec.namespace}/{spec.name} {where}.rayStartParams num-gpus: "{params["num-gpus"]}"'
            )
    container = ray_container(pod)
    if container is None:
        return found
    if (m := _NUM_GPUS_FLAG.search(" ".join(container.command + container.args))) is not None:
        found.append(f"container {container.name} runs ray start --num-gpus={m['value']}")
    for name in GPU_VISIBILITY_ENV:
        value = container.env.get(name)
        hides = value is not None and (
            value in RAY_NO_CUDA_DEVICES if name == "CUDA_VISIBLE_DEVICES" else value.strip().lower() in NO_GPU_VALUES
        )
        if hides:
            found.append(f'container {container.name} sets {name}="{value}"')
    return found


def _cluster_spec(pod: Pod, snap: Snapshot) -> tuple[RayClusterSpec | None, str | None]:
    """The RayCluster (or RayService, whose clusters KubeRay names <service>-<suffix>) the pod belongs to."""
    label = pod.ray_cluster or ""
    candidates = [
        c
        for c in snap.ray_clusters
        if c.namespace == pod.namespace
        and (c.name == label or (c.kind == "RayService" and label.startswith(c.name + "-")))
    ]
    exact = next((c for c in candidates if c.name == label), None)
    return exact or (candidates[0] if candidates else None), pod.ray_group


def kuberay_object(pod: Pod, snap: Snapshot) -> str:
    """`<kind>/<name>` of the KubeRay object to edit for this pod, for kubectl."""
    spec, _ = _cluster_spec(pod, snap)
    return f"{spec.kind.lower()}/{spec.name}" if spec else f"raycluster/{pod.ray_cluster}"


def _group_params(spec: RayClusterSpec, group: str | None) -> dict[str, str] | None:
    return next((g.ray_start_params for g in spec.worker_groups if g.name == group), None)


# --------------------------------------------------------------------------- Ray versions


def image_ray_version(pod: Pod) -> str | None:
    container = ray_container(pod)
    m = _RAY_IMAGE.search(container.image) if container else None
    return m["version"] if m else None


def version_mismatches(snap: Snapshot) -> list[str]:
    """Worker pods whose image carries another Ray version than their head's, per Ray cluster."""
    found = []
    for group, head, head_version, workers in _mismatched_workers(snap):
        head_text = (
            f"head {head.name} runs Ray {head_version} ({_image(head)})"
            if head
            else f"head runs Ray {head_version} (/api/version)"
        )
        by_version: dict[tuple[str, str], list[str]] = {}
        for pod, version in workers:
            by_version.setdefault((version, _image(pod)), []).append(pod.name)
        for (version, image), pods in sorted(by_version.items()):
            found.append(
                f"{group.namespace}/{group.cluster}: {head_text}; workers {', '.join(pods)} run Ray {version} ({image})"
            )
    return found


def _mismatched_workers(snap: Snapshot) -> Iterator[tuple[RayPodGroup, Pod | None, str, list[tuple[Pod, str]]]]:
    """Per Ray cluster whose head's version is known: the head, its version, and the workers (with
    their version) whose image carries another."""
    groups = ray_pod_groups(snap)
    for group in groups:
        head = group.heads[0] if group.heads else None
        head_version = image_ray_version(head) if head else None
        if head_version is None and len(groups) == 1:
            head_version = snap.ray_head_version  # the dashboard's /api/version names the head's own
        if head_version is None:
            continue
        workers = [
            (pod, version) for pod in group.workers if (version := image_ray_version(pod)) not in (None, head_version)
        ]
        if workers:
            yield group, head, head_version, workers


def logged_version_mismatches(snap: Snapshot) -> list[tuple[Pod, Container, re.Match[str]]]:
    """Each container whose log holds Ray's own refusal to join a node of another Ray/Python version
    (its previous run's log read first), with the error's match."""
    found = []
    for pod in snap.pods:
        for container in pod.containers:
            if (m := _version_mismatch(container.previous_logs) or _version_mismatch(container.logs)) is not None:
                found.append((pod, container, m))
    return found


def version_mismatch_errors(logged: list[tuple[Pod, Container, re.Match[str]]]) -> list[str]:
    """The `logged_version_mismatches`, one line each."""
    return [
        f"{pod.key} [{container.name}]: the cluster runs Ray {m['cluster_ray']} / Python {m['cluster_py']}, "
        f"this process ({m['where']}) Ray {m['own_ray']} / Python {m['own_py']}"
        for pod, container, m in logged
    ]


def _image(pod: Pod) -> str:
    container = ray_container(pod)
    return container.image if container else "no container"


def version_mismatch_pods(snap: Snapshot, logged: list[tuple[Pod, Container, re.Match[str]]]) -> list[str]:
    """Links of the pods `version_mismatches` and `version_mismatch_errors` speak of."""
    keys = {pod.key for *_, workers in _mismatched_workers(snap) for pod, _ in workers}
    keys.update(pod.key for pod, _, _ in logged)
    return [f"pod:{key}" for key in sorted(keys)]


def serve_replicas_too_big(cluster: RayClusterSpec) -> list[str] | None:
    """The Serve deployments of a RayService one replica of which asks more GPUs on one node than any node
    of its cluster has (ray_actor_options.num_gpus; each of its placement_group_bundles, or all of them
    under STRICT_PACK). [] for a RayCluster or a config without deployments; None when a node's GPU count is
    not a number (a rayStartParams value filled in at run time)."""
    if cluster.kind != "RayService" or not isinstance(cluster.serve_config, dict):
        return []
    nodes = [("head", cluster.head_ray_start_params, cluster.head_gpu_limit)]
    nodes += [(f"worker group {g.name}", g.ray_start_params, g.gpu_limit_per_pod) for g in cluster.worker_groups]
    sizes: list[tuple[float, str]] = []
    for where, params, limit in nodes:
        if "num-gpus" in params:
            value = _number(params["num-gpus"])
            if value is None:
                return None
            sizes.append((value, f"{where}: rayStartParams num-gpus {params['num-gpus']}"))
        else:
            sizes.append((float(limit), f"{where}: nvidia.com/gpu {limit} per pod"))
    largest, where = max(sizes)
    found = []
    for app in cluster.serve_config.get("applications") or []:
        for deployment in (app.get("deployments") or []) if isinstance(app, dict) else []:
            if not isinstance(deployment, dict):
                continue
            need, how = _replica_gpus(deployment)
            if need > largest:
                found.append(
                    f"application {app.get('name')}, deployment "
                    f"{deployment.get('name')}: one replica asks {need:g} GPU(s) "
                    f"on one node ({how}); the largest node of the cluster has {largest:g} ({where})"
                )
    return found


def _replica_gpus(deployment: dict) -> tuple[float, str]:
    """The GPUs one replica needs on a single node, and where the config says so."""
    given = deployment.get("ray_actor_options")
    options = given if isinstance(given, dict) else {}
    need, how = _number(options.get("num_gpus")) or 0.0, "ray_actor_options.num_gpus"
    bundles = [b for b in deployment.get("placement_group_bundles") or [] if isinstance(b, dict)]
    gpus = [_number(b.get("GPU")) or 0.0 for b in bundles]
    if gpus and deployment.get("placement_group_strategy") == "STRICT_PACK" and sum(gpus) > need:
        need, how = sum(gpus), f"placement_group_bundles {bundles} under STRICT_PACK"
    elif gpus and max(gpus) > need:
        need, how = max(gpus), f"a bundle of placement_group_bundles {bundles}"
    return need, how


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(str(value))
    except ValueError:
        return None
