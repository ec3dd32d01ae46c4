"""Prometheus history to the subjects it is about: vLLM servers and GPUs.

A vLLM series joins the server of its pod (the `namespace` and `pod` labels Prometheus' Kubernetes
discovery adds), else the server scraped at its `instance`; a dcgm-exporter series joins the GPU of
its `UUID`, else `Hostname` and `gpu` index. dcgm-exporter's pod mapping labels a GPU with the pod it is given to
(`namespace`, `pod`; `exported_namespace`, `exported_pod` when the ServiceMonitor does not honour the
exporter's labels): kept as the GPU's `labelled_pods`, which diag.link.join prefers to "every GPU pod
of the node". A series that joins nothing names a server or GPU the
bundle has no other data on: it becomes one, known from Prometheus alone, so that an incident whose pod
is gone is still seen, unless its namespace is outside those the bundle was collected for (manifest.json
kubernetes.namespaces): a shared Prometheus answers for other tenants too. Runs before diag.link.join,
which then links these servers and GPUs like any other. A query marked `joins_only` (`up`, a process'
start time) adds to the servers the others made known and makes none.
"""

from __future__ import annotations

from collections import defaultdict

from diag.bundle.prometheus_queries import BY_STEM, RangeQuery
from diag.parsers.gpu_common import pci_address
from diag.snapshot.model import GPU, History, PromSeries, PromWindow, Snapshot, VllmServer

_SeriesOf = dict[str, list[PromSeries]]  # stem (or "stem/<label value>") -> the subject's series


def attach_history(snap: Snapshot) -> None:
    results = [r for r in snap.prometheus if r.name in BY_STEM and r.result_type == "matrix"]
    results.sort(key=lambda r: BY_STEM[r.name].joins_only)  # the subjects first, then what only adds to them
    if not results:
        return
    servers = _Servers(snap, _triaged_namespaces(snap.manifest))
    gpus = _Gpus(snap)
    server_series: dict[int, _SeriesOf] = defaultdict(lambda: defaultdict(list))
    gpu_series: dict[int, _SeriesOf] = defaultdict(lambda: defaultdict(list))
    for result in results:
        query = BY_STEM[result.name]
        for series in result.series:
            if query.subject == "vllm":
                server = servers.of(series.metric, create=not query.joins_only)
                target = server_series[id(server)] if server is not None else None
                if server is not None and server.history_pod is None and series.metric.get("pod"):
                    server.history_pod = f"{series.metric.get('namespace')}/{series.metric['pod']}"
            else:
                gpu = gpus.of(series.metric)
                target = gpu_series[id(gpu)] if gpu is not None else None
                if gpu is not None and (pod := _workload_pod(series.metric)) and pod not in gpu.labelled_pods:
                    gpu.labelled_pods.append(pod)
                if gpu is not None and "GPU_I_ID" in series.metric:
                    # dcgm-exporter labels a MIG instance's series with its GPU instance: MIG was on within
                    # the window, whatever a capture at collection says
                    gpu.mig_mode = "Enabled"
            if target is not None:
                target[_key(query, series)].append(series)
    read_vllm = [r.name for r in results if BY_STEM[r.name].subject == "vllm"]
    read_gpu = [r.name for r in results if BY_STEM[r.name].subject == "gpu"]
    for server in snap.vllm_servers:
        server.history = _history(server_series.get(id(server), {}), read_vllm)
        running = server_series.get(id(server), {}).get("vllm_num_requests_running", [])
        server.history_engines = len({s.metric.get("engine") for s in running}) if running else None
    for gpu in snap.gpus:
        gpu.history = _history(gpu_series.get(id(gpu), {}), read_gpu)


def history_window(snap: Snapshot) -> PromWindow | None:
    """The range the history covers: the union of the windows its answers recorded."""
    windows = [r.window for r in snap.prometheus if r.window is not None and r.name in BY_STEM]
    if not windows:
        return None
    return PromWindow(min(w.start for w in windows), max(w.end for w in windows), min(w.step for w in windows))


