"""Facts for the ray layer: Ray nodes, actors, placement groups, and `ray status` demands."""

from __future__ import annotations

from diag.facts.common import link, plain
from diag.model import PlacementGroup, RayNode, Snapshot


def _alive(snap: Snapshot) -> list[RayNode]:
    return [n for n in snap.ray_nodes if n.state in (None, "ALIVE")]


def fits_one_node(resources: dict[str, float], nodes: list[RayNode]) -> bool | None:
    """Could any node, empty, ever hold this request? None when no node totals are known."""
    if not nodes:
        return None
    return any(all(n.resources_total.get(k, 0.0) >= v for k, v in resources.items() if v > 0) for n in nodes)


def cluster_facts(snap: Snapshot) -> dict:
    nodes = _alive(snap)
    status = snap.ray_status
    demands = []
    if status is not None:
        for d in status.demands:
            demands.append(plain(d) | {"fits_one_node": fits_one_node(d.resources, nodes)})
    versions = sorted({n.ray_version for n in snap.ray_nodes if n.ray_version})
    return {
        "ray_status_seen": status is not None,
        "ray_usage": {k: {"used": u, "total": t} for k, (u, t) in status.usage.items()} if status else {},
        "ray_demands": demands,
        "ray_versions": versions,
        "ray_head_version": snap.ray_head_version,
        "ray_nodes_alive": len(nodes),
        "ray_gpu_total": sum(n.resources_total.get("GPU", 0.0) for n in nodes),
        "ray_resource_names": sorted({k for n in nodes for k in n.resources_total}),
    }


def scopes(snap: Snapshot) -> dict[str, list[dict]]:
    nodes = _alive(snap)
    return {
        "ray_node": [_ray_node(n, snap) for n in snap.ray_nodes],
        "actor": [
            plain(a) | {
                "fits_one_node": fits_one_node(a.required_resources, nodes),
                "missing_resources": sorted(k for k in a.required_resources if nodes and all(k not in n.resources_total for n in nodes)),
                "_subject": f"actor/{a.name or a.class_name}/{a.actor_id[:8]}",
                "_links": link("actor", a.actor_id) + link("ray_node", a.node_id),
            }
            for a in snap.ray_actors
        ],
        "placement_group": [_placement_group(pg, nodes) for pg in snap.placement_groups],
    }


def _ray_node(node: RayNode, snap: Snapshot) -> dict:
    pod = snap.pod(node.pod) if node.pod else None
    pod_gpus = sum(int(c.limits.get("nvidia.com/gpu", "0") or 0) for c in pod.containers) if pod else None
    return plain(node) | {
        "gpu_total": node.resources_total.get("GPU"),
        "pod_gpu_limit": pod_gpus,
        "object_store_usage": (
            node.object_store_used_bytes / node.object_store_total_bytes
            if node.object_store_used_bytes is not None and node.object_store_total_bytes
            else None
        ),
        "_subject": f"ray_node/{node.node_id[:12]}" + (f" ({node.pod})" if node.pod else ""),
        "_links": link("ray_node", node.node_id) + link("pod", node.pod),
    }


def _placement_group(pg: PlacementGroup, nodes: list[RayNode]) -> dict:
    merged: dict[str, float] = {}
    for bundle in pg.bundles:
        for k, v in bundle.items():
            merged[k] = merged.get(k, 0.0) + v
    if pg.strategy == "STRICT_PACK":
        placeable = fits_one_node(merged, nodes)
    elif pg.strategy == "STRICT_SPREAD":
        placeable = None if not nodes else len(pg.bundles) <= len(nodes) and all(fits_one_node(b, nodes) for b in pg.bundles)
    else:
        placeable = None if not nodes else all(fits_one_node(b, nodes) for b in pg.bundles)
    return plain(pg) | {
        "total_resources": merged,
        "placeable": placeable,
        "_subject": f"placement_group/{pg.name or pg.placement_group_id[:8]}",
        "_links": link("placement_group", pg.placement_group_id),
    }
