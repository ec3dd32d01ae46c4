"""The bundle's layout, one row per source: where its file is, whose faults it shows, what reads it,
whether it decides a verdict, the command that makes it by hand and the collector that writes it.
Loading (diag/bundle/load.py), the gaps (diag/verdict/coverage.py), the collectors (diag/collect/*),
`llmdiag layout` and docs/bundle-format.md all read this table: a new source is one row here, its
reader (diag/bundle/readers.py) and its parser.

A path may hold `<name>` parts (any text) and one `[...]` part that may be absent:
`vllm/<server>.metrics[.<n>].txt` is `vllm/a.metrics.txt` and `vllm/a.metrics.2.txt`."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal
from urllib.parse import urlsplit

from diag.bundle import readers
from diag.bundle.prometheus_queries import RANGE_QUERIES
from diag.bundle.readers import Reader
from diag.parsers import kubernetes, kubernetes_config, kubernetes_gateway, kubernetes_network, kubernetes_policy
from diag.snapshot.model import Snapshot

# How the loader reads a file: "whole" (one parse), "lines" (a cut-off text gives its complete lines),
# "list" (a cut-off Kubernetes list gives its complete items), "deferred" (the reader keeps it for the
# loader's last steps, which say how it fared).
Framing = Literal["whole", "lines", "list", "deferred"]


@dataclass(frozen=True)
class Source:
    path: str
    layer: str | None  # whose faults it shows; None where any layer's could (a crash log)
    read: Reader | None  # None: not a file, a collector's own status in the manifest
    framing: Framing = "whole"
    command: str = ""  # writes it by hand; "{ns}" is "-n <namespace>" or "-A"
    collector: str = ""  # the module of diag/collect that writes it
    # a fault it shows could be the root cause; the others (KubeRay lists, logs) add detail
    decides: bool = True
    # files of one group stand for one another (`ray status`'s text or the dashboard's JSON); the group's
    # name is the source reported missing when none is in the bundle
    group: str = ""
    note: str = ""  # for docs/bundle-format.md

    @cached_property
    def pattern(self) -> re.Pattern[str]:
        regex = re.escape(self.path).replace(r"\[", "(?:").replace(r"\]", ")?")
        return re.compile("^" + re.sub(r"<(\w+)>", r"(?P<\1>.+?)", regex) + "$")

    @property
    def need(self) -> str:
        return self.group or self.path


@dataclass(frozen=True)
class KubeList:
    """A `kubectl get -o json` list, which the Kubernetes collector reads with the API's client."""

    kind: str  # the collector's name for it, and kubectl's where `kubectl_kind` is empty
    load: Reader | None  # None: read with the list it stands for
    scope: Literal["namespace", "all"]  # listed in the target's namespace(s), or across all of them
    # a gap only where Ray runs on Kubernetes (the KubeRay lists), whose "skipped" (no CRDs) is an answer
    kuberay: bool = False
    # stands for another list where that one could not be read (EndpointSlices for Endpoints)
    instead_of: str | None = None
    kubectl_kind: str = ""
    note: str = ""
    # a fault it shows could be the root cause, and a bundle without it has a gap
    decides: bool = True
    # the group/version of the CRDs that serve it, where they may be absent: then its list is "skipped",
    # an answer (no such objects can exist), not a gap
    crd: str = ""

    @property
    def path(self) -> str:
        return f"k8s/{self.kind}.json"

    def kubectl(self, namespaces: str) -> str:
        """The command that writes this file by hand; `namespaces` is `-n <ns>` or `-A`."""
        where = "-A" if self.scope == "all" else namespaces
        where = "" if self.kind == "nodes" else f" {where}"
        return f"kubectl get {self.kubectl_kind or self.kind}{where} -o json > {self.path}"

    def source(self) -> Source:
        return Source(
            self.path,
            "kubernetes",
            self.load,
            "list",
            self.kubectl("{ns}"),
            "diag/collect/kubernetes.py",
            decides=self.decides and not self.kuberay,
            note=self.note,
        )


def _into(attribute: str, parse: Callable[..., list[Any]], *args: str) -> Reader:
    def load(snap: Snapshot, text: str) -> None:
        getattr(snap, attribute).extend(parse(text, *args))

    return readers.kube_list(load, attribute)


