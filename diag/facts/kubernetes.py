"""Facts for the kubernetes layer: pods, nodes, services, workloads, HPAs, RayClusters, daemonsets."""

from __future__ import annotations

from diag.facts.common import event_facts, link, plain
from diag.model import Node, Pod, Snapshot
from diag.parsers.logs import model_load_seconds
from diag.parsers.quantity import gpu_count, mig_counts
from diag.parsers.scheduler import parse_fit_error

GPU_NODE_LABELS = ("nvidia.com/gpu.present", "nvidia.com/gpu.product", "nvidia.com/gpu.count")
TERMINAL_PHASES = ("Succeeded", "Failed")


def pod_gpu_request(pod: Pod) -> int:
    return sum(gpu_count(c.limits or c.requests) for c in pod.containers)


def is_gpu_node(node: Node) -> bool:
    return any(k in node.labels for k in GPU_NODE_LABELS) or "nvidia.com/gpu" in node.capacity


def cluster_facts(snap: Snapshot) -> dict:
    gpu_nodes = [n for n in snap.nodes if is_gpu_node(n)]
    allocatable = {n.name: gpu_count(n.allocatable) if "nvidia.com/gpu" in n.allocatable else None for n in snap.nodes}
    allocated = _gpus_allocated_by_node(snap)
    return {
        "node_count": len(snap.nodes),
        "gpu_nodes": [n.name for n in gpu_nodes],
        "gpu_allocatable_total": sum(v or 0 for v in allocatable.values()),
        "gpu_allocated_total": sum(allocated.values()),
        "gpu_allocatable_max_per_node": max((v or 0 for v in allocatable.values()), default=0),
        "nodes": {n.name: _node_brief(n, allocatable[n.name], allocated.get(n.name, 0)) for n in snap.nodes},
    }


def scopes(snap: Snapshot) -> dict[str, list[dict]]:
    allocated = _gpus_allocated_by_node(snap)
    return {
        "pod": [_pod(p) for p in snap.pods],
        "node": [_node(n, allocated.get(n.name, 0)) for n in snap.nodes],
        "service": [_service(s, snap) for s in snap.services],
        "workload": [
            plain(w) | {"_subject": f"{w.kind.lower()}/{w.namespace}/{w.name}", "_links": link("workload", f"{w.namespace}/{w.name}")}
            for w in snap.workloads
        ],
        "hpa": [_hpa(h, snap) for h in snap.hpas],
        "raycluster": [_raycluster(c) for c in snap.ray_clusters],
        "daemonset": [
            plain(d) | {"_subject": f"daemonset/{d.namespace}/{d.name}", "_links": []} for d in snap.daemonsets
        ],
    }


def _gpus_allocated_by_node(snap: Snapshot) -> dict[str, int]:
    allocated: dict[str, int] = {}
    for pod in snap.pods:
        if pod.node_name and pod.phase not in TERMINAL_PHASES:
            allocated[pod.node_name] = allocated.get(pod.node_name, 0) + pod_gpu_request(pod)
    return allocated


def _node_brief(node: Node, gpu_allocatable: int | None, gpu_allocated: int) -> dict:
    ready = node.conditions.get("Ready", {}).get("status")
    return {
        "labels": node.labels,
        "taints": node.taints,
        "unschedulable": node.unschedulable,
        "ready": None if ready is None else ready == "True",
        "is_gpu_node": is_gpu_node(node),
        "gpu_allocatable": gpu_allocatable,
        "gpu_allocated": gpu_allocated,
    }


