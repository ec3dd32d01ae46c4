"""A triage of some namespaces reads their pods only: a cluster-scoped finding (a cordoned GPU node) is
theirs only where it touches their workloads, and says what it could not see (issue 36)."""

from __future__ import annotations

import json
from pathlib import Path

from diag.analyze import analyze_bundle
from diag.bundle.files import Bundle

FIXTURE = Path(__file__).resolve().parents[3] / "fixtures" / "k8s-gpu-node-cordoned"


def _triage_of(namespace: str) -> Bundle:
    """The fixture as `llmdiag collect -n NAMESPACE` would have written it: that namespace's pods and
    events, the cluster's nodes and daemonsets, and a manifest that says so."""
    files = {rel.relative_to(FIXTURE).as_posix(): rel.read_bytes() for rel in FIXTURE.rglob("*") if rel.is_file()}
    for kind in ("pods", "events"):
        listed = json.loads(files[f"k8s/{kind}.json"])
        listed["items"] = [i for i in listed["items"] if i["metadata"].get("namespace") == namespace]
        files[f"k8s/{kind}.json"] = json.dumps(listed).encode()
    files = {rel: data for rel, data in files.items() if not rel.startswith("k8s/logs/") or namespace in rel}
    files["manifest.json"] = json.dumps({"kubernetes": {"namespaces": [namespace]}}).encode()
    return Bundle(files, origin=f"<{namespace}>")


def _k8s_111(report) -> list:
    return [f for f in report.findings if f.rule == "K8S-111"]


def test_a_cordoned_node_that_runs_none_of_the_namespaces_pods_is_not_its_fault() -> None:
    report = analyze_bundle(_triage_of("research"))
    [cordoned] = _k8s_111(report)
    assert not cordoned.serving
    assert (report.verdict.status, report.exit_code) == ("healthy", 0)  # reported, under other problems
    assert "GPU pods still on it: none of namespace research (other namespaces' pods were not read)" in " ".join(
        cordoned.evidence
    )


def test_a_cordoned_node_where_the_namespaces_pending_pod_could_go_stays_the_cause() -> None:
    report = analyze_bundle(_triage_of("llm"))
    [cordoned] = _k8s_111(report)
    assert cordoned.serving
    assert (report.verdict.layer, report.verdict.rule) == ("kubernetes", "K8S-111")
    free = [line for f in report.findings if f.rule == "K8S-101" for line in f.evidence if "free" in line]
    assert free and all("at most" in line for line in free if "nvidia.com/gpu free" in line), free


def test_without_a_manifest_the_lists_are_taken_as_they_are() -> None:
    report = analyze_bundle(Bundle.open(FIXTURE))
    [cordoned] = _k8s_111(report)
    assert cordoned.serving and "not read" not in " ".join(cordoned.evidence)
