"""Facts for the kubernetes layer: pods, nodes, services, workloads, HPAs, RayClusters, daemonsets."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from diag.bundle import layout
from diag.facts import kubernetes_containers as containers
from diag.facts import kubernetes_dra as dra
from diag.facts import kubernetes_events, kubernetes_network, kubernetes_policy, ray_pods
from diag.facts import kubernetes_placement as placement
from diag.facts.common import aged, aged_events, current_events, event_facts, link, plain
from diag.facts.vllm_episodes import queue_per_scrape
from diag.parsers.logs import model_load_seconds
from diag.parsers.scheduler import missing_storage_class, parse_fit_error
from diag.parsers.signals import LogSignals, builtin_signals, looked_for
from diag.snapshot.clock import Clock
from diag.snapshot.gpu_resources import GPU_NODE_LABELS, gpu_component, is_gpu_node, pod_gpu_request, wants_gpus
from diag.snapshot.indexes import Indexes, indexes
from diag.snapshot.model import (
    HPA,
    DaemonSet,
    EngineArgs,
    Event,
    Node,
    Pod,
    RayClusterSpec,
    ServeStatus,
    Service,
    Snapshot,
    VllmServer,
    Workload,
)
from diag.snapshot.quantity import gpu_count, mig_counts

T = TypeVar("T")
TERMINAL_PHASES = ("Succeeded", "Failed")
# Reasons the kubelet gives a pod it refuses at admission (pod phase Failed, "Pod was rejected: ...").
ADMISSION_REASONS = ("TopologyAffinityError", "UnexpectedAdmissionError")
ADMISSION_OUT_OF_GPU_PREFIX = "OutOfnvidia.com/"  # "Node didn't have enough resource: nvidia.com/gpu, ..."
# Conditions an HPA sets False when it cannot work; ScalingDisabled (replicas 0) is a choice, not a fault.
HPA_BLOCKING_CONDITIONS = ("ScalingActive", "AbleToScale")
HPA_BENIGN_REASONS = ("ScalingDisabled",)
# FailedScheduling reason texts, by the scheduler plugin that wrote them (shared/reference/k8s/messages.md).
INSUFFICIENT_GPU = "Insufficient nvidia.com/gpu"
TAINT_REASON_MARKS = ("untolerated taint", "that the pod didn't tolerate")
AFFINITY_REASON_MARK = "didn't match Pod's node affinity/selector"
SPREAD_REASON_MARKS = ("pod topology spread constraints", "pod affinity rules", "pod anti-affinity rules")
# Nodes that take no pod for now: NodeUnschedulable's "node(s) were unschedulable" (cordoned), and the
# lifecycle taints of a cordoned or not Ready node, where TaintToleration names them.
NODE_DOWN_REASON_MARKS = (
    "were unschedulable",
    "{node.kubernetes.io/unschedulable:",
    "{node.kubernetes.io/not-ready:",
    "{node.kubernetes.io/unreachable:",
)
MAX_NODES_SHOWN = 10  # nodes named one by one in a pending pod's facts; the rest are counted
# KubeRay's failure events (ray-operator/controllers/ray/utils/constant.go: InvalidRayClusterSpec,
# FailedToCreateWorkerPod, ...).
KUBERAY_ERROR_EVENT_PREFIXES = ("Invalid", "FailedTo")
KUBERAY_VALIDATION_FAILED = (
    "ValidationFailed"  # RayServiceValidationFailed (ray-operator/apis/ray/v1/rayservice_types.go)
)
# KubeRay's Warning events when it refuses an object (ray-operator/controllers/ray/utils/constant.go)
KUBERAY_INVALID_EVENTS = (
    "InvalidRayServiceSpec",
    "InvalidRayServiceMetadata",
    "InvalidRayClusterSpec",
    "InvalidRayClusterMetadata",
)
# The ReplicaSet and StatefulSet controllers' event when the API server refuses a pod they create; a
# ResourceQuota's refusal reads 'pods "x" is forbidden: exceeded quota: <name>, requested: ...'.
FAILED_CREATE = "FailedCreate"
SCALING_REPLICA_SET = "ScalingReplicaSet"  # the Deployment controller's scale up/down events
QUOTA_EXCEEDED = "exceeded quota"
# The LimitRanger admission plugin's refusals (plugin/pkg/admission/limitranger/admission.go: minConstraint,
# maxConstraint, limitRequestRatioConstraint), several joined in "[..., ...]":
# 'maximum memory usage per Container is 32Gi, but limit is 64Gi', 'minimum cpu usage per Pod is 1.  No
# request is specified', 'cpu max limit to request ratio per Container is 2, but provided ratio is 4.000000'.
LIMIT_RANGE_REFUSAL = re.compile(
    r"(?:minimum|maximum) \S+ usage per (?:Container|Pod) is \S+?(?:, "
    r"but (?:request|limit) is |\.  No (?:request|limit) is specified)"
    r"|\S+ max limit to request ratio per (?:Container|Pod) is \S+, but "
)


def source_read(snap: Snapshot, name: str) -> bool:
    """Was this bundle file read? Facts drawn from a file that was not are unknown (None), not empty."""
    status = snap.sources.get(name)
    return status is not None and status.status == "ok"


@dataclass
class Lookups:
    """What every subject builder needs beside the snapshot's indexes, worked out once per snapshot."""

    snap: Snapshot
    clock: Clock
    indexes: Indexes
    allocated: dict[str, int] = field(default_factory=dict)  # node -> GPUs held by its live pods
    # node -> the live pods of every namespace on it, where k8s/node-pods/<node>.json was read whole
    cluster_wide: dict[str, list[Pod]] = field(default_factory=dict)
    mig_offered: list[str] = field(default_factory=list)  # nvidia.com/mig-* advertised anywhere
    whole_gpus_offered: bool = False  # some node advertises nvidia.com/gpu
    signals_by_message: dict[str, list[str]] = field(default_factory=dict)  # event message -> signals it matches
    placements: dict[str, dict] = field(default_factory=dict)  # _placement's, by what of a pod it reads
    # ConfigMap/Secret -> namespace -> the names listed; None where that list was not read whole
    config_names: dict[str, dict[str, set[str]] | None] = field(default_factory=dict)

    @classmethod
    def of(cls, snap: Snapshot, clock: Clock) -> Lookups:
        allocated: dict[str, int] = {}
        for pod in snap.pods:
            if pod.node_name and pod.phase not in TERMINAL_PHASES:
                allocated[pod.node_name] = allocated.get(pod.node_name, 0) + pod_gpu_request(pod)
        cluster_wide = {
            node: [p for p in pods if p.phase not in TERMINAL_PHASES]
            for node, pods in snap.node_pods.items()
            if source_read(snap, layout.NODE_PODS_FILE.replace("<node>", node))
        }
        for node, pods in cluster_wide.items():  # every namespace's pods there, this namespace's among them
            allocated[node] = sum(pod_gpu_request(p) for p in pods)
        return cls(
            snap=snap,
            clock=clock,
            indexes=indexes(snap),
            allocated=allocated,
            cluster_wide=cluster_wide,
            mig_offered=sorted({r for n in snap.nodes for r in placement.mig_offered(n)}),
            whole_gpus_offered=any(placement.gpu_allocatable(n) for n in snap.nodes),
            config_names={kind: kubernetes_network.names_read(snap, kind) for kind in ("ConfigMap", "Secret")},
        )

    def signals_in(self, message: str) -> list[str]:
        """The log signals an event message matches, each message matched once (kubelet repeats them)."""
        names = self.signals_by_message.get(message)
        if names is None:
            patterns = looked_for(self.snap).patterns
            names = self.signals_by_message[message] = [
                name for name, pattern in patterns.items() if pattern.search(message)
            ]
        return names

    def gpu_pods_on(self, node: str) -> list[Pod]:
        """The live GPU pods on a node: of every namespace where they were read, else of the bundle's."""
        pods = self.cluster_wide.get(node)
        if pods is None:
            pods = [p for p in self.indexes.pods_on_node.get(node, []) if p.phase not in TERMINAL_PHASES]
        return [p for p in pods if wants_gpus(p)]

    def gpu_free(self, node: Node) -> int | None:
        allocatable = placement.gpu_allocatable(node)
        return None if allocatable is None else allocatable - self.allocated.get(node.name, 0)


