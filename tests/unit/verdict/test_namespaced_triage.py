"""A triage of some namespaces reads their pods only: a cluster-scoped finding (a cordoned GPU node) is
theirs only where it touches their workloads, and says what it could not see (issue 36)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from diag.analyze import analyze_bundle
from diag.bundle.files import Bundle

FIXTURE = Path(__file__).resolve().parents[3] / "fixtures" / "k8s-gpu-node-cordoned"


def _triage_of(namespace: str, node_pods: dict[str, list[dict]] | None = None) -> Bundle:
    """The fixture as `llmdiag collect -n NAMESPACE` would have written it: that namespace's pods and
    events, the cluster's nodes and daemonsets, and a manifest that says so."""
    files = {rel.relative_to(FIXTURE).as_posix(): rel.read_bytes() for rel in FIXTURE.rglob("*") if rel.is_file()}
    for kind in ("pods", "events"):
        listed = json.loads(files[f"k8s/{kind}.json"])
        listed["items"] = [i for i in listed["items"] if i["metadata"].get("namespace") == namespace]
        files[f"k8s/{kind}.json"] = json.dumps(listed).encode()
    files = {rel: data for rel, data in files.items() if not rel.startswith("k8s/logs/") or namespace in rel}
    files["manifest.json"] = json.dumps({"kubernetes": {"namespaces": [namespace]}}).encode()
    for node, items in (node_pods or {}).items():
        files[f"k8s/node-pods/{node}.json"] = json.dumps({"apiVersion": "v1", "kind": "List", "items": items}).encode()
    return Bundle(files, origin=f"<{namespace}>")


def _pods_on(node: str, *extra: dict) -> list[dict]:
    """Every namespace's pods on the node, as `kubectl get pods -A --field-selector spec.nodeName=` lists them."""
    listed = json.loads((FIXTURE / "k8s" / "pods.json").read_text())["items"]
    return [i for i in listed if i["spec"].get("nodeName") == node] + list(extra)


