"""The serving path: which subjects the verdict is about.

A namespace rarely holds only the inference service. The serving path is what a request or a GPU of
the service passes through: vLLM servers and their pods, Ray clusters (nodes, actors, placement
groups, their pods), GPUs and the pods that ask for them, the NVIDIA daemonsets that hand GPUs out, the
nodes these run on or could run on (GPU nodes), and the Services, workloads and HPAs of those pods.
In a triage of some namespaces, a GPU node is on their path only where their pods run, or where one of
their serving pods waits for a node its selector allows: a cordoned node that runs another team's pods
is not their fault.
A finding about anything else is an "other problem": reported, never the verdict, never the cause of
a serving-path finding; in a triage of some namespaces, reported only where its subject is in one of
them. A bundle with no serving subject at all cannot tell them apart, so there every finding counts.
"""

from __future__ import annotations

from diag.engine.rules import Finding
from diag.facts.kubernetes_placement import matches_selector
from diag.snapshot.gpu_resources import gpu_component, is_gpu_node, wants_gpus
from diag.snapshot.model import Node, Pod, Snapshot

# Links of these kinds are on the serving path wherever they appear.
_SERVING_KINDS = ("vllm:", "ray_node:", "actor:", "placement_group:", "gpu:", "raycluster:")


def serving_links(snap: Snapshot) -> set[str] | None:
    """The link keys of the serving path; None when the bundle shows no serving subject at all."""
    pods = serving_pods(snap)
    links = {f"pod:{p.key}" for p in pods}
    links |= {f"workload:{p.namespace}/{p.workload_name}" for p in pods if p.workload_name}
    if not _pods_selected(snap):  # a workload with no pod yet; where pods were chosen, only those count
        links |= {f"workload:{w.namespace}/{w.name}" for w in snap.workloads if w.template_gpus > 0}
    links |= {f"node:{p.node_name}" for p in pods if p.node_name}
    gpu_nodes = [n for n in snap.nodes if is_gpu_node(n)]
    if snap.pods_listed_in() is None:
        links |= {f"node:{n.name}" for n in gpu_nodes}
    for pod in pods:
        if not pod.node_name and pod.phase == "Pending":
            links |= {f"node:{n.name}" for n in _nodes_it_may_use(pod, gpu_nodes)}
    if not links and not (snap.vllm_servers or snap.ray_nodes or snap.ray_actors or snap.gpus or snap.ray_clusters):
        return None
    return links


def _nodes_it_may_use(pod: Pod, gpu_nodes: list[Node]) -> list[Node]:
    """The GPU nodes a waiting pod's node selector and required affinity allow; every GPU node where they
    allow none (which of them it was meant for is then not known)."""
    return [n for n in gpu_nodes if matches_selector(pod, n)] or gpu_nodes


def _pods_selected(snap: Snapshot) -> bool:
    """Whether the collection chose pods by label or by name (`-l`, `--pod`): then the namespace's other
    workloads are not what the question is about."""
    selectors = snap.manifest.get("selectors")
    return isinstance(selectors, dict) and bool(selectors.get("label") or selectors.get("pod"))


def serving_pods(snap: Snapshot) -> list[Pod]:
    return [p for p in snap.pods if _serves(p)]


def in_question(finding: Finding, namespaces: list[str] | None) -> bool:
    """Whether a finding off the serving path is reported at all. In a triage of some namespaces it is
    only where its subject lies in one of them (an unrelated pod of theirs that crashes): a cordoned node,
    a daemonset or a GPU that none of their pods uses is another team's question."""
    if namespaces is None or finding.serving:
        return True
    parts = finding.subject.split("/")
    return len(parts) == 3 and parts[1] in namespaces


def on_serving_path(finding: Finding, serving: set[str] | None) -> bool:
    if serving is None or finding.subject == "cluster":
        return True
    return any(link.startswith(_SERVING_KINDS) or link in serving for link in finding.links)


def _serves(pod: Pod) -> bool:
    return (
        pod.vllm_server is not None
        or pod.ray_cluster is not None
        or pod.ray_node_type is not None
        or wants_gpus(pod)
        or (pod.owner_kind == "DaemonSet" and gpu_component(pod.owner_name or "") is not None)
    )
