"""Link the layers: pod <-> node <-> Ray node <-> GPU <-> vLLM server.

Each link is made from evidence both sides carry (names, labels, IPs, pids); where none exists the
link stays None. Nothing here judges health.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from dataclasses import dataclass
from urllib.parse import urlsplit

from diag.bundle import layout
from diag.bundle.identity import Ambiguous, PodNames
from diag.link.prometheus_join import attach_history
from diag.parsers import workloads
from diag.parsers.vllm_metrics import summarize
from diag.snapshot.indexes import indexes
from diag.snapshot.model import (
    GPU,
    Container,
    Pod,
    RayActor,
    RayClusterSpec,
    RayNode,
    Service,
    Snapshot,
    SourceStatus,
    VllmServer,
    XidLine,
)


def join(snap: Snapshot) -> Snapshot:
    attach_history(snap)
    _events_to_objects(snap)
    _pods_to_workloads(snap)
    _ray_nodes_to_pods(snap)
    _vllm_servers_to_pods(snap)
    _gpus_to_nodes_and_pods(snap)
    _ray_nodes_to_gpu_hosts(snap)
    _gpu_processes_to_ray_actors(snap)
    _ray_groups_to_pods(snap)
    _placement_group_strategies(snap)
    for server in snap.vllm_servers:
        server.summary = summarize(server.scrapes) if server.scrapes else None
    return snap


def _events_to_objects(snap: Snapshot) -> None:
    pods: dict[tuple[str | None, str], Pod] = {(p.namespace, p.name): p for p in snap.pods}
    nodes = indexes(snap).nodes
    clusters: dict[tuple[str | None, str], RayClusterSpec] = {(c.namespace, c.name): c for c in snap.ray_clusters}
    for event in snap.events:
        if event.involved_kind == "Pod" and (pod := pods.get((event.namespace, event.involved_name))):
            if event.involved_uid and pod.uid and event.involved_uid != pod.uid:
                continue  # about an earlier pod of that name (a StatefulSet pod is recreated under its name)
            pod.events.append(event)
        elif event.involved_kind == "Node" and (node := nodes.get(event.involved_name)):
            node.events.append(event)
        elif event.involved_kind in ("RayCluster", "RayService") and (
            rc := clusters.get((event.namespace, event.involved_name))
        ):
            rc.events.append(event)


def _pods_to_workloads(snap: Snapshot) -> None:
    workloads = {(w.kind, w.namespace, w.name) for w in snap.workloads}
    for pod in snap.pods:
        if pod.owner_kind == "ReplicaSet" and pod.owner_name:
            deployment = pod.owner_name.rsplit("-", 1)[0]
            if ("Deployment", pod.namespace, deployment) in workloads:
                pod.workload_kind, pod.workload_name = "Deployment", deployment
            else:
                pod.workload_kind, pod.workload_name = "ReplicaSet", pod.owner_name
        elif pod.owner_kind:
            pod.workload_kind, pod.workload_name = pod.owner_kind, pod.owner_name
        if pod.ray_cluster and pod.workload_kind is None:
            pod.workload_kind, pod.workload_name = "RayCluster", pod.ray_cluster


def _ray_nodes_to_pods(snap: Snapshot) -> None:
    by_ip = {p.pod_ip: p for p in snap.pods if p.pod_ip}
    names = PodNames(snap.pods)
    for node in snap.ray_nodes:
        named = names.pod(node.node_name) if node.node_name else None
        pod = named if isinstance(named, Pod) else by_ip.get(node.node_ip or "") or by_ip.get(node.node_name or "")
        if pod is not None:
            node.pod = pod.key
            pod.ray_node_id = node.node_id


def _vllm_servers_to_pods(snap: Snapshot) -> None:
    """A server's files (vllm/<pod ref>.*) join the pod they name; a pod whose container runs vLLM
    (diag.parsers.workloads: its command, image, arguments, environment or log) without files gets a
    server of its own. A server is named after its pod: the bare pod name where no other namespace has
    it, else <namespace>.<pod>."""
    names = PodNames(snap.pods)
    by_pod: dict[str, VllmServer] = {}
    by_address = _pods_by_vllm_address(snap.pods)
    for server in snap.vllm_servers:
        found = names.pod(server.name)
        if isinstance(found, Ambiguous):
            _refuse(snap, [rel for rel in snap.sources if layout.part(rel, "server") == server.name], found)
        elif found is not None:
            server.name = _server_name(found, names)
            by_pod[found.key] = server
        elif server.url and (pod := by_address.get(_address(server.url))) is not None:
            by_pod.setdefault(pod.key, server)  # --vllm-url gave the pod's own address
    services = _ServicesBySelector.of(snap.services)
    for pod in snap.pods:
        if (in_pod := workloads.vllm_container(pod)) is None:
            continue
        container = in_pod[0]
        of_pod = by_pod.get(pod.key)
        if of_pod is None:
            of_pod = by_pod[pod.key] = VllmServer(name=_server_name(pod, names))
            snap.vllm_servers.append(of_pod)
        of_pod.engine_args = of_pod.engine_args or container.engine_args
        _server_in_pod(of_pod, pod, container, services)
    # A server known only by its files runs in the pod they name even when no container starts vLLM
    # itself: Ray Serve runs it in pods whose command is `ray start`.
    for key, server in by_pod.items():
        if server.pod is None and (named := snap.pod(key)) is not None and named.containers:
            _server_in_pod(server, named, named.containers[0], services)


def _pods_by_vllm_address(pods: list[Pod]) -> dict[tuple[str, int], Pod]:
    """Running pods that serve vLLM, by their IP and the server's port."""
    found = {}
    for pod in pods:
        if pod.pod_ip and pod.phase == "Running" and (served := workloads.vllm_server_port(pod)) is not None:
            found[(pod.pod_ip, served[1])] = pod
    return found


