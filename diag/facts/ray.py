"""Facts for the ray layer: Ray nodes, actors, placement groups, `ray status` demands, and whether the
Ray cluster the Kubernetes side runs could be read at all.

Resource names: the state API (`ray list`, /api/v0/*) and `ray status` carry Ray's own names, while
the dashboard camelCases the keys of /api/cluster_status and of /nodes?view=summary `resourcesTotal`
(`llama3_8b_gpu` -> `llama38BGpu`). A request is compared with a node under both spellings.
"""

from __future__ import annotations

from dataclasses import dataclass

from diag.core.shell import word
from diag.facts import ray_pods
from diag.facts.common import aged, link, plain
from diag.snapshot.clock import Clock
from diag.snapshot.indexes import indexes
from diag.snapshot.model import PlacementGroup, RayActor, RayNode, Snapshot, VllmServer
from diag.snapshot.quantity import gpu_count

PENDING_ACTOR_STATES = ("PENDING_CREATION",)  # DEPENDENCIES_UNREADY waits for its arguments, not resources
PENDING_PG_STATES = ("PENDING", "RESCHEDULING")
# Deaths nobody should be paged for: the wording of the GCS's death causes (gcs_actor_manager.cc:
# "killed by `ray.kill`", "all references to the actor were removed") and intended worker exits.
INTENDED_DEATH_MARKS = (
    "ray.kill",
    "all references to the actor were removed",
    "INTENDED_USER_EXIT",
    "INTENDED_SYSTEM_EXIT",
)
# How the state API words a node death that is no fault (dashboard/utils.py compose_state_message).
EXPECTED_NODE_DEATHS = ("Expected termination", "Terminated due to idle")
OBJECT_STORE = "object_store_memory"
_BYTE_RESOURCES = ("memory", "objectStoreMemory")
# The collector's own record of the dashboard not answering (diag/collect/ray.py).
DASHBOARD_SOURCE = "ray/dashboard"


# --------------------------------------------------------------------------- resources


def dashboard_name(resource: str) -> str:
    """The dashboard's camelCase of a resource name (ray/dashboard/utils.py to_camel_case)."""
    first, *rest = resource.split("_")
    return first + "".join(part.title() for part in rest)


def amount(totals: dict[str, float], resource: str) -> float:
    return totals.get(resource, totals.get(dashboard_name(resource), 0.0))


def fits(resources: dict[str, float], totals: dict[str, float]) -> bool:
    return all(amount(totals, name) >= need for name, need in resources.items() if need > 0)


def bundle_text(resources: dict[str, float]) -> str:
    return "{" + ", ".join(f"{name}: {need:g}" for name, need in sorted(resources.items())) + "}"


def resources_text(totals: dict[str, float]) -> str:
    """A node's schedulable resources, without the per-node markers and byte counts."""
    shown = {k: v for k, v in totals.items() if not k.startswith("node:") and dashboard_name(k) not in _BYTE_RESOURCES}
    return bundle_text(shown) if shown else "no CPU, no GPU, nothing to schedule on"


@dataclass
class Capacity:
    """What a request is compared with: each alive node's totals, or only the cluster's (`ray status`)."""

    totals: list[dict[str, float]]
    per_node: bool

    @classmethod
    def of(cls, snap: Snapshot, nodes: list[RayNode]) -> Capacity | None:
        known = [n.resources_total for n in nodes if n.resources_total]
        if known:
            return cls(known, per_node=True)
        cluster = _status_totals(snap)
        # a task or actor runs on one node: more than the whole cluster has is enough to know
        return cls([cluster], per_node=False) if cluster else None

    def fits(self, resources: dict[str, float]) -> bool:
        return any(fits(resources, totals) for totals in self.totals)

    def shortfall(self, resources: dict[str, float]) -> str:
        """Why a request fits nowhere: per resource the most one node (or the cluster) offers."""
        where = "on one node" if self.per_node else "in the whole cluster"
        short = []
        for name, need in sorted(resources.items()):
            most = max(amount(t, name) for t in self.totals)
            if most < need:
                short.append(
                    f"{name} {need:g} asked, none offered"
                    if most == 0
                    else f"{name} {need:g} asked, at most {most:g} {where}"
                )
        return "; ".join(short) or "each resource exists somewhere, but no single node has them all"