def _triaged_namespaces(manifest: object) -> set[str] | None:
    """The namespaces the bundle was collected for; None when every one (or the manifest does not say)."""
    kubernetes = manifest.get("kubernetes") if isinstance(manifest, dict) else None
    namespaces = kubernetes.get("namespaces") if isinstance(kubernetes, dict) else None
    if not isinstance(namespaces, list) or not namespaces or "*" in namespaces:
        return None
    return {n for n in namespaces if isinstance(n, str)}


def _workload_pod(labels: dict[str, str]) -> str | None:
    """ "ns/name" of the pod dcgm-exporter says holds the GPU; on the exporter's own target labels it names
    the exporter's pod, which no GPU is given to, so the join drops it."""
    namespace = labels.get("exported_namespace") or labels.get("namespace")
    pod = labels.get("exported_pod") or labels.get("pod")
    return f"{namespace}/{pod}" if namespace and pod else None


def _key(query: RangeQuery, series: PromSeries) -> str:
    return f"{query.stem}/{series.metric.get(query.by, '')}" if query.by else query.stem


def _history(series_of: _SeriesOf, stems_read: list[str]) -> History:
    history: History = {stem: [] for stem in stems_read}
    for key, series in series_of.items():
        history[key] = _combine(series, BY_STEM[key.split("/", 1)[0]].combine)
    return history


def _combine(series: list[PromSeries], how: str) -> list[tuple[float, float]]:
    by_time: dict[float, list[float]] = defaultdict(list)
    for s in series:
        for t, value in s.values:
            by_time[t].append(value)
    pick = sum if how == "sum" else max
    return [(t, float(pick(values))) for t, values in sorted(by_time.items())]


class _Servers:
    """vLLM servers by the names a series can give: <namespace>.<pod>, <pod>, instance (host:port)."""

    def __init__(self, snap: Snapshot, namespaces: set[str] | None) -> None:
        self.snap = snap
        self.namespaces = namespaces
        self.by_name = {s.name: s for s in snap.vllm_servers}
        self.by_pod = {s.pod: s for s in snap.vllm_servers if s.pod}
        self.by_url = {s.url.split("://", 1)[-1].rstrip("/"): s for s in snap.vllm_servers if s.url}

    def of(self, labels: dict[str, str], create: bool = True) -> VllmServer | None:
        namespace, pod, instance = labels.get("namespace"), labels.get("pod"), labels.get("instance")
        if namespace and self.namespaces is not None and namespace not in self.namespaces:
            return None  # another tenant of a shared Prometheus
        if namespace and pod:
            found = self.by_pod.get(f"{namespace}/{pod}") or self.by_name.get(f"{namespace}.{pod}")
            if found is None and (bare := self.by_name.get(pod)) is not None and bare.namespace in (None, namespace):
                found = bare
            return found or (self._new(f"{namespace}.{pod}", namespace) if create else None)
        if instance:
            found = self.by_url.get(instance) or self.by_name.get(instance)
            return found or (self._new(instance, None) if create else None)
        return None  # no label says which server: it joins nothing

    def _new(self, name: str, namespace: str | None) -> VllmServer:
        server = self.by_name[name] = VllmServer(name=name, namespace=namespace)
        self.snap.vllm_servers.append(server)
        return server


class _Gpus:
    """GPUs by dcgm-exporter's labels: UUID, else Hostname and gpu index."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.by_uuid = {g.uuid: g for g in snap.gpus if g.uuid}
        self.by_place = {(g.host, g.index): g for g in snap.gpus}

    def of(self, labels: dict[str, str]) -> GPU | None:
        uuid, host, index = labels.get("UUID"), labels.get("Hostname"), labels.get("gpu")
        if uuid and uuid in self.by_uuid:
            return self.by_uuid[uuid]
        place = (host, int(index)) if host and index and index.isdigit() else None
        if place is not None and place in self.by_place:
            return self.by_place[place]
        if place is None:
            return None
        gpu = GPU(host=place[0], index=place[1], uuid=uuid or None, name=labels.get("modelName") or None,
                  pci_bus_id=labels.get("pci_bus_id") or None, pci_address=pci_address(labels.get("pci_bus_id")),
                  only_in_prometheus=True)  # fmt: skip
        self.by_place[place] = gpu
        if gpu.uuid:
            self.by_uuid[gpu.uuid] = gpu
        self.snap.gpus.append(gpu)
        return gpu