# --------------------------------------------------------------------------- cluster


def lookups(snap: Snapshot, clock: Clock) -> Lookups:
    """The lookups the Kubernetes facts share, for cluster_facts and scopes both. None of them reads the
    clock: the history pass keeps them."""
    return Lookups.of(snap, clock)


def cluster_facts(snap: Snapshot, index: Lookups) -> dict:
    clock = index.clock
    allocatable = {n.name: placement.gpu_allocatable(n) for n in snap.nodes}
    known = snap.nodes != []
    return {
        "node_count": len(snap.nodes),
        "gpu_nodes": [n.name for n in index.indexes.gpu_nodes],
        "gpu_allocatable_total": sum(v or 0 for v in allocatable.values()) if known else None,
        "gpu_allocated_total": sum(index.allocated.values()),
        "gpu_allocatable_max_per_node": max((v or 0 for v in allocatable.values()), default=0) if known else None,
        "gpu_nodes_without_devices": [
            f"{n.name} ({_gpu_labels_text(n)}; allocatable nvidia.com/gpu: "
            f"{n.allocatable.get('nvidia.com/gpu', 'absent')})"
            for n in index.indexes.gpu_nodes
            if not placement.advertises_gpus(n)
        ],
        "gpu_nodes_without_devices_names": [
            n.name for n in index.indexes.gpu_nodes if not placement.advertises_gpus(n)
        ],
        "gpu_nodes_without_devices_links": [
            f"node:{n.name}" for n in index.indexes.gpu_nodes if not placement.advertises_gpus(n)
        ],
        "mig_resources_offered": index.mig_offered,
        "nodes": {n.name: _node_brief(n, index) for n in snap.nodes},
        **_kuberay_validation(snap, clock),
    }


def _kuberay_validation(snap: Snapshot, clock: Clock) -> dict:
    """KubeRay's refusals of a RayService or RayCluster: a condition with reason ValidationFailed, or its
    Invalid* Warning event (which outlives a missing rayservices.json). None when neither was read."""
    kuberay_read = any(source_read(snap, n) for n in ("k8s/rayclusters.json", "k8s/rayservices.json"))
    events_read = source_read(snap, "k8s/events.json")
    refused: dict[str, list[str]] = {}
    for c in snap.ray_clusters:
        for kind, condition in sorted(c.conditions.items()):
            if condition.get("reason") == KUBERAY_VALIDATION_FAILED:
                refused.setdefault(f"{c.namespace}/{c.name}", []).append(
                    f"{c.kind.lower()} {c.namespace}/{c.name}: {kind}={condition.get('status')} "
                    f"(ValidationFailed): {condition.get('message') or 'no message'}"
                )
    for e in snap.events:  # the window is asked last: a fleet has tens of thousands of events
        if (
            e.involved_kind in ("RayService", "RayCluster")
            and e.type == "Warning"
            and e.reason in KUBERAY_INVALID_EVENTS
            and clock.current(e.last_seen)
        ):
            refused.setdefault(f"{e.namespace}/{e.involved_name}", []).append(
                f"{e.involved_kind.lower()} event {e.reason}: {e.message}"
            )
    if not (kuberay_read or events_read):
        return {"kuberay_refusals": None, "kuberay_refusal_links": []}
    return {
        "kuberay_refusals": [line for lines in refused.values() for line in lines],
        "kuberay_refusal_links": [f"raycluster:{key}" for key in refused],
    }


def _gpu_labels_text(node: Node) -> str:
    shown = [f"{k}={node.labels[k]}" for k in GPU_NODE_LABELS if k in node.labels]
    return ", ".join(shown) or "no GPU labels"


def scopes(snap: Snapshot, index: Lookups) -> dict[str, list[dict]]:
    return {
        "pod": [_pod_lasting(p, index) | pod_windowed(p, index) for p in snap.pods],
        "node": [_node_lasting(n, index) | node_windowed(n, index) for n in snap.nodes],
    } | object_scopes(snap, index)


def object_scopes(snap: Snapshot, index: Lookups) -> dict[str, list[dict]]:
    """The scopes beside pods and nodes: services, workloads, HPAs, RayClusters, daemonsets."""
    refusals = _failed_create_events(snap, index.clock)
    events_read = source_read(snap, "k8s/events.json")
    return (
        {
            "service": [_service(s, index) for s in snap.services],
            "workload": [_workload(w, refusals, events_read) for w in snap.workloads],
            "hpa": [_hpa(h, index) for h in snap.hpas],
            "raycluster": [_raycluster(c, index) for c in snap.ray_clusters],
            "daemonset": [_daemonset(d, index) for d in snap.daemonsets],
        }
        | kubernetes_network.scopes(snap)
        | kubernetes_policy.scopes(snap, index)
    )


def _node_brief(node: Node, index: Lookups) -> dict:
    ready = node.conditions.get("Ready", {}).get("status")
    return {
        "labels": node.labels,
        "taints": node.taints,
        "unschedulable": node.unschedulable,
        "ready": None if ready is None else ready == "True",
        "is_gpu_node": is_gpu_node(node),
        "gpu_allocatable": placement.gpu_allocatable(node),
        "gpu_allocated": index.allocated.get(node.name, 0),
    }


# --------------------------------------------------------------------------- pods


def _event_signals(events: list[Event], index: Lookups) -> dict[str, list[str]]:
    """Signal name -> the messages of the pod's current Warning events that match it: the kubelet and
    the container runtime quote the same refusals that logs do (nvidia-container-cli's, NVML's).
    Matched here, not in the rules: a CEL regex over every event of every pod is compiled each time."""
    found: dict[str, list[str]] = {name: [] for name in looked_for(index.snap).names()}
    for event in events:
        if event.type == "Warning" and event.message:
            for name in index.signals_in(event.message):
                found[name].append(event.message)
    return found