def _status_totals(snap: Snapshot) -> dict[str, float]:
    """The cluster's resource totals as `ray status` (or /api/cluster_status) reports them."""
    return {name: total for name, (_, total) in snap.ray_status.usage.items()} if snap.ray_status else {}


def _alive(snap: Snapshot) -> list[RayNode]:
    return [n for n in snap.ray_nodes if n.state in (None, "ALIVE")]


# --------------------------------------------------------------------------- cluster


def cluster_facts(snap: Snapshot) -> dict:
    nodes = _alive(snap)
    groups = ray_pods.ray_pod_groups(snap)
    head = next((p for g in groups for p in g.heads), None)
    capacity = Capacity.of(snap, nodes)
    failures = _collection_failures(snap)
    logged_mismatches = ray_pods.logged_version_mismatches(snap)
    return {
        "ray_offers": _offers(snap, nodes),
        # what `kubectl exec` needs to reach the head, for remediation commands
        "ray_head_exec": f"-n {word(head.namespace)} {word(head.name)}" if head else "<head pod>",
        "infeasible_actors": _infeasible_actors(snap, capacity),
        "infeasible_demands": _infeasible_demands(snap, capacity),
        "unschedulable_log_lines": [
            f"{p.key}: {line}"
            for p in snap.pods
            for c in p.containers
            for line in c.log_signals.get("ray_cannot_schedule", [])
        ],
        # the autoscaler (v2) re-queueing a worker that never came up (RAY-211), from the head's autoscaler log
        "autoscaler_launch_timeouts": _signal_lines(snap, "autoscaler_launch_timeout"),
        # the GCS failing to reach its external Redis (RAY-212), and the pods whose logs say so
        "gcs_redis_failures": _signal_lines(snap, "gcs_redis_unreachable"),
        "gcs_redis_failure_pods": [
            f"pod:{p.key}" for p in snap.pods if any(c.log_signals.get("gcs_redis_unreachable") for c in p.containers)
        ],
        "ray_cluster_expected": bool(groups or snap.ray_clusters),
        "ray_cluster_pods": [ray_pods.pod_brief(p) for g in groups for p in g.heads + g.workers],
        "ray_sources_failed": sorted(failures),
        # the collector's own word on the dashboard, else the first Ray source it could not read
        "ray_dashboard_failure": failures.get(DASHBOARD_SOURCE) or next(iter(failures.values()), None),
        "ray_sources_read": sorted(n for n, s in snap.sources.items() if n.startswith("ray/") and s.status == "ok"),
        "ray_head_unreachable": _head_unreachable(snap),
        "ray_version_mismatches": ray_pods.version_mismatches(snap),
        "ray_version_errors": ray_pods.version_mismatch_errors(logged_mismatches),
        "ray_version_mismatch_pods": ray_pods.version_mismatch_pods(snap, logged_mismatches),
        "object_stores": _object_stores(snap, nodes),
    }


def _signal_lines(snap: Snapshot, signal: str) -> list[str]:
    """Every pod's log lines of one signal, each as "<namespace>/<pod>: <line>"."""
    return [f"{p.key}: {line}" for p in snap.pods for c in p.containers for line in c.log_signals.get(signal, [])]


def _offers(snap: Snapshot, nodes: list[RayNode]) -> list[str]:
    """What the alive nodes offer, each; without per-node totals, the cluster's from `ray status`."""
    offers = [f"{_node_name(n)}: {resources_text(n.resources_total)}" for n in nodes if n.resources_total]
    if not offers and (totals := _status_totals(snap)):
        offers.append(f"the whole cluster (ray status, no per-node totals): {resources_text(totals)}")
    return offers


