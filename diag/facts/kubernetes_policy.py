"""What limits serving pods beside their own spec: a PodDisruptionBudget that lets none of them be
evicted (every drain of their GPU nodes waits on it), NetworkPolicies that admit nothing to the port
they serve on, a ReadWriteOnce claim that replicas on other nodes cannot attach, and a ReadWriteOncePod
claim that another pod holds."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from diag.facts.common import current_events, link, plain
from diag.facts.kubernetes_containers import vllm_container
from diag.facts.kubernetes_network import _vllm_ports
from diag.facts.kubernetes_placement import label_selector_matches
from diag.snapshot.gpu_resources import wants_gpus
from diag.snapshot.model import Event, NetworkPolicy, NetworkPolicyPort, Pod, PodDisruptionBudget, Snapshot

if TYPE_CHECKING:
    from diag.facts.kubernetes import Lookups

_TERMINAL = ("Succeeded", "Failed")
# The eviction API's refusal (pkg/registry/core/pod/storage/eviction.go), as drain tools repeat it in
# their events, and Karpenter's DisruptionBlocked on a node ("Pdb prevents pod evictions
# (PodDisruptionBudget=[llm/qwen])"; older: "pdb llm/qwen prevents pod evictions"), which names the budget.
EVICTION_REFUSED = re.compile(r"violate the pod's disruption budget|prevents pod evictions", re.IGNORECASE)
# The attach/detach controller's FailedAttachVolume for a volume another node holds
# (pkg/controller/volume/attachdetach/reconciler): "Volume is already used by pod(s) a, b" or
# "Volume is already exclusively attached to one node and can't be attached to another".
_MULTI_ATTACH = re.compile(
    r'Multi-Attach error for volume "(?P<volume>[^"]+)"(?: Volume is already used by pod\(s\) (?P<pods>.+))?'
)


def _read(snap: Snapshot, name: str) -> bool:
    status = snap.sources.get(name)
    return status is not None and status.status == "ok"


def scopes(snap: Snapshot, index: Lookups) -> dict[str, list[dict]]:
    return {
        "pdb": _pdbs(snap, index),
        "network_policy": _network_policies(snap),
    }


# ----------------------------------------------------------------------------- PodDisruptionBudgets


def _pdbs(snap: Snapshot, index: Lookups) -> list[dict]:
    live: dict[str, list[Pod]] = {}
    if snap.pdbs:
        for pod in snap.pods:
            if pod.phase not in _TERMINAL:
                live.setdefault(pod.namespace, []).append(pod)
    return [
        _pdb(b, [p for p in live.get(b.namespace, []) if label_selector_matches(b.selector, p.labels)], index)
        for b in snap.pdbs
    ]


def _pdb(pdb: PodDisruptionBudget, covered: list[Pod], index: Lookups) -> dict:
    snap = index.snap
    serving = [p for p in covered if wants_gpus(p) or p.vllm_server is not None]
    healthy, expected = pdb.current_healthy, pdb.expected_pods
    # zero allowed while every pod is healthy is the budget itself; with a pod down it is a rollout's moment
    no_disruption = (
        None
        if pdb.disruptions_allowed is None or healthy is None or expected is None
        else pdb.disruptions_allowed == 0 and expected > 0 and healthy >= expected
    )
    nodes = index.indexes.nodes
    cordoned = sorted(
        {p.node_name for p in serving if p.node_name and p.node_name in nodes and nodes[p.node_name].unschedulable}
    )
    events_read = _read(snap, "k8s/events.json")
    about: list[Event] = [e for p in covered for e in p.events]
    about += index.indexes.events_about.get(("PodDisruptionBudget", pdb.namespace, pdb.name), [])
    named = re.compile(rf"(?<![\w.-]){re.escape(pdb.namespace)}/{re.escape(pdb.name)}(?![\w.-])")
    about += [
        e
        for n in sorted({p.node_name for p in serving if p.node_name in nodes})
        for e in nodes[n].events
        if named.search(e.message)
    ]
    refusals = [
        f"{e.involved_kind.lower()}/{e.involved_name}: {e.reason}: {e.message}"
        for e in current_events(about, index.clock)
        if EVICTION_REFUSED.search(e.message)
    ]
    return plain(pdb) | {
        "gpu_serving_pods": [p.name for p in serving],
        "allows_no_disruption": no_disruption,
        "budget": _budget(pdb),
        "status_text": f"{healthy} of {expected} pods healthy, {pdb.disruptions_allowed} disruptions allowed",
        "blocked_drains": [
            f"{n} is cordoned and holds {', '.join(p.name for p in serving if p.node_name == n)}" for n in cordoned
        ],
        "eviction_refusals": refusals if events_read else None,
        "fix": _pdb_fix(pdb),
        "patch": _pdb_patch(pdb),
        "_subject": f"pdb/{pdb.namespace}/{pdb.name}",
        "_links": [f"pod:{p.key}" for p in serving] + [x for n in cordoned for x in link("node", n)],
    }


def _budget(pdb: PodDisruptionBudget) -> str:
    if pdb.min_available is not None:
        return f"minAvailable: {pdb.min_available}"
    if pdb.max_unavailable is not None:
        return f"maxUnavailable: {pdb.max_unavailable}"
    return "neither minAvailable nor maxUnavailable"


def _one_less(pdb: PodDisruptionBudget) -> int | None:
    """minAvailable one under the pods it expects, where that still keeps one: the budget that lets a drain
    take one pod at a time."""
    if isinstance(pdb.min_available, int) and pdb.expected_pods is not None and pdb.expected_pods > 1:
        return pdb.expected_pods - 1
    return None


def _pdb_fix(pdb: PodDisruptionBudget) -> str:
    lower = _one_less(pdb)
    if lower is not None:
        return (
            f"spec.minAvailable: {lower} in place of {pdb.min_available}: "
            f"one of its {pdb.expected_pods} pods may then be evicted at a time"
        )
    if pdb.expected_pods == 1:
        return (
            f"it covers a single pod, so {_budget(pdb)} forbids its only eviction: run a second replica first, "
            "then spec.maxUnavailable: 1 (spec.minAvailable removed)"
        )
    return f"spec.maxUnavailable: 1 in place of {_budget(pdb)}: one pod may then be evicted at a time"


def _pdb_patch(pdb: PodDisruptionBudget) -> str:
    lower = _one_less(pdb)
    spec: dict = {"minAvailable": lower} if lower is not None else {"minAvailable": None, "maxUnavailable": 1}
    return json.dumps({"spec": spec}, separators=(",", ":"))


# ----------------------------------------------------------------------------- NetworkPolicies


def _serving_ports(pod: Pod, snap: Snapshot) -> list[tuple[int, str | None]]:
    """The ports a vLLM pod serves on, as (number, name): where Services select it, the container ports
    their targetPorts lead to; else vLLM's own port."""
    named = {name: n for c in pod.containers for name, n in c.ports.items() if not name.isdigit()}
    by_number = {n: name for name, n in named.items()}
    found: list[tuple[int, str | None]] = []
    for svc in snap.services:
        if (
            svc.namespace != pod.namespace
            or not svc.selector
            or any(pod.labels.get(k) != v for k, v in svc.selector.items())
        ):
            continue
        for sp in svc.ports:
            target = sp.target_port if sp.target_port is not None else sp.port
            number = named.get(target) if isinstance(target, str) else target
            if number is not None and (number, by_number.get(number)) not in found:
                found.append((number, by_number.get(number)))
    for port in [] if found else _vllm_ports(pod):
        found.append((port, by_number.get(port)))
    return found