def _pod_lasting(pod: Pod, index: Lookups) -> dict:
    """The facts of a pod that no history window changes: the history pass keeps them (see pod_windowed)."""
    # config_refs: read through missing_config_refs and missing_pull_secrets
    facts = plain(pod, drop=("containers", "init_containers", "events", "config_refs"))
    logs_read = _any_log_read(pod)
    # every signal looked for: one no line matched is known absent ([]), not unknown
    signals: dict[str, list[str]] | None = {name: [] for name in looked_for(index.snap).names()} if logs_read else None
    load_times = []
    for c in pod.containers:
        if signals is not None:
            for name, lines in c.log_signals.items():
                signals.setdefault(name, []).extend(lines)
        for text in (c.logs, c.previous_logs):
            if text and (seconds := model_load_seconds(text)) is not None:
                load_times.append(seconds)
    node = index.indexes.nodes.get(pod.node_name or "")
    server = index.indexes.servers.get(pod.vllm_server or "")
    facts.update(
        containers=[plain(c, drop=_CONTAINER_DROPPED) for c in pod.containers],
        init_containers=[plain(c, drop=_CONTAINER_DROPPED) for c in pod.init_containers],
        gpu_request=pod_gpu_request(pod),
        wants_gpus=wants_gpus(pod),
        owner_ref=f"{(pod.workload_kind or 'pod').lower()}/{pod.workload_name}"
        if pod.workload_name
        else f"pod/{pod.name}",
        mig_requests={k: v for c in pod.containers for k, v in mig_counts(c.limits, c.requests).items()},
        restarts=sum(c.restart_count for c in pod.containers),
        log_signals=signals,  # None: no log of it was collected
        memory_volumes=[
            v.get("name")
            for v in pod.volumes
            if isinstance(v.get("emptyDir"), dict) and v["emptyDir"].get("medium") == "Memory"
        ],
        dev_shm_in_memory=_dev_shm_in_memory(pod),
        memory_volumes_text=", ".join(
            f"{v.get('name')} ("
            f"{'sizeLimit ' + str(v['emptyDir']['sizeLimit']) if v['emptyDir'].get('sizeLimit') else 'no sizeLimit'})"
            for v in pod.volumes
            if isinstance(v.get("emptyDir"), dict) and v["emptyDir"].get("medium") == "Memory"
        ),
        model_load_seconds=max(load_times) if load_times else None,
        # why no node takes it: only for a pod the scheduler has not placed (None also without nodes.json)
        placement=_placement(pod, index) if not pod.node_name and source_read(index.snap, "k8s/nodes.json") else None,
        gpu_resource_mismatch=_gpu_resource_mismatch(pod, index),
        admission_rejection=_admission_rejection(pod),
        node_gpu_sharing=_node_gpu_sharing(pod, node),
        gpu_env_without_request=[]
        if wants_gpus(pod) or pod.owner_kind == "DaemonSet"
        else containers.gpu_env_without_request(pod),
        ray_gpu_total=_ray_gpu_total(pod, index),
        vllm=_vllm_facts(pod, server),
        crash_loops=containers.crash_loops(pod, looked_for(index.snap).crash_causes),
        **kubernetes_network.config_ref_facts(pod, index.config_names),
        # a workload that serves (vLLM, a Ray node, a pod given GPUs), not a node agent such as the device plugin
        serving_workload=pod.owner_kind != "DaemonSet"
        and (
            pod.vllm_server is not None
            or pod.ray_cluster is not None
            or wants_gpus(pod)
            or containers.vllm_container(pod) is not None
        ),
        is_vllm=pod.vllm_server is not None,
        runs_vllm=containers.vllm_container(pod) is not None,
        ready=_condition_true(pod.conditions.get("Ready", {})),
        # a container ran (or runs): only then can the pod have a log of its own
        started=any(c.state in ("running", "terminated") or c.restart_count > 0 for c in pod.containers),
        _subject=f"pod/{pod.namespace}/{pod.name}",
    )
    return facts


# read through log_signals and the facts above, the GPUs' Xid lines and the server's engine args
_CONTAINER_DROPPED = ("logs", "previous_logs", "logs_scanned", "xid_lines", "engine_args")


def pod_windowed(pod: Pod, index: Lookups) -> dict:
    """The facts of a pod that read its events, terminations or eviction against the history window."""
    clock = index.clock
    events = current_events(pod.events, clock)  # what derived facts read: aged events are history
    events_read = source_read(index.snap, "k8s/events.json")
    scheduling = _failed_scheduling(pod, events, events_read)
    return {
        "events": event_facts(pod.events, clock),
        "event_reasons": sorted({e.reason for e in events}),
        "event_signals": _event_signals(events, index) if events_read else None,
        "failed_scheduling": scheduling,
        **_claims(pod, index),
        "dra": dra.dra_refusals(scheduling, events, events_read),
        "read_write_once_pod_holders": kubernetes_policy.read_write_once_pod_holders(pod, scheduling, index.snap),
        "evicted": pod.phase == "Failed" and pod.reason == "Evicted" and clock.current(_ended_at(pod)),
        "oom_killed": containers.oom_killed(pod, clock),
        "unnamed_crashes": containers.unnamed_crashes(pod, looked_for(index.snap).crash_causes, clock),
        "image_pull_errors": containers.image_pull_errors(pod, events),
        "cannot_start": containers.cannot_start(pod, events),
        "failed_mounts": containers.failed_mounts(events) if events_read else None,
        # the attach/detach controller says it once a while; the kubelet's current FailedMount says it still holds
        "multi_attach": kubernetes_policy.multi_attach(
            pod, pod.events if containers.failed_mounts(events) else [], index.snap
        )
        if events_read
        else None,
        "probe_failures": [e.message for e in events if e.reason == "Unhealthy"] if events_read else None,
        "placement_refusals": _placement_refusals(events) if events_read else None,
        "scale_up_failures": kubernetes_events.scale_up_failures(
            pod.events,
            events,
            current_events(index.indexes.events_about.get(kubernetes_events.AUTOSCALER_STATUS, []), clock),
        )
        if events_read
        else None,
        "_links": _pod_links(pod, index, pending=scheduling is not None and scheduling["seen"]),
        "_aged": aged_events(pod.events, clock)
        + containers.aged_terminations(pod, clock)
        + (aged(f"evicted: {pod.message}", _ended_at(pod), clock) if pod.reason == "Evicted" else []),
    }


def _placement_refusals(events: list[Event]) -> list[dict]:
    """The scheduler's and the node autoscalers' current refusals to place the pod, for rules to read
    instead of `events`: with it in a condition, every pod's whole event list goes into CEL values."""
    return [
        {"reason": e.reason, "source": e.source, "message": e.message}
        for e in events
        if e.reason in ("FailedScheduling", "NotTriggerScaleUp")
    ]


