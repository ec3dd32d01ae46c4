"""A Kubernetes API replay server: recorded objects served over real HTTP to the real `kubernetes` client.

No Kubernetes API server runs in CI. llmdiag's live collector is tested against this instead: a
ThreadingHTTPServer on 127.0.0.1 that serves a bundle's k8s/*.json as the API (lists with label and
field selectors and limit/continue pagination, single gets), pods/log from k8s/logs/ (tailLines,
previous, limitBytes), pods/proxy and services/proxy (forwarded to a real local HTTP server when one
is configured), and pods/exec over the websocket protocol the API server speaks (v4/v5.channel.k8s.io:
stdout on channel 1, stderr on 2, a metav1.Status on 3), answering fixed argv with recorded output.

Every request is recorded with the RBAC verb the API server's authorizer would check, so tests can
assert that nothing but reads (and the exec upgrade) was sent.
"""

from __future__ import annotations

import base64
import json
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Self
from urllib.parse import parse_qs, unquote, urlsplit

from diag.bundle.files import Bundle
from tests.replay import websocket
from tests.replay.selectors import SelectorError, matches_fields, matches_labels

TOKEN = "replay-token"


@dataclass(frozen=True)
class Resource:
    group: str  # "" for the core group
    version: str
    list_kind: str
    bundle_file: str  # k8s/<bundle_file>
    namespaced: bool = True
    custom: bool = False  # CRD lists carry kind/apiVersion on every item; built-in ones do not

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


RESOURCES: dict[str, Resource] = {
    "pods": Resource("", "v1", "PodList", "pods.json"),
    "events": Resource("", "v1", "EventList", "events.json"),
    "nodes": Resource("", "v1", "NodeList", "nodes.json", namespaced=False),
    "services": Resource("", "v1", "ServiceList", "services.json"),
    "endpoints": Resource("", "v1", "EndpointsList", "endpoints.json"),
    "endpointslices": Resource("discovery.k8s.io", "v1", "EndpointSliceList", "endpointslices.json"),
    "deployments": Resource("apps", "v1", "DeploymentList", "deployments.json"),
    "statefulsets": Resource("apps", "v1", "StatefulSetList", "statefulsets.json"),
    "daemonsets": Resource("apps", "v1", "DaemonSetList", "daemonsets.json"),
    "horizontalpodautoscalers": Resource("autoscaling", "v2", "HorizontalPodAutoscalerList", "hpa.json"),
    "ingresses": Resource("networking.k8s.io", "v1", "IngressList", "ingresses.json"),
    "poddisruptionbudgets": Resource("policy", "v1", "PodDisruptionBudgetList", "poddisruptionbudgets.json"),
    "networkpolicies": Resource("networking.k8s.io", "v1", "NetworkPolicyList", "networkpolicies.json"),
    "persistentvolumeclaims": Resource("", "v1", "PersistentVolumeClaimList", "persistentvolumeclaims.json"),
    "rayclusters": Resource("ray.io", "v1", "RayClusterList", "rayclusters.json", custom=True),
    "rayservices": Resource("ray.io", "v1", "RayServiceList", "rayservices.json", custom=True),
    "configmaps": Resource("", "v1", "ConfigMapList", "configmaps.json"),
    "secrets": Resource("", "v1", "SecretList", "secrets.json"),
    "gateways": Resource("gateway.networking.k8s.io", "v1", "GatewayList", "gateways.json", custom=True),
    "httproutes": Resource("gateway.networking.k8s.io", "v1", "HTTPRouteList", "httproutes.json", custom=True),
    "grpcroutes": Resource("gateway.networking.k8s.io", "v1", "GRPCRouteList", "grpcroutes.json", custom=True),
}
# Accept: ...;as=PartialObjectMetadataList: the API server answers with the items' metadata alone
_METADATA_ONLY = "as=PartialObjectMetadataList"
_WRITE_METHODS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