KUBE_LISTS = (
    KubeList("pods", _into("pods", kubernetes.parse_pods), "namespace", note="a v1 List; -A allowed"),
    KubeList("nodes", _into("nodes", kubernetes.parse_nodes), "all"),
    KubeList(
        "events",
        _into("events", kubernetes.parse_events),
        "namespace",
        note="core/v1 Event list; events.k8s.io/v1 also accepted",
    ),
    KubeList("services", _into("services", kubernetes.parse_services), "namespace"),
    KubeList("endpoints", readers.endpoints(kubernetes.parse_endpoints), "namespace"),
    KubeList(
        "endpointslices",
        readers.endpoints(kubernetes.parse_endpointslices),
        "namespace",
        instead_of="endpoints",
        note="read where endpoints.json is not",
    ),
    KubeList("deployments", _into("workloads", kubernetes.parse_workloads, "Deployment"), "namespace"),
    KubeList("statefulsets", _into("workloads", kubernetes.parse_workloads, "StatefulSet"), "namespace"),
    KubeList("hpa", _into("hpas", kubernetes.parse_hpas), "namespace"),
    KubeList(
        "ingresses",
        _into("ingresses", kubernetes_network.parse_ingresses),
        "namespace",
        kubectl_kind="ingresses.networking.k8s.io",
        note="networking.k8s.io/v1; a bundle without it has no gap",
        decides=False,
    ),
    KubeList(
        "poddisruptionbudgets",
        _into("pdbs", kubernetes_policy.parse_pdbs),
        "namespace",
        kubectl_kind="poddisruptionbudgets.policy",
        note="policy/v1; a bundle without it has no gap",
        decides=False,
    ),
    KubeList(
        "networkpolicies",
        _into("network_policies", kubernetes_policy.parse_network_policies),
        "namespace",
        kubectl_kind="networkpolicies.networking.k8s.io",
        note="networking.k8s.io/v1; a bundle without it has no gap",
        decides=False,
    ),
    KubeList(
        "persistentvolumeclaims",
        _into("pvcs", kubernetes_policy.parse_pvcs),
        "namespace",
        note="a bundle without it has no gap",
        decides=False,
    ),
    KubeList(
        "daemonsets",
        _into("daemonsets", kubernetes.parse_daemonsets),
        "all",
        note="device plugin / GPU operator health",
    ),
    KubeList(
        "rayclusters",
        _into("ray_clusters", kubernetes.parse_rayclusters),
        "namespace",
        True,
        kubectl_kind="rayclusters.ray.io",
    ),
    KubeList(
        "rayservices",
        _into("ray_clusters", kubernetes.parse_rayservices),
        "namespace",
        True,
        kubectl_kind="rayservices.ray.io",
    ),
    KubeList(
        "configmaps",
        _into("configmaps", kubernetes_config.parse_configmaps),
        "namespace",
        note="names only are read; a bundle without it has no gap",
        decides=False,
    ),
    KubeList(
        "secrets",
        _into("secrets", kubernetes_config.parse_secrets),
        "namespace",
        note="names only are read; `llmdiag collect` writes no data: by hand, drop .items[].data first",
        decides=False,
    ),
    KubeList(
        "gateways",
        _into("gateways", kubernetes_gateway.parse_gateways),
        "all",
        kubectl_kind="gateways.gateway.networking.k8s.io",
        note="Gateway API v1, where its CRDs are installed; a bundle without it has no gap",
        decides=False,
        crd="gateway.networking.k8s.io/v1",
    ),
    KubeList(
        "httproutes",
        _into("routes", kubernetes_gateway.parse_httproutes),
        "namespace",
        kubectl_kind="httproutes.gateway.networking.k8s.io",
        note="Gateway API v1, where its CRDs are installed; a bundle without it has no gap",
        decides=False,
        crd="gateway.networking.k8s.io/v1",
    ),
    KubeList(
        "grpcroutes",
        _into("routes", kubernetes_gateway.parse_grpcroutes),
        "namespace",
        kubectl_kind="grpcroutes.gateway.networking.k8s.io",
        note="Gateway API v1, where its CRDs are installed; a bundle without it has no gap",
        decides=False,
        crd="gateway.networking.k8s.io/v1",
    ),
)
BY_PATH = {row.path: row for row in KUBE_LISTS}
BY_KIND = {row.kind: row for row in KUBE_LISTS}