def _ended_at(pod: Pod) -> str | None:
    """When the last of a finished pod's containers ended (an evicted pod's eviction)."""
    return max((c.finished_at for c in pod.containers if c.finished_at), default=None)


def _dev_shm_in_memory(pod: Pod) -> bool:
    """A container of the pod mounts an emptyDir of medium Memory on /dev/shm (else /dev/shm is the
    runtime's 64 MiB)."""
    memory = {
        v.get("name")
        for v in pod.volumes
        if isinstance(v.get("emptyDir"), dict) and v["emptyDir"].get("medium") == "Memory"
    }
    return any(c.mounts.get("/dev/shm") in memory for c in pod.containers)


def _condition_true(condition: dict) -> bool | None:
    status = condition.get("status")
    return None if status not in ("True", "False") else status == "True"


def _any_log_read(pod: Pod) -> bool:
    return any(c.logs is not None or c.previous_logs is not None for c in pod.containers)


def _node_gpu_sharing(pod: Pod, node: Node | None) -> dict | None:
    """How the pod's node shares its GPUs: `shared` false on an unshared node or for a pod on no node;
    None when its node is not in nodes.json."""
    if not pod.node_name:
        return {"shared": False}
    if node is None:
        return None
    sharing = placement.gpu_sharing(node)
    return {"shared": False} if sharing is None else {"shared": True} | sharing


def _pod_links(pod: Pod, index: Lookups, pending: bool) -> list[str]:
    links = (
        link("pod", pod.key)
        + link("node", pod.node_name)
        + link("ray_node", pod.ray_node_id)
        + link("vllm", pod.vllm_server)
        + link("raycluster", f"{pod.namespace}/{pod.ray_cluster}" if pod.ray_cluster else None)
        + link("workload", f"{pod.namespace}/{pod.workload_name}" if pod.workload_name else None)
    )
    if pending and wants_gpus(pod):
        # an unplaced GPU pod's fate is the GPU nodes': their faults explain why it waits
        links += [f"node:{n.name}" for n in index.indexes.gpu_nodes]
    return links


def _claims(pod: Pod, index: Lookups) -> dict:
    """The PersistentVolumeClaims the pod mounts, what the cluster said about each (their own events:
    ProvisioningFailed, FailedBinding), and the StorageClasses those events say do not exist."""
    claims = [
        v["persistentVolumeClaim"]["claimName"]
        for v in pod.volumes
        if isinstance(v.get("persistentVolumeClaim"), dict)
        and isinstance(v["persistentVolumeClaim"].get("claimName"), str)
    ]
    said = [
        (claim, e)
        for claim in claims
        for e in current_events(
            index.indexes.events_about.get(("PersistentVolumeClaim", pod.namespace, claim), []), index.clock
        )
    ]
    return {
        "claims": claims,
        "claim_events": [f"{claim}: {e.reason}: {e.message}" for claim, e in said],
        "missing_storage_classes": sorted({name for _, e in said if (name := missing_storage_class(e.message))}),
    }


def _failed_scheduling(pod: Pod, events: list[Event], events_read: bool) -> dict | None:
    """The newest scheduler verdict on a pod that is not placed, from its current events or its condition.
    `seen` false when none was found where it would be (a placed pod, or events read with none for it);
    None when the pod waits, its condition says nothing and events.json was not read."""
    if pod.node_name:
        return _no_scheduling_failure()
    messages = [e.message for e in events if e.reason == "FailedScheduling"]
    condition = pod.conditions.get("PodScheduled", {})
    if condition.get("status") == "False" and condition.get("message"):
        messages.append(condition["message"])
    if not messages:
        return _no_scheduling_failure() if events_read else None
    message = messages[-1]
    fit = parse_fit_error(message)
    reasons = fit.reasons if fit else {}
    return {
        "seen": True,
        "message": message,
        "nodes": fit.nodes if fit else None,
        "reasons": reasons,
        "preemption": fit.preemption if fit else {},
        "insufficient_gpu": INSUFFICIENT_GPU in reasons,
        "taint_reasons": [r for r in reasons if any(mark in r for mark in TAINT_REASON_MARKS)],
        "affinity_mismatch": any(AFFINITY_REASON_MARK in r for r in reasons),
        "spread_reasons": [f"{n} {r}" for r, n in reasons.items() if any(mark in r for mark in SPREAD_REASON_MARKS)],
        "node_down_reasons": [
            f"{n} {r}" for r, n in reasons.items() if any(mark in r for mark in NODE_DOWN_REASON_MARKS)
        ],
    }


def _no_scheduling_failure() -> dict:
    return {
        "seen": False,
        "message": None,
        "nodes": None,
        "reasons": {},
        "preemption": {},
        "insufficient_gpu": False,
        "taint_reasons": [],
        "affinity_mismatch": False,
        "spread_reasons": [],
        "node_down_reasons": [],
    }


def _placement(pod: Pod, index: Lookups) -> dict:
    """Why an unplaced pod fits no node, node by node: selector, taints, free GPUs. Worked out once for
    the pods that ask the same (the replicas of one template): it reads every node, and a full cluster
    can hold hundreds of pending replicas. Shared between them, and read-only like all facts."""
    asks = repr(
        (
            wants_gpus(pod),
            pod_gpu_request(pod),
            pod.node_selector,
            pod.affinity,
            pod.tolerations,
            pod.topology_spread_constraints,
        )
    )
    found = index.placements.get(asks)
    if found is None:
        found = index.placements[asks] = _placement_on_nodes(pod, index)
    return found


def _placement_on_nodes(pod: Pod, index: Lookups) -> dict:
    candidates = index.indexes.gpu_nodes if wants_gpus(pod) else list(index.indexes.nodes.values())
    matching = [n for n in candidates if placement.matches_selector(pod, n)]
    asked = placement.selector_keys(pod)
    shown = asked + ([placement.GPU_PRODUCT_LABEL] if placement.GPU_PRODUCT_LABEL not in asked else [])
    untolerated = [(n, t) for n in matching for t in placement.untolerated_taints(pod, n)]
    request = pod_gpu_request(pod)
    down_with_room = [n for n in matching if _unavailable_note(n) and _room_for(n, request, index)]
    return {
        "selector": placement.selector_terms(pod),
        "candidate_nodes": [n.name for n in candidates],
        "nodes_matching_selector": [n.name for n in matching],
        "candidate_labels": [
            f"{n.name}: " + ", ".join(f"{k}={n.labels.get(k, '(not set)')}" for k in shown) for n in candidates
        ],
        "untolerated_taints": [f"{n.name}: {placement.taint_text(t)}" for n, t in untolerated],
        "tolerations": [placement.toleration_text(t) for t in pod.tolerations],
        "missing_tolerations": sorted({placement.toleration_for(t) for _, t in untolerated}),
        "gpu_free": [
            f"{n.name}: {_at_most(index, n)}{index.gpu_free(n)} of {placement.gpu_allocatable(n)} nvidia.com/gpu free"
            f"{_unavailable_note(n)}"
            for n in matching
            if placement.gpu_allocatable(n) is not None
        ],
        "gpu_allocatable_max": max((placement.gpu_allocatable(n) or 0 for n in matching), default=0),
        "spread_and_pod_affinity": placement.spread_and_pod_affinity(pod),
        # the nodes it may use that take no pod now (cordoned, not Ready) but have room for it
        "unavailable_fitting": [_node_as_read(n, index) for n in down_with_room],
        "unavailable_fitting_names": [n.name for n in down_with_room],
        "nodes_refused": _nodes_refused(pod, request, candidates, matching, index),
    }