def _batch_pod_on(node: str) -> dict:
    """A pod of another namespace holding 2 GPUs of the node (it was not drained with the cordon)."""
    listed = json.loads((FIXTURE / "k8s" / "pods.json").read_text())["items"]
    pod = copy.deepcopy(next(i for i in listed if i["metadata"]["name"] == "finetune-qwen-0-xrcn6"))
    pod["metadata"].update(namespace="batch", name="embed-batch-0")
    pod["spec"]["nodeName"] = node
    for container in pod["spec"]["containers"]:
        container["resources"] = {"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "2"}}
    return pod


def _k8s_111(report) -> list:
    return [f for f in report.findings if f.rule == "K8S-111"]


def test_a_cordoned_node_that_runs_none_of_the_namespaces_pods_is_not_in_its_report() -> None:
    report = analyze_bundle(_triage_of("research"))
    assert _k8s_111(report) == []  # another team's node: not this namespace's question
    assert (report.verdict.status, report.exit_code) == ("healthy", 0)
    assert all(f.serving or f.subject.split("/")[1:2] == ["research"] for f in report.findings)


def test_a_cordoned_node_where_the_namespaces_pending_pod_could_go_stays_the_cause() -> None:
    report = analyze_bundle(_triage_of("llm"))
    [cordoned] = _k8s_111(report)
    assert cordoned.serving
    assert (report.verdict.layer, report.verdict.rule) == ("kubernetes", "K8S-111")
    # the pending replica's own finding names the cordoned node, explained by it
    [pending] = [f for f in report.findings if f.rule == "K8S-117"]
    assert pending.subject == "pod/llm/llama-70b-7f8d9c6b5d-4chff" and pending.explained_by == "K8S-111"
    free = [line for line in pending.evidence if "nvidia.com/gpu free" in line]
    assert free and all("at most" in line for line in free), free
    assert "of namespace llm (other namespaces' pods were not read)" in " ".join(pending.evidence)


def test_without_a_manifest_the_lists_are_taken_as_they_are() -> None:
    report = analyze_bundle(Bundle.open(FIXTURE))
    [cordoned] = _k8s_111(report)
    assert cordoned.serving and "not read" not in " ".join(cordoned.evidence)


def test_every_namespaces_pods_read_on_the_gpu_nodes_are_counted_but_never_the_namespaces_own() -> None:
    bundle = _triage_of(
        "llm", {"gpu-h100-1": _pods_on("gpu-h100-1"), "gpu-h100-2": _pods_on("gpu-h100-2", _batch_pod_on("gpu-h100-2"))}
    )
    report = analyze_bundle(bundle)
    [cordoned] = _k8s_111(report)
    evidence = " ".join(cordoned.evidence)
    assert "GPU pods still on it: batch/embed-batch-0" in evidence and "not read" not in evidence
    [pending] = [f for f in report.findings if f.rule == "K8S-117"]
    text = " ".join(pending.evidence)
    assert "gpu-h100-2: cordoned; 6 of 8 nvidia.com/gpu free, GPU pods on it: batch/embed-batch-0" in text
    assert "gpu-h100-1: 0 of 8 nvidia.com/gpu free for its 4" in text
    assert "llm/llama-70b-7f8d9c6b5d-pfnp5, research/finetune-qwen-0-xrcn6" in text
    assert "at most" not in text and "not read" not in text
    # the other namespaces' pods are context: never pods of the triage, nor on its serving path
    assert {f.subject for f in report.findings if f.subject.startswith("pod/")} <= {
        "pod/llm/llama-70b-7f8d9c6b5d-4chff",
        "pod/llm/llama-70b-7f8d9c6b5d-pfnp5",
    }
    assert (report.verdict.layer, report.verdict.rule) == ("kubernetes", "K8S-111")


def test_a_node_whose_pods_list_failed_still_says_what_was_not_read() -> None:
    bundle = _triage_of("llm", {"gpu-h100-2": _pods_on("gpu-h100-2", _batch_pod_on("gpu-h100-2"))})
    manifest = json.loads(bundle.files["manifest.json"])
    manifest["sources"] = {
        "k8s/node-pods/gpu-h100-1.json": {
            "status": "failed",
            "detail": 'pods is forbidden: cannot list resource "pods"',
        }
    }
    bundle.files["manifest.json"] = json.dumps(manifest).encode()
    report = analyze_bundle(bundle)
    [pending] = [f for f in report.findings if f.rule == "K8S-117"]
    text = " ".join(pending.evidence)
    # its own replica holds 4 of 8: what else does could not be read, so the count is a bound
    assert (
        "gpu-h100-1: at most 4 of 8 nvidia.com/gpu free, enough by what was read (GPU pods on it: "
        "llm/llama-70b-7f8d9c6b5d-pfnp5 of namespace llm (other namespaces' pods were not read))"
    ) in text
    assert "gpu-h100-2: cordoned; 6 of 8 nvidia.com/gpu free, GPU pods on it: batch/embed-batch-0" in text


def test_a_waiting_pod_puts_on_the_path_only_the_gpu_nodes_its_selector_allows() -> None:
    from diag.snapshot.model import Container, Node, Pod, Snapshot
    from diag.verdict.relevance import serving_links

    def node(name: str, product: str, cordoned: bool = False) -> Node:
        labels = {"nvidia.com/gpu.product": product}
        return Node(name, labels=labels, unschedulable=cordoned, capacity={"nvidia.com/gpu": "8"})

    gpus = {"nvidia.com/gpu": "4"}
    waiting = Pod("llm", "qwen-1", phase="Pending", containers=[Container("vllm", limits=gpus, requests=gpus)])
    snap = Snapshot(
        pods=[waiting],
        nodes=[node("h200-a", "NVIDIA-H200"), node("l40s-a", "NVIDIA-L40S", cordoned=True)],
        manifest={"kubernetes": {"namespaces": ["llm"]}},
    )
    assert {"node:h200-a", "node:l40s-a"} <= serving_links(snap)  # it may go anywhere
    waiting.node_selector = {"nvidia.com/gpu.product": "NVIDIA-H200"}
    links = serving_links(snap)
    assert "node:h200-a" in links and "node:l40s-a" not in links
    waiting.node_selector = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}  # no node has it
    assert {"node:h200-a", "node:l40s-a"} <= serving_links(snap)
