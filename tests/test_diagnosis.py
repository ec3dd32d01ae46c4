"""Causal links and the verdict: the deepest unexplained cause of the highest severity."""

from __future__ import annotations

from diag.diagnosis import link_causes, verdict
from diag.engine import Finding, Rule


def rule(rid: str, layer: str, explains: tuple[str, ...] = ()) -> Rule:
    return Rule(rid, layer, "critical", rid, "pod", "true", [], "", explains=list(explains))


def finding(rid: str, layer: str, severity: str = "critical", links: tuple[str, ...] = ("pod:ns/a",), subject: str = "pod/ns/a") -> Finding:
    return Finding(rid, layer, severity, f"title {rid}", subject, [], "", links=list(links))


RULES = {
    "GPU-102": rule("GPU-102", "gpu", ("K8S-103",)),
    "K8S-103": rule("K8S-103", "kubernetes", ("K8S-101",)),
    "K8S-101": rule("K8S-101", "kubernetes", ("RAY-102", "VLLM-112")),
    "RAY-102": rule("RAY-102", "ray"),
    "VLLM-112": rule("VLLM-112", "vllm"),
    "VLLM-101": rule("VLLM-101", "vllm"),
}


def test_stacked_faults_resolve_to_the_deepest_cause() -> None:
    findings = [
        finding("VLLM-112", "vllm", links=("pod:ns/a", "vllm:a")),
        finding("RAY-102", "ray", links=("pod:ns/a",)),
        finding("K8S-101", "kubernetes"),
        finding("K8S-103", "kubernetes", links=("node:n1", "pod:ns/a")),
        finding("GPU-102", "gpu", links=("node:n1",), subject="gpu/n1/0"),
    ]
    link_causes(findings, RULES)
    causes = {f.rule: f.explained_by for f in findings}
    assert causes == {"VLLM-112": "K8S-101", "RAY-102": "K8S-101", "K8S-101": "K8S-103", "K8S-103": "GPU-102", "GPU-102": None}
    v = verdict(findings, checked=5, undecided=0)
    assert (v.layer, v.rule) == ("gpu", "GPU-102")
    assert "explains 4 other findings" in v.summary


def test_no_link_between_unrelated_subjects() -> None:
    findings = [finding("K8S-101", "kubernetes", links=("pod:ns/a",)), finding("VLLM-112", "vllm", links=("pod:ns/b",))]
    link_causes(findings, RULES)
    assert [f.explained_by for f in findings] == [None, None]


def test_severity_before_depth_and_info_is_never_the_verdict() -> None:
    findings = [
        finding("GPU-102", "gpu", severity="warning", links=("node:n9",)),
        finding("VLLM-101", "vllm", severity="critical", links=("vllm:z",)),
        finding("K8S-103", "kubernetes", severity="info", links=("node:n8",)),
    ]
    link_causes(findings, RULES)
    assert verdict(findings, 3, 0).rule == "VLLM-101"
    only_info = [finding("K8S-103", "kubernetes", severity="info")]
    v = verdict(only_info, 3, 1)
    assert v.layer is None and "1 could not be decided" in v.summary