def _infeasible_actors(snap: Snapshot, capacity: Capacity | None) -> list[str]:
    """Pending actors nothing could ever hold. An actor inside a placement group waits for its group
    (a placement-group finding), not for resources of its own."""
    if capacity is None:
        return []
    return [
        f"{_actor_name(a)} requires {bundle_text(a.required_resources)}: {capacity.shortfall(a.required_resources)}"
        for a in snap.ray_actors
        if a.state in PENDING_ACTOR_STATES
        and a.placement_group_id is None
        and a.required_resources
        and not capacity.fits(a.required_resources)
    ]


def _infeasible_demands(snap: Snapshot, capacity: Capacity | None) -> list[str]:
    """`ray status` task/actor demands nothing could ever hold."""
    if snap.ray_status is None or capacity is None:
        return []
    return [
        f"ray status: {bundle_text(d.resources)}: {d.count}+ pending tasks/actors ({capacity.shortfall(d.resources)})"
        for d in snap.ray_status.demands
        if d.kind == "task_or_actor" and not capacity.fits(d.resources)
    ]


def _collection_failures(snap: Snapshot) -> dict[str, str]:
    """Ray sources the collector itself could not read (manifest.json), name -> its detail."""
    recorded = snap.manifest.get("sources")
    if not isinstance(recorded, dict):
        return {}
    return {
        name: str(entry.get("detail") or "failed")
        for name, entry in sorted(recorded.items())
        if name.startswith("ray/") and isinstance(entry, dict) and entry.get("status") == "failed"
    }


def _head_unreachable(snap: Snapshot) -> bool:
    """The collector could not read the dashboard: it said so, or every Ray source it tried failed."""
    recorded = snap.manifest.get("sources")
    if not isinstance(recorded, dict):
        return False
    ray = {n: e.get("status") for n, e in recorded.items() if n.startswith("ray/") and isinstance(e, dict)}
    if ray.get(DASHBOARD_SOURCE) == "failed":
        return True
    return "failed" in ray.values() and "ok" not in ray.values()


def _object_stores(snap: Snapshot, nodes: list[RayNode]) -> list[dict]:
    """Object store use per alive node; the cluster's total from `ray status` when no node says."""
    stores = []
    for node in nodes:
        used, total = _node_object_store(node)
        if used is not None and total:
            stores.append(_store(_node_name(node), used, total))
    if not stores and snap.ray_status is not None:
        usage = snap.ray_status.usage.get(OBJECT_STORE) or snap.ray_status.usage.get(dashboard_name(OBJECT_STORE))
        if usage is not None and usage[1]:
            stores.append(_store("the whole cluster (ray status)", usage[0], usage[1]))
    return stores


def _node_object_store(node: RayNode) -> tuple[float | None, float | None]:
    if node.object_store_used_bytes is not None:
        return node.object_store_used_bytes, node.object_store_total_bytes
    total = amount(node.resources_total, OBJECT_STORE) or None
    available = None if node.resources_available is None else amount(node.resources_available, OBJECT_STORE)
    return (total - available if total is not None and available is not None else None), total


def _store(where: str, used: float, total: float) -> dict:
    gib = 2.0**30
    return {
        "usage": used / total,
        "text": f"{where}: {used / gib:.2f} GiB of {total / gib:.2f} GiB in use ({100 * used / total:.0f}%)",
    }


# --------------------------------------------------------------------------- per subject


def scopes(snap: Snapshot, clock: Clock) -> dict[str, list[dict]]:
    nodes = _alive(snap)
    # An unplaced actor or group waits on every node and on the Kubernetes pods that should bring more.
    waiting_on = [f"ray_node:{n.node_id}" for n in nodes] + [g.link for g in ray_pods.ray_pod_groups(snap)]
    deaths = _Deaths(snap, clock)
    members: dict[str | None, list[RayActor]] = {}
    lost: dict[str | None, list[RayActor]] = {}
    for actor in snap.ray_actors:
        members.setdefault(actor.placement_group_id, []).append(actor)
        if actor.state in ("DEAD", "RESTARTING"):
            lost.setdefault(actor.node_id, []).append(actor)
    servers = indexes(snap).servers_of_ray_cluster
    return {
        "ray_node": [_ray_node(n, snap, clock, lost.get(n.node_id, []), servers) for n in snap.ray_nodes],
        "actor": [_actor(a, snap, waiting_on, deaths) for a in snap.ray_actors],
        "placement_group": [_placement_group(pg, nodes, members, waiting_on) for pg in snap.placement_groups],
    }