@dataclass(frozen=True)
class RequestInfo:
    """What the API server's authorizer sees: verb, group, resource[/subresource], namespace, name."""

    verb: str
    api_group: str
    resource: str
    subresource: str | None = None
    namespace: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    upgrade: bool  # a websocket upgrade (exec)
    info: RequestInfo | None  # None: not an API resource path
    accept: str = ""  # the Accept header
    impersonate_user: str = ""  # the Impersonate-User header (kubectl --as)


@dataclass
class ExecAnswer:
    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0


@dataclass
class ReplayCluster:
    """The recorded state: objects per resource, logs, exec answers, and proxy upstreams."""

    objects: dict[str, list[dict]] = field(default_factory=dict)
    # (namespace, pod, container, previous) -> log text
    logs: dict[tuple[str, str, str, bool], str] = field(default_factory=dict)
    # (namespace, pod, argv) -> answer; the container is not part of the key
    exec_answers: dict[tuple[str, str, tuple[str, ...]], ExecAnswer] = field(default_factory=dict)
    # ("pods" | "services", namespace, name, port) -> base URL of a real local HTTP server
    upstreams: dict[tuple[str, str, str, str], str] = field(default_factory=dict)

    @classmethod
    def from_bundle(cls, bundle: Bundle) -> ReplayCluster:
        cluster = cls()
        for name, resource in RESOURCES.items():
            raw = bundle.files.get(f"k8s/{resource.bundle_file}")
            if raw is not None:
                cluster.objects[name] = [i for i in json.loads(raw).get("items", []) if isinstance(i, dict)]
        for rel in bundle.names("k8s/logs"):
            cluster._add_log_file(rel.removeprefix("k8s/logs/"), bundle.text(rel))
        return cluster

    def pods(self) -> list[dict]:
        return self.objects.get("pods", [])

    def find(self, resource: str, namespace: str | None, name: str) -> dict | None:
        return next(
            (
                o
                for o in self.objects.get(resource, [])
                if _meta(o).get("name") == name and (namespace is None or _meta(o).get("namespace") == namespace)
            ),
            None,
        )

    def _add_log_file(self, filename: str, text: str) -> None:
        """<pod>.log, <pod>.<container>.log, <namespace>.<pod>.log, each with an optional .previous."""
        stem = filename.removesuffix(".log")
        previous = stem.endswith(".previous")
        stem = stem.removesuffix(".previous")
        for pod in self.pods():
            meta, containers = _meta(pod), _container_names(pod)
            for prefix in (meta.get("name"), f"{meta.get('namespace')}.{meta.get('name')}"):
                if stem == prefix and containers:
                    self.logs[(meta["namespace"], meta["name"], containers[0], previous)] = text
                elif stem.startswith(f"{prefix}.") and stem.removeprefix(f"{prefix}.") in containers:
                    self.logs[(meta["namespace"], meta["name"], stem.removeprefix(f"{prefix}."), previous)] = text