def _serves(pod: Pod) -> bool:
    return pod.vllm_server is not None or vllm_container(pod) is not None


def _admits(port: NetworkPolicyPort, number: int, name: str | None) -> bool:
    if port.protocol != "TCP":
        return False
    if port.port is None:
        return True
    if isinstance(port.port, str):
        return port.port == name
    return port.port == number or (port.end_port is not None and port.port <= number <= port.end_port)


def _admitted(policies: list[NetworkPolicy], number: int, name: str | None) -> bool:
    """Whether any ingress rule of these policies admits TCP to the port, from any source: policies add
    up, and who the clients are is not known here."""
    return any(
        not rule.ports or any(_admits(p, number, name) for p in rule.ports) for pol in policies for rule in pol.ingress
    )


def _lead(policies: list[NetworkPolicy]) -> NetworkPolicy:
    """The policy a finding names where several shut the same pods off: a default-deny one (no ingress
    rule) first, the others are quoted beside it."""
    return min(policies, key=lambda p: (bool(p.ingress), p.name))


def _rules_text(policy: NetworkPolicy) -> str:
    if not policy.ingress:
        return "no ingress rule (every connection refused)"
    shown = []
    for rule in policy.ingress:
        ports = (
            ", ".join(
                f"{p.port if p.port is not None else 'any'}{'-' + str(p.end_port) if p.end_port else ''}/{p.protocol}"
                for p in rule.ports
            )
            or "every port"
        )
        peers = "every source" if not rule.peers else f"{len(rule.peers)} peer(s)"
        shown.append(f"{ports} from {peers}")
    return "; ".join(shown)


