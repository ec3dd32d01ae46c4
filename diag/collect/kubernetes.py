"""The Kubernetes collector: the k8s/ files of the bundle, read through the API server.

Phase 1 (`collect_objects`) writes k8s/<kind>.json exactly as `kubectl get <kind> -o json` prints
it, for the target's scope (namespace or all, label selector, one pod, one RayCluster/RayService),
plus the nodes, the events of the scoped objects and of their nodes, the GPU device-plugin /
GPU-operator daemonsets and the Gateway API Gateways of every namespace (a route's Gateway is often in
another). Secrets and ConfigMaps are listed by name only (diag.collect.kube: metadata-only lists), and
a list whose CRDs are not installed (KubeRay, the Gateway API) is "skipped", an answer. It hands the
parsed pods on as soon as it has them: the other collectors need them to find vLLM servers
(`vllm_server_pods`), Ray heads (`ray_head_pods`) and one pod per GPU node to run nvidia-smi in
(`gpu_exec_pods`). Phase 2 writes bounded log tails (`collect_logs`) and nvidia-smi output (`collect_gpu_exec`).

Tested against a real API server with kwok nodes (tests/live/test_k8s_control_plane.py, test_k8s_pod_io.py)
and, for answers that server cannot give, against tests/replay over real HTTP.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from diag.bundle.layout import BY_KIND, KUBE_LISTS, NODE_PODS_FILE
from diag.collect import json_text
from diag.collect.base import Sink, SourceResult, Target
from diag.collect.redact import redact_object
from diag.core.errors import ParseError
from diag.parsers.kubernetes import (
    RAY_CLUSTER_LABEL,
    RAY_NODE_TYPE_LABEL,
    parse_events_document,
    parse_nodes_document,
    parse_pods_document,
)
from diag.snapshot.gpu_resources import is_gpu_node
from diag.snapshot.model import Container, Event, Node, Pod
from diag.snapshot.quantity import gpu_count, mig_total

if TYPE_CHECKING:
    from diag.collect.kube import KubeAccess
    from diag.collect.watch import WarmLists

# Kinds listed in the target's namespace(s), after the pods; file k8s/<kind>.json
NAMESPACED_KINDS = tuple(
    row.kind
    for row in KUBE_LISTS
    if row.scope == "namespace" and row.kind not in ("pods", "events") and row.instead_of is None
)
RAY_KINDS = tuple(row.kind for row in KUBE_LISTS if row.kuberay)
# Kinds served by CRDs that may be absent (a 404 is "skipped"), and the CRDs' group/version
CRD_KINDS = {row.kind: row.crd for row in KUBE_LISTS if row.crd}
# Kinds listed across all namespaces beside the nodes and daemonsets (a route's Gateway may be in another)
CLUSTER_WIDE_KINDS = tuple(row.kind for row in KUBE_LISTS if row.scope == "all" and row.crd)
# Daemonsets whose name or label values contain one of these: the node's GPU stack
GPU_DAEMONSETS = ("nvidia-device-plugin", "gpu-operator", "nvidia-dcgm-exporter", "gpu-feature-discovery")
MAX_LOG_PODS = 40  # pods whose logs are read, the most suspicious first
PARALLEL_REQUESTS = 8

_Job = TypeVar("_Job")


@dataclass(frozen=True)
class Scope:
    """Where to look: one namespace or all (None), and which pods."""

    namespace: str | None
    pod_selector: str | None = None
    pod_name: str | None = None

    @property
    def narrowed(self) -> bool:
        """Only some pods of the namespace: events are then kept for the collected objects only."""
        return bool(self.pod_selector or self.pod_name)


@dataclass(frozen=True)
class ExecTarget:
    """A container to run a fixed command in, and the name its output is filed under."""

    namespace: str
    pod: str
    container: str | None
    file_stem: str  # e.g. the node name for gpu/<node>.xml


@dataclass(frozen=True)
class VllmPod:
    namespace: str
    pod: str
    container: str
    port: int
    file_stem: str  # vllm/<file_stem>.metrics.txt: <namespace>.<pod>


# ----------------------------------------------------------------------------- phase 1: objects


def collect_objects(
    kube: KubeAccess, target: Target, sink: Sink, on_pods: Callable[[list[Pod]], None]
) -> list[SourceResult]:
    """Write k8s/*.json for the target; return how each file fared. `on_pods` gets the pods read
    (parsed) as soon as they are, before the other lists have come back and the events are listed;
    the other lists are written while the events are listed, events.json after them."""
    namespace = target_namespace(kube, target)
    with ThreadPoolExecutor(max_workers=PARALLEL_REQUESTS) as pool:
        pending = {k: pool.submit(_list, kube, k, namespace) for k in NAMESPACED_KINDS}
        pending["nodes"] = pool.submit(_list, kube, "nodes", None)
        pending["daemonsets"] = pool.submit(_list, kube, "daemonsets", None)  # the GPU stack lives elsewhere
        pending.update({k: pool.submit(_list, kube, k, None) for k in CLUSTER_WIDE_KINDS})
        # --ray-cluster scopes the pods by the RayCluster(s) it names, so the Ray lists come first
        outcomes = {k: pending[k].result() for k in RAY_KINDS}
        scope, scope_note = _scope(target, namespace, outcomes)
        # with watched copies, the pods as their text: a steady cycle parses only those that changed
        outcomes["pods"] = _list(
            kube, "pods", namespace, scope.pod_selector, _name_field(scope.pod_name), raw=kube.warm is not None
        )
        # the collectors that need the pods (and the vLLM scrape interval) start now, beside the other lists
        not_understood: list[SourceResult] = []
        pods_list = outcomes["pods"]
        pods, as_written = _parsed_pods(pods_list if isinstance(pods_list, dict) else None, not_understood, kube.warm)
        on_pods(pods)
        outcomes.update({k: f.result() for k, f in pending.items()})
    if isinstance(outcomes["endpoints"], SourceResult):  # the same addresses, when Endpoints cannot be read
        outcomes["endpointslices"] = _list(kube, "endpointslices", namespace)
    if isinstance(outcomes["daemonsets"], dict):
        outcomes["daemonsets"]["items"] = [d for d in outcomes["daemonsets"]["items"] if _is_gpu_daemonset(d)]

    lists = {k: v for k, v in outcomes.items() if isinstance(v, dict)}
    results = [v for v in outcomes.values() if isinstance(v, SourceResult)] + not_understood
    # the lists in hand are written (and redacted: a fleet's pods.json takes a second of CPU) while the
    # API server answers the events lists, not after them
    with ThreadPoolExecutor(max_workers=2) as writer:
        written = writer.submit(_write_lists, sink, lists, {"pods": pods} if as_written else {})
        on_nodes = writer.submit(collect_node_pods, kube, scope.namespace, pods, lists.get("nodes"), sink)
        events = _events(kube, scope, pods, lists)
        written.result()
        results.extend(on_nodes.result())
    if isinstance(events, dict):
        lists["events"] = events
        sink.write_json("k8s/events.json", events, _parsed_events(events, kube.warm))
    else:
        results.extend(events)
    for kind, answer in lists.items():
        results.append(
            SourceResult(BY_KIND[kind].path, "ok", _list_detail(answer, scope_note if kind == "pods" else ""))
        )
    return results


def _write_lists(sink: Sink, lists: dict[str, dict], parsed: dict[str, list]) -> None:
    for kind, answer in lists.items():
        sink.write_json(BY_KIND[kind].path, answer, parsed.get(kind))


def target_namespace(kube: KubeAccess, target: Target) -> str | None:
    """The namespace to read (None: all of them): -A, else -n, else the context's own."""
    return None if target.all_namespaces else (target.namespace or kube.current_namespace())


def _list(
    kube: KubeAccess,
    kind: str,
    namespace: str | None,
    label_selector: str | None = None,
    field_selector: str | None = None,
    raw: bool = False,
) -> dict | SourceResult:
    from diag.collect.kube import KubeError

    try:
        return kube.list_json(kind, namespace, label_selector, field_selector, raw=raw)
    except KubeError as e:
        if kind in RAY_KINDS and e.status == 404:
            return SourceResult(BY_KIND[kind].path, "skipped", "the ray.io/v1 CRDs are not installed")
        if kind in CRD_KINDS and e.status == 404:
            return SourceResult(BY_KIND[kind].path, "skipped", f"the {CRD_KINDS[kind]} CRDs are not installed")
        return SourceResult(BY_KIND[kind].path, "failed", str(e))


def _scope(target: Target, namespace: str | None, ray_lists: dict[str, dict | SourceResult]) -> tuple[Scope, str]:
    selectors = [s for s in (target.selector,) if s]
    note = ""
    if target.ray_cluster:
        clusters = _ray_cluster_names(target.ray_cluster, ray_lists)
        selectors.append(f"{RAY_CLUSTER_LABEL} in ({','.join(sorted(clusters))})")
        note = f"RayCluster {', '.join(sorted(clusters))}"
    return Scope(namespace, ",".join(selectors) or None, target.pod), note


def _ray_cluster_names(name: str, ray_lists: dict[str, dict | SourceResult]) -> set[str]:
    """A RayCluster is itself; a RayService is the RayCluster(s) KubeRay made for it (active, pending)."""
    services = ray_lists.get("rayservices")
    for service in services.get("items", []) if isinstance(services, dict) else []:
        if (service.get("metadata") or {}).get("name") == name:
            status = service.get("status") or {}
            made = {
                (status.get(key) or {}).get("rayClusterName") for key in ("activeServiceStatus", "pendingServiceStatus")
            }
            if made - {None, ""}:
                return {n for n in made if n}
    return {name}


def _name_field(pod_name: str | None) -> str | None:
    return f"metadata.name={pod_name}" if pod_name else None


def _parsed_pods(
    pods_list: dict | None, results: list[SourceResult], warm: WarmLists | None = None
) -> tuple[list[Pod], bool]:
    """The pods, and whether they are what the loader makes of the k8s/pods.json written of `pods_list`
    (parsed from its redacted items: `_pods_of`)."""
    if pods_list is None:
        return [], False
    try:
        return _pods_of(pods_list, warm)
    except ParseError as e:
        results.append(
            SourceResult("k8s/pods.json", "failed", f"read but not understood, so no logs, vLLM or exec: {e}")
        )
        return [], False


def _pods_of(pods_list: dict, warm: WarmLists | None) -> tuple[list[Pod], bool]:
    """The pods of the list. With the watched copies of `warm` (the items their text), a pod is parsed
    once for as long as its copy hands it out unchanged (a fleet's pods took half a second each cycle),
    and from its redacted item: the pods are those the bundle's k8s/pods.json gives, and the analysis
    takes them instead of parsing the file again (`Bundle.parsed`)."""
    items = pods_list.get("items")
    if warm is None or type(items) is not list or not all(isinstance(item, dict | bytes) for item in items):
        return parse_pods_document(pods_list), False

    def parse(some: list) -> list[Pod]:
        return parse_pods_document(
            {**pods_list, "items": [redact_object(json_text.item_object(item)) for item in some]}
        )

    try:
        return warm.per_item("pods", items, parse), True
    except ParseError:
        return parse(items), True  # whole, so that the message places the bad item in the whole list


def _parsed_events(events: dict, warm: WarmLists | None) -> list[Event] | None:
    """With the watched copies, the events as the loader makes them of the k8s/events.json written
    (from their redacted items), each made once while it is unchanged; else None (the file is parsed)."""
    if warm is None:
        return None

    def parse(some: list) -> list[Event]:
        return parse_events_document({**events, "items": [redact_object(json_text.item_object(e)) for e in some]})

    try:
        return warm.per_item("events", events["items"], parse)
    except ParseError:
        return None  # the loader places the item it cannot read in the whole file


def _events(kube: KubeAccess, scope: Scope, pods: list[Pod], lists: dict[str, dict]) -> dict | list[SourceResult]:
    """Events of the scoped objects, and of the nodes their pods run on, in one v1 List."""
    outcome = _list(kube, "events", scope.namespace)
    if isinstance(outcome, SourceResult):
        return [outcome]
    items = outcome["items"]
    if (outcome.get("metadata") or {}).get("continue"):
        items = _with_every_warning(kube, scope, items)
    if scope.narrowed:
        related = _related_objects(pods, lists)
        items = [e for e in items if _involved(e) in related]
    nodes = {p.node_name for p in pods if p.node_name}
    if nodes and (scope.namespace is not None or scope.narrowed):  # else every event is in already
        node_events = _list(kube, "events", None, field_selector="involvedObject.kind=Node")
        if isinstance(node_events, SourceResult):
            return [SourceResult("k8s/events.json", "failed", f"events of the nodes: {node_events.detail}")]
        seen = {(e.get("metadata") or {}).get("uid") for e in items}
        items += [
            e
            for e in node_events["items"]
            if _involved(e)[2] in nodes and (e.get("metadata") or {}).get("uid") not in seen
        ]
    return {**outcome, "items": items}


def _with_every_warning(kube: KubeAccess, scope: Scope, items: list[dict]) -> list[dict]:
    """A capped list of events keeps the first ones in the API server's order (by name), not the ones
    that matter: the Warnings (FailedScheduling, BackOff, FailedMount ...) are listed again on their
    own, so that a fleet's thousands of Normal events cannot push them out. The list stays marked
    capped (more exist), so the analysis still knows it is incomplete."""
    warnings = _list(kube, "events", scope.namespace, field_selector="type=Warning")
    if isinstance(warnings, SourceResult):
        return items
    seen = {(e.get("metadata") or {}).get("uid") for e in items}
    return items + [e for e in warnings["items"] if (e.get("metadata") or {}).get("uid") not in seen]


_ObjectRef = tuple[str | None, str | None, str | None]  # (kind, namespace, name)


def _involved(event: dict) -> _ObjectRef:
    obj = event.get("involvedObject") or {}
    return obj.get("kind"), obj.get("namespace"), obj.get("name")


def _related_objects(pods: list[Pod], lists: dict[str, dict]) -> set[_ObjectRef]:
    """The pods, their owners, and every other object collected in the scope."""
    related: set[_ObjectRef] = {("Pod", p.namespace, p.name) for p in pods}
    related |= {(p.owner_kind, p.namespace, p.owner_name) for p in pods if p.owner_kind}
    for kind in ("services", "deployments", "statefulsets", "hpa", "rayclusters", "rayservices"):
        for item in (lists.get(kind) or {}).get("items", []):
            meta = item.get("metadata") or {}
            related.add((item.get("kind"), meta.get("namespace"), meta.get("name")))
    return related


def _is_gpu_daemonset(daemonset: dict) -> bool:
    meta = daemonset.get("metadata") or {}
    names = [meta.get("name") or "", *(v for v in (meta.get("labels") or {}).values() if isinstance(v, str))]
    return any(pattern in name for name in names for pattern in GPU_DAEMONSETS)


def _list_detail(answer: dict, note: str) -> str:
    count = f"{len(answer.get('items', []))} items"
    if (answer.get("metadata") or {}).get("continue"):
        count += " (capped; more exist)"
    return f"{count}; {note}" if note else count


# ----------------------------------------------------------------------------- who is who


def file_stems(pods: list[Pod]) -> dict[str, str]:
    """pod key -> file stem: always <namespace>.<pod>. A bare pod name is ambiguous as soon as another
    namespace has the same name (StatefulSet names like vllm-0 repeat), and a capped or namespaced
    pod list cannot show that it does not."""
    return {p.key: f"{p.namespace}.{p.name}" for p in pods}


def vllm_server_pods(pods: list[Pod]) -> list[VllmPod]:
    """Running pods with a container that runs vLLM's OpenAI server (diag.parsers.workloads: its
    command, image, arguments or environment), with the port to scrape."""
    from diag.parsers.workloads import vllm_server_port

    stems = file_stems(pods)
    found = []
    for pod in pods:
        if pod.phase != "Running":
            continue
        port = vllm_server_port(pod)
        if port is not None:
            found.append(VllmPod(pod.namespace, pod.name, port[0].name, port[1], stems[pod.key]))
    return found


def ray_head_pods(pods: list[Pod]) -> list[Pod]:
    return [p for p in pods if p.labels.get(RAY_NODE_TYPE_LABEL) == "head"]


def gpu_exec_pods(pods: list[Pod]) -> list[ExecTarget]:
    """One running, ready pod per GPU node, and its container that was given GPUs (for nvidia-smi)."""
    chosen: dict[str, ExecTarget] = {}
    for pod in sorted(pods, key=lambda p: (p.namespace, p.name)):
        if pod.node_name is None or pod.node_name in chosen or pod.phase != "Running":
            continue
        container = next((c for c in pod.containers if _has_gpus(c) and c.ready), None)
        if container is not None:
            chosen[pod.node_name] = ExecTarget(pod.namespace, pod.name, container.name, pod.node_name)
    return list(chosen.values())


def _has_gpus(container: Container) -> bool:
    return gpu_count(container.limits, container.requests) > 0 or mig_total(container.limits, container.requests) > 0


def pods_that_matter(pods: list[Pod]) -> list[Pod]:
    """vLLM servers, Ray heads and workers, and pods that are not Running and Ready or that restart."""
    from diag.parsers.workloads import vllm_server_port

    def trouble(pod: Pod) -> int:
        containers = pod.containers + pod.init_containers
        restarts = sum(c.restart_count for c in containers)
        unready = pod.phase != "Running" or any(c.ready is False for c in pod.containers)
        return 2 * unready + (restarts > 0)

    def serving(pod: Pod) -> bool:
        return pod.ray_node_type is not None or vllm_server_port(pod) is not None

    wanted = [p for p in pods if p.phase != "Succeeded" and (trouble(p) or serving(p))]
    wanted.sort(key=lambda p: (-trouble(p), p.namespace, p.name))
    return wanted[:MAX_LOG_PODS]


# ----------------------------------------------------------------------------- phase 2: logs, exec


@dataclass(frozen=True)
class _LogRequest:
    pod: Pod
    container: str
    previous: bool
    rel: str  # k8s/logs/<namespace>.<pod>[.<container>][.previous].log


def _log_requests(pods: list[Pod]) -> tuple[list[_LogRequest], list[SourceResult]]:
    """Which logs to read: the current one of every container that ran, --previous where one restarted."""
    stems = file_stems(pods)
    requests: list[_LogRequest] = []
    skipped: list[SourceResult] = []
    for pod in pods:
        stem = stems[pod.key]
        several = len(pod.containers) > 1
        chosen = [(c, False) for c in pod.containers] + [(c, True) for c in pod.init_containers if _init_failed(c)]
        for container, is_init in chosen:
            base = f"k8s/logs/{stem}.{container.name}" if several or is_init else f"k8s/logs/{stem}"
            ran = container.state in ("running", "terminated") or container.restart_count > 0
            if ran:
                requests.append(_LogRequest(pod, container.name, False, f"{base}.log"))
            else:
                why = (
                    container.state_reason
                    or container.state
                    or ("not scheduled" if pod.node_name is None else "not started")
                )
                skipped.append(
                    SourceResult(f"{base}.log", "skipped", f"container {container.name} has not run ({why})")
                )
            if container.restart_count > 0 or container.last_exit_code is not None:
                requests.append(_LogRequest(pod, container.name, True, f"{base}.previous.log"))
    return requests, skipped


def _init_failed(container: Container) -> bool:
    return container.restart_count > 0 or (
        container.state == "terminated" and container.last_exit_code not in (None, 0)
    )


def collect_logs(kube: KubeAccess, pods: list[Pod], sink: Sink, tail_lines: int) -> list[SourceResult]:
    """Bounded log tails (current and --previous) of the pods that matter."""
    from diag.collect.kube import KubeError

    requests, results = _log_requests(pods_that_matter(pods))

    def read(req: _LogRequest) -> SourceResult:
        where = f"{req.pod.key} container {req.container}" + (" (previous)" if req.previous else "")
        try:
            text = kube.pod_log(req.pod.namespace, req.pod.name, req.container, tail_lines, req.previous)
        except KubeError as e:
            return SourceResult(req.rel, "failed", str(e))
        sink.write(req.rel, text)
        return SourceResult(req.rel, "ok", where)

    return results + _parallel(read, requests)


def collect_gpu_exec(kube: KubeAccess, pods: list[Pod], sink: Sink, timeout_s: float) -> list[SourceResult]:
    """nvidia-smi -q -x and the --query-gpu CSV, run in one GPU pod per node -> gpu/<node>.xml, .csv."""
    from diag.collect.gpu import NVIDIA_SMI_CSV, NVIDIA_SMI_XML
    from diag.collect.kube import KubeError

    targets = gpu_exec_pods(pods)
    if not targets:
        return [SourceResult("gpu", "skipped", "no running pod with a GPU to run nvidia-smi in")]
    jobs = [
        (t, argv, f"gpu/{t.file_stem}.{ext}")
        for t in targets
        for argv, ext in ((NVIDIA_SMI_XML, "xml"), (NVIDIA_SMI_CSV, "csv"))
    ]

    def run(job: tuple[ExecTarget, list[str], str]) -> SourceResult:
        target, argv, rel = job
        where = f"`{' '.join(argv)}` in {target.namespace}/{target.pod}"
        try:
            output = kube.exec_fixed(target.namespace, target.pod, target.container, argv, timeout_s)
        except KubeError as e:
            return SourceResult(rel, "failed", str(e))
        sink.write(rel, output)
        return SourceResult(rel, "ok", where)

    return _parallel(run, jobs)


def _parallel(fn: Callable[[_Job], SourceResult], jobs: Iterable[_Job]) -> list[SourceResult]:
    jobs = list(jobs)
    if not jobs:
        return []
    with ThreadPoolExecutor(max_workers=min(PARALLEL_REQUESTS, len(jobs))) as pool:
        return list(pool.map(fn, jobs))


# ----------------------------------------------------------------------------- every namespace's pods on the GPU nodes

MAX_NODE_POD_LISTS = 32  # GPU nodes whose pods of every namespace are read, in a triage of some namespaces


def collect_node_pods(
    kube: KubeAccess, namespace: str | None, pods: list[Pod], nodes_list: dict | None, sink: Sink
) -> list[SourceResult]:
    """In a triage of one namespace: the pods of every namespace on the GPU nodes on its path, one list
    per node selected by spec.nodeName, into k8s/node-pods/<node>.json (never k8s/pods.json), so that
    what holds a node's GPUs is said from what was read. At most MAX_NODE_POD_LISTS nodes; the others
    are skipped, and their findings say that other namespaces' pods were not read."""
    from diag.collect.kube import KubeError

    if namespace is None or nodes_list is None:
        return []
    try:
        gpu_nodes = [n for n in parse_nodes_document(nodes_list) if is_gpu_node(n)]
    except ParseError:
        return []
    chosen = _nodes_on_the_path(gpu_nodes, pods)
    results = [
        SourceResult(_node_pods_file(n), "skipped", f"more than {MAX_NODE_POD_LISTS} GPU nodes on the path")
        for n in chosen[MAX_NODE_POD_LISTS:]
    ]

    def read(node: str) -> SourceResult:
        rel = _node_pods_file(node)
        try:
            answer = kube.list_json("pods", None, field_selector=f"spec.nodeName={node}")
        except KubeError as e:
            return SourceResult(rel, "failed", str(e))
        sink.write_json(rel, answer)
        return SourceResult(rel, "ok", _list_detail(answer, "pods of every namespace on the node"))

    return _parallel(read, chosen[:MAX_NODE_POD_LISTS]) + results


def _nodes_on_the_path(gpu_nodes: list[Node], pods: list[Pod]) -> list[str]:
    """The GPU nodes the namespace's pods run on; where one of them waits for a node, every GPU node,
    those that take no pod now (cordoned, not Ready) first: they are the likeliest to explain the wait."""
    placed = {p.node_name for p in pods if p.node_name}
    chosen = [n.name for n in gpu_nodes if n.name in placed]
    if any(not p.node_name and p.phase == "Pending" for p in pods):
        rest = [n for n in gpu_nodes if n.name not in placed]
        rest.sort(key=lambda n: not (n.unschedulable or n.conditions.get("Ready", {}).get("status") != "True"))
        chosen += [n.name for n in rest]
    return chosen


def _node_pods_file(node: str) -> str:
    return NODE_PODS_FILE.replace("<node>", node)
