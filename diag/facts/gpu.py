"""Facts for the gpu layer: one subject per physical GPU seen through NVML or nvidia-smi."""

from __future__ import annotations

from diag.facts.common import link, plain
from diag.model import GPU, Snapshot


def cluster_facts(snap: Snapshot) -> dict:
    return {"gpus_seen": len(snap.gpus)}


def scopes(snap: Snapshot) -> dict[str, list[dict]]:
    return {"gpu": [_gpu(g, snap) for g in snap.gpus]}


def _gpu(gpu: GPU, snap: Snapshot) -> dict:
    ray_gpu_free = _ray_counts_free(gpu, snap)
    foreign = [p for p in gpu.processes if p.pod is None and p.ray_actor_id is None]
    return plain(gpu) | {
        "memory_used_pct": (
            100.0 * gpu.memory_used_mib / gpu.memory_total_mib if gpu.memory_used_mib is not None and gpu.memory_total_mib else None
        ),
        "unowned_processes": [plain(p) for p in foreign],
        "unowned_memory_mib": sum(p.used_memory_mib or 0.0 for p in foreign),
        "ray_counts_free": ray_gpu_free,
        "_subject": f"gpu/{gpu.host}/{gpu.index}",
        "_links": link("gpu", gpu.uuid or f"{gpu.host}/{gpu.index}") + link("node", gpu.node)
        + [f"pod:{p}" for p in gpu.serving_pods],
    }


def _ray_counts_free(gpu: GPU, snap: Snapshot) -> bool | None:
    """Does Ray report at least one GPU free on the node this GPU belongs to? None when unknown."""
    for node in snap.ray_nodes:
        pod = snap.pod(node.pod) if node.pod else None
        same_host = (pod is not None and pod.node_name == gpu.node) or node.node_name == gpu.host or node.pod == gpu.host
        if same_host and node.resources_available is not None:
            return node.resources_available.get("GPU", 0.0) >= 1.0
    return None
