"""Scenarios on a REAL control plane (tests/live/k8s_cluster.py): kwok GPU nodes, vLLM Deployments
and Services; the real scheduler, ReplicaSet and quota controllers act, and `llmdiag triage` reads
the result through the real API server. Each scenario has the fixture that stands for it and must
fire the same rule."""

from __future__ import annotations

import ipaddress
import subprocess
from collections.abc import Iterator

import pytest
from k8s_cluster import TEST_NET, ControlPlane, wait_for
from k8s_scenarios import (
    CATALOGUE,
    apply,
    assert_only_test_addresses,
    cordon_under_another_namespaces_pod,
    expected,
    failed_scheduling,
    fired,
    free_gpus,
    get,
    namespace,
    namespaces_removed_after,
    node_and_pod_addresses,
    nodes_ready,
    pods,
    refuse_by_quota,
    run_printed_commands,
    triage,
    two_gpu_nodes,
    vllm_deployment,
)

from diag.collect import kube as kube_module
from diag.collect import kubernetes as collect_k8s
from diag.collect.kube import KubeAccess

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def gpu_cluster(control_plane: ControlPlane) -> ControlPlane:
    """Two 8-GPU H100 nodes with the GPU operator's taint; both Ready under kwok."""
    return two_gpu_nodes(control_plane)


@pytest.fixture(autouse=True)
def _namespaces_removed_after(gpu_cluster: ControlPlane) -> Iterator[None]:
    with namespaces_removed_after(gpu_cluster):
        yield


def test_the_gpu_node_addresses_are_local(gpu_cluster: ControlPlane) -> None:
    apply(gpu_cluster, namespace("probe"), vllm_deployment("probe", "probe", gpus=1, tolerate=True))
    wait_for("a running pod", lambda: any(p["status"].get("podIP") for p in pods(gpu_cluster, "probe", "probe")))
    addresses = node_and_pod_addresses(gpu_cluster)
    assert addresses, "no node or pod address to check"
    assert_only_test_addresses(gpu_cluster)
    free_gpus(gpu_cluster, "probe")


def test_gpu_request_too_large(gpu_cluster: ControlPlane) -> None:
    ns = "too-large"
    CATALOGUE[ns].build(gpu_cluster, ns)  # 16 GPUs asked, 8 on each node
    message = failed_scheduling(gpu_cluster, ns)[0]["message"]
    assert "Insufficient nvidia.com/gpu" in message
    assert_only_test_addresses(gpu_cluster)

    report = triage(gpu_cluster, ns)
    assert run_printed_commands(gpu_cluster, report) == []
    want = expected("k8s-gpu-request-too-large")
    assert want["verdict"]["rule"] in fired(report), report["findings"]
    assert report["verdict"]["layer"] == want["verdict"]["layer"]
    assert report["verdict"]["rule"] == want["verdict"]["rule"], report["verdict"]


def test_gpu_cluster_full(gpu_cluster: ControlPlane) -> None:
    ns = "cluster-full"
    full = CATALOGUE[ns]
    # research jobs take every GPU of a pool of two nodes, then one more vLLM replica asks for 4
    nodes_ready(gpu_cluster, full.nodes)
    full.build(gpu_cluster, ns)
    assert "Insufficient nvidia.com/gpu" in failed_scheduling(gpu_cluster, ns)[0]["message"]
    assert_only_test_addresses(gpu_cluster)

    report = triage(gpu_cluster, ns)
    assert run_printed_commands(gpu_cluster, report) == []
    want = expected("k8s-gpu-cluster-full")
    assert want["verdict"]["rule"] in fired(report), report["findings"]
    assert "K8S-102" not in fired(report)
    assert report["verdict"]["rule"] == want["verdict"]["rule"], report["verdict"]
    free_gpus(gpu_cluster, ns)
    gpu_cluster.kubectl("delete", "node", *(n["metadata"]["name"] for n in full.nodes))


def test_rollout_that_drops_the_toleration(gpu_cluster: ControlPlane) -> None:
    ns = "taint"
    # the first replica runs; then the rollout: the same Deployment, its pod template without the toleration
    CATALOGUE[ns].build(gpu_cluster, ns)
    assert "untolerated taint" in failed_scheduling(gpu_cluster, ns)[0]["message"]
    phases = sorted(p["status"]["phase"] for p in pods(gpu_cluster, ns, "llama-70b"))
    assert phases == ["Pending", "Running"], phases  # the old replica keeps serving, as in the fixture

    report = triage(gpu_cluster, ns)
    assert run_printed_commands(gpu_cluster, report) == []
    want = expected("k8s-untolerated-taint")
    assert want["verdict"]["rule"] in fired(report), report["findings"]
    assert report["verdict"]["layer"] == want["verdict"]["layer"]
    assert report["verdict"]["rule"] == want["verdict"]["rule"], report["verdict"]
    free_gpus(gpu_cluster, ns)


def test_quota_refuses_the_vllm_pods(gpu_cluster: ControlPlane) -> None:
    ns = "quota"
    refuse_by_quota(gpu_cluster, ns)
    events = get(gpu_cluster, "events", "-n", ns, "--field-selector", "reason=FailedCreate")["items"]
    assert any("exceeded quota: gpus" in e["message"] for e in events), [e["message"] for e in events]
    assert pods(gpu_cluster, ns, "llama-70b") == []

    report = triage(gpu_cluster, ns)
    assert run_printed_commands(gpu_cluster, report) == []
    want = expected("k8s-quota-exceeded")
    assert set(want["fires"]) <= fired(report), report["findings"]
    assert report["verdict"]["layer"] == want["verdict"]["layer"], report["verdict"]
    assert report["verdict"]["rule"] == want["verdict"]["rule"], report["verdict"]
    free_gpus(gpu_cluster, ns)