def _address(url: str) -> tuple[str, int]:
    """(host, port) of a URL, as a pod's IP and port would name it; ("", 0) where its port is no number."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    try:
        return (parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))
    except ValueError:
        return ("", 0)


def _server_name(pod: Pod, names: PodNames) -> str:
    return pod.name if names.unique(pod) else f"{pod.namespace}.{pod.name}"


def _refuse(snap: Snapshot, files: list[str], found: Ambiguous) -> None:
    """A file that names a pod by a bare name two namespaces share joins neither: say so, file by file."""
    for rel in files:
        snap.sources[rel] = SourceStatus("failed", f"{rel}: {found.detail}")


def _server_in_pod(server: VllmServer, pod: Pod, container: Container, services: _ServicesBySelector) -> None:
    server.namespace, server.pod, server.node = pod.namespace, pod.key, pod.node_name
    server.ray_node_id = pod.ray_node_id
    pod.vllm_server = server.name
    for signal, lines in container.log_signals.items():
        server.log_signals.setdefault(signal, []).extend(lines)
    server.logs_read = server.logs_read or container.logs is not None or container.previous_logs is not None
    if (svc := services.first_selecting(pod)) is not None:
        server.service = f"{svc.namespace}/{svc.name}"


@dataclass
class _ServicesBySelector:
    """The Services with a selector, by their namespace and their selector's first label: a Service
    selects a pod only if the pod has that label, so a pod is matched against those of its own labels,
    not against every Service of its namespace (a fleet's servers times its Services)."""

    by_first_label: dict[tuple[str, str, str], list[tuple[int, Service]]]  # with its place in services.json

    @classmethod
    def of(cls, services: list[Service]) -> _ServicesBySelector:
        by_first_label: dict[tuple[str, str, str], list[tuple[int, Service]]] = {}
        for place, svc in enumerate(services):
            if svc.selector:
                key, value = next(iter(svc.selector.items()))
                by_first_label.setdefault((svc.namespace, key, value), []).append((place, svc))
        return cls(by_first_label)

    def first_selecting(self, pod: Pod) -> Service | None:
        """The first Service (in services.json's order) whose selector the pod's labels satisfy."""
        selecting = [
            (place, svc)
            for key, value in pod.labels.items()
            for place, svc in self.by_first_label.get((pod.namespace, key, value), ())
            if all(pod.labels.get(k) == v for k, v in svc.selector.items())
        ]
        return min(selecting, key=lambda found: found[0])[1] if selecting else None


def _gpus_to_nodes_and_pods(snap: Snapshot) -> None:
    nodes = indexes(snap).nodes
    names = PodNames(snap.pods)
    gpu_pods_by_node = {
        node: [p for p in pods if any(_gpu_limit(c.limits) for c in p.containers)]
        for node, pods in indexes(snap).pods_on_node.items()
    }
    refused: set[str] = set()
    for gpu in snap.gpus:
        found = names.pod(gpu.host) if gpu.host not in nodes else None
        if isinstance(found, Pod):  # captured inside a pod: that pod's own view of its GPUs
            gpu.node = found.node_name
            gpu.serving_pods = [found.key]
        elif isinstance(found, Ambiguous):
            gpu.node, gpu.serving_pods = None, []
            if gpu.host not in refused:
                refused.add(gpu.host)
                _refuse(snap, [rel for rel in snap.sources if layout.part(rel, "host") == gpu.host], found)
        else:
            gpu.node = gpu.host if gpu.host in nodes or not nodes else None
            on_node = [p.key for p in gpu_pods_by_node.get(gpu.host, [])]
            # dcgm-exporter's pod mapping names the one pod of the node this GPU is given to
            gpu.serving_pods = [p for p in on_node if p in gpu.labelled_pods] or on_node
    node_xid_lines = xid_lines_by_node(snap)
    for gpu in snap.gpus:
        kernel = snap.kernel_xid_lines.get(gpu.host, [])
        if gpu.node or kernel:
            lines = [*node_xid_lines.get(gpu.node or "", ()), *kernel]
            about = list({line.text: line for line in lines if _names(line, gpu)}.values())
            gpu.xid_lines = [line.text for line in about]
            gpu.xids = sorted(set(gpu.xids).union(*(line.codes for line in about)))
    gpus_by_pod: dict[str, list[GPU]] = {}
    for gpu in snap.gpus:
        for pod_key in dict.fromkeys(gpu.serving_pods):
            gpus_by_pod.setdefault(pod_key, []).append(gpu)
    for gpu in snap.gpus:
        if not gpu.serving_pods:  # no pod list (Prometheus alone): the pod dcgm-exporter names
            for pod_key in gpu.labelled_pods:
                gpus_by_pod.setdefault(pod_key, []).append(gpu)
    for server in snap.vllm_servers:
        server.gpus = [_gpu_ref(g) for g in gpus_by_pod.get(server.pod or _pod_key_of(server), [])]


def xid_lines_by_node(snap: Snapshot) -> dict[str, list[XidLine]]:
    """Kernel Xid lines seen in pod logs or node events, per Kubernetes node, each once."""
    found: dict[str, list[XidLine]] = {}
    for pod in snap.pods:
        for container in pod.containers:
            if pod.node_name and container.xid_lines:
                found.setdefault(pod.node_name, []).extend(container.xid_lines)
    for node in snap.nodes:
        found.setdefault(node.name, []).extend(e.xid for e in node.events if e.xid is not None)
    return {node: list(dict.fromkeys(lines)) for node, lines in found.items()}


def _names(line: XidLine, gpu: GPU) -> bool:
    """Whether the line names exactly this GPU's PCI address. A line whose address no GPU of the node
    has goes to none of them: it is a finding about the node (diag.facts.gpu), never about every GPU."""
    return gpu.pci_address is not None and line.device == gpu.pci_address


def _ray_nodes_to_gpu_hosts(snap: Snapshot) -> None:
    """A Ray node outside Kubernetes (no pod) runs on the machine whose GPU capture carries its name or
    address: the reporter's hostname, the node's node_name or node_ip against the capture's file stem
    and the name and addresses the NVML snapshot records. A node on a loopback address runs on the
    machine llmdiag ran on: the only machine captured, unless a node names it (the GPU sweep names each
    capture after its node); so does the head of a cluster whose dashboard llmdiag reached on a loopback
    address (manifest.json's outside.ray_address), whatever address the head advertises. When two live
    nodes claim one machine, neither is joined: which raylet hands out which GPU cannot be told."""
    outside = [n for n in snap.ray_nodes if n.pod is None]
    if not outside or not snap.gpus:
        return
    names = PodNames(snap.pods)
    nodes = indexes(snap).nodes
    exact: dict[str, set[str]] = {}  # a name or address -> the captures it names
    short: dict[str, set[str]] = {}  # a DNS name's first label -> the captures it names
    for gpu in snap.gpus:
        if gpu.host in nodes or not isinstance(names.pod(gpu.host), Pod):
            for name in (gpu.host, gpu.host_name, *(a for a in gpu.host_addresses if not _loopback(a))):
                for index, key in zip((exact, short), _host_keys(name), strict=True):
                    if key:
                        index.setdefault(key, set()).add(gpu.host)
    machines = {host for hosts in exact.values() for host in hosts}
    head_is_local = _loopback(_url_host((snap.manifest.get("outside") or {}).get("ray_address")))
    claims: dict[str, list[RayNode]] = {}
    guesses: dict[str, list[RayNode]] = {}  # the loopback nodes, where no capture names them
    for node in outside:
        own = [_host_keys(name) for name in (node.hostname, node.node_name, node.node_ip)]
        hosts = {host for key, _ in own for host in exact.get(key or "", ())}
        hosts = hosts or {host for key, first in own for k in {key, first} for host in short.get(k or "", ())}
        if len(hosts) == 1:
            claims.setdefault(next(iter(hosts)), []).append(node)
        elif (
            not hosts
            and (_loopback(node.node_ip) or (node.is_head and head_is_local))
            and len(machines) == 1
            and not nodes
        ):
            guesses.setdefault(next(iter(machines)), []).append(node)
    for host in claims.keys() | guesses.keys():
        claimants = claims.get(host) or guesses[host]
        alive = [n for n in claimants if n.state != "DEAD"]
        chosen = alive if alive else claimants
        if len(chosen) == 1:
            chosen[0].gpu_host = host


def _host_keys(name: str | None) -> tuple[str | None, str | None]:
    """A machine's name or address as compared, in lower case, and a DNS name's first label (None for an
    address): "h100-07" names "h100-07.example.internal" where no capture has the full name."""
    if not name or not name.strip():
        return None, None
    name = name.strip().lower()
    try:
        ipaddress.ip_address(name)
        return name, None
    except ValueError:
        return name, name.split(".", 1)[0]


def _url_host(url: object) -> str | None:
    return urlsplit(url).hostname if isinstance(url, str) else None


def _loopback(address: str | None) -> bool:
    try:
        return address is not None and ipaddress.ip_address(address.strip()).is_loopback
    except ValueError:
        return address is not None and address.strip().lower() == "localhost"


def _gpu_processes_to_ray_actors(snap: Snapshot) -> None:
    """A GPU process is the live Ray actor with its pid on the GPU's Kubernetes node (or on a node not
    known); pids repeat across pods, so the actors are looked up by (pid, node), the last listed winning.
    On a machine joined to its Ray node (_ray_nodes_to_gpu_hosts) only that node's actors and worker
    processes count: pids repeat across machines too."""
    on_host = {n.gpu_host: n for n in snap.ray_nodes if n.gpu_host is not None}
    joined = {n.node_id for n in on_host.values()}
    node_of_ray_node = {n.node_id: (p.node_name if n.pod and (p := snap.pod(n.pod)) else None) for n in snap.ray_nodes}
    pod_of_ray_node = {n.node_id: n.pod for n in snap.ray_nodes}
    last_alive: dict[tuple[int, str | None], tuple[int, RayActor]] = {}
    alive_on_node: dict[tuple[int, str], RayActor] = {}
    for position, actor in enumerate(snap.ray_actors):
        if actor.state == "ALIVE" and actor.pid is not None:
            if actor.node_id in joined:
                alive_on_node[(actor.pid, actor.node_id or "")] = actor
            else:
                last_alive[(actor.pid, node_of_ray_node.get(actor.node_id or ""))] = (position, actor)
    for gpu in snap.gpus:
        if (ray_node := on_host.get(gpu.host)) is not None:
            workers = {w["pid"]: w for w in ray_node.workers or [] if w.get("pid") is not None}
            for proc in gpu.processes:
                alive = alive_on_node.get((proc.pid, ray_node.node_id))
                worker = workers.get(proc.pid)
                proc.ray_worker = worker is not None or alive is not None
                proc.ray_actor_id = alive.actor_id if alive else worker.get("actor_id") if worker else None
            continue
        for proc in gpu.processes:
            found = [last_alive.get((proc.pid, gpu.node)), last_alive.get((proc.pid, None))]
            if fits := [f for f in found if f is not None]:
                actor = max(fits, key=lambda f: f[0])[1]
                proc.ray_actor_id = actor.actor_id
                proc.pod = pod_of_ray_node.get(actor.node_id or "")


def _ray_groups_to_pods(snap: Snapshot) -> None:
    members = indexes(snap).pods_of_ray_cluster
    for cluster in snap.ray_clusters:
        for group in cluster.worker_groups:
            in_group = [p for p in members.get((cluster.namespace, cluster.name), []) if p.ray_group == group.name]
            group.pods_total = len(in_group)
            group.pods_running = sum(1 for p in in_group if p.phase == "Running")


def _placement_group_strategies(snap: Snapshot) -> None:
    """The state API omits a placement group's strategy; `ray status` names it in the demand line, one
    demand per bundle shape: "{'CPU': 1.0} * 1, {'CPU': 1.0, 'GPU': 1.0} * 2 (STRICT_PACK): 1+ pending"."""
    if snap.ray_status is None:
        return
    demands = [d for d in snap.ray_status.demands if d.kind == "placement_group" and d.strategy]
    shown = [(d.strategy, _shape(d.resources), d.bundles) for d in demands]
    for pg in snap.placement_groups:
        if pg.strategy is not None or not pg.bundles:
            continue
        shapes = Counter(_shape(b) for b in pg.bundles)
        pg.strategy = next(
            (
                s
                for s in dict.fromkeys(d.strategy for d in demands)
                if all((s, shape, n) in shown for shape, n in shapes.items())
            ),
            None,
        )


def _shape(bundle: dict[str, float]) -> tuple[tuple[str, float], ...]:
    return tuple(sorted(bundle.items()))


def _gpu_limit(limits: dict[str, str]) -> int:
    value = limits.get("nvidia.com/gpu")
    try:
        return int(value) if value is not None else 0
    except ValueError:
        return 0


def _pod_key_of(server: VllmServer) -> str:
    """ "ns/name" of a server known from Prometheus alone (named "<namespace>.<pod>"), else "" (joins nothing)."""
    if server.namespace and server.name.startswith(f"{server.namespace}."):
        return f"{server.namespace}/{server.name.removeprefix(server.namespace + '.')}"
    return ""


def _gpu_ref(gpu: GPU) -> str:
    return gpu.uuid or f"{gpu.host}/{gpu.index}"