class ReplayServer:
    """`with ReplayServer(cluster) as server:` serves on 127.0.0.1:<free port> until the block ends."""

    def __init__(
        self,
        cluster: ReplayCluster,
        exec_protocols: tuple[str, ...] = ("v4.channel.k8s.io",),
        forbidden: frozenset[str] = frozenset(),
        metadata_only_lists: bool = True,
    ) -> None:
        self.cluster = cluster
        # False: answer a metadata-only Accept with whole objects, as a server or proxy that ignores it
        self.metadata_only_lists = metadata_only_lists
        self.exec_protocols = exec_protocols
        self.forbidden = forbidden  # resources (or resource/subresource) RBAC denies, answered 403
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.replay = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def seen(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self.requests)

    def write_kubeconfig(self, folder: Path, namespace: str = "default", context: str = "replay") -> Path:
        """A kubeconfig whose current context points at this server with a bearer token."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "replay", "cluster": {"server": self.url}}],
            "users": [{"name": "replay", "user": {"token": TOKEN}}],
            "contexts": [{"name": context, "context": {"cluster": "replay", "user": "replay", "namespace": namespace}}],
            "current-context": context,
        }
        path = folder / "kubeconfig"
        path.write_text(json.dumps(config))  # JSON is YAML
        return path


# ----------------------------------------------------------------------------- request handling


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ThreadingHTTPServer

    def log_message(self, format: str, *args: object) -> None:
        pass

    @property
    def replay(self) -> ReplayServer:
        return self.server.replay  # type: ignore[attr-defined]

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_PATCH(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    # ------------------------------------------------------------------ dispatch

    def _handle(self) -> None:
        try:
            self._answer()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (its timeout); nothing to answer

    def _answer(self) -> None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query, keep_blank_values=True)
        upgrade = self.headers.get("Upgrade", "").lower() == "websocket"
        info = _request_info(self.command, parts.path, query)
        accept = self.headers.get("Accept", "")
        as_user = self.headers.get("Impersonate-User", "")
        self.replay.record(RecordedRequest(self.command, parts.path, query, upgrade, info, accept, as_user))
        if int(self.headers.get("Content-Length") or 0):
            self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self._status(HTTPStatus.UNAUTHORIZED, "Unauthorized", "Unauthorized")
        if info is None:
            return self._status(HTTPStatus.NOT_FOUND, "NotFound", "the server could not find the requested resource")
        if _rbac_name(info) in self.replay.forbidden:
            return self._status(HTTPStatus.FORBIDDEN, "Forbidden", _forbidden_message(info))
        if info.subresource == "exec":
            return self._exec(info, query, upgrade)
        if self.command != "GET":
            return self._status(HTTPStatus.METHOD_NOT_ALLOWED, "MethodNotAllowed", "the replay server is read-only")
        resource = RESOURCES.get(info.resource)
        if resource is None or (resource.custom and info.resource not in self.replay.cluster.objects):
            return self._status(HTTPStatus.NOT_FOUND, "NotFound", "the server could not find the requested resource")
        if info.subresource == "log":
            return self._log(info, query)
        if info.subresource == "proxy":
            return self._proxy(info, parts.path, parts.query)
        if info.name is None:
            return self._list(info, resource, query, _METADATA_ONLY in accept and self.replay.metadata_only_lists)
        return self._get(info, resource)

    # ------------------------------------------------------------------ objects

    def _list(
        self, info: RequestInfo, resource: Resource, query: dict[str, list[str]], metadata_only: bool = False
    ) -> None:
        items = [
            o
            for o in self.replay.cluster.objects.get(info.resource, [])
            if info.namespace is None or _meta(o).get("namespace") == info.namespace
        ]
        try:
            label_selector, field_selector = _first(query, "labelSelector"), _first(query, "fieldSelector")
            items = [o for o in items if matches_labels(label_selector, _meta(o).get("labels") or {})]
            items = [o for o in items if matches_fields(field_selector, o)]
        except SelectorError as e:
            return self._status(HTTPStatus.BAD_REQUEST, "BadRequest", str(e))
        items.sort(key=lambda o: (_meta(o).get("namespace") or "", _meta(o).get("name") or ""))
        start = _decode_continue(_first(query, "continue"))
        limit = int(_first(query, "limit") or 0)
        end = start + limit if limit > 0 else len(items)
        page = [_as_listed(o, resource) for o in items[start:end]]
        metadata: dict = {"resourceVersion": "424242"}
        if end < len(items):
            metadata["continue"] = base64.urlsafe_b64encode(json.dumps({"start": end}).encode()).decode()
            metadata["remainingItemCount"] = len(items) - end
        kind, group_version = resource.list_kind, resource.group_version
        if metadata_only:
            kind, group_version = "PartialObjectMetadataList", "meta.k8s.io/v1"
            page = [{"kind": "PartialObjectMetadata", "apiVersion": group_version, "metadata": _meta(o)} for o in page]
        self._json(HTTPStatus.OK, {"kind": kind, "apiVersion": group_version, "metadata": metadata, "items": page})

    def _get(self, info: RequestInfo, resource: Resource) -> None:
        obj = self.replay.cluster.find(info.resource, info.namespace, info.name or "")
        if obj is None:
            return self._not_found(info)
        kind = resource.list_kind.removesuffix("List")
        self._json(HTTPStatus.OK, {"kind": kind, "apiVersion": resource.group_version, **obj})

    # ------------------------------------------------------------------ pods/log

    def _log(self, info: RequestInfo, query: dict[str, list[str]]) -> None:
        pod = self.replay.cluster.find("pods", info.namespace, info.name or "")
        if pod is None:
            return self._not_found(info)
        names = _container_names(pod)
        container = _first(query, "container") or (names[0] if len(names) == 1 else None)
        if container is None:
            message = f"a container name must be specified for pod {info.name}, choose one of: [{' '.join(names)}]"
            return self._status(HTTPStatus.BAD_REQUEST, "BadRequest", message)
        if container not in names:
            return self._status(
                HTTPStatus.BAD_REQUEST, "BadRequest", f"container {container} is not valid for pod {info.name}"
            )
        previous = _first(query, "previous") == "true"
        text = self.replay.cluster.logs.get((info.namespace or "", info.name or "", container, previous))
        if text is None and previous:
            message = f'previous terminated container "{container}" in pod "{info.name}" not found'
            return self._status(HTTPStatus.BAD_REQUEST, "BadRequest", message)
        data = _tail((text or "").encode(), _first(query, "tailLines"), _first(query, "limitBytes"))
        self._send(HTTPStatus.OK, data, "text/plain")

    # ------------------------------------------------------------------ proxies

    def _proxy(self, info: RequestInfo, path: str, query: str) -> None:
        target, _, port = (info.name or "").partition(":")
        upstream = self.replay.cluster.upstreams.get((info.resource, info.namespace or "", target, port))
        if upstream is None:
            message = (
                f'no endpoints available for service "{target}"'
                if info.resource == "services"
                else "error trying to reach service: dial tcp "
                f"{_pod_ip(self.replay.cluster, info)}:{port}: connect: connection refused"
            )
            return self._status(HTTPStatus.SERVICE_UNAVAILABLE, "ServiceUnavailable", message)
        rest = path.split("/proxy", 1)[1]
        url = upstream.rstrip("/") + (rest or "/") + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(url, timeout=30) as answer:
                self._send(answer.status, answer.read(), answer.headers.get("Content-Type", "text/plain"))
        except urllib.error.HTTPError as e:
            self._send(e.code, e.read(), e.headers.get("Content-Type", "text/plain"))
        except (urllib.error.URLError, OSError) as e:
            self._status(HTTPStatus.SERVICE_UNAVAILABLE, "ServiceUnavailable", f"error trying to reach service: {e}")

    # ------------------------------------------------------------------ pods/exec

    def _exec(self, info: RequestInfo, query: dict[str, list[str]], upgrade: bool) -> None:
        if not upgrade:
            return self._status(HTTPStatus.BAD_REQUEST, "BadRequest", "Upgrade request required")
        offered = [p.strip() for p in self.headers.get("Sec-WebSocket-Protocol", "").split(",")]
        protocol = next((p for p in offered if p in self.replay.exec_protocols), None)
        if protocol is None:
            return self._status(HTTPStatus.BAD_REQUEST, "BadRequest", f"no supported subprotocol in {offered}")
        pod = self.replay.cluster.find("pods", info.namespace, info.name or "")
        if pod is None:
            return self._not_found(info)
        argv = tuple(query.get("command", []))
        answer = self.replay.cluster.exec_answers.get((info.namespace or "", info.name or "", argv))
        self.send_response(HTTPStatus.SWITCHING_PROTOCOLS)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", websocket.accept_key(self.headers.get("Sec-WebSocket-Key", "")))
        self.send_header("Sec-WebSocket-Protocol", protocol)
        self.end_headers()
        self.wfile.flush()
        if answer is None:
            status = _exec_failure(f"replay: no recorded output for {list(argv)}", "InternalError", None)
        else:
            websocket.write_channel(self.wfile, websocket.STDOUT, answer.stdout.encode())
            websocket.write_channel(self.wfile, websocket.STDERR, answer.stderr.encode())
            status = (
                {"metadata": {}, "status": "Success"}
                if answer.exit_code == 0
                else _exec_failure(
                    "command terminated with non-zero exit code: error "
                    f"executing command {list(argv)}, exit code {answer.exit_code}",
                    "NonZeroExitCode",
                    answer.exit_code,
                )
            )
        websocket.write_channel(self.wfile, websocket.STATUS, json.dumps(status).encode())
        websocket.write_close(self.wfile)
        self._await_peer_close()
        self.close_connection = True

    def _await_peer_close(self) -> None:
        self.connection.settimeout(2)
        try:
            while websocket.read_frame(self.rfile)[0] != websocket.OP_CLOSE:
                pass
        except (EOFError, OSError):
            pass

    # ------------------------------------------------------------------ answers

    def _not_found(self, info: RequestInfo) -> None:
        self._status(HTTPStatus.NOT_FOUND, "NotFound", f'{info.resource} "{info.name}" not found')

    def _status(self, code: HTTPStatus, reason: str, message: str) -> None:
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": int(code),
        }
        self._json(code, body)

    def _json(self, code: int, body: dict) -> None:
        self._send(code, json.dumps(body).encode(), "application/json")

    def _send(self, code: int, data: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


# ----------------------------------------------------------------------------- helpers


def _request_info(method: str, path: str, query: dict[str, list[str]]) -> RequestInfo | None:
    """The RBAC attributes of a request, as the API server's RequestInfoFactory derives them."""
    segments = [unquote(s) for s in path.strip("/").split("/")]
    if segments[:2] == ["api", "v1"]:
        group, rest = "", segments[2:]
    elif segments[:1] == ["apis"] and len(segments) >= 3:
        group, rest = segments[1], segments[3:]
    else:
        return None
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest:
        return None
    resource, name = rest[0], rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else None
    if method in _WRITE_METHODS:
        verb = _WRITE_METHODS[method] if name or method == "POST" else "deletecollection"
    elif name is None:
        verb = "watch" if _first(query, "watch") in ("true", "1") else "list"
    else:
        verb = "get"
    return RequestInfo(verb, group, resource, subresource, namespace, name)


