"""PodDisruptionBudgets, NetworkPolicies and ReadWriteOnce claims as the rules read them."""

from __future__ import annotations

from typing import Any

from diag.facts.kubernetes import lookups
from diag.facts.kubernetes_policy import multi_attach, read_write_once_pod_holders, scopes
from diag.snapshot.clock import Clock
from diag.snapshot.model import (
    Container,
    Event,
    NetworkPolicy,
    NetworkPolicyPort,
    NetworkPolicyRule,
    Node,
    PersistentVolumeClaim,
    Pod,
    PodDisruptionBudget,
    Service,
    ServicePort,
    Snapshot,
    SourceStatus,
)

LABELS = {"app": "qwen"}
GPU = {"nvidia.com/gpu": "1"}


def _vllm(name: str, node: str = "gpu-1", claim: str | None = None, phase: str = "Running") -> Pod:
    container = Container("vllm", command=["vllm", "serve", "Qwen/Qwen2.5-7B"], ports={"http": 8000}, limits=GPU)
    volumes = [{"name": "models", "persistentVolumeClaim": {"claimName": claim}}] if claim else []
    return Pod("llm", name, labels=LABELS, node_name=node, phase=phase, containers=[container], volumes=volumes)


def _snap(**kw: Any) -> Snapshot:
    snap = Snapshot(services=[Service("llm", "qwen", LABELS, [ServicePort(80, "http", "http")])], **kw)
    snap.sources["k8s/events.json"] = SourceStatus("ok")
    return snap


def _facts(snap: Snapshot, scope: str) -> list[dict]:
    return scopes(snap, lookups(snap, Clock(None, "none")))[scope]


def _policy(name: str, *rules: NetworkPolicyRule, selector: dict | None = None) -> NetworkPolicy:
    return NetworkPolicy("llm", name, {} if selector is None else selector, ["Ingress"], list(rules))


def test_a_default_deny_isolates_the_serving_port_unless_another_policy_admits_it() -> None:
    pods = [_vllm("qwen-0")]
    deny = _policy("default-deny")
    [alone] = _facts(_snap(pods=pods, network_policies=[deny]), "network_policy")
    assert (alone["isolated_serving_pods"], alone["serving_ports"], alone["services"]) == (
        ["qwen-0"],
        ["8000 (http)"],
        ["qwen"],
    )
    # policies add up: one that admits the named port from some namespace lets the traffic in
    admit = _policy(
        "allow-http",
        NetworkPolicyRule([NetworkPolicyPort("TCP", "http")], [{"namespaceSelector": {}}]),
        selector={"matchLabels": LABELS},
    )
    facts = _facts(_snap(pods=pods, network_policies=[deny, admit]), "network_policy")
    assert [f["isolated_serving_pods"] for f in facts] == [[], []]


def test_a_port_range_admits_the_port_and_a_rule_for_another_port_does_not() -> None:
    pods = [_vllm("qwen-0")]
    ranged = _policy("range", NetworkPolicyRule([NetworkPolicyPort("TCP", 7000, 8999)]))
    assert _facts(_snap(pods=pods, network_policies=[ranged]), "network_policy")[0]["isolated_serving_pods"] == []
    metrics = _policy("metrics-only", NetworkPolicyRule([NetworkPolicyPort("TCP", 9400)]))
    [found] = _facts(_snap(pods=pods, network_policies=[metrics]), "network_policy")
    assert found["isolated_serving_pods"] == ["qwen-0"]
    assert found["rules_text"] == "9400/TCP from every source"
    udp = _policy("udp", NetworkPolicyRule([NetworkPolicyPort("UDP", 8000)]))
    assert _facts(_snap(pods=pods, network_policies=[udp]), "network_policy")[0]["isolated_serving_pods"] == ["qwen-0"]


def test_a_policy_that_selects_other_pods_or_only_egress_isolates_nothing() -> None:
    pods = [_vllm("qwen-0")]
    other = _policy("web", selector={"matchLabels": {"app": "web"}})
    egress = NetworkPolicy("llm", "egress-only", {}, ["Egress"], [])
    facts = _facts(_snap(pods=pods, network_policies=[other, egress]), "network_policy")
    assert [f["isolated_serving_pods"] for f in facts] == [[], []]


def _pdb(**kw: object) -> PodDisruptionBudget:
    base: dict = {"selector": {"matchLabels": LABELS}, "min_available": 2, "disruptions_allowed": 0}
    base |= {"current_healthy": 2, "desired_healthy": 2, "expected_pods": 2} | kw
    return PodDisruptionBudget("llm", "qwen", **base)


