"""Causal links and the verdict: the deepest unexplained cause of the highest severity."""

from __future__ import annotations

from diag.engine.rules import Finding, Rule, RuleOutcome
from diag.verdict.coverage import Gap
from diag.verdict.diagnosis import link_causes, verdict


def rule(
    rid: str, layer: str, explains: tuple[str, ...] = (), requires: tuple[str, ...] = (), certain: bool = False
) -> Rule:
    return Rule(
        rid,
        layer,
        "critical",
        rid,
        "pod",
        "true",
        [],
        "",
        explains=list(explains),
        requires=list(requires),
        certain=certain,
    )


def finding(
    rid: str, layer: str, severity: str = "critical", links: tuple[str, ...] = ("pod:ns/a",), subject: str = "pod/ns/a"
) -> Finding:
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
    assert causes == {
        "VLLM-112": "K8S-101",
        "RAY-102": "K8S-101",
        "K8S-101": "K8S-103",
        "K8S-103": "GPU-102",
        "GPU-102": None,
    }
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
    v = verdict(
        [finding("K8S-103", "kubernetes", severity="info")],
        3,
        0,
        [Gap("k8s/events.json", "not in the bundle", "kubectl get events")],
    )
    assert (v.status, v.layer, v.rule) == ("inconclusive", None, None)
    assert "k8s/events.json" in v.summary and v.gaps[0].remedy == "kubectl get events"


def test_a_gap_no_explaining_rule_needs_is_no_caveat() -> None:
    """The over-hedge: a list none of the root's possible causes reads leaves the verdict whole."""
    rules = RULES | {"K8S-310": rule("K8S-310", "kubernetes", ("VLLM-101",), requires=("k8s/hpa.json",))}
    statefulsets = Gap("k8s/statefulsets.json", "not in the bundle", "kubectl get statefulsets -n ns -o json")
    v = verdict([finding("VLLM-101", "vllm")], 3, 0, [statefulsets], rules, {})
    assert (v.status, v.layer, v.rule, v.caveats, v.confidence) == ("fault", "vllm", "VLLM-101", [], "high")
    assert v.gaps == [statefulsets] and "could change" not in v.summary


def test_a_gap_an_undecided_explaining_rule_needs_is_a_caveat_not_a_shrug() -> None:
    rules = RULES | {"K8S-310": rule("K8S-310", "kubernetes", ("VLLM-101",), requires=("k8s/hpa.json",))}
    hpa = Gap("k8s/hpa.json", "not in the bundle", "kubectl get hpa -n ns -o json")
    v = verdict([finding("VLLM-101", "vllm")], 3, 0, [hpa], rules, {"K8S-310": RuleOutcome("skipped")})
    assert (v.status, v.layer, v.rule) == ("fault", "vllm", "VLLM-101")
    assert [(c.gap.source, c.rules, c.deeper) for c in v.caveats] == [("k8s/hpa.json", ("K8S-310",), True)]
    assert v.confidence == "low" and "Not read, and could change this: k8s/hpa.json" in v.summary
    decided = verdict([finding("VLLM-101", "vllm")], 3, 0, [hpa], rules, {"K8S-310": RuleOutcome("silent")})
    assert (decided.caveats, decided.confidence) == ([], "high")


def test_explaining_rules_are_followed_through_chains() -> None:
    """GPU-102 explains K8S-103, which explains K8S-101: a missing GPU file can change a K8S-101 root."""
    rules = {
        **RULES,
        "GPU-102": rule("GPU-102", "gpu", ("K8S-103",), requires=("gpu/",)),
    }
    xml = Gap("gpu/node-a.xml", "not XML", "nvidia-smi -q -x")
    v = verdict([finding("K8S-101", "kubernetes")], 3, 0, [xml], rules, {"GPU-102": RuleOutcome("unknown")})
    assert [c.rules for c in v.caveats] == [("GPU-102",)] and v.confidence == "low"
    same_layer = {
        **rules,
        "K8S-103": rule("K8S-103", "kubernetes", ("K8S-101",), requires=("k8s/nodes.json",)),
    }
    nodes = Gap("k8s/nodes.json", "truncated", "kubectl get nodes -o json")
    v = verdict([finding("K8S-101", "kubernetes")], 3, 0, [nodes], same_layer, {"K8S-103": RuleOutcome("skipped")})
    assert [c.rules for c in v.caveats] == [("K8S-103",)] and v.confidence == "medium"