def test_a_cordoned_node_that_runs_another_namespaces_pod(gpu_cluster: ControlPlane) -> None:
    """Issue 36: the pending replica gets its own finding naming the cordoned node, explained by the
    cordon; the node's text counts the other namespace's pod that the namespaced triage read apart."""
    ns, other = "cordon", "batch-jobs"
    batch_pod = cordon_under_another_namespaces_pod(gpu_cluster, ns, other)
    try:
        message = failed_scheduling(gpu_cluster, ns)[0]["message"]
        assert "were unschedulable" in message and "Insufficient nvidia.com/gpu" in message, message

        report = triage(gpu_cluster, ns)
        assert run_printed_commands(gpu_cluster, report) == []
        assert (report["verdict"]["layer"], report["verdict"]["rule"]) == ("kubernetes", "K8S-111"), report["verdict"]
        [pending] = [f for f in report["findings"] if f["rule"] == "K8S-117"]
        assert pending["subject"].startswith(f"pod/{ns}/llama-70b-") and pending["explained_by"] == "K8S-111"
        evidence = " ".join(pending["evidence"])
        assert f"gpu-h100-2: cordoned; 6 of 8 nvidia.com/gpu free, GPU pods on it: {other}/{batch_pod}" in evidence
        assert "gpu-h100-1: 2 of 8 nvidia.com/gpu free for its 6" in evidence
        assert "kubectl uncordon gpu-h100-2" in pending["remediation"]
        assert "K8S-101" not in fired(report)
        [cordoned] = [f for f in report["findings"] if f["rule"] == "K8S-111"]
        text = " ".join(cordoned["evidence"])
        assert f"GPU pods still on it: {other}/{batch_pod}" in text and "not read" not in text, text
        # the other namespace's pod is context, never one of this namespace's subjects
        assert not any(f["subject"].startswith(f"pod/{other}/") for f in report["findings"])

        # the batch namespace's own triage: its pod is on the cordoned node, and is counted once
        batch_report = triage(gpu_cluster, other)
        [its_node] = [f for f in batch_report["findings"] if f["rule"] == "K8S-111"]
        assert f"GPU pods still on it: {other}/{batch_pod}" in " ".join(its_node["evidence"])
    finally:
        gpu_cluster.kubectl("uncordon", "gpu-h100-2")
        free_gpus(gpu_cluster, ns)
        free_gpus(gpu_cluster, other)


def test_the_control_plane_talks_only_to_local_addresses(gpu_cluster: ControlPlane) -> None:
    """After the scenarios: every socket the components hold leads to loopback or the test network."""
    peers = gpu_cluster.peer_addresses()
    assert "kube-apiserver" in peers and "etcd" in peers, peers  # the check sees our components
    strangers = {name: sorted(a for a in addresses if a != "*" and not ipaddress.ip_address(a).is_loopback
                              and not gpu_cluster.network.owns(a))
                 for name, addresses in peers.items()}  # fmt: skip
    assert not any(strangers.values()), strangers


def test_a_test_network_address_no_namespace_owns_goes_nowhere(gpu_cluster: ControlPlane) -> None:
    """kwok hands out pod IPs past the end of its range: those must be refused on this host, not sent
    out by the default route."""
    stray = next(str(a) for a in TEST_NET.hosts() if not gpu_cluster.network.owns(str(a)) and a.packed[2] > 200)
    owned = str(next(ipaddress.ip_network(gpu_cluster.network.pod_cidr).hosts()))
    assert subprocess.run(["ip", "route", "get", owned], capture_output=True, text=True).returncode == 0
    refused = subprocess.run(["ip", "route", "get", stray], capture_output=True, text=True)
    assert refused.returncode != 0 and "No route to host" in refused.stderr, (stray, refused.stdout, refused.stderr)


def _event(ns: str, name: str, kind: str, reason: str, message: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": ns},
        "involvedObject": {"kind": "Pod", "name": "llama-70b-0", "namespace": ns},
        "type": kind,
        "reason": reason,
        "message": message,
        "count": 1,
        "source": {"component": "default-scheduler" if kind == "Warning" else "kubelet"},
    }


def test_a_capped_event_list_keeps_every_warning(control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch) -> None:
    """The API server lists events by name; at a fleet's size the list is capped, and the Normal ones
    first in that order must not push a FailedScheduling out: the Warnings are listed again by the
    real field selector type=Warning, and the list stays marked as capped."""
    ns = "capped-events"
    normal = [
        _event(
            ns,
            f"a-pulled-{i}",
            "Normal",
            "Pulled",
            'Container image "vllm/vllm-openai:v0.10.1.1" already present on machine',
        )
        for i in range(6)
    ]
    warning = [
        _event(
            ns,
            f"z-failed-{i}",
            "Warning",
            "FailedScheduling",
            "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
        )
        for i in range(2)
    ]
    apply(control_plane, namespace(ns), *normal, *warning)
    monkeypatch.setattr(kube_module, "MAX_ITEMS", 3)
    monkeypatch.setattr(kube_module, "PAGE_SIZE", 2)
    listed = collect_k8s._events(KubeAccess(str(control_plane.kubeconfig)), collect_k8s.Scope(ns), [], {})
    names = [e["metadata"]["name"] for e in listed["items"]]
    assert names[:3] == ["a-pulled-0", "a-pulled-1", "a-pulled-2"]  # the cap, in the API server's order
    assert sorted(names[3:]) == ["z-failed-0", "z-failed-1"]
    assert listed["metadata"]["continue"]