def _room_for(node: Node, request: int, index: Lookups) -> bool:
    """Whether the node would hold the pod's GPUs if it took pods (unknown counts as room)."""
    free = index.gpu_free(node)
    return request == 0 or free is None or free >= request


def _node_as_read(node: Node, index: Lookups) -> str:
    """A node as llmdiag read it: why it takes no pod, its free GPUs and who holds the others."""
    notes = _unavailable_note(node).strip(" ()")
    allocatable = placement.gpu_allocatable(node)
    gpus = (
        ""
        if allocatable is None
        else f"{_at_most(index, node)}{index.gpu_free(node)} of {allocatable} nvidia.com/gpu free, "
        f"GPU pods on it: {_gpu_pods_text(node.name, index)}"
    )
    return f"{node.name}: " + "; ".join(part for part in (notes, gpus) if part)


def _nodes_refused(pod: Pod, request: int, candidates: list[Node], matching: list[Node], index: Lookups) -> list[str]:
    """Node by node, what of the nodes as read keeps the pod off each one its selector allows."""
    found = []
    for node in matching[:MAX_NODES_SHOWN]:
        why = [_unavailable_note(node).strip(" ()")] if _unavailable_note(node) else []
        why += [f"taint {placement.taint_text(t)} not tolerated" for t in placement.untolerated_taints(pod, node)]
        free, allocatable = index.gpu_free(node), placement.gpu_allocatable(node)
        if request and not allocatable:
            why.append(f"advertises {'no' if allocatable is None else '0'} nvidia.com/gpu")
        elif request and free is not None and (free < request or not why):
            short = f" for its {request}" if free < request else ", enough by what was read"
            why.append(
                f"{_at_most(index, node)}{free} of {allocatable} nvidia.com/gpu free{short} "
                f"(GPU pods on it: {_gpu_pods_text(node.name, index)})"
            )
        found.append(f"{node.name}: {', '.join(why) or 'nothing in what was read keeps it off'}")
    if len(matching) > MAX_NODES_SHOWN:
        found.append(f"and {len(matching) - MAX_NODES_SHOWN} more")
    if len(candidates) > len(matching):
        found.append(f"{len(candidates) - len(matching)} other node(s) do not match its nodeSelector/affinity")
    return found


def _unavailable_note(node: Node) -> str:
    """Why free GPUs on this node do not count: it is cordoned or not Ready."""
    notes = (["cordoned"] if node.unschedulable else []) + (
        [f"Ready={node.conditions['Ready'].get('status')}"]
        if node.conditions.get("Ready", {}).get("status") not in (None, "True")
        else []
    )
    return f" ({', '.join(notes)})" if notes else ""


def _gpu_resource_mismatch(pod: Pod, index: Lookups) -> dict | None:
    """The GPU resource the pod asks for against what the device plugins offer (MIG strategy): `found`
    false when they agree; None without nodes.json."""
    if not source_read(index.snap, "k8s/nodes.json"):
        return None
    offered_mig, offers_whole = index.mig_offered, index.whole_gpus_offered
    asked_mig = sorted({k for c in pod.containers for k in mig_counts(c.limits, c.requests)})
    if asked_mig and not set(asked_mig) & set(offered_mig):
        asked = asked_mig
    elif pod_gpu_request(pod) > 0 and not offers_whole and offered_mig:
        asked = ["nvidia.com/gpu"]
    else:
        return {"found": False}
    return {
        "found": True,
        "requested": asked,
        "offered": offered_mig + (["nvidia.com/gpu"] if offers_whole else []),
        "mig_strategies": sorted(
            {
                f"{n.name}: {placement.MIG_STRATEGY_LABEL}={n.labels[placement.MIG_STRATEGY_LABEL]}"
                for n in index.indexes.gpu_nodes
                if placement.MIG_STRATEGY_LABEL in n.labels
            }
        ),
    }


def _admission_rejection(pod: Pod) -> dict:
    """The kubelet's refusal of the pod at admission, from its status; `rejected` false when it did not."""
    reason = pod.reason or ""
    if pod.phase != "Failed" or not (reason in ADMISSION_REASONS or reason.startswith(ADMISSION_OUT_OF_GPU_PREFIX)):
        return {"rejected": False, "reason": None, "message": None}
    return {"rejected": True, "reason": reason, "message": pod.message}


def _ray_gpu_total(pod: Pod, index: Lookups) -> float | None:
    node = index.indexes.ray_node_in_pod.get(pod.key)
    return None if node is None else node.resources_total.get("GPU", 0.0)


def _vllm_facts(pod: Pod, server: VllmServer | None) -> dict | None:
    container = containers.vllm_container(pod)
    if container is None:
        return None
    args = server.engine_args if server else None
    port = args.port if args else None
    return {
        "container": container.name,
        "port": port,
        "model": args.model if args else None,
        "health": server.health if server else None,
    } | containers.probe_facts(container, port)


# --------------------------------------------------------------------------- nodes


def _node_lasting(node: Node, index: Lookups) -> dict:
    """The facts of a node that no history window changes: the history pass keeps them."""
    on_node = index.indexes.pods_on_node.get(node.name, [])
    ready = node.conditions.get("Ready")
    return (
        plain(node, drop=("events",))
        | _node_brief(node, index)
        | {
            "gpu_capacity": gpu_count(node.capacity) if "nvidia.com/gpu" in node.capacity else None,
            "ready_condition": ready,
            "pressure": sorted(
                t for t, c in node.conditions.items() if t.endswith("Pressure") and c.get("status") == "True"
            ),
            "pressure_detail": [
                f"{t}: {c.get('reason')} ({c.get('message')})"
                for t, c in sorted(node.conditions.items())
                if t.endswith("Pressure") and c.get("status") == "True"
            ],
            "gpu_sharing": placement.gpu_sharing(node),
            "pods": [p.key for p in on_node],
            "gpu_pods": [p.key for p in index.gpu_pods_on(node.name)],
            "gpu_pods_text": _gpu_pods_text(node.name, index),
            "_subject": f"node/{node.name}",
            "_links": link("node", node.name) + [f"pod:{p.key}" for p in on_node],
        }
    )


def _at_most(index: Lookups, node: Node) -> str:
    """GPUs free on a node, counted from the pods of some namespaces only, is an upper bound."""
    return "" if index.snap.pods_listed_in() is None or node.name in index.cluster_wide else "at most "