def test_a_certain_root_has_no_caveat() -> None:
    rules = {
        **RULES,
        "GPU-102": rule("GPU-102", "gpu", ("VLLM-101",), requires=("gpu/",)),
    }
    rules["VLLM-101"] = rule("VLLM-101", "vllm", (), certain=True)
    v = verdict([finding("VLLM-101", "vllm")], 3, 0, [Gap("gpu/node-a.xml", "not XML", "nvidia-smi -q -x")], rules, {})
    assert (v.rule, v.caveats, v.confidence) == ("VLLM-101", [], "high")


def test_a_missing_crash_log_of_the_roots_own_pod_is_a_caveat_unless_the_root_explains_the_crash() -> None:
    crash_loop = rule("K8S-213", "kubernetes", (), requires=("k8s/pods.json",))
    log_rule = rule("VLLM-201", "vllm", ("K8S-213",), requires=("k8s/logs/",))
    rules = {"K8S-213": crash_loop, "VLLM-201": log_rule}
    log = Gap(
        "k8s/logs/ns.a.vllm.log",
        "crashed, log not collected",
        "kubectl -n ns logs a -c vllm",
        links=("pod:ns/a",),
        moot_if_root_explains="K8S-213",
    )
    v = verdict([finding("K8S-213", "kubernetes")], 3, 0, [log], rules, {"VLLM-201": RuleOutcome("skipped")})
    assert (v.status, v.layer, v.rule) == ("fault", "kubernetes", "K8S-213")
    assert [c.rules for c in v.caveats] == [("VLLM-201",)] and v.confidence == "low"
    oom = rule("K8S-210", "kubernetes", ("K8S-213",))
    v = verdict([finding("K8S-210", "kubernetes")], 3, 0, [log], {**rules, "K8S-210": oom}, {})
    assert (v.rule, v.caveats) == ("K8S-210", [])


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
    from diag.verdict.diagnosis import _rank

    ordered = sorted(findings, key=_rank)
    for effect in ordered:
        for cause in ordered:
            if (
                cause is effect
                or effect.rule not in rules[cause.rule].explains
                or (effect.serving and not cause.serving)
            ):
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

    rules = RULES | {
        "VLLM-112": rule("VLLM-112", "vllm", ("K8S-101",)),
        "RAY-102": rule("RAY-102", "ray", ("VLLM-101",)),
    }
    layers = {rid: r.layer for rid, r in rules.items()}
    linked = 0
    for seed in range(300):
        draw = random.Random(seed)
        findings = []
        for _ in range(draw.randint(1, 14)):
            rid = draw.choice(sorted(rules))
            links = tuple(
                draw.sample(["pod:ns/a", "pod:ns/b", "node:gpu-1", "vllm:s", "ray_node:r"], draw.randint(0, 2))
            )
            subject = "cluster" if draw.random() < 0.25 else f"pod/ns/{draw.choice('ab')}"
            found = finding(rid, layers[rid], draw.choice(["critical", "warning", "info"]), links, subject)
            found.serving = draw.random() < 0.8
            findings.append(found)
        expected = _linked_by_trying_every_pair(copy.deepcopy(findings), rules)
        link_causes(findings, rules)
        assert [f.explained_by for f in findings] == expected, seed
        linked += sum(1 for e in expected if e)
    assert linked > 100  # not vacuous
