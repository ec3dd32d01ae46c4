"""Where a pod may run: nodeSelector / required node affinity, taints and tolerations, GPU resources.

These mirror the scheduler's filters (NodeAffinity, TaintToleration, NodeResourcesFit for extended
resources) closely enough to name, for a pod that cannot be placed, the label it asks for, the taint it
does not tolerate, or the GPU resource no node offers.
"""

from __future__ import annotations

from diag.snapshot.model import Node, Pod
from diag.snapshot.quantity import GPU_RESOURCE, MIG_RESOURCE_PREFIX, gpu_count

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
GPU_REPLICAS_LABEL = "nvidia.com/gpu.replicas"
GPU_SHARING_LABEL = "nvidia.com/gpu.sharing-strategy"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
SHARED_PRODUCT_SUFFIX = "-SHARED"
SHARING_STRATEGIES = ("time-slicing", "mps")  # GFD writes "none" when GPUs are not shared
# Taints the node lifecycle controller and kubelet set themselves (not-ready, unreachable,
# unschedulable, *-pressure ...): their cause is the node's condition, not a missing toleration. And
# the control plane's own taint, which keeps workloads off it on purpose.
IGNORED_TAINT_PREFIXES = ("node.kubernetes.io/", "node-role.kubernetes.io/")
REPELLING_EFFECTS = ("NoSchedule", "NoExecute")


def gpu_allocatable(node: Node) -> int | None:
    """Whole GPUs the node advertises; None when it advertises no nvidia.com/gpu at all."""
    return gpu_count(node.allocatable) if GPU_RESOURCE in node.allocatable else None


def mig_offered(node: Node) -> list[str]:
    """The nvidia.com/mig-* resources the node advertises with at least one device."""
    return sorted(k for k, v in node.allocatable.items() if k.startswith(MIG_RESOURCE_PREFIX) and v not in ("0", ""))


def advertises_gpus(node: Node) -> bool:
    """Does the device plugin advertise any GPU device (whole or MIG) on this node?"""
    return bool(gpu_allocatable(node)) or bool(mig_offered(node))


def gpu_sharing(node: Node) -> dict | None:
    """How GFD says the node's GPUs are shared (time-slicing / MPS); None when they are not."""
    strategy = node.labels.get(GPU_SHARING_LABEL)
    replicas = node.labels.get(GPU_REPLICAS_LABEL, "")
    product = node.labels.get(GPU_PRODUCT_LABEL, "")
    shared = (
        strategy in SHARING_STRATEGIES
        or product.endswith(SHARED_PRODUCT_SUFFIX)
        or (replicas.isdigit() and int(replicas) > 1)
    )
    if not shared:
        return None
    return {
        "strategy": strategy,
        "replicas": replicas or None,
        "product": product or None,
        "physical_gpus": node.labels.get(GPU_COUNT_LABEL),
        "advertised_gpus": node.allocatable.get(GPU_RESOURCE),
    }


# --------------------------------------------------------------------------- node selection


def selector_terms(pod: Pod) -> list[str]:
    """The pod's hard node constraints as readable terms: "key=value" and "key In [a, b]"."""
    terms = [f"{k}={v}" for k, v in sorted(pod.node_selector.items())]
    for term in _required_affinity_terms(pod):
        for expr in term.get("matchExpressions") or []:
            values = expr.get("values") or []
            terms.append(f"{expr.get('key')} {expr.get('operator')}" + (f" [{', '.join(values)}]" if values else ""))
    return terms


def selector_keys(pod: Pod) -> list[str]:
    keys = set(pod.node_selector)
    for term in _required_affinity_terms(pod):
        keys.update(str(e.get("key")) for e in term.get("matchExpressions") or [])
    return sorted(keys)


def matches_selector(pod: Pod, node: Node) -> bool:
    """nodeSelector and required node affinity, as the NodeAffinity filter applies them."""
    if any(node.labels.get(k) != v for k, v in pod.node_selector.items()):
        return False
    terms = _required_affinity_terms(pod)
    return not terms or any(_term_matches(term, node) for term in terms)