NVML_FILE = "gpu/<host>.nvml.json"
NODE_PODS_FILE = "k8s/node-pods/<node>.json"
SMI_XML_FILE = "gpu/<host>.xml"
VLLM_SCRAPE_FILE = "vllm/<server>.metrics[.<n>].txt"
_ON_HEAD = "   # on the Ray head"
_RAY_LIST = "--detail --format json"
_DASHBOARD = "curl -s http://<ray-head>:8265"
_VLLM = "curl -s http://<pod IP>:8000"

SOURCES: tuple[Source, ...] = (
    *(row.source() for row in KUBE_LISTS),
    Source(
        "k8s/logs/<stem>[.previous].log",
        None,
        readers.pod_log,
        command="kubectl logs <pod> -c <container> --tail=500 [--previous]",
        collector="diag/collect/kubernetes.py",
        decides=False,
        note="<stem>: [<namespace>.]<pod>[.<container>]; .previous.log: the run before",
    ),
    Source(
        NODE_PODS_FILE,
        "kubernetes",
        readers.node_pods(kubernetes.parse_pods),
        "list",
        "kubectl get pods -A --field-selector spec.nodeName=<node> -o json > k8s/node-pods/<node>.json",
        "diag/collect/kubernetes.py",
        decides=False,
        note="in a triage of some namespaces: every namespace's pods on a GPU node on their path, for what "
        "holds its GPUs; never counted as the namespace's own pods",
    ),
    Source(
        "ray/status.txt",
        "ray",
        readers.ray_status_text,
        "lines",
        f"ray status > ray/status.txt{_ON_HEAD}",
        "diag/collect/ray.py",
        group="ray/status",
    ),
    Source(
        "ray/cluster_status.json",
        "ray",
        readers.ray_cluster_status,
        command=f"{_DASHBOARD}/api/cluster_status > ray/cluster_status.json",
        collector="diag/collect/ray.py",
        group="ray/status",
        note="the dashboard's answer for `ray status`",
    ),
    Source(
        "ray/nodes.json",
        "ray",
        readers.ray_nodes,
        command=f"ray list nodes {_RAY_LIST} > ray/nodes.json{_ON_HEAD}",
        collector="diag/collect/ray.py",
    ),
    Source(
        "ray/nodes_summary.json",
        "ray",
        readers.ray_nodes_summary,
        command=f"{_DASHBOARD}/nodes?view=summary > ray/nodes_summary.json",
        collector="diag/collect/ray.py",
        group="ray/nodes.json",
    ),
    Source(
        "ray/actors.json",
        "ray",
        readers.ray_actors,
        command=f"ray list actors {_RAY_LIST} > ray/actors.json{_ON_HEAD}",
        collector="diag/collect/ray.py",
    ),
    Source(
        "ray/placement_groups.json",
        "ray",
        readers.ray_placement_groups,
        command=f"ray list placement-groups {_RAY_LIST} > ray/placement_groups.json{_ON_HEAD}",
        collector="diag/collect/ray.py",
    ),
    Source(
        "ray/logical_actors.json",
        "ray",
        readers.ray_logical_actors,
        collector="diag/collect/ray.py",
        note="the dashboard's /logical/actors: the GPU ids each actor holds",
    ),
    Source(
        "ray/version.json",
        "ray",
        readers.ray_version,
        collector="diag/collect/ray.py",
        note="the dashboard's /api/version: the head's Ray version",
    ),
    Source(
        NVML_FILE,
        "gpu",
        readers.NVML_GPUS,
        command="llmdiag collect --local-gpu (llmdiag's own NVML snapshot)",
        collector="diag/collect/gpu.py",
        group="gpu",
        note="<host>: the node's name, or the pod's where read in a pod",
    ),
    Source(
        SMI_XML_FILE,
        "gpu",
        readers.SMI_XML_GPUS,
        command="nvidia-smi -q -x > gpu/<host>.xml",
        collector="diag/collect/gpu.py",
        group="gpu",
    ),
    Source(
        "gpu/<host>.csv",
        "gpu",
        readers.SMI_CSV_GPUS,
        "lines",
        "nvidia-smi --query-gpu=index,uuid,name,memory.used,memory.total,utilization.gpu,temperature.gpu "
        "--format=csv > gpu/<host>.csv",
        "diag/collect/gpu.py",
        group="gpu",
    ),
    Source(
        "gpu/<host>.xid.txt",
        "gpu",
        readers.kernel_xid_lines,
        "lines",
        "journalctl -k --no-pager -o short-iso -g 'NVRM: Xid' > gpu/<host>.xid.txt",
        "diag/collect/ray_sweep.py",
        group="gpu",
        note="the kernel's Xid lines on that host (dmesg's or journalctl's lines)",
    ),
    Source(
        VLLM_SCRAPE_FILE,
        "vllm",
        readers.vllm_scrape,
        "deferred",
        f"{_VLLM}/metrics > vllm/<server>.metrics.txt",
        "diag/collect/vllm.py",
        group="vllm",
        note="<server>: the pod (or host:port); .<n>: further scrapes, 1, 2, ... in time order",
    ),
    Source(
        "vllm/<server>.models.json",
        "vllm",
        readers.vllm_models,
        command=f"{_VLLM}/v1/models > vllm/<server>.models.json",
        collector="diag/collect/vllm.py",
        group="vllm",
    ),
    Source(
        "vllm/<server>.health.txt",
        "vllm",
        readers.vllm_health,
        command="curl -s -o /dev/null -w '%{http_code}\\n' http://<pod IP>:8000/health > vllm/<server>.health.txt",
        collector="diag/collect/vllm.py",
        group="vllm",
        note='the HTTP status of GET /health ("200", "503", "timeout")',
    ),
    Source(
        "vllm/<server>.cmdline.txt",
        "vllm",
        readers.vllm_cmdline,
        command="tr '\\0' '\\n' < /proc/<vllm pid>/cmdline > vllm/<server>.cmdline.txt",
        collector="diag/collect/vllm.py",
        group="vllm",
        note="the server's arguments, one per line",
    ),
    Source(
        "prometheus/<query>.json",
        None,
        readers.prometheus_answer,
        command="llmdiag collect --prometheus-url URL",
        collector="diag/collect/prometheus.py",
        note="an HTTP API answer (/api/v1/query_range) under its query's stem (diag/bundle/prometheus_queries.py)",
    ),
    # the collectors' own statuses, in the manifest: not files
    Source("kubernetes", "kubernetes", None, collector="diag/collect/kubernetes.py"),
    Source("k8s", "kubernetes", None, collector="diag/collect/kubernetes.py", decides=False),
    Source("k8s/logs", "kubernetes", None, collector="diag/collect/kubernetes.py", decides=False),
    Source("ray", "ray", None, collector="diag/collect/ray.py"),
    Source("ray/dashboard", "ray", None, collector="diag/collect/ray.py"),
    Source("ray/cli", "ray", None, collector="diag/collect/ray.py"),
    Source("gpu", "gpu", None, collector="diag/collect/gpu.py"),
    Source("gpu/exec", "gpu", None, collector="diag/collect/runner.py"),
    Source("ray/gpu-sweep", "gpu", None, collector="diag/collect/ray_sweep.py"),
    Source("vllm", "vllm", None, collector="diag/collect/vllm.py"),
    Source("prometheus", None, None, collector="diag/collect/prometheus.py", decides=False),
)