def _gpu_pods_text(node: str, index: Lookups) -> str:
    """The GPU pods on a node, said as far as the bundle knows them: every namespace's where they were
    read on that node; else, in a triage of some namespaces, the pods of the others were not read."""
    keys = ", ".join(p.key for p in index.gpu_pods_on(node)) or "none"
    listed_in = index.snap.pods_listed_in()
    if listed_in is None or node in index.cluster_wide:
        return keys
    return f"{keys} of namespace {', '.join(listed_in)} (other namespaces' pods were not read)"


def node_windowed(node: Node, index: Lookups) -> dict:
    """The facts of a node that read its events against the history window."""
    return {
        "events": event_facts(node.events, index.clock),
        "event_lines": [f"{e.reason}: {e.message}" for e in current_events(node.events, index.clock)],
        "_aged": aged_events(node.events, index.clock),
    }


# --------------------------------------------------------------------------- services, HPAs


def _service(svc: Service, index: Lookups) -> dict:
    selected = [p for p in _candidates(svc, index.indexes.pods_by_label) if _selects(svc, p.labels)]
    workloads = [w for w in _candidates(svc, index.indexes.workloads_by_label) if _selects(svc, w.template_labels)]
    selects_nothing = bool(svc.selector) and not selected and not workloads
    zero = [w for w in workloads if w.replicas == 0 and w.template_runs_vllm]
    # vLLM pods of its namespace labelled with a key of its selector, but another value: what it was meant for
    lookalikes = (
        [p for p in index.indexes.vllm_pods_in.get(svc.namespace, []) if set(p.labels) & set(svc.selector)]
        if selects_nothing
        else []
    )
    return plain(svc) | {
        **kubernetes_network.target_port_facts(svc, selected),
        "selects_nothing": selects_nothing,
        "scaled_to_zero": [_scaled_to_zero(w, index) for w in zero],
        "scaled_to_zero_refs": [f"{w.kind.lower()}/{w.name}" for w in zero],
        "lookalike_vllm_pods": [
            f"{p.name} ({', '.join(f'{k}={p.labels[k]}' for k in sorted(svc.selector) if k in p.labels)})"
            for p in lookalikes
        ],
        "selected_pods": [p.key for p in selected],
        "selected_pod_states": [_pod_state(p) for p in selected],
        "selected_pod_names": [p.name for p in sorted(selected, key=lambda p: p.phase == "Failed")],  # live ones first
        "selector_arg": ",".join(f"{k}={v}" for k, v in sorted(svc.selector.items())),  # for kubectl -l
        # by its workloads' pod template too: a Deployment left with no pod still has the Service in front
        "fronts_vllm": any(p.vllm_server for p in selected) or any(w.template_runs_vllm for w in workloads),
        # None when endpoints.json holds nothing for this Service: unknown, not empty
        "ready_addresses": svc.ready_addresses if svc.endpoints_seen else None,
        "not_ready_addresses": svc.not_ready_addresses if svc.endpoints_seen else None,
        "_subject": f"service/{svc.namespace}/{svc.name}",
        "_links": link("service", f"{svc.namespace}/{svc.name}")
        + [f"pod:{p.key}" for p in selected]
        + [f"vllm:{p.vllm_server}" for p in selected if p.vllm_server]
        # the workloads whose pods it would select, even while they have none
        + [f"workload:{w.namespace}/{w.name}" for w in workloads]
        + [f"pod:{p.key}" for p in lookalikes],
    }


def _scaled_to_zero(workload: Workload, index: Lookups) -> str:
    """A vLLM workload at spec.replicas 0, with its controller's last scale-down event in the window."""
    said = f"{workload.kind.lower()}/{workload.name}: spec.replicas 0"
    down = [
        e
        for e in index.snap.events
        if e.reason == SCALING_REPLICA_SET
        and e.involved_kind == workload.kind
        and e.involved_name == workload.name
        and e.namespace == workload.namespace
        and e.message.endswith(" to 0")
        and index.clock.current(e.last_seen)
    ]
    if down:
        last = max(down, key=lambda e: e.last_seen or "")
        said += f" ({last.last_seen or 'time not given'}: {last.message})"
    return said


def _workload(workload: Workload, refusals: dict[tuple[str, str, str], list[Event]], events_read: bool) -> dict:
    quota = _refusals(workload, refusals, events_read, lambda message: QUOTA_EXCEEDED in message)
    limit_range = _refusals(
        workload, refusals, events_read, lambda message: LIMIT_RANGE_REFUSAL.search(message) is not None
    )
    other = _refusals(
        workload,
        refusals,
        events_read,
        lambda message: QUOTA_EXCEEDED not in message and LIMIT_RANGE_REFUSAL.search(message) is None,
    )
    return plain(workload) | {
        "other_refusals": other,
        "quota_refusals": quota,
        "refused_by_quota": bool(quota) if quota is not None else None,
        "limit_range_refusals": limit_range,
        "ref": f"{workload.kind.lower()}/{workload.name}",
        "_subject": f"{workload.kind.lower()}/{workload.namespace}/{workload.name}",
        "_links": link("workload", f"{workload.namespace}/{workload.name}"),
    }


def _failed_create_events(snap: Snapshot, clock: Clock) -> dict[tuple[str, str, str], list[Event]]:
    """The controllers' FailedCreate events (the API server refused a pod they create), by the workload they
    are about: (namespace, "StatefulSet", name) or, for a ReplicaSet `<deployment>-<pod-template-hash>`,
    (namespace, "Deployment", <deployment>). Events past the history window do not count."""
    found: dict[tuple[str, str, str], list[Event]] = {}
    for event in snap.events:
        if event.reason != FAILED_CREATE or not clock.current(event.last_seen):
            continue
        if event.involved_kind == "StatefulSet":
            key = (event.namespace or "", "StatefulSet", event.involved_name)
        elif event.involved_kind == "ReplicaSet":
            key = (event.namespace or "", "Deployment", event.involved_name.rsplit("-", 1)[0])
        else:
            continue
        found.setdefault(key, []).append(event)
    return found


def _refusals(
    workload: Workload,
    refusals: dict[tuple[str, str, str], list[Event]],
    events_read: bool,
    says: Callable[[str], bool],
) -> list[str] | None:
    """Why the API server refused this workload's pods, newest first: the refusals whose message `says` so.

    A Deployment carries its ReplicaSets' ReplicaFailure condition while the refusal lasts; the
    controllers also write FailedCreate events (see _failed_create_events), the only trace for a
    StatefulSet: without events.json, a StatefulSet's refusals are unknown (None).
    """
    found = []
    failure = workload.conditions.get("ReplicaFailure", {})
    if failure.get("status") == "True" and says(failure.get("message") or ""):
        found.append(failure["message"])
    events = [e for e in refusals.get((workload.namespace, workload.kind, workload.name), []) if says(e.message)]
    found += [e.message for e in sorted(events, key=lambda e: e.last_seen or "", reverse=True)]
    if not found and not events_read and workload.kind != "Deployment":
        return None
    return found


