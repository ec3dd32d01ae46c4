"""Kubernetes facts: scheduler filters as the rules read them (selector, taints, GPU resources), the vLLM
container's probes, crash causes, and the K8S rules on small snapshots built from the model."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from diag.core.rules_dir import builtin_rules_dir, load_settings
from diag.engine.rules import evaluate, load_rules
from diag.facts import build_facts
from diag.facts import kubernetes_containers as containers
from diag.facts import kubernetes_placement as placement
from diag.link.join import join
from diag.parsers.signals import builtin_signals
from diag.snapshot.clock import Clock
from diag.snapshot.gpu_resources import is_gpu_node
from diag.snapshot.model import (
    HPA,
    Container,
    Event,
    Node,
    Pod,
    Probe,
    RayClusterSpec,
    RayWorkerGroup,
    Snapshot,
    SourceStatus,
    VllmServer,
    Workload,
)

GPU_LABELS = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": "8",
}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
VLLM_ARGS = ["serve", "meta-llama/Llama-3.1-8B-Instruct", "--port", "8000", "--tensor-parallel-size", "4"]


def gpu_node(name: str, gpus: str | None = "8", **kw) -> Node:
    resources = {"cpu": "208", "memory": "2000Gi"} | ({"nvidia.com/gpu": gpus} if gpus is not None else {})
    return Node(
        name=name,
        labels=dict(GPU_LABELS) | kw.pop("labels", {}),
        taints=kw.pop("taints", [GPU_TAINT]),
        conditions={
            "Ready": {"status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}
        },
        capacity=dict(resources),
        allocatable=dict(resources),
        **kw,
    )


def vllm_container(
    gpus: int = 4, probes: list[Probe] | None = None, memory_limit: str | None = None, **kw
) -> Container:
    limits = {"nvidia.com/gpu": str(gpus)} | ({"memory": memory_limit} if memory_limit else {})
    return Container(
        name="vllm",
        image="vllm/vllm-openai:v0.10.1.1",
        command=["vllm"],
        args=list(VLLM_ARGS),
        ports={"http": 8000},
        limits=limits,
        requests={"nvidia.com/gpu": str(gpus)},
        probes=probes or [],
        **kw,
    )


def pending_pod(name: str, message: str, gpus: int = 4, **kw) -> Pod:
    pod = Pod(
        namespace="llm",
        name=name,
        phase="Pending",
        containers=[vllm_container(gpus)],
        tolerations=kw.pop("tolerations", [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]),
        **kw,
    )
    pod.events.append(Event("llm", "Pod", name, "FailedScheduling", message, "Warning"))
    return pod


def running_pod(name: str, node: str, gpus: int, namespace: str = "llm") -> Pod:
    trainer = Container(name="trainer", limits={"nvidia.com/gpu": str(gpus)})
    return Pod(namespace=namespace, name=name, phase="Running", node_name=node, containers=[trainer])


def fired(snap: Snapshot) -> dict[str, list[str]]:
    """rule id -> subjects, for the K8S rules only."""
    rules_dir = builtin_rules_dir()
    settings = {name: spec["default"] for name, spec in load_settings(rules_dir).items()}
    rules = [r for r in load_rules([rules_dir]) if r.id.startswith("K8S-")]
    read = ("pods", "nodes", "events", "deployments", "statefulsets")
    snap.sources = {f"k8s/{name}.json": SourceStatus("ok") for name in read}
    result = evaluate(rules, build_facts(join(snap)), settings)
    assert {rid: o.detail for rid, o in result.outcomes.items() if o.status == "error"} == {}
    found: dict[str, list[str]] = {}
    for f in result.findings:
        found.setdefault(f.rule, []).append(f.subject)
    return found


INSUFFICIENT = (
    "0/3 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, "
    "2 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are "
    "available: 2 No preemption victims found for incoming pod, "
    "1 Preemption is not helpful for scheduling."
)


# --------------------------------------------------------------------------- placement


def test_node_selector_and_required_affinity_as_the_scheduler_filters_them():
    node = gpu_node("gpu-1", labels={"pool": "a", "nvidia.com/gpu.count": "8"})
    pod = Pod(namespace="llm", name="p", node_selector={"pool": "a"})
    assert placement.matches_selector(pod, node)
    pod.node_selector = {"pool": "b"}
    assert not placement.matches_selector(pod, node)

    def with_terms(*terms: dict) -> Pod:
        return Pod(
            namespace="llm",
            name="p",
            affinity={
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}
            },
        )

    gt_7 = {"matchExpressions": [{"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["7"]}]}
    gt_8 = {"matchExpressions": [{"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["8"]}]}
    absent = {"matchExpressions": [{"key": "spot", "operator": "DoesNotExist"}]}
    not_in = {"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["a"]}]}
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}
    assert placement.matches_selector(with_terms(gt_7), node)
    assert not placement.matches_selector(with_terms(gt_8), node)
    assert placement.matches_selector(with_terms(gt_8, absent), node)  # terms are ORed
    assert not placement.matches_selector(with_terms(not_in), node)
    assert placement.matches_selector(with_terms(by_name), node)
    assert not placement.matches_selector(with_terms({}), node)  # an empty term matches nothing
    assert placement.selector_terms(with_terms(gt_7)) == ["nvidia.com/gpu.count Gt [7]"]


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, True),
        ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}, True),  # no effect: every effect
        ({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}, True),  # Equal is the default
        ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}, False),
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"operator": "Exists"}, True),  # empty key with Exists tolerates everything
        ({"key": "dedicated", "operator": "Exists"}, False),
    ],
)
def test_tolerations_match_taints_like_the_taint_toleration_plugin(toleration: dict, tolerated: bool):
    pod = Pod(namespace="llm", name="p", tolerations=[toleration])
    assert (placement.untolerated_taints(pod, gpu_node("gpu-1")) == []) is tolerated


def test_lifecycle_control_plane_and_soft_taints_are_not_reported_as_missing_tolerations():
    node = gpu_node(
        "gpu-1",
        taints=[
            {"key": "node.kubernetes.io/unreachable", "value": None, "effect": "NoSchedule"},
            {"key": "node-role.kubernetes.io/control-plane", "value": None, "effect": "NoSchedule"},
            {"key": "gpu-burst", "value": "true", "effect": "PreferNoSchedule"},
        ],
    )
    assert placement.untolerated_taints(Pod(namespace="llm", name="p"), node) == []
    assert (
        placement.toleration_for(GPU_TAINT)
        == '{key: "nvidia.com/gpu", operator: "Equal", value: "present", effect: "NoSchedule"}'
    )
    assert (
        placement.taint_text({"key": "nvidia.com/gpu", "value": None, "effect": "NoSchedule"})
        == "nvidia.com/gpu:NoSchedule"
    )


def test_gpu_nodes_known_by_labels_even_without_advertised_gpus_and_sharing_read_from_gfd_labels():
    bare = Node(name="gpu-new", labels={"feature.node.kubernetes.io/pci-10de.present": "true"})
    assert is_gpu_node(bare) and not placement.advertises_gpus(bare)
    mixed = Node(name="mig", allocatable={"nvidia.com/mig-1g.10gb": "7"}, capacity={"nvidia.com/mig-1g.10gb": "7"})
    assert is_gpu_node(mixed) and placement.mig_offered(mixed) == ["nvidia.com/mig-1g.10gb"]
    assert placement.gpu_sharing(gpu_node("gpu-1")) is None
    shared = gpu_node(
        "gpu-2",
        labels={
            "nvidia.com/gpu.product": "NVIDIA-L4-SHARED",
            "nvidia.com/gpu.replicas": "4",
            "nvidia.com/gpu.sharing-strategy": "time-slicing",
        },
        gpus="32",
    )
    assert placement.gpu_sharing(shared) == {
        "strategy": "time-slicing",
        "replicas": "4",
        "product": "NVIDIA-L4-SHARED",
        "physical_gpus": "8",
        "advertised_gpus": "32",
    }


# --------------------------------------------------------------------------- containers


def test_probe_facts_resolve_named_ports_and_compute_the_liveness_budget():
    probes = [
        Probe(
            "liveness",
            "httpGet",
            path="/health",
            port="http",
            initial_delay_seconds=60,
            period_seconds=10,
            failure_threshold=3,
        ),
        Probe("readiness", "httpGet", path="/healthz", port="metrics"),
    ]
    facts = containers.probe_facts(vllm_container(probes=probes), vllm_port=8000)
    assert facts["liveness_budget_s"] == 90
    assert facts["liveness"]["port_number"] == 8000
    assert facts["startup"] is None and facts["has_startup"] is False and facts["has_liveness"] is True
    assert facts["readiness"]["port_number"] is None  # "metrics" is not a declared container port
    assert facts["readiness_port_mismatch"] is True
    assert facts["readiness_path_unknown"] is True
    tcp = containers.probe_facts(vllm_container(probes=[Probe("readiness", "tcpSocket", port=8000)]), vllm_port=8000)
    assert tcp["readiness_port_mismatch"] is False and tcp["readiness_path_unknown"] is False
    unknown_port = containers.probe_facts(
        vllm_container(probes=[Probe("readiness", "tcpSocket", port=8000)]), vllm_port=None
    )
    assert unknown_port["readiness_port_mismatch"] is None
    exec_probe = containers.probe_facts(vllm_container(probes=[Probe("readiness", "exec")]), vllm_port=None)
    assert exec_probe["readiness_port_mismatch"] is False  # an exec probe asks no port
    none = containers.probe_facts(vllm_container(probes=[]), vllm_port=8000)
    assert (
        none["has_readiness"] is False
        and none["readiness_port_mismatch"] is False
        and none["readiness_path_unknown"] is False
    )


def test_crash_loops_carry_the_known_cause_lines_of_their_logs():
    causes = builtin_signals().crash_causes
    oom = vllm_container(
        state="waiting",
        state_reason="CrashLoopBackOff",
        last_terminated_reason="OOMKilled",
        last_exit_code=137,
        restart_count=4,
        memory_limit="48Gi",
    )
    cuda = vllm_container(
        state="waiting",
        state_reason="CrashLoopBackOff",
        last_terminated_reason="Error",
        last_exit_code=1,
        restart_count=4,
        log_signals={"cuda_oom": ["torch.OutOfMemoryError: CUDA out of memory."], "engine_dead": ["EngineDeadError"]},
    )
    plain = vllm_container(
        state="waiting",
        state_reason="CrashLoopBackOff",
        last_terminated_reason="Error",
        last_exit_code=2,
        restart_count=4,
        previous_logs="one\n\ntwo\nthree\nfour\nfive\nsix\n",
    )
    pod = Pod(namespace="llm", name="p", containers=[oom])
    assert containers.oom_killed(pod, Clock(None, "none"))[0]["memory_limit"] == "48Gi"
    assert containers.crash_loops(pod, causes) == []  # K8S-210's
    [known] = containers.crash_loops(Pod(namespace="llm", name="p", containers=[cuda]), causes)
    assert known["known_causes"] == ["torch.OutOfMemoryError: CUDA out of memory."]
    [crash] = containers.crash_loops(Pod(namespace="llm", name="p", containers=[plain]), causes)
    assert crash["exit_code"] == 2 and crash["last_lines"] == "four | five | six" and crash["known_causes"] == []


def test_crashes_no_signal_names_carry_their_decisive_line_by_layer():
    causes = builtin_signals().crash_causes
    refused = (
        "usage: vllm serve [model_tag] [options]\n"
        "vllm serve: error: unrecognized arguments: --max-num-batch-tokens 16384\n"
    )
    bad_flag = vllm_container(
        state="waiting",
        state_reason="CrashLoopBackOff",
        last_terminated_reason="Error",
        last_exit_code=2,
        restart_count=3,
        previous_logs=refused,
        logs="INFO starting\n",
    )
    fetch = (
        'Traceback (most recent call last):\n  File "/kserve/kserve/storage/storage.py", line 353, in _download_gcs\n'
        "RuntimeError: Failed to fetch model. No model found in gs://bucket/m/.\n"
    )
    init = Container(
        name="storage-initializer",
        state="waiting",
        state_reason="CrashLoopBackOff",
        last_terminated_reason="Error",
        last_exit_code=1,
        restart_count=7,
        previous_logs=fetch,
    )
    [crash] = containers.crash_loops(Pod(namespace="llm", name="p", containers=[bad_flag]), causes)
    assert crash["decisive"] == "vllm serve: error: unrecognized arguments: --max-num-batch-tokens 16384 (vllm layer)"
    now = Clock(None, "none")
    found = containers.unnamed_crashes(
        Pod(namespace="llm", name="p", containers=[bad_flag], init_containers=[init]), causes, now
    )
    assert sorted(found) == ["kubernetes", "vllm"]
    # the line of the crashed run (--previous), placed by the program that logged it when nothing else places it
    assert found["vllm"] | {"fix": None} == {
        "container": "vllm",
        "init": False,
        "restarts": 3,
        "exit_code": 2,
        "kind": "last error line",
        "exception": None,
        "line": "vllm serve: error: unrecognized arguments: --max-num-batch-tokens 16384",
        "family": "argument_refused",
        "family_description": "the program refused an argument or an option on its command line",
        "fix": None,
        "layer": "vllm",
        "placed_by": "the program that logged it (vLLM)",
        "log": "previous",
    }
    assert (
        found["kubernetes"]["init"] is True
        and found["kubernetes"]["placed_by"] == "where its traceback's frames come from"
    )
    # a known cause, an OOM kill, a container that never crashed: nothing to name
    named = vllm_container(
        state="waiting",
        state_reason="CrashLoopBackOff",
        last_terminated_reason="Error",
        restart_count=3,
        previous_logs=refused,
        log_signals={"cuda_oom": ["torch.OutOfMemoryError: CUDA out of memory."]},
    )
    oom = vllm_container(
        state="waiting", state_reason="CrashLoopBackOff", last_terminated_reason="OOMKilled", previous_logs=refused
    )
    running = vllm_container(state="running", previous_logs=refused)
    for c in (named, oom, running):
        assert containers.unnamed_crashes(Pod(namespace="llm", name="p", containers=[c]), causes, now) == {}
    # restarted once, running since: current within the window, history past it
    restarted = vllm_container(
        state="running",
        last_terminated_reason="Error",
        restart_count=1,
        last_finished_at="2026-12-01T10:00:00Z",
        previous_logs=refused,
    )
    window = Clock(datetime(2026, 12, 1, 10, 30, tzinfo=timezone.utc), "test", window_s=3600)
    later = Clock(datetime(2026, 12, 1, 14, 0, tzinfo=timezone.utc), "test", window_s=3600)
    assert list(containers.unnamed_crashes(Pod(namespace="llm", name="p", containers=[restarted]), causes, window)) == [
        "vllm"
    ]
    assert containers.unnamed_crashes(Pod(namespace="llm", name="p", containers=[restarted]), causes, later) == {}
    # a crashed container whose log is not in the bundle: unknown, not "no cause"
    unread = vllm_container(
        state="waiting", state_reason="CrashLoopBackOff", last_terminated_reason="Error", restart_count=3
    )
    assert containers.unnamed_crashes(Pod(namespace="llm", name="p", containers=[unread]), causes, now) is None


def test_gpu_visibility_variables_that_hide_gpus_are_not_gpu_use():
    env = {"NVIDIA_VISIBLE_DEVICES": "void", "CUDA_VISIBLE_DEVICES": "0,1"}
    pod = Pod(namespace="llm", name="p", containers=[Container(name="app", env=env)])
    assert containers.gpu_env_without_request(pod) == ["app: CUDA_VISIBLE_DEVICES=0,1"]


# --------------------------------------------------------------------------- rules on snapshots


def test_gpu_shortage_is_told_apart_from_a_request_no_node_can_hold():
    nodes = [gpu_node("gpu-1"), gpu_node("gpu-2")]
    busy = [running_pod("train-a", "gpu-1", 8, "research"), running_pod("train-b", "gpu-2", 8, "research")]
    full = fired(Snapshot(nodes=nodes, pods=busy + [pending_pod("fits", INSUFFICIENT, gpus=4)]))
    assert full.get("K8S-101") == ["pod/llm/fits"] and "K8S-102" not in full
    too_big = fired(
        Snapshot(nodes=[gpu_node("gpu-1"), gpu_node("gpu-2")], pods=[pending_pod("huge", INSUFFICIENT, gpus=16)])
    )
    assert too_big.get("K8S-102") == ["pod/llm/huge"] and "K8S-101" not in too_big


def test_gpu_nodes_without_a_device_plugin_are_the_finding_not_a_shortage():
    nodes = [gpu_node("gpu-1", gpus=None), Node(name="cpu-1")]
    found = fired(Snapshot(nodes=nodes, pods=[pending_pod("waits", INSUFFICIENT)]))
    assert found.get("K8S-103") == ["cluster"]
    assert "K8S-101" not in found and "K8S-102" not in found


def test_untolerated_gpu_taint_names_the_taint_but_the_control_plane_taint_alone_does_not_fire():
    message = (
        "0/3 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, "
        "2 node(s) had untolerated taint {nvidia.com/gpu: present}."
    )
    nodes = [gpu_node("gpu-1"), gpu_node("gpu-2")]
    found = fired(Snapshot(nodes=nodes, pods=[pending_pod("no-toleration", message, tolerations=[])]))
    assert found.get("K8S-104") == ["pod/llm/no-toleration"]
    tolerant = fired(
        Snapshot(nodes=[gpu_node("gpu-1"), gpu_node("gpu-2")], pods=[pending_pod("tolerates", INSUFFICIENT)])
    )
    assert "K8S-104" not in tolerant


def test_selector_mismatch_needs_every_gpu_node_to_miss_the_label():
    message = "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."
    wrong = pending_pod("wrong", message, node_selector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"})
    assert fired(Snapshot(nodes=[gpu_node("gpu-1"), gpu_node("gpu-2")], pods=[wrong])).get("K8S-105") == [
        "pod/llm/wrong"
    ]
    right = pending_pod("right", message, node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    assert "K8S-105" not in fired(Snapshot(nodes=[gpu_node("gpu-1"), gpu_node("gpu-2")], pods=[right]))


def test_liveness_budget_shorter_than_the_logged_load_time_fires_only_without_a_startup_probe():
    load_log = (
        "(VllmWorker TP0 pid=389) INFO 12-01 14:10:44 [gpu_model_runner.py:2007] "
        "Model loading took 32.8854 GiB and 98.611370 seconds\n"
    )
    liveness = Probe(
        "liveness",
        "httpGet",
        path="/health",
        port=8000,
        initial_delay_seconds=60,
        period_seconds=10,
        failure_threshold=3,
    )

    def pod(probes: list[Probe]) -> Pod:
        c = vllm_container(
            probes=probes,
            state="waiting",
            state_reason="CrashLoopBackOff",
            last_terminated_reason="Error",
            last_exit_code=137,
            restart_count=9,
            previous_logs=load_log,
        )
        return Pod(namespace="llm", name="vllm-0", phase="Running", node_name="gpu-1", containers=[c])

    assert "K8S-201" in fired(Snapshot(nodes=[gpu_node("gpu-1")], pods=[pod([liveness])]))
    startup = Probe("startup", "httpGet", path="/health", port=8000, period_seconds=10, failure_threshold=60)
    assert "K8S-201" not in fired(Snapshot(nodes=[gpu_node("gpu-1")], pods=[pod([liveness, startup])]))


def test_daemonset_agents_may_see_every_gpu_but_a_workload_may_not():
    agent = Pod(
        namespace="gpu-operator",
        name="dcgm-exporter-x",
        phase="Running",
        node_name="gpu-1",
        owner_kind="DaemonSet",
        owner_name="nvidia-dcgm-exporter",
        containers=[Container(name="exporter", env={"NVIDIA_VISIBLE_DEVICES": "all"})],
    )
    notebook = Pod(
        namespace="research",
        name="nb",
        phase="Running",
        node_name="gpu-1",
        containers=[Container(name="notebook", env={"NVIDIA_VISIBLE_DEVICES": "all"})],
    )
    found = fired(Snapshot(nodes=[gpu_node("gpu-1")], pods=[agent, notebook]))
    assert found.get("K8S-123") == ["pod/research/nb"]


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        (
            "UnexpectedAdmissionError",
            (
                "Pod was rejected: Allocate failed due to requested number of devices unavailable for "
                "nvidia.com/gpu. Requested: 4, Available: 0, which is unexpected"
            ),
        ),
        (
            "OutOfnvidia.com/gpu",
            "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: 4, used: 8, capacity: 8",
        ),
        ("TopologyAffinityError", "Pod was rejected: Resources cannot be allocated with Topology locality"),
    ],
)
def test_kubelet_admission_refusals_of_gpu_pods(reason: str, message: str):
    rejected = Pod(
        namespace="llm",
        name="rejected",
        phase="Failed",
        node_name="gpu-1",
        reason=reason,
        message=message,
        containers=[vllm_container()],
    )
    evicted = Pod(
        namespace="llm",
        name="evicted",
        phase="Failed",
        node_name="gpu-1",
        reason="Evicted",
        message="The node was low on resource: memory.",
        containers=[vllm_container()],
    )
    found = fired(Snapshot(nodes=[gpu_node("gpu-1")], pods=[rejected, evicted]))
    assert found.get("K8S-107") == ["pod/llm/rejected"]
    assert found.get("K8S-113") == ["pod/llm/evicted"]


def test_hpa_conditions_that_are_choices_are_not_metric_failures():
    def snapshot(reason: str) -> Snapshot:
        pod = Pod(
            namespace="llm",
            name="vllm-6c9d8b7f5d-x2x9k",
            phase="Running",
            node_name="gpu-1",
            owner_kind="ReplicaSet",
            owner_name="vllm-6c9d8b7f5d",
            containers=[vllm_container()],
        )
        hpa = HPA(
            namespace="llm",
            name="vllm",
            target_kind="Deployment",
            target_name="vllm",
            min_replicas=0,
            max_replicas=4,
            current_replicas=0,
            metrics=[{"type": "Pods", "name": "vllm:num_requests_waiting"}],
            conditions={"ScalingActive": {"status": "False", "reason": reason, "message": "..."}},
        )
        return Snapshot(
            nodes=[gpu_node("gpu-1")],
            pods=[pod],
            hpas=[hpa],
            vllm_servers=[VllmServer(name="vllm-6c9d8b7f5d-x2x9k")],
            workloads=[Workload(kind="Deployment", namespace="llm", name="vllm")],
        )

    def hpa_findings(snap: Snapshot) -> list[str]:
        snap.sources = {"k8s/hpa.json": SourceStatus("ok")}
        rules = [r for r in load_rules([builtin_rules_dir()]) if r.id == "K8S-312"]
        return [f.subject for f in evaluate(rules, build_facts(join(snap)), {}).findings]

    assert hpa_findings(snapshot("FailedGetPodsMetric")) == ["hpa/llm/vllm"]
    assert hpa_findings(snapshot("ScalingDisabled")) == []


def test_parallel_size_of_a_rayservice_cluster_comes_from_its_serve_config():
    serve = {
        "applications": [
            {"args": {"llm_configs": [{"engine_kwargs": {"tensor_parallel_size": 8, "pipeline_parallel_size": 2}}]}}
        ]
    }
    service = RayClusterSpec(kind="RayService", namespace="ray", name="llama", serve_config=serve)
    cluster = RayClusterSpec(
        kind="RayCluster",
        namespace="ray",
        name="llama-x7k2m",
        worker_groups=[RayWorkerGroup(name="gpu", replicas=2, gpu_limit_per_pod=8)],
    )

    def worker(name: str, node: str | None) -> Pod:
        return Pod(
            namespace="ray",
            name=name,
            phase="Running" if node else "Pending",
            node_name=node,
            ray_cluster="llama-x7k2m",
            ray_group="gpu",
            ray_node_type="worker",
            containers=[Container(name="ray-worker", limits={"nvidia.com/gpu": "8"})],
        )

    snap = Snapshot(
        nodes=[gpu_node("gpu-1")], pods=[worker("w1", "gpu-1"), worker("w2", None)], ray_clusters=[service, cluster]
    )
    snap.sources = {"k8s/rayclusters.json": SourceStatus("ok")}
    facts = build_facts(join(snap))
    subject = next(s for s in facts.scopes["raycluster"] if s["name"] == "llama-x7k2m")
    assert subject["parallel_gpus_needed"] == 16 and subject["gpus_running"] == 8
    assert subject["partial_groups"] == ["gpu: 1 of 2 pods running, 1 pending (8 GPU each)"]
    rules = [r for r in load_rules([builtin_rules_dir()]) if r.id == "K8S-402"]
    assert [f.subject for f in evaluate(rules, facts, {}).findings] == ["raycluster/ray/llama-x7k2m"]


# --------------------------------------------------------------------------- unknown is not silent


def outcomes(snap: Snapshot, read: tuple[str, ...]) -> dict[str, str]:
    """rule id -> fired | silent | unknown ..., for the K8S rules, with only the `read` files read."""
    rules_dir = builtin_rules_dir()
    settings = {name: spec["default"] for name, spec in load_settings(rules_dir).items()}
    rules = [r for r in load_rules([rules_dir]) if r.id.startswith("K8S-")]
    snap.sources = {name: SourceStatus("ok") for name in read}
    result = evaluate(rules, build_facts(join(snap)), settings)
    assert {rid: o.detail for rid, o in result.outcomes.items() if o.status == "error"} == {}
    return {rid: o.status for rid, o in result.outcomes.items()}


def waiting_pod(gpus: int = 4) -> Pod:
    """A pending GPU pod whose status says nothing about scheduling: only events could."""
    return Pod(namespace="llm", name="waits", phase="Pending", containers=[vllm_container(gpus)])


# each rule with a pod whose other facts would let it fire, so only the scheduler's word decides
@pytest.mark.parametrize(("rule", "gpus"), [("K8S-101", 4), ("K8S-102", 16), ("K8S-104", 4), ("K8S-106", 4)])
def test_a_pending_pod_is_unknown_without_events_and_silent_with_events_that_hold_nothing(rule: str, gpus: int):
    without = outcomes(
        Snapshot(nodes=[gpu_node("gpu-1")], pods=[waiting_pod(gpus)]), read=("k8s/pods.json", "k8s/nodes.json")
    )
    assert without[rule] == "unknown"
    empty = outcomes(
        Snapshot(nodes=[gpu_node("gpu-1")], pods=[waiting_pod(gpus)]),
        read=("k8s/pods.json", "k8s/nodes.json", "k8s/events.json"),
    )
    assert empty[rule] == "silent"


def test_scheduling_facts_tell_none_seen_from_not_collected():
    index_snap = Snapshot(nodes=[gpu_node("gpu-1")], pods=[waiting_pod(), running_pod("placed", "gpu-1", 4)])
    index_snap.sources = {"k8s/pods.json": SourceStatus("ok"), "k8s/nodes.json": SourceStatus("ok")}
    pods = {p["name"]: p for p in build_facts(join(index_snap)).scopes["pod"]}
    assert pods["waits"]["failed_scheduling"] is None and pods["waits"]["failed_mounts"] is None
    assert pods["placed"]["failed_scheduling"]["seen"] is False  # placed: known from pods.json alone
    index_snap.sources["k8s/events.json"] = SourceStatus("ok")
    pods = {p["name"]: p for p in build_facts(join(index_snap)).scopes["pod"]}
    assert pods["waits"]["failed_scheduling"]["seen"] is False and pods["waits"]["failed_mounts"] == []
    assert pods["waits"]["log_signals"] is None  # no log of it was collected


def test_a_missing_model_volume_needs_events_and_a_started_pods_log_to_be_ruled_out():
    def k8s_212(pod: Pod, read: tuple[str, ...]) -> str:
        return outcomes(Snapshot(nodes=[gpu_node("gpu-1")], pods=[pod]), read=read)["K8S-212"]

    def mounting() -> Pod:  # no container has run: it has no log, only events could tell
        return Pod(namespace="llm", name="mounting", phase="Pending", node_name="gpu-1", containers=[vllm_container()])

    def restarting(logs: str | None) -> Pod:
        crashing = vllm_container(state="waiting", state_reason="CrashLoopBackOff", restart_count=3, logs=logs)
        return Pod(
            namespace="llm",
            name="restarting",
            phase="Running",
            node_name="gpu-1",
            containers=[crashing],
            conditions={"Ready": {"status": "False"}},
        )

    assert k8s_212(mounting(), read=("k8s/pods.json",)) == "unknown"
    assert k8s_212(mounting(), read=("k8s/pods.json", "k8s/events.json")) == "silent"
    clean_log = "(APIServer pid=1) INFO 03-14 09:00:05 [api_server.py:1805] vLLM API server version 0.10.1\n"
    assert k8s_212(restarting(None), read=("k8s/pods.json", "k8s/events.json")) == "unknown"
    assert k8s_212(restarting(clean_log), read=("k8s/pods.json", "k8s/events.json")) == "silent"


# --------------------------------------------------------------------------- quota (K8S-116)

QUOTA_REFUSAL = (
    'pods "llama-70b-5c7d9f8b6d-x2x9q" is forbidden: exceeded quota: gpus, requested: requests.nvidia.com/gpu=4, '
    "used: requests.nvidia.com/gpu=8, limited: requests.nvidia.com/gpu=8"
)


def gpu_workload(kind: str = "Deployment", name: str = "llama-70b", **kw) -> Workload:
    return Workload(
        kind=kind, namespace="llm", name=name, replicas=1, template_labels={"app": name}, template_gpus=4, **kw
    )


def test_quota_refusal_from_the_deployments_replica_failure_condition():
    failure = {"status": "True", "reason": "FailedCreate", "message": QUOTA_REFUSAL}
    snap = Snapshot(workloads=[gpu_workload(conditions={"ReplicaFailure": failure})])
    assert fired(snap).get("K8S-116") == ["deployment/llm/llama-70b"]
    failure["status"] = "False"
    assert "K8S-116" not in fired(snap)


def test_quota_refusal_from_failed_create_events_of_its_replicaset_or_statefulset():
    def refused(kind: str, name: str) -> Event:
        return Event("llm", kind, name, "FailedCreate", f"Error creating: {QUOTA_REFUSAL}", "Warning")

    deployments = [gpu_workload(), gpu_workload(name="llama-70b-canary")]
    snap = Snapshot(workloads=deployments, events=[refused("ReplicaSet", "llama-70b-5c7d9f8b6d")])
    assert fired(snap).get("K8S-116") == ["deployment/llm/llama-70b"]  # not the canary, whose name it starts with
    snap = Snapshot(workloads=deployments, events=[refused("ReplicaSet", "llama-70b-canary-7b4f9c8d5")])
    assert fired(snap).get("K8S-116") == ["deployment/llm/llama-70b-canary"]
    snap = Snapshot(workloads=[gpu_workload("StatefulSet")], events=[refused("StatefulSet", "llama-70b")])
    assert fired(snap).get("K8S-116") == ["statefulset/llm/llama-70b"]


def test_other_create_failures_are_not_a_quota_refusal():
    denied = 'pods "llama-70b-5c7d9f8b6d-x2x9q" is forbidden: violates PodSecurity "restricted:latest": privileged'
    snap = Snapshot(
        workloads=[
            gpu_workload(conditions={"ReplicaFailure": {"status": "True", "reason": "FailedCreate", "message": denied}})
        ],
        events=[
            Event("llm", "ReplicaSet", "llama-70b-5c7d9f8b6d", "FailedCreate", f"Error creating: {denied}", "Warning")
        ],
    )
    assert "K8S-116" not in fired(snap)


# --------------------------------------------------------------------------- LimitRange (K8S-507)

# the LimitRanger admission plugin's wordings (plugin/pkg/admission/limitranger/admission.go)
LIMIT_RANGE_REFUSALS = [
    'pods "llama-70b-0" is forbidden: maximum memory usage per Container is 32Gi, but limit is 64Gi',
    'pods "llama-70b-0" is forbidden: [minimum cpu usage per Pod is 1, but request '
    "is 500m, maximum memory usage per Container is 4Gi.  No limit is specified]",
    'pods "llama-70b-0" is forbidden: cpu max limit to request '
    "ratio per Container is 2, but provided ratio is 4.000000",
]


@pytest.mark.parametrize("refusal", LIMIT_RANGE_REFUSALS)
def test_limit_range_refusal_from_a_statefulsets_failed_create_event(refusal: str):
    event = Event(
        "llm",
        "StatefulSet",
        "llama-70b",
        "FailedCreate",
        f"create Pod llama-70b-0 in StatefulSet llama-70b failed error: {refusal}",
        "Warning",
    )
    snap = Snapshot(workloads=[gpu_workload("StatefulSet")], events=[event])
    assert fired(snap).get("K8S-507") == ["statefulset/llm/llama-70b"]
    assert "K8S-116" not in fired(snap)


def test_limit_range_refusal_from_the_deployments_condition_and_not_from_a_quota():
    failure = {"status": "True", "reason": "FailedCreate", "message": LIMIT_RANGE_REFUSALS[0]}
    assert fired(Snapshot(workloads=[gpu_workload(conditions={"ReplicaFailure": failure})])).get("K8S-507") == [
        "deployment/llm/llama-70b"
    ]
    quota = {"status": "True", "reason": "FailedCreate", "message": QUOTA_REFUSAL}
    assert "K8S-507" not in fired(Snapshot(workloads=[gpu_workload(conditions={"ReplicaFailure": quota})]))


def test_a_statefulsets_refusals_are_unknown_without_events_a_deployments_condition_still_tells():
    read = ("k8s/statefulsets.json", "k8s/deployments.json")
    assert outcomes(Snapshot(workloads=[gpu_workload("StatefulSet")]), read)["K8S-507"] == "unknown"
    assert (
        outcomes(Snapshot(workloads=[gpu_workload("StatefulSet")]), (*read, "k8s/events.json"))["K8S-507"] == "silent"
    )
    assert outcomes(Snapshot(workloads=[gpu_workload()]), read)["K8S-507"] == "silent"