# The sources every analysis looks for, by path or group: absent ones are reported missing.
EXPECTED = (
    "k8s/pods.json",
    "k8s/events.json",
    "k8s/nodes.json",
    "ray/status",
    "ray/actors.json",
    "ray/nodes.json",
    "gpu",
    "vllm",
)


@dataclass(frozen=True)
class Folder:
    name: str
    layer: str | None
    collector: str  # the manifest's name for the collector that fills it
    words: str  # "an unknown <words> file"
    remedy: str  # for a file of it that no row names a command for
    decides: bool  # where no row says


FOLDERS = (
    Folder(
        "k8s", "kubernetes", "kubernetes", "Kubernetes", "collect it again with kubectl get (its kind) -o json", False
    ),
    Folder(
        "ray",
        "ray",
        "ray",
        "Ray",
        "collect it again on the Ray head (ray status; ray list ... --format json)",
        True,
    ),
    Folder("gpu", "gpu", "gpu", "GPU", "collect it again: nvidia-smi -q -x on the node", True),
    Folder("vllm", "vllm", "vllm", "vLLM", "scrape it again: curl -s http://<pod>:8000/metrics", True),
    Folder(
        "prometheus",
        None,
        "prometheus",
        "Prometheus",
        "query Prometheus again (llmdiag triage --prometheus-url ...)",
        True,
    ),
)
_FOLDER = {f.name: f for f in FOLDERS}
SOURCES_BY_PATH = {row.path: row for row in SOURCES}
_EXACT = {row.path: row for row in SOURCES if "<" not in row.path}
_PATTERNED = tuple(row for row in SOURCES if "<" in row.path)
_QUERY_LAYER = {f"prometheus/{q.stem}.json": q.subject for q in RANGE_QUERIES}