def _candidates(svc: Service, by_label: dict[tuple[str, str, str], list[T]]) -> list[T]:
    """What carries the rarest of the Service's selector labels, in listing order (none without a selector)."""
    lists = [by_label.get((svc.namespace, key, value), []) for key, value in svc.selector.items()]
    return min(lists, key=len, default=[])


def _selects(svc: Service, labels: dict[str, str]) -> bool:
    return bool(svc.selector) and all(labels.get(k) == v for k, v in svc.selector.items())


def _pod_state(pod: Pod) -> str:
    """One line on why a pod is or is not ready: phase, Ready condition, waiting reason, last probe failure."""
    ready = pod.conditions.get("Ready", {})
    waiting = [c.state_reason for c in pod.containers if c.state_reason]
    probe = [e.message for e in pod.events if e.reason == "Unhealthy"]
    parts = [f"{pod.name}: {pod.phase or 'phase unknown'}", f"Ready={ready.get('status', '?')}"]
    parts += waiting[:1] + probe[-1:]
    return ", ".join(parts)


def _hpa(hpa: HPA, index: Lookups) -> dict:
    clock = index.clock
    targets = index.indexes.servers_of_workload.get((hpa.namespace, hpa.target_name), [])
    events = index.indexes.events_about.get(("HorizontalPodAutoscaler", hpa.namespace, hpa.name), [])
    queues = {s.name: s.summary for s in targets if s.summary is not None}
    growth = [m.waiting_growth for m in queues.values() if m.waiting_growth is not None]
    waiting = [m.requests_waiting for m in queues.values() if m.requests_waiting is not None]
    facts = kubernetes_network.hpa_target_facts(hpa, index.snap, bool(targets))
    return plain(hpa) | {
        **facts,
        "metric_types": sorted({m.get("type", "") for m in hpa.metrics}),
        "metric_names": [f"{m.get('type')}/{m.get('name')}" for m in hpa.metrics],
        "resource_metrics_only": bool(hpa.metrics)
        and all(m.get("type") in ("Resource", "ContainerResource") for m in hpa.metrics),
        "scales_vllm": bool(targets),
        "target_servers": [s.name for s in targets],
        "at_max": (
            hpa.current_replicas >= hpa.max_replicas
            if hpa.current_replicas is not None and hpa.max_replicas is not None
            else None
        ),
        "target_queues": [
            f"{name}: {m.requests_waiting:g} waiting"
            + (f" ({m.waiting_growth:+g} between first and last scrape)" if m.waiting_growth is not None else "")
            for name, m in queues.items()
            if m.requests_waiting is not None
        ],
        "queue_growth_max": max(growth) if growth else None,
        # per server, the fewest requests waiting at any scrape and the smallest share of the running batch:
        # a queue that held at every scrape, not one request seen once
        "target_queue_floors": [
            {
                "waiting": min(q["waiting"] for q in scrapes),
                "share": min(
                    q["waiting"] / q["running"] if q["running"] > 0 else float(q["waiting"] > 0) for q in scrapes
                ),
            }
            for s in targets
            if (scrapes := queue_per_scrape(s.scrapes))
        ]
        if queues
        else None,
        "queue_waiting_max": max(waiting) if waiting else None,
        "metric_problems": [
            f"{kind}={c.get('status')} {c.get('reason')}: {c.get('message')}"
            for kind, c in hpa.conditions.items()
            if kind in HPA_BLOCKING_CONDITIONS
            and c.get("status") == "False"
            and c.get("reason") not in HPA_BENIGN_REASONS
        ],
        "warning_events": [f"{e.reason}: {e.message}" for e in current_events(events, clock) if e.type == "Warning"],
        # a metric missing for a while (a new pod's first minutes) is no fault once ScalingActive is True again
        "metric_events": [
            f"{e.reason}: {e.message}"
            for e in current_events(events, clock)
            if e.reason in kubernetes_network.HPA_METRIC_EVENTS
            and hpa.conditions.get("ScalingActive", {}).get("status") != "True"
        ],
        "_subject": f"hpa/{hpa.namespace}/{hpa.name}",
        "_aged": aged_events(events, clock),
        "_links": link("workload", f"{hpa.namespace}/{hpa.target_name}")
        + [f"vllm:{s.name}" for s in targets]
        + link("workload", f"{hpa.namespace}/{target}" if (target := facts["target_lookalike"]) else None),
    }


# --------------------------------------------------------------------------- KubeRay


def _raycluster(cluster: RayClusterSpec, index: Lookups) -> dict:
    snap, clock = index.snap, index.clock
    events_read = source_read(snap, "k8s/events.json")
    members = index.indexes.pods_of_ray_cluster.get((cluster.namespace, cluster.name), [])
    running = [p for p in members if p.phase == "Running"]
    return plain(cluster, drop=("events",)) | {
        "events": event_facts(cluster.events, clock),
        "kubectl_kind": cluster.kind.lower(),
        # the RayCluster its pods name in their ray.io/cluster label (a RayService's is generated)
        "pods_cluster": cluster.active_cluster or cluster.pending_cluster or cluster.name,
        "operator_errors": [
            f"{e.reason}: {e.message}"
            for e in current_events(cluster.events, clock)
            if e.type == "Warning" and e.reason.startswith(KUBERAY_ERROR_EVENT_PREFIXES)
        ]
        if events_read
        else None,
        "unhealthy_conditions": _unhealthy_ray_conditions(cluster),
        "partial_groups": [
            f"{g.name}: {g.pods_running} of {desired} pods running, {pending} pending ({g.gpu_limit_per_pod} GPU each)"
            for g in cluster.worker_groups
            if (desired := g.replicas if g.replicas is not None else g.pods_total)
            and 0 < g.pods_running < desired
            and (pending := sum(1 for p in members if p.ray_group == g.name and p.phase == "Pending"))
        ],
        "pending_pods": [p.name for p in members if p.phase == "Pending"],
        **_serve_status_facts(cluster, clock, looked_for(snap)),
        "serve_replicas_too_big": ray_pods.serve_replicas_too_big(cluster),
        "gpus_running": sum(pod_gpu_request(p) for p in running),
        "parallel_gpus_needed": _parallel_gpus_needed(cluster, members, index),
        "_subject": f"{cluster.kind.lower()}/{cluster.namespace}/{cluster.name}",
        "_links": link("raycluster", f"{cluster.namespace}/{cluster.name}") + _run_links(cluster, members, index),
        "_aged": aged_events(cluster.events, clock),
    }


def _run_links(cluster: RayClusterSpec, members: list[Pod], index: Lookups) -> list[str]:
    """The pods (and, for a RayService, the RayClusters) a finding on this object is about. A RayService's
    pods carry the label of the RayCluster it runs (ray.io/cluster=<rayservice>-<suffix>), never its own
    name: its active and pending clusters (status) and the clusters it created are linked, with their pods,
    so that a RayService-level cause explains what happens in those pods."""
    if cluster.kind != "RayService":
        return [f"pod:{p.key}" for p in members]
    names = {n for n in (cluster.active_cluster, cluster.pending_cluster) if n}
    names |= {
        c.name
        for c in index.snap.ray_clusters
        if any(s is cluster for s in index.indexes.rayservices_owning.get((c.namespace, c.name), []))
    }
    pods = [p for name in sorted(names) for p in index.indexes.pods_of_ray_cluster.get((cluster.namespace, name), [])]
    return [f"raycluster:{cluster.namespace}/{name}" for name in sorted(names)] + [
        f"pod:{p.key}" for p in members + pods
    ]