def _pod(pod: Pod) -> dict:
    facts = plain(pod, drop=("containers", "init_containers", "events"))
    containers = []
    signals: dict[str, list[str]] = {}
    load_times = []
    for c in pod.containers:
        containers.append(plain(c, drop=("logs", "previous_logs")))
        for name, lines in c.log_signals.items():
            signals.setdefault(name, []).extend(lines)
        for text in (c.logs, c.previous_logs):
            if text and (seconds := model_load_seconds(text)) is not None:
                load_times.append(seconds)
    scheduling = _failed_scheduling(pod)
    facts.update(
        containers=containers,
        init_containers=[plain(c, drop=("logs", "previous_logs")) for c in pod.init_containers],
        events=event_facts(pod.events),
        event_reasons=sorted({e.reason for e in pod.events}),
        gpu_request=pod_gpu_request(pod),
        mig_requests={k: v for c in pod.containers for k, v in mig_counts(c.limits or c.requests).items()},
        restarts=sum(c.restart_count for c in pod.containers),
        log_signals=signals,
        model_load_seconds=max(load_times) if load_times else None,
        failed_scheduling=scheduling,
        is_vllm=pod.vllm_server is not None,
        _subject=f"pod/{pod.namespace}/{pod.name}",
        _links=link("pod", pod.key) + link("node", pod.node_name) + link("ray_node", pod.ray_node_id)
        + link("vllm", pod.vllm_server) + link("raycluster", f"{pod.namespace}/{pod.ray_cluster}" if pod.ray_cluster else None)
        + link("workload", f"{pod.namespace}/{pod.workload_name}" if pod.workload_name else None),
    )
    return facts


def _failed_scheduling(pod: Pod) -> dict | None:
    """The newest scheduler verdict on a pod that is not placed, from its events or its condition."""
    if pod.node_name:
        return None
    messages = [e.message for e in pod.events if e.reason == "FailedScheduling"]
    condition = pod.conditions.get("PodScheduled", {})
    if condition.get("status") == "False" and condition.get("message"):
        messages.append(condition["message"])
    if not messages:
        return None
    message = messages[-1]
    fit = parse_fit_error(message)
    return {
        "message": message,
        "nodes": fit.nodes if fit else None,
        "reasons": fit.reasons if fit else {},
        "preemption": fit.preemption if fit else {},
    }


def _node(node: Node, gpu_allocated: int) -> dict:
    gpu_allocatable = gpu_count(node.allocatable) if "nvidia.com/gpu" in node.allocatable else None
    brief = _node_brief(node, gpu_allocatable, gpu_allocated)
    return plain(node, drop=("events",)) | brief | {
        "gpu_capacity": gpu_count(node.capacity) if "nvidia.com/gpu" in node.capacity else None,
        "pressure": sorted(t for t, c in node.conditions.items() if t.endswith("Pressure") and c.get("status") == "True"),
        "events": event_facts(node.events),
        "_subject": f"node/{node.name}",
        "_links": link("node", node.name),
    }


def _service(svc, snap: Snapshot) -> dict:
    selected = [
        p for p in snap.pods
        if svc.selector and p.namespace == svc.namespace and all(p.labels.get(k) == v for k, v in svc.selector.items())
    ]
    return plain(svc) | {
        "selected_pods": [p.key for p in selected],
        "fronts_vllm": any(p.vllm_server for p in selected),
        "_subject": f"service/{svc.namespace}/{svc.name}",
        "_links": link("service", f"{svc.namespace}/{svc.name}") + [f"pod:{p.key}" for p in selected]
        + [f"vllm:{p.vllm_server}" for p in selected if p.vllm_server],
    }


def _hpa(hpa, snap: Snapshot) -> dict:
    targets = [
        s for s in snap.vllm_servers
        if s.pod and (pod := snap.pod(s.pod)) and pod.namespace == hpa.namespace and pod.workload_name == hpa.target_name
    ]
    return plain(hpa) | {
        "metric_types": sorted({m.get("type", "") for m in hpa.metrics}),
        "resource_metrics_only": bool(hpa.metrics) and all(m.get("type") == "Resource" for m in hpa.metrics),
        "scales_vllm": bool(targets),
        "target_servers": [s.name for s in targets],
        "_subject": f"hpa/{hpa.namespace}/{hpa.name}",
        "_links": link("workload", f"{hpa.namespace}/{hpa.target_name}") + [f"vllm:{s.name}" for s in targets],
    }


def _raycluster(cluster) -> dict:
    return plain(cluster, drop=("events",)) | {
        "events": event_facts(cluster.events),
        "_subject": f"{cluster.kind.lower()}/{cluster.namespace}/{cluster.name}",
        "_links": link("raycluster", f"{cluster.namespace}/{cluster.name}"),
    }