def test_a_budget_that_allows_none_with_every_pod_healthy_blocks_a_cordoned_nodes_drain() -> None:
    pods = [_vllm("qwen-0", "gpu-1"), _vllm("qwen-1", "gpu-2")]
    nodes = [Node("gpu-1"), Node("gpu-2", unschedulable=True)]
    [pdb] = _facts(_snap(pods=pods, nodes=nodes, pdbs=[_pdb()]), "pdb")
    assert pdb["allows_no_disruption"] is True
    assert pdb["gpu_serving_pods"] == ["qwen-0", "qwen-1"]
    assert pdb["blocked_drains"] == ["gpu-2 is cordoned and holds qwen-1"]
    assert pdb["patch"] == '{"spec":{"minAvailable":1}}'
    # a pod down (a rollout): zero allowed is not the budget's doing
    [rolling] = _facts(_snap(pods=pods, nodes=nodes, pdbs=[_pdb(current_healthy=1)]), "pdb")
    assert rolling["allows_no_disruption"] is False
    # policy/v1: a budget without a selector selects no pod
    [empty] = _facts(_snap(pods=pods, nodes=nodes, pdbs=[_pdb(selector=None)]), "pdb")
    assert empty["gpu_serving_pods"] == []


def test_an_eviction_refusal_in_the_events_is_quoted() -> None:
    refused = Event(
        "llm",
        "Pod",
        "qwen-0",
        "EvictionBlocked",
        "Cannot evict pod as it would violate the pod's disruption budget.",
        "Warning",
    )
    pod = _vllm("qwen-0")
    pod.events = [refused]
    one = _pdb(min_available=None, max_unavailable=0, current_healthy=1, desired_healthy=1, expected_pods=1)
    [pdb] = _facts(_snap(pods=[pod], nodes=[Node("gpu-1")], pdbs=[one]), "pdb")
    assert pdb["eviction_refusals"] == [
        "pod/qwen-0: EvictionBlocked: Cannot evict pod as it would violate the pod's disruption budget."
    ]
    assert pdb["patch"] == '{"spec":{"minAvailable":null,"maxUnavailable":1}}'


def test_a_volume_exclusively_attached_elsewhere_names_the_claim_its_mode_and_the_node() -> None:
    holder, waiting = _vllm("qwen-0", "gpu-1", "hf-cache"), _vllm("qwen-1", "gpu-2", "hf-cache", "Pending")
    message = (
        'Multi-Attach error for volume "pvc-1f2e" Volume is already exclusively attached to one node and '
        "can't be attached to another"
    )
    snap = _snap(
        pods=[holder, waiting], pvcs=[PersistentVolumeClaim("llm", "hf-cache", ["ReadWriteOnce"], "gp3", "pvc-1f2e")]
    )
    snap.sources["k8s/persistentvolumeclaims.json"] = SourceStatus("ok")
    [found] = multi_attach(waiting, [Event("llm", "Pod", "qwen-1", "FailedAttachVolume", message, "Warning")], snap)
    assert found["text"] == (
        "claim hf-cache (volume pvc-1f2e): accessModes ReadWriteOnce; attached on gpu-1 for qwen-0"
    )
    # without the claims list the access mode is unknown, not assumed
    del snap.sources["k8s/persistentvolumeclaims.json"]
    [unread] = multi_attach(waiting, [Event("llm", "Pod", "qwen-1", "FailedAttachVolume", message, "Warning")], snap)
    assert unread["access_modes"] is None and "accessModes not read" in unread["text"]


def test_karpenters_disruption_blocked_on_the_node_counts_where_it_names_this_budget() -> None:
    pods = [_vllm("qwen-0", "gpu-1")]
    node = Node("gpu-1")
    blocked = "Pdb prevents pod evictions (PodDisruptionBudget=[llm/qwen])"
    node.events = [
        Event(None, "Node", "gpu-1", "DisruptionBlocked", blocked, "Normal"),
        Event(
            None,
            "Node",
            "gpu-1",
            "DisruptionBlocked",
            "Pdb prevents pod evictions (PodDisruptionBudget=[llm/qwen-2])",
            "Normal",
        ),
    ]
    [pdb] = _facts(_snap(pods=pods, nodes=[node], pdbs=[_pdb()]), "pdb")
    assert pdb["eviction_refusals"] == [f"node/gpu-1: DisruptionBlocked: {blocked}"]


def test_the_schedulers_read_write_once_pod_refusal_names_the_claim_and_who_holds_it() -> None:
    holder, waiting = _vllm("qwen-0", "gpu-1", "hf-cache"), _vllm("qwen-1", "", "hf-cache", "Pending")
    waiting.node_name = None
    snap = _snap(pods=[holder, waiting], pvcs=[PersistentVolumeClaim("llm", "hf-cache", ["ReadWriteOncePod"])])
    older = (
        "0/2 nodes are available: node has pod using PersistentVolumeClaim with the same name and "
        "ReadWriteOncePod access mode."
    )
    found = read_write_once_pod_holders(waiting, {"seen": True, "message": older}, snap)
    assert found == ["claim hf-cache (ReadWriteOncePod) is used by qwen-0 on gpu-1"]
    other = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    assert read_write_once_pod_holders(waiting, {"seen": True, "message": other}, snap) == []
    assert read_write_once_pod_holders(waiting, None, snap) is None
