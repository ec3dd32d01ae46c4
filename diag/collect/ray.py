"""Ray: the head's dashboard REST answers, kept verbatim, under the names the bundle layout gives them.

The dashboard is read over plain HTTP (not `ray.util.state`: see docs/decisions.md), either at a URL
(`--ray-address`) or through the API server's service proxy to `<raycluster>-head-svc:dashboard`.
When no dashboard answer comes back and the head pod is known, the same facts are read with the
`ray` CLI inside the head pod (fixed argv, no shell): `ray status`, `ray list ... --format json`.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from diag.collect.base import Sink, SourceResult
from diag.collect.http import (
    DEFAULT_MAX_ANSWER_BYTES,
    HttpGet,
    Unreachable,
    body_excerpt,
    direct_get,
    service_proxy_get,
)

if TYPE_CHECKING:
    from diag.collect.kube import KubeAccess

DASHBOARD_PORT = "dashboard"  # the port name KubeRay gives 8265 on the head service
LIST_LIMIT = 10000  # the state API's own ceiling (RAY_MAX_LIMIT_FROM_API_SERVER); its default is 100

# bundle file <- dashboard path
DASHBOARD_FILES: tuple[tuple[str, str], ...] = (
    ("ray/cluster_status.json", "/api/cluster_status"),
    ("ray/actors.json", f"/api/v0/actors?detail=1&limit={LIST_LIMIT}"),
    ("ray/placement_groups.json", f"/api/v0/placement_groups?detail=1&limit={LIST_LIMIT}"),
    ("ray/nodes.json", f"/api/v0/nodes?detail=1&limit={LIST_LIMIT}"),
    ("ray/nodes_summary.json", "/nodes?view=summary"),
    ("ray/logical_actors.json", "/logical/actors"),  # the GPU ids each actor holds
    ("ray/version.json", "/api/version"),
)

# bundle file <- argv run in the head container when the dashboard cannot be reached
_RAY_LIST = ("--detail", "--format", "json", "--limit", str(LIST_LIMIT))
CLI_FILES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ray/status.txt", ("ray", "status")),
    ("ray/actors.json", ("ray", "list", "actors", *_RAY_LIST)),
    ("ray/placement_groups.json", ("ray", "list", "placement-groups", *_RAY_LIST)),
    ("ray/nodes.json", ("ray", "list", "nodes", *_RAY_LIST)),
)


@dataclass(frozen=True)
class RayHead:
    """The head of a KubeRay cluster: its service (for the dashboard) and pod (for exec)."""

    namespace: str
    cluster: str  # RayCluster name; KubeRay names the head service <cluster>-head-svc
    pod: str | None = None
    container: str | None = None  # None: the pod's default container (KubeRay's head is the first)

    @property
    def service(self) -> str:
        return f"{self.cluster}-head-svc"


def collect_ray_address(
    address: str, sink: Sink, timeout_s: float, max_bytes: int = DEFAULT_MAX_ANSWER_BYTES
) -> list[SourceResult]:
    """Read the dashboard at `address` (e.g. http://127.0.0.1:8265)."""
    return _read_dashboard(direct_get(address, max_bytes=max_bytes), address, sink, timeout_s)


def collect_ray_head(kube: KubeAccess, head: RayHead, sink: Sink, timeout_s: float) -> list[SourceResult]:
    """Read the dashboard through the service proxy; fall back to the `ray` CLI in the head pod."""
    where = f"service {head.namespace}/{head.service}:{DASHBOARD_PORT}"
    get = service_proxy_get(kube, head.namespace, head.service, DASHBOARD_PORT)
    results = _read_dashboard(get, where, sink, timeout_s)
    if any(r.status == "ok" for r in results):
        return results
    why = results[0].detail
    if head.pod is None:
        return [*results, SourceResult("ray/cli", "skipped", "no head pod known to run `ray` in")]
    dashboard = SourceResult("ray/dashboard", "failed", f"{why}; read with `ray` in pod {head.namespace}/{head.pod}")
    return [dashboard, *_run_cli(kube, head, head.pod, sink, timeout_s)]


def _read_dashboard(get: HttpGet, where: str, sink: Sink, timeout_s: float) -> list[SourceResult]:
    def fetch(rel: str, path: str) -> SourceResult:
        try:
            status, body = get(path, timeout_s)
        except Unreachable as e:
            return SourceResult(rel, "failed", f"{where} GET {path}: {e.detail}")
        if status != 200:
            return SourceResult(rel, "failed", f"{where} GET {path}: HTTP {status} {body_excerpt(body)}".rstrip())
        sink.write(rel, body)
        return SourceResult(rel, "ok", f"{where} GET {path}")

    with ThreadPoolExecutor(max_workers=len(DASHBOARD_FILES)) as pool:
        return list(pool.map(lambda item: fetch(*item), DASHBOARD_FILES))


def _run_cli(kube: KubeAccess, head: RayHead, pod: str, sink: Sink, timeout_s: float) -> list[SourceResult]:
    from diag.collect.kube import KubeError

    def run(rel: str, argv: tuple[str, ...]) -> SourceResult:
        where = f"`{' '.join(argv)}` in {head.namespace}/{pod}"
        try:
            stdout = kube.exec_fixed(head.namespace, pod, head.container, list(argv), timeout_s)
        except KubeError as e:
            return SourceResult(rel, "failed", f"{where}: {e}")
        sink.write(rel, stdout)
        return SourceResult(rel, "ok", where)

    with ThreadPoolExecutor(max_workers=len(CLI_FILES)) as pool:
        return list(pool.map(lambda item: run(*item), CLI_FILES))