def _rbac_name(info: RequestInfo) -> str:
    return f"{info.resource}/{info.subresource}" if info.subresource else info.resource


def _forbidden_message(info: RequestInfo) -> str:
    where = f' in the namespace "{info.namespace}"' if info.namespace else " at the cluster scope"
    return (
        f'{_rbac_name(info)} is forbidden: User "system:serviceaccount:llmdiag:llmdiag" cannot {info.verb} '
        f'resource "{_rbac_name(info)}" in API group "{info.api_group}"{where}'
    )


def _first(query: dict[str, list[str]], key: str) -> str | None:
    values = query.get(key)
    return values[0] if values else None


def _decode_continue(token: str | None) -> int:
    if not token:
        return 0
    return int(json.loads(base64.urlsafe_b64decode(token.encode()))["start"])


def _meta(obj: dict) -> dict:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _as_listed(obj: dict, resource: Resource) -> dict:
    """Built-in lists leave kind/apiVersion off their items; CRD lists keep them."""
    if resource.custom:
        return obj
    return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}


def _container_names(pod: dict) -> list[str]:
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    return [c.get("name") for c in spec.get("containers") or [] if isinstance(c, dict) and c.get("name")]


def _pod_ip(cluster: ReplayCluster, info: RequestInfo) -> str:
    pod = cluster.find("pods", info.namespace, (info.name or "").partition(":")[0]) or {}
    status = pod.get("status") if isinstance(pod.get("status"), dict) else {}
    return str(status.get("podIP") or "<none>")


def _tail(data: bytes, tail_lines: str | None, limit_bytes: str | None) -> bytes:
    if tail_lines is not None:
        lines = data.splitlines(keepends=True)
        data = b"".join(lines[-int(tail_lines) :]) if int(tail_lines) > 0 else b""
    if limit_bytes is not None:
        data = data[: int(limit_bytes)]
    return data


def _exec_failure(message: str, reason: str, exit_code: int | None) -> dict:
    status: dict = {"metadata": {}, "status": "Failure", "message": message, "reason": reason}
    if exit_code is not None:
        status["details"] = {"causes": [{"reason": "ExitCode", "message": str(exit_code)}]}
    return status
