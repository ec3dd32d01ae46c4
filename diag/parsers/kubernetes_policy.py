"""`kubectl get -o json` of what limits how serving pods run beside their spec: PodDisruptionBudgets
(policy/v1), NetworkPolicies (networking.k8s.io/v1) and PersistentVolumeClaims (v1)."""

from __future__ import annotations

from diag.parsers.json_fields import Fields
from diag.parsers.kubernetes import _conditions, _int_or_name, _objects
from diag.snapshot.model import (
    NetworkPolicy,
    NetworkPolicyPort,
    NetworkPolicyRule,
    PersistentVolumeClaim,
    PodDisruptionBudget,
)


def parse_pdbs(text: str) -> list[PodDisruptionBudget]:
    found = []
    for obj in _objects(text, "PodDisruptionBudget"):
        spec, status = obj.fields.child("spec"), obj.fields.child("status")
        found.append(
            PodDisruptionBudget(
                namespace=obj.require_namespace(),
                name=obj.name,
                selector=spec.raw_object("selector") if "selector" in spec else None,
                min_available=_int_or_name(spec, "minAvailable"),
                max_unavailable=_int_or_name(spec, "maxUnavailable"),
                disruptions_allowed=status.integer("disruptionsAllowed"),
                current_healthy=status.integer("currentHealthy"),
                desired_healthy=status.integer("desiredHealthy"),
                expected_pods=status.integer("expectedPods"),
                conditions=_conditions(status),
            )
        )
    return found


def parse_network_policies(text: str) -> list[NetworkPolicy]:
    found = []
    for obj in _objects(text, "NetworkPolicy"):
        spec = obj.fields.child("spec")
        types = spec.strings("policyTypes")
        if not types:  # the API server's default where a client gave none
            types = ["Ingress", "Egress"] if spec.children("egress") else ["Ingress"]
        found.append(
            NetworkPolicy(
                namespace=obj.require_namespace(),
                name=obj.name,
                pod_selector=spec.raw_object("podSelector"),
                policy_types=types,
                ingress=[_rule(r) for r in spec.children("ingress")],
            )
        )
    return found


def _rule(rule: Fields) -> NetworkPolicyRule:
    ports = [
        NetworkPolicyPort(p.text("protocol") or "TCP", _int_or_name(p, "port"), p.integer("endPort"))
        for p in rule.children("ports")
    ]
    return NetworkPolicyRule(ports, rule.raw_objects("from"))


def parse_pvcs(text: str) -> list[PersistentVolumeClaim]:
    found = []
    for obj in _objects(text, "PersistentVolumeClaim"):
        spec, status = obj.fields.child("spec"), obj.fields.child("status")
        found.append(
            PersistentVolumeClaim(
                namespace=obj.require_namespace(),
                name=obj.name,
                access_modes=spec.strings("accessModes"),
                storage_class=spec.text("storageClassName"),
                volume_name=spec.text("volumeName"),
                phase=status.text("phase"),
            )
        )
    return found