def _network_policies(snap: Snapshot) -> list[dict]:
    """Each serving pod once: the Ingress policies that select it and the serving ports none of them
    admits; the finding goes to the lead policy of each pod so shut off."""
    shut_by: dict[str, list[tuple[Pod, list[str], list[NetworkPolicy]]]] = {}
    isolating = [p for p in snap.network_policies if "Ingress" in p.policy_types]
    if isolating:
        for pod in snap.pods:
            if pod.phase in _TERMINAL or not _serves(pod):
                continue
            on_pod = [
                p
                for p in isolating
                if p.namespace == pod.namespace and label_selector_matches(p.pod_selector, pod.labels)
            ]
            shut = [
                f"{n} ({name})" if name else str(n)
                for n, name in _serving_ports(pod, snap)
                if on_pod and not _admitted(on_pod, n, name)
            ]
            if shut:
                lead = _lead(on_pod)
                shut_by.setdefault(f"{lead.namespace}/{lead.name}", []).append((pod, shut, on_pod))
    return [_network_policy(p, shut_by.get(f"{p.namespace}/{p.name}", []), snap) for p in snap.network_policies]


def _network_policy(
    policy: NetworkPolicy, shut: list[tuple[Pod, list[str], list[NetworkPolicy]]], snap: Snapshot
) -> dict:
    isolated = [pod for pod, _, _ in shut]
    ports_text = list(dict.fromkeys(port for _, ports, _ in shut for port in ports))
    others = {p.name for _, _, on_pod in shut for p in on_pod if p is not policy}
    keys = {p.key for p in isolated}
    fronts = sorted(
        s.name
        for s in snap.services
        if s.namespace == policy.namespace
        and s.selector
        and any(all(p.labels.get(k) == v for k, v in s.selector.items()) for p in isolated)
    )
    return plain(policy) | {
        "isolated_serving_pods": [p.name for p in isolated],
        "serving_ports": ports_text,
        "rules_text": _rules_text(policy),
        "other_policies": sorted(others),
        "services": fronts,
        # what llmdiag's own reads of them through the API server's proxy met: a timeout is what a policy
        # that the network plugin enforces does to them
        "health": [
            f"{(s.pod or s.name).split('/')[-1]}: GET /health {s.health}"
            for s in snap.vllm_servers
            if s.pod in keys and s.health
        ],
        "_subject": f"networkpolicy/{policy.namespace}/{policy.name}",
        "_links": [f"pod:{p.key}" for p in isolated]
        + [x for s in fronts for x in link("service", f"{policy.namespace}/{s}")],
    }