def _node_name(node: RayNode) -> str:
    return f"node {node.node_id[:12]}" + (
        f" (pod {node.pod})" if node.pod else f" ({node.node_ip})" if node.node_ip else ""
    )


def _ray_node(
    node: RayNode, snap: Snapshot, clock: Clock, lost: list[RayActor], servers: dict[tuple[str, str], list[VllmServer]]
) -> dict:
    """`lost`: the node's dead and restarting actors; `servers`: vLLM servers by (namespace, KubeRay cluster)."""
    pod = snap.pod(node.pod) if node.pod else None
    message = node.state_message or ""
    unexpected = node.state == "DEAD" and not message.startswith(EXPECTED_NODE_DEATHS)
    cluster_servers = servers.get((pod.namespace, pod.ray_cluster), []) if pod and pod.ray_cluster else []
    return plain(node) | {
        "name": _node_name(node),
        "resources_text": resources_text(node.resources_total),
        # Ray leaves GPU out of a node's resources when it has none; unknown only when no totals came.
        "gpu_total": node.resources_total.get("GPU", 0.0) if node.resources_total else None,
        "pod_gpu_limit": float(sum(gpu_count(c.limits, c.requests) for c in pod.containers)) if pod else None,
        "gpu_overrides": ray_pods.gpu_overrides(pod, snap) if pod else [],
        "pod_state": ray_pods.pod_brief(pod) if pod else None,
        "pod_namespace": pod.namespace if pod else None,
        "pod_name": pod.name if pod else None,
        "kuberay_object": ray_pods.kuberay_object(pod, snap) if pod and pod.ray_cluster else None,
        # a death past the history window (end_time) is history, not today's fault
        "died_unexpectedly": unexpected and clock.current(node.end_time),
        "death_age_seconds": clock.age(node.end_time),
        "death_recent": clock.recent(node.end_time),
        "actors_lost": [_actor_name(a) for a in lost],
        "_subject": f"ray_node/{node.node_id[:12]}" + (f" ({node.pod})" if node.pod else ""),
        "_links": link("ray_node", node.node_id) + link("pod", node.pod) + [f"vllm:{s.name}" for s in cluster_servers],
        "_aged": aged(f"died: {node.state_message or 'no reason given'}", node.end_time, clock) if unexpected else [],
    }


def _actor_name(actor: RayActor) -> str:
    return f"actor {actor.name or actor.class_name or '?'} ({actor.class_name}, {actor.actor_id[:8]})"


def _died_of_failure(actor: RayActor) -> bool:
    return (
        actor.state == "DEAD"
        and actor.death_cause is not None
        and not any(m in actor.death_cause for m in INTENDED_DEATH_MARKS)
    )


class _Deaths:
    """When each dead actor died, and which failed deaths are today's (within the history window)."""

    def __init__(self, snap: Snapshot, clock: Clock) -> None:
        self.clock = clock
        self.node_ends = {n.node_id: n.end_time for n in snap.ray_nodes if n.state == "DEAD"}
        # today's failed deaths by (class, cause), in the order Ray listed them
        self.failures: dict[tuple[str, str | None], list[RayActor]] = {}
        for actor in snap.ray_actors:
            if self.current_failure(actor):
                self.failures.setdefault((actor.class_name, actor.death_cause), []).append(actor)

    def time(self, actor: RayActor) -> str | None:
        """The actor's end time; else its dead node's, which it cannot have outlived (so it is at least as old)."""
        if actor.state != "DEAD":
            return None
        return actor.end_time or self.node_ends.get(actor.node_id or "")

    def current_failure(self, actor: RayActor) -> bool:
        return _died_of_failure(actor) and self.clock.current(self.time(actor))