SERVE_FAILED_STATUSES = ("DEPLOY_FAILED", "UNHEALTHY")  # of an application or a deployment (ray.serve.schema)


def _serve_status_facts(cluster: RayClusterSpec, clock: Clock, signals: LogSignals | None = None) -> dict:
    """What a RayService says of its Serve applications (a RayCluster says nothing of Serve: empty lists)."""
    waiting = (signals or builtin_signals()).patterns.get("serve_replicas_unscheduled")
    pending = [s for s in cluster.serve_statuses if s.cluster == "pending" and s.deployment is None]
    upgrade_started = cluster.condition_times.get("UpgradeInProgress")
    not_running = [_serve_status_text(s) for s in pending if s.status != "RUNNING"]
    if cluster.pending_cluster and not pending:
        not_running = [f"pending cluster {cluster.pending_cluster}: no Serve application reported yet"]
    return {
        "serve_failures": [
            _serve_status_text(s)
            for s in cluster.serve_statuses
            if s.status in SERVE_FAILED_STATUSES and not (waiting and s.message and waiting.search(s.message))
        ],
        "serve_waiting_for_resources": [
            _serve_status_text(s) for s in cluster.serve_statuses if waiting and s.message and waiting.search(s.message)
        ],
        "upgrade_in_progress": _upgrade_in_progress(cluster),
        # None: an upgrade whose start KubeRay did not record (no UpgradeInProgress transition time)
        "upgrade_seconds": (clock.age(upgrade_started) if upgrade_started else None)
        if cluster.pending_cluster
        else 0.0,
        "pending_cluster": cluster.pending_cluster,
        "pending_not_running": not_running,
    }


def _upgrade_in_progress(cluster: RayClusterSpec) -> bool:
    """A pending cluster replacing an active one; the first cluster of a new RayService is pending too,
    without an active one (KubeRay's UpgradeInProgress condition says which, where it has one)."""
    if cluster.pending_cluster is None:
        return False
    if (condition := cluster.conditions.get("UpgradeInProgress")) is not None:
        return condition.get("status") == "True"
    return cluster.active_cluster is not None


def _serve_status_text(status: ServeStatus) -> str:
    where = f"application {status.application}" + (f", deployment {status.deployment}" if status.deployment else "")
    return f"{status.cluster} cluster {status.cluster_name or '?'}: {where}: {status.status or 'no status'}" + (
        f": {status.message}" if status.message else ""
    )


def _unhealthy_ray_conditions(cluster: RayClusterSpec) -> list[str]:
    """KubeRay's own word that the cluster is not well (ray-operator/apis/ray/v1/raycluster_types.go)."""
    found = [
        f"{kind}={c.get('status')} ({c.get('reason')}): {c.get('message') or 'no message'}"
        for kind, c in sorted(cluster.conditions.items())
        if (kind == "HeadPodReady" and c.get("status") == "False")
        or (kind == "ReplicaFailure" and c.get("status") == "True")
    ]
    if cluster.kind == "RayCluster" and cluster.state == "failed":
        found.append(f"state=failed: {cluster.reason or 'no reason given'}")
    return found


def _parallel_gpus_needed(cluster: RayClusterSpec, members: list[Pod], index: Lookups) -> int | None:
    """GPUs one vLLM replica spans (tensor x pipeline parallel), from a vLLM server in the cluster's pods
    or from the serve config (ray.serve.llm engine_kwargs) of the RayService it belongs to."""
    sizes = [
        size
        for p in members
        for s in index.indexes.servers_in_pod.get(p.key, [])
        if s.engine_args and (size := _parallel_size(s.engine_args)) is not None
    ]
    owners = index.indexes.rayservices_owning.get((cluster.namespace, cluster.name), [])
    for config in [cluster.serve_config] + [s.serve_config for s in owners]:
        sizes += _serve_config_parallel_sizes(config)
    return max(sizes) if sizes else None


def _parallel_size(args: EngineArgs) -> int | None:
    if args.tensor_parallel_size is None or args.pipeline_parallel_size is None:
        return None
    return args.tensor_parallel_size * args.pipeline_parallel_size


def _serve_config_parallel_sizes(config: Any) -> list[int]:
    if isinstance(config, list):
        return [size for item in config for size in _serve_config_parallel_sizes(item)]
    if not isinstance(config, dict):
        return []
    found = []
    if "tensor_parallel_size" in config or "pipeline_parallel_size" in config:
        try:
            found.append(int(config.get("tensor_parallel_size", 1)) * int(config.get("pipeline_parallel_size", 1)))
        except (TypeError, ValueError):
            pass  # a templated or malformed value tells nothing about the size
    return found + [size for value in config.values() for size in _serve_config_parallel_sizes(value)]


# --------------------------------------------------------------------------- GPU daemonsets


def _daemonset(ds: DaemonSet, index: Lookups) -> dict:
    component = gpu_component(ds.name, ds.images)
    own = [
        p
        for p in index.snap.pods
        if p.owner_kind == "DaemonSet" and p.owner_name == ds.name and p.namespace == ds.namespace
    ]
    unready = [
        p for p in own if p.conditions.get("Ready", {}).get("status") != "True" and p.phase not in TERMINAL_PHASES
    ]
    excluded = (
        [n for n in index.indexes.gpu_nodes if any(n.labels.get(k) != v for k, v in ds.node_selector.items())]
        if component
        else []
    )
    # by name: a GPU operator's daemonsets have a pod on each of a fleet's nodes
    with_pod = {p.node_name for p in own}
    without_pod = [n for n in index.indexes.gpu_nodes if own and n.name not in with_pod] if component else []
    # A node without one of the daemonset's pods says so only when the pod list was read whole.
    pods_complete = (
        index.snap.sources.get("k8s/pods.json") is not None and index.snap.sources["k8s/pods.json"].status == "ok"
    )
    excluded_names = {n.name for n in excluded}
    uncovered = (
        excluded + [n for n in without_pod if n.name not in excluded_names]
        if pods_complete or not without_pod
        else None
    )
    return plain(ds) | {
        "gpu_component": component,
        "is_gpu_component": component is not None,
        "unready_pods": [_pod_state(p) + f" on {p.node_name or 'no node'}" for p in unready],
        "gpu_nodes_uncovered": None if uncovered is None else [n.name for n in uncovered],
        "_subject": f"daemonset/{ds.namespace}/{ds.name}",
        "_links": [f"pod:{p.key}" for p in unready]
        + [f"node:{p.node_name}" for p in unready if p.node_name]
        + [f"node:{n.name}" for n in uncovered or excluded],
    }