def _required_affinity_terms(pod: Pod) -> list[dict]:
    required = (pod.affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    return [t for t in required.get("nodeSelectorTerms") or [] if isinstance(t, dict)]


def _term_matches(term: dict, node: Node) -> bool:
    expressions = [(e, node.labels) for e in term.get("matchExpressions") or []]
    fields = [(e, {"metadata.name": node.name}) for e in term.get("matchFields") or []]
    if not expressions and not fields:
        return False  # an empty term matches no node
    return all(_expression_matches(e, values) for e, values in expressions + fields)


def label_selector_matches(selector: dict | None, labels: dict[str, str]) -> bool:
    """A metav1.LabelSelector (matchLabels and matchExpressions) against a pod's labels: {} selects
    every pod, None none."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    return all(_expression_matches(e, labels) for e in selector.get("matchExpressions") or [] if isinstance(e, dict))


def _expression_matches(expr: dict, labels: dict[str, str]) -> bool:
    key, operator, values = str(expr.get("key", "")), expr.get("operator"), expr.get("values") or []
    present = key in labels
    value = labels.get(key, "")
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and values:
        try:
            number, bound = int(value), int(values[0])
        except ValueError:
            return False
        return number > bound if operator == "Gt" else number < bound
    return False


def spread_and_pod_affinity(pod: Pod) -> list[str]:
    """The pod's hard topology spread constraints and required pod (anti-)affinity terms, readable."""
    found = [
        f"topologySpreadConstraint maxSkew={c.get('maxSkew')} topologyKey={c.get('topologyKey')} "
        f"whenUnsatisfiable={c.get('whenUnsatisfiable')} selector {_label_selector(c.get('labelSelector'))}"
        for c in pod.topology_spread_constraints
        if c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"
    ]
    for kind in ("podAffinity", "podAntiAffinity"):
        for term in (pod.affinity.get(kind) or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or []:
            found.append(
                f"{kind} topologyKey={term.get('topologyKey')} selector {_label_selector(term.get('labelSelector'))}"
            )
    return found


def _label_selector(selector: dict | None) -> str:
    selector = selector or {}
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    parts += [
        f"{e.get('key')} {e.get('operator')} {e.get('values') or ''}".strip()
        for e in selector.get("matchExpressions") or []
    ]
    return ", ".join(parts) or "(all pods)"


# --------------------------------------------------------------------------- taints


def untolerated_taints(pod: Pod, node: Node) -> list[dict]:
    """Taints that keep the pod off the node, leaving out the node-lifecycle and control-plane ones."""
    return [
        t
        for t in node.taints
        if t.get("effect") in REPELLING_EFFECTS
        and not str(t.get("key", "")).startswith(IGNORED_TAINT_PREFIXES)
        and not any(_tolerates(tol, t) for tol in pod.tolerations)
    ]


def _tolerates(toleration: dict, taint: dict) -> bool:
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    operator = toleration.get("operator") or "Equal"
    if not toleration.get("key"):
        return operator == "Exists"
    if toleration.get("key") != taint.get("key"):
        return False
    return operator == "Exists" or (toleration.get("value") or "") == (taint.get("value") or "")


def taint_text(taint: dict) -> str:
    """A taint as `kubectl taint` writes it: key=value:Effect (key:Effect without a value)."""
    value = taint.get("value")
    return f"{taint.get('key')}{'=' + value if value else ''}:{taint.get('effect')}"


def toleration_text(toleration: dict) -> str:
    """A toleration as `kubectl describe pod` lists it: key=value:Effect op=Exists."""
    key = toleration.get("key") or "*"
    value = f"={toleration['value']}" if toleration.get("value") else ""
    effect = f":{toleration['effect']}" if toleration.get("effect") else ""
    operator = f" op={toleration['operator']}" if toleration.get("operator") == "Exists" else ""
    return f"{key}{value}{effect}{operator}"


def toleration_for(taint: dict) -> str:
    """The toleration that lets a pod onto a node with this taint, as a pod-spec snippet."""
    if taint.get("value"):
        return (
            f'{{key: "{taint.get("key")}", operator: "Equal", value: '
            f'"{taint.get("value")}", effect: "{taint.get("effect")}"}}'
        )
    return f'{{key: "{taint.get("key")}", operator: "Exists", effect: "{taint.get("effect")}"}}'