def _actor(actor: RayActor, snap: Snapshot, waiting_on: list[str], deaths: _Deaths) -> dict:
    # Actors of one class that died the same way (Serve replaces a failed replica with a new actor) are
    # one failure: the first of them stands for the rest. Deaths past the history window do not count.
    same = deaths.failures.get((actor.class_name, actor.death_cause), [])
    pending = actor.state in PENDING_ACTOR_STATES
    died_at = deaths.time(actor)
    return plain(actor) | {
        "display_name": _actor_name(actor),
        "died_of_failure": _died_of_failure(actor),
        "death_age_seconds": deaths.clock.age(died_at),
        "death_recent": deaths.clock.recent(died_at),
        "same_deaths": len(same),
        "first_of_same_deaths": bool(same) and same[0] is actor,
        "_subject": f"actor/{actor.name or actor.class_name}/{actor.actor_id[:8]}",
        "_links": link("actor", actor.actor_id)
        + link("ray_node", actor.node_id)
        + link("placement_group", actor.placement_group_id)
        + (waiting_on if pending else []),
        "_aged": aged(f"died: {actor.death_cause}", died_at, deaths.clock) if _died_of_failure(actor) else [],
    }


def _placement_group(
    pg: PlacementGroup, nodes: list[RayNode], actors_by_group: dict[str | None, list[RayActor]], waiting_on: list[str]
) -> dict:
    members = actors_by_group.get(pg.placement_group_id, [])
    pending = pg.state in PENDING_PG_STATES
    return plain(pg) | {
        "display_name": f"placement group {pg.name or '(unnamed)'} ({pg.placement_group_id[:8]})",
        "bundles_text": ", ".join(bundle_text(b) for b in pg.bundles) or "bundles not reported",
        "pending": pending,
        "never_placeable": _never_placeable(pg, nodes),
        "waiting_actors": [_actor_name(a) for a in members if a.state in PENDING_ACTOR_STATES],
        "_subject": f"placement_group/{pg.name or pg.placement_group_id[:8]}",
        "_links": link("placement_group", pg.placement_group_id)
        + [f"actor:{a.actor_id}" for a in members]
        + (waiting_on if pending else []),
    }


def _never_placeable(pg: PlacementGroup, nodes: list[RayNode]) -> list[str]:
    """Why the group can never be placed on the nodes the cluster has, each reason one line."""
    reasons = []
    if pg.scheduling_state == "INFEASIBLE":
        reasons.append("Ray's scheduler marks it INFEASIBLE (stats.scheduling_state)")
    known = [n.resources_total for n in nodes if n.resources_total]
    if not known or not pg.bundles:
        return reasons
    capacity = Capacity(known, per_node=True)
    merged: dict[str, float] = {}
    for bundle in pg.bundles:
        for name, need in bundle.items():
            merged[name] = merged.get(name, 0.0) + need
    if pg.strategy == "STRICT_PACK" and not capacity.fits(merged):
        reasons.append(
            f"STRICT_PACK puts all bundles on one node, {bundle_text(merged)} in all: {capacity.shortfall(merged)}"
        )
    eligible = [totals for totals in known if any(fits(b, totals) for b in pg.bundles)]
    if pg.strategy == "STRICT_SPREAD" and len(pg.bundles) > len(eligible):
        reasons.append(
            f"STRICT_SPREAD puts each of its {len(pg.bundles)} bundles on its "
            f"own node; {len(eligible)} of the {len(known)} node(s) can hold one"
        )
    for bundle in pg.bundles if pg.strategy != "STRICT_PACK" else []:  # STRICT_PACK's check above covers each
        if not capacity.fits(bundle):
            reasons.append(f"bundle {bundle_text(bundle)} fits no node: {capacity.shortfall(bundle)}")
    return reasons