# ----------------------------------------------------------------------------- ReadWriteOnce claims


def multi_attach(pod: Pod, events: list[Event], snap: Snapshot) -> list[dict]:
    """The volumes the pod cannot attach because another node holds them: the claim, its access modes
    (None where the claims were not read) and the node that holds it, from the pods the attach/detach
    controller names, else from the other pods that mount the claim."""
    claims = _claims(pod)
    pvcs = {c.name: c for c in snap.pvcs if c.namespace == pod.namespace}
    pvcs_read = _read(snap, "k8s/persistentvolumeclaims.json")
    found: dict[str, dict] = {}
    for e in events:
        m = _MULTI_ATTACH.search(e.message) if e.reason == "FailedAttachVolume" else None
        if m is None or m["volume"] in found:
            continue
        bound = [c for c in claims if c in pvcs and pvcs[c].volume_name == m["volume"]]
        claim = bound[0] if bound else next(iter(claims)) if len(claims) == 1 else None
        holders = [n.strip() for n in m["pods"].split(",")] if m["pods"] else []
        if not holders and claim is not None:
            holders = [
                p.name
                for p in snap.pods
                if p.namespace == pod.namespace
                and p.name != pod.name
                and p.node_name
                and p.node_name != pod.node_name
                and p.phase == "Running"
                and claim in _claims(p)
            ]
        nodes = sorted(
            {p.node_name for p in snap.pods if p.namespace == pod.namespace and p.name in holders and p.node_name}
        )
        modes = (pvcs[claim].access_modes if claim in pvcs else None) if pvcs_read else None
        where = ", ".join(nodes) or "another node"
        found[m["volume"]] = {
            "volume": m["volume"],
            "claim": claim,
            "access_modes": modes,
            "held_on_nodes": nodes,
            "text": f"claim {claim or '(one of ' + ', '.join(sorted(claims)) + ')'} (volume {m['volume']}): "
            f"accessModes {', '.join(modes) if modes else 'not read' if modes is None else 'none'}; "
            f"attached on {where}" + (f" for {', '.join(holders)}" if holders else ""),
            "message": e.message,
        }
    return list(found.values())


def _claims(pod: Pod) -> set[str]:
    return {
        v["persistentVolumeClaim"]["claimName"]
        for v in pod.volumes
        if isinstance(v.get("persistentVolumeClaim"), dict)
        and isinstance(v["persistentVolumeClaim"].get("claimName"), str)
    }


# kube-scheduler's VolumeRestrictions refusal: "... node(s) unavailable due to PersistentVolumeClaim with
# ReadWriteOncePod access mode already in-use by another pod" (v1.34), "node has pod using
# PersistentVolumeClaim with the same name and ReadWriteOncePod access mode" (before)
RWOP_REFUSED = "ReadWriteOncePod access mode"


def read_write_once_pod_holders(pod: Pod, scheduling: dict | None, snap: Snapshot) -> list[str] | None:
    """Where the scheduler refused the pod for a ReadWriteOncePod claim: which of its claims, and the pod
    (and node) that holds each; [] where it refused it for nothing of the kind, None where the pod waits
    and its events were not read."""
    if scheduling is None:
        return None
    if not scheduling["seen"] or RWOP_REFUSED not in scheduling["message"]:
        return []
    pvcs = {c.name: c for c in snap.pvcs if c.namespace == pod.namespace}
    claims = sorted(c for c in _claims(pod) if c not in pvcs or "ReadWriteOncePod" in pvcs[c].access_modes)
    found = []
    for claim in claims:
        mode = "ReadWriteOncePod" if claim in pvcs else "access mode not read"
        users = [
            f"{p.name} on {p.node_name}"
            for p in snap.pods
            if p.namespace == pod.namespace and p.node_name and p.phase not in _TERMINAL and claim in _claims(p)
        ]
        found.append(f"claim {claim} ({mode}) is used by {', '.join(users) or 'a pod not in the bundle'}")
    return found