def source_of(rel: str) -> tuple[Source, re.Match[str]] | None:
    """The row a bundle path is of, and its named parts."""
    row = _EXACT.get(rel)
    if row is not None:
        found = row.pattern.match(rel)
        assert found is not None
        return row, found
    folder = rel.split("/", 1)[0]
    for row in _PATTERNED:
        if row.path.startswith(folder + "/") and (found := row.pattern.match(rel)) is not None:
            return row, found
    return None


def part(rel: str, name: str, *paths: str) -> str | None:
    """The named part of a bundle path (`host` of gpu/<host>.xml), where the path is of one of `paths`'
    rows (any row with that part where none is given)."""
    found = source_of(rel)
    if found is None or (paths and found[0].path not in paths) or name not in found[0].pattern.groupindex:
        return None
    return found[1][name]


def folder_of(rel: str) -> Folder | None:
    return _FOLDER.get(rel.split("/", 1)[0]) if "/" in rel else None


def layer_of(name: str) -> str | None:
    """Whose faults a source (a path, or a collector's name) would show; None where any layer's could."""
    if name in _QUERY_LAYER:
        return _QUERY_LAYER[name]
    found = source_of(name)
    if found is not None:
        return found[0].layer
    folder = folder_of(name)
    return folder.layer if folder is not None else None


def decides(name: str) -> bool:
    """Whether a fault the source shows could be the root cause."""
    found = source_of(name)
    if found is not None:
        return found[0].decides
    folder = folder_of(name)
    return folder is not None and folder.decides


def files_of(need: str) -> tuple[str, ...]:
    """The files that meet a need (a group, or one path), in table order."""
    return tuple(row.path for row in SOURCES if row.read is not None and row.need == need)


def remedy(name: str, ns: str) -> str | None:
    """`collect it again: <the command>` for a file of one path (its group's first command), else what
    to do for a file of its folder; None for a name the layout does not place."""
    found = source_of(name)
    if found is not None and found[0].read is not None and "<" not in found[0].path and found[0].command:
        return f"collect it again: {SOURCES_BY_PATH[files_of(found[0].need)[0]].command.replace('{ns}', ns)}"
    folder = folder_of(name)
    return folder.remedy if folder is not None else None


def render() -> str:
    """The layout as docs/bundle-format.md shows it: every file, the command that makes it by hand."""
    rows = [("manifest.json", "written by `llmdiag collect`: when, what, and how each source fared", "")]
    rows += [(row.path, row.command.replace("{ns}", "-n <namespace>"), row.note) for row in SOURCES if row.read]
    width = max(len(path) for path, _, _ in rows) + 2
    lines = []
    for path, command, note in rows:
        lines.append(f"{path:<{width}}{command or '(' + note + ')'}".rstrip())
        if note and command:
            lines.append(f"{'':<{width}}({note})")
    return "\n".join(lines) + "\n"


def server_stem(url: str) -> str:
    """The file stem of a vLLM server read by its URL (`--vllm-url`): http://127.0.0.1:8000 ->
    127.0.0.1_8000; a URL without a scheme is http's."""
    parts = urlsplit(url.strip() if "://" in url else f"http://{url.strip()}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.hostname or ''}_{port}"
