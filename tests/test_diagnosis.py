"""Causal links and the verdict: the deepest unexplained cause of the highest severity."""

from __future__ import annotations

from diag.coverage import Gap
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
    assert v.status == "healthy"


def test_no_fault_with_a_gap_is_inconclusive_and_names_it() -> None:
    v = verdict([finding("K8S-103", "kubernetes", severity="info")], 3, 0, [Gap("k8s/events.json", "not in the bundle", "kubectl get events")])
    assert (v.status, v.layer, v.rule) == ("inconclusive", None, None)
    assert "k8s/events.json" in v.summary and v.gaps[0].remedy == "kubectl get events"


def test_a_fault_beside_a_gap_it_cannot_hide_under_is_still_the_verdict() -> None:
    same_layer = Gap("k8s/nodes.json", "truncated", "kubectl get nodes")
    v = verdict([finding("K8S-101", "kubernetes")], 3, 0, [same_layer])
    assert (v.status, v.rule) == ("fault", "K8S-101") and "1 source could not be read" in v.summary
    detail_only = Gap("k8s/hpa.json", "forbidden", "kubectl get hpa", deciding=False)
    assert verdict([finding("VLLM-101", "vllm")], 3, 0, [detail_only]).rule == "VLLM-101"


def test_a_gap_below_the_root_leaves_the_cause_undecided() -> None:
    v = verdict([finding("VLLM-101", "vllm")], 3, 0, [Gap("gpu/node-a.xml", "not XML", "nvidia-smi -q -x")])
    assert (v.status, v.layer, v.rule) == ("inconclusive", None, None)
    assert "point at the vllm layer (VLLM-101" in v.summary and "gpu/node-a.xml" in v.summary


def test_a_gap_the_root_explains_does_not_undecide_it() -> None:
    node_down = finding("K8S-110", "kubernetes", links=("node:gpu-2",), subject="node/gpu-2")
    unreachable = Gap("gpu/gpu-2.xml", "error dialing backend", "nvidia-smi -q -x", links=("node:gpu-2",))
    assert verdict([node_down], 3, 0, [unreachable]).rule == "K8S-110"


def test_an_unrelated_workload_never_takes_the_verdict_nor_explains() -> None:
    unrelated = finding("K8S-101", "kubernetes", links=("pod:ns/web", "node:n1"))
    unrelated.serving = False
    serving = finding("VLLM-112", "vllm", severity="warning", links=("vllm:a", "node:n1"))
    findings = [unrelated, serving]
    link_causes(findings, RULES)
    assert serving.explained_by is None
    v = verdict(findings, 2, 0)
    assert (v.status, v.rule) == ("fault", "VLLM-112")
    assert verdict([unrelated], 2, 0).status == "healthy"


def test_cluster_wide_findings_link_only_to_the_subjects_they_name() -> None:
    cause = finding("K8S-103", "kubernetes", links=("node:gpu-1",), subject="cluster")
    on_that_node = finding("K8S-101", "kubernetes", links=("pod:ns/a", "node:gpu-1"))
    elsewhere = finding("K8S-101", "kubernetes", links=("pod:ns/b", "node:gpu-9"), subject="pod/ns/b")
    ray_wide = finding("RAY-102", "ray", links=(), subject="cluster")
    rules = RULES | {"K8S-103": rule("K8S-103", "kubernetes", ("K8S-101", "RAY-102"))}
    link_causes([cause, on_that_node, elsewhere, ray_wide], rules)
    assert (on_that_node.explained_by, elsewhere.explained_by, ray_wide.explained_by) == ("K8S-103", None, "K8S-103")


def _linked_by_trying_every_pair(findings: list[Finding], rules: dict[str, Rule]) -> list[str | None]:
    """The definition link_causes indexes: each finding, in rank order, against every other in rank order."""
    from diag.diagnosis import _rank

    ordered = sorted(findings, key=_rank)
    for effect in ordered:
        for cause in ordered:
            if cause is effect or effect.rule not in rules[cause.rule].explains or (effect.serving and not cause.serving):
                continue
            both_cluster_wide = cause.subject == "cluster" and effect.subject == "cluster"
            if (both_cluster_wide or set(cause.links) & set(effect.links)) and cause.explained_by != effect.rule:
                effect.explained_by = cause.rule
                break
    return [f.explained_by for f in findings]


def test_finding_causes_by_link_gives_what_trying_every_pair_gives() -> None:
    """Random findings over few subjects, so that links, cluster-wide findings, mutual explanations
    (A explains B and B explains A) and off-path causes all meet."""
    import copy
    import random

    rules = RULES | {"VLLM-112": rule("VLLM-112", "vllm", ("K8S-101",)), "RAY-102": rule("RAY-102", "ray", ("VLLM-101",))}
    layers = {rid: r.layer for rid, r in rules.items()}
    linked = 0
    for seed in range(300):
        draw = random.Random(seed)
        findings = []
        for _ in range(draw.randint(1, 14)):
            rid = draw.choice(sorted(rules))
            links = tuple(draw.sample(["pod:ns/a", "pod:ns/b", "node:gpu-1", "vllm:s", "ray_node:r"], draw.randint(0, 2)))
            subject = "cluster" if draw.random() < 0.25 else f"pod/ns/{draw.choice('ab')}"
            found = finding(rid, layers[rid], draw.choice(["critical", "warning", "info"]), links, subject)
            found.serving = draw.random() < 0.8
            findings.append(found)
        expected = _linked_by_trying_every_pair(copy.deepcopy(findings), rules)
        link_causes(findings, rules)
        assert [f.explained_by for f in findings] == expected, seed
        linked += sum(1 for e in expected if e)
    assert linked > 100  # not vacuous
