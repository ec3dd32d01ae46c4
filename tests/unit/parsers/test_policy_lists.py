"""PodDisruptionBudgets, NetworkPolicies and PersistentVolumeClaims as `kubectl get -o json` prints them."""

from __future__ import annotations

import json

import pytest

from diag.core.errors import ParseError
from diag.parsers.kubernetes_policy import parse_network_policies, parse_pdbs, parse_pvcs
from diag.snapshot.model import NetworkPolicyPort


def _list(*items: dict) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(items), "metadata": {"resourceVersion": ""}})


def test_a_pdb_keeps_its_budget_selector_and_the_disruption_controllers_status() -> None:
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "qwen", "namespace": "llm"},
        "spec": {"minAvailable": "100%", "selector": {"matchLabels": {"app": "qwen"}}},
        "status": {
            "conditions": [
                {"type": "DisruptionAllowed", "status": "False", "reason": "InsufficientPods", "message": ""}
            ],
            "currentHealthy": 2,
            "desiredHealthy": 2,
            "disruptionsAllowed": 0,
            "expectedPods": 2,
            "observedGeneration": 1,
        },
    }
    [found] = parse_pdbs(_list(pdb))
    assert (found.min_available, found.max_unavailable, found.disruptions_allowed) == ("100%", None, 0)
    assert found.selector == {"matchLabels": {"app": "qwen"}}
    assert found.conditions["DisruptionAllowed"]["reason"] == "InsufficientPods"
    # a budget the controller has not looked at yet: its status is unknown, not zero
    del pdb["status"], pdb["spec"]["selector"]
    [fresh] = parse_pdbs(_list(pdb))
    assert (fresh.disruptions_allowed, fresh.selector) == (None, None)


def test_a_network_policy_without_policy_types_gets_the_api_servers_default() -> None:
    policy = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "allow-http", "namespace": "llm"},
        "spec": {
            "podSelector": {"matchLabels": {"app": "qwen"}},
            "ingress": [
                {"from": [{"namespaceSelector": {}}], "ports": [{"port": "http"}, {"port": 7000, "endPort": 7100}]}
            ],
        },
    }
    [found] = parse_network_policies(_list(policy))
    assert found.policy_types == ["Ingress"]
    assert found.ingress[0].ports == [NetworkPolicyPort("TCP", "http"), NetworkPolicyPort("TCP", 7000, 7100)]
    assert found.ingress[0].peers == [{"namespaceSelector": {}}]
    policy["spec"]["ingress"][0]["ports"] = [{"port": True}]
    with pytest.raises(ParseError, match="expected a number or a name"):
        parse_network_policies(_list(policy))


def test_a_claim_keeps_its_access_modes_and_the_volume_it_is_bound_to() -> None:
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "hf-cache", "namespace": "llm"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "gp3", "volumeName": "pvc-1f2e"},
        "status": {"accessModes": ["ReadWriteOnce"], "phase": "Bound"},
    }
    [found] = parse_pvcs(_list(claim))
    assert (found.access_modes, found.storage_class, found.volume_name, found.phase) == (
        ["ReadWriteOnce"],
        "gp3",
        "pvc-1f2e",
        "Bound",
    )
    with pytest.raises(ParseError):
        parse_pvcs(json.dumps({"apiVersion": "v1", "kind": "ServiceList", "items": []}))
