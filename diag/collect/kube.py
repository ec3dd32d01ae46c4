"""Read-only access to the Kubernetes API server: the one door a laptop with a kubeconfig has.

Every layer is reached through the API server: objects and logs directly, the Ray dashboard and the
vLLM endpoints through its pod/service proxy, nvidia-smi and `ray status` through exec of a fixed
argument list. Nothing here writes to the cluster; exec is the only "create" (pods/exec in RBAC).

Answers are kept as the API's own JSON, never the `kubernetes` client's snake_case models, so the
bundle holds what `kubectl get -o json` would have printed. Every body is read as a stream up to
`max_answer_bytes` and the request's timeout (diag.collect.bounds).

Every GET goes through one urllib3 pool built from the kubeconfig (diag.collect.kubeconfig): the
`kubernetes` package's import costs more than a whole triage, so it is loaded only where its code runs
(exec, and kubeconfigs with an auth-provider). Tested against a real API server with kwok nodes
(tests/live/), exec and logs included, and against tests/replay (a recorded-API replay server) for
what that server cannot serve.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from diag import __version__
from diag.collect import exec_credential
from diag.collect import kubeconfig as kubeconfig_module
from diag.collect.bounds import (
    DEFAULT_MAX_ANSWER_BYTES,
    MAX_ATTEMPTS,
    RETRY_STATUSES,
    AnswerTooLarge,
    AnswerTooSlow,
    read_capped,
    retry_after_s,
)

if TYPE_CHECKING:
    from diag.collect.watch import WarmLists

PAGE_SIZE = 500  # items per list request (limit/continue)
# Connections kept to the API server: one for each request the collectors make at once (vllm.py's
# MAX_READS_AT_ONCE proxied reads, k8s.py's PARALLEL_REQUESTS lists or logs, the Ray dashboard's and
# Prometheus's proxied reads). The client's default, cpu_count x 5, made most of the vLLM collector's
# requests open a new TLS connection of their own. More requests than this still run: urllib3 opens
# a connection and does not keep it.
CONNECTION_POOL_SIZE = 96
REQUEST_TIMEOUT_S = 30.0  # lists, logs and the exec handshake; proxied GETs take the caller's timeout
PREFLIGHT_TIMEOUT_S = 5.0  # GET /version before the collectors start: at most this, or --request-timeout if shorter
RBAC_HINT = "llmdiag's read-only ClusterRole is deploy/clusterrole.yaml"
MAX_ITEMS = 5000  # hard cap per kind; a capped List keeps metadata.continue, as the API does
MAX_LOG_BYTES = 4 * 1024 * 1024  # per log request (limitBytes), on top of tailLines
# the exec websocket's subprotocols, newest first: the API server picks the newest it speaks
EXEC_PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
USER_AGENT = f"llmdiag/{__version__}"  # what the API server's audit log names as the client


class KubeError(Exception):
    """An API call failed. One readable line; `status` is the HTTP status when there was one."""

    def __init__(self, message: str, status: int | None = None, retry_after: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after  # the answer's Retry-After header, for a 429 or 503


class KubeTimeout(KubeError):
    """The API server (or the pod behind its proxy) did not answer in time."""


@dataclass(frozen=True)
class _Kind:
    """Where one kind is listed, and what kubectl names its items."""

    group_version: str  # "v1" (the core group, under /api), else "<group>/<version>" (under /apis)
    plural: str
    namespaced: bool  # listed within a namespace when one is given
    kind: str
    # listed as metadata only (the API's PartialObjectMetadataList): a Secret's data never leaves the server
    metadata_only: bool = False

    def path(self, namespace: str | None) -> str:
        """The list's URL path, as the client's generated list methods build it."""
        root = f"/api/{self.group_version}" if self.group_version == "v1" else f"/apis/{self.group_version}"
        within = f"/namespaces/{_seg(namespace)}" if namespace is not None and self.namespaced else ""
        return f"{root}{within}/{self.plural}"


KINDS: dict[str, _Kind] = {
    "pods": _Kind("v1", "pods", True, "Pod"),
    "events": _Kind("v1", "events", True, "Event"),
    "nodes": _Kind("v1", "nodes", False, "Node"),
    "services": _Kind("v1", "services", True, "Service"),
    "endpoints": _Kind("v1", "endpoints", True, "Endpoints"),
    "endpointslices": _Kind("discovery.k8s.io/v1", "endpointslices", True, "EndpointSlice"),
    "deployments": _Kind("apps/v1", "deployments", True, "Deployment"),
    "statefulsets": _Kind("apps/v1", "statefulsets", True, "StatefulSet"),
    "daemonsets": _Kind("apps/v1", "daemonsets", True, "DaemonSet"),
    "hpa": _Kind("autoscaling/v2", "horizontalpodautoscalers", True, "HorizontalPodAutoscaler"),
    "ingresses": _Kind("networking.k8s.io/v1", "ingresses", True, "Ingress"),
    "poddisruptionbudgets": _Kind("policy/v1", "poddisruptionbudgets", True, "PodDisruptionBudget"),
    "networkpolicies": _Kind("networking.k8s.io/v1", "networkpolicies", True, "NetworkPolicy"),
    "persistentvolumeclaims": _Kind("v1", "persistentvolumeclaims", True, "PersistentVolumeClaim"),
    "rayclusters": _Kind("ray.io/v1", "rayclusters", True, "RayCluster"),
    "rayservices": _Kind("ray.io/v1", "rayservices", True, "RayService"),
    "configmaps": _Kind("v1", "configmaps", True, "ConfigMap", metadata_only=True),
    "secrets": _Kind("v1", "secrets", True, "Secret", metadata_only=True),
    "gateways": _Kind("gateway.networking.k8s.io/v1", "gateways", True, "Gateway"),
    "httproutes": _Kind("gateway.networking.k8s.io/v1", "httproutes", True, "HTTPRoute"),
    "grpcroutes": _Kind("gateway.networking.k8s.io/v1", "grpcroutes", True, "GRPCRoute"),
}
# The Accept header of a metadata-only list: items are PartialObjectMetadata (apiVersion, kind, metadata)
METADATA_ONLY_ACCEPT = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


def _metadata_only(item: dict, spec: _Kind) -> dict:
    """The item as the kind's own (`kubectl get` names it so) with its name and no more: whatever the
    server sent (an API server or proxy that ignores the metadata-only Accept sends the data, and a
    Secret's last-applied-configuration annotation holds it too), nothing else is kept."""
    meta = item.get("metadata")
    kept = (
        {k: meta[k] for k in ("name", "namespace", "uid", "creationTimestamp") if k in meta}
        if isinstance(meta, dict)
        else {}
    )
    return {"apiVersion": spec.group_version, "kind": spec.kind, "metadata": kept}


class KubeAccess:
    """A configured, read-only API client. Thread-safe: collectors share one instance."""

    def __init__(
        self,
        kubeconfig: str | None = None,
        context: str | None = None,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
        impersonate_user: str | None = None,
        impersonate_groups: tuple[str, ...] = (),
        credential_timeout_s: float | None = None,
    ) -> None:
        import urllib3

        self._timeout = request_timeout_s
        self._max_bytes = max_answer_bytes
        self.in_cluster = kubeconfig is None and context is None and "KUBERNETES_SERVICE_HOST" in os.environ
        try:
            if self.in_cluster:
                self._connection = kubeconfig_module.in_cluster()
            else:
                if (problem := kubeconfig_problem(kubeconfig, context)) is not None:
                    raise KubeError(problem)
                self._connection = kubeconfig_module.load(
                    kubeconfig, context, credential_timeout_s or request_timeout_s
                )
        except (kubeconfig_module.ConfigError, exec_credential.CredentialError, OSError, ValueError) as e:
            raise KubeError(f"cannot load Kubernetes configuration: {_one_line(e)}") from e
        # No retry after a read timeout: a hung pod behind the proxy would cost 4x the caller's timeout.
        self._retries = urllib3.Retry(total=None, connect=2, read=0, status=0, other=0, redirect=3)
        self._pool = _pool(self._connection, self._retries)
        self._headers = {"User-Agent": USER_AGENT}
        # kubectl --as / --as-group: the API server checks RBAC as that user (and acts as nothing else:
        # llmdiag still only reads). One group at most (checked by the CLI).
        if impersonate_user:
            self._headers["Impersonate-User"] = impersonate_user
        for group in impersonate_groups:
            self._headers["Impersonate-Group"] = group
        self.context = self._connection.context
        self._namespace = self._connection.namespace
        self.server = self._connection.server
        self.warm: WarmLists | None = None  # lists kept current by watches, for a process that stays up

    def preflight(self, timeout_s: float) -> str | None:
        """GET /version once, without retries, within `timeout_s`: None when the API server answered
        (any HTTP status but 401 shows it is there), else one line naming the server and context."""
        import urllib3

        where = f"the API server {self.server}" + (f" (context {self.context})" if self.context else "")
        started = time.monotonic()
        try:
            answer = self._pool.request(
                "GET",
                f"{self.server}/version",
                headers=self._request_headers({}),
                timeout=urllib3.Timeout(total=timeout_s),
                retries=False,
                preload_content=False,
            )
            # The connection must not go back to the pool with the answer's body unread: the next
            # request on it would read that body as its own status line.
            answer.close()
            answer.release_conn()
        except urllib3.exceptions.HTTPError as e:
            reason = e.reason if isinstance(e, urllib3.exceptions.MaxRetryError) and e.reason else e
            if isinstance(reason, urllib3.exceptions.NewConnectionError):
                why = f"cannot connect ({str(reason).rsplit(': ', 1)[-1]})"
            elif isinstance(reason, urllib3.exceptions.TimeoutError):
                why = f"no answer within {time.monotonic() - started:.1f}s"
            else:
                why = _one_line(reason)
            return f"{where} is unreachable: {why}; the Kubernetes sources were skipped"
        except OSError as e:
            return f"{where} is unreachable: {_one_line(e)}; the Kubernetes sources were skipped"
        if answer.status == 401:
            return f"{where} refused the credentials (HTTP 401); the Kubernetes sources were skipped"
        return None

    def current_namespace(self) -> str:
        return self._namespace

    # ------------------------------------------------------------------ objects

    def list_json(
        self,
        kind: str,
        namespace: str | None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        max_items: int | None = None,
        raw: bool = False,
    ) -> dict:
        """`kubectl get <kind> -o json` (namespace None: all namespaces, or a cluster-scoped kind); from
        the watched copy of `warm` where one is set (diag/collect/watch.py), its items as their JSON
        text there where `raw` asks for it."""
        max_items = max_items or MAX_ITEMS
        if self.warm is not None:
            return self.warm.list_json(self, kind, namespace, label_selector, field_selector, max_items, raw)
        items, cont, _ = self._list(kind, namespace, label_selector, field_selector, max_items)
        metadata: dict[str, Any] = {"resourceVersion": ""}
        if cont is not None:
            metadata["continue"] = cont  # more exist: the cap was reached
        return {"apiVersion": "v1", "items": items[:max_items], "kind": "List", "metadata": metadata}

    def list_items(
        self,
        kind: str,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        each: Callable[[dict], Any],
    ) -> tuple[list[Any], str]:
        """`each` of every item of a list (no cap: a watched copy must hold them all), made page by page,
        and the list's resourceVersion."""
        items, _, version = self._list(kind, namespace, label_selector, field_selector, None, each)
        return items, version

    def _list(
        self,
        kind: str,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        max_items: int | None,
        each: Callable[[dict], Any] | None = None,
    ) -> tuple[list[Any], str | None, str]:
        """(items, the continue token where the cap stopped the paging, the list's resourceVersion)."""
        spec = KINDS.get(kind)
        if spec is None:
            raise KubeError(f"unknown kind {kind!r} (known: {', '.join(sorted(KINDS))})")
        items: list[Any] = []
        cont: str | None = None
        version = ""
        while True:
            page = self._list_page(spec, namespace, label_selector, field_selector, cont)
            for item in page.get("items") or []:
                if isinstance(item, dict):
                    if spec.metadata_only:
                        item = _metadata_only(item, spec)
                    item.setdefault("apiVersion", spec.group_version)
                    item.setdefault("kind", spec.kind)
                    items.append(item if each is None else each(item))
            metadata = page.get("metadata") or {}
            version = version or str(metadata.get("resourceVersion") or "")
            cont = metadata.get("continue") or None
            if cont is None or (max_items is not None and len(items) >= max_items):
                break
        return items, cont, version

    def watch_lines(
        self,
        kind: str,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        version: str,
        timeout_s: int,
        slack_s: float,
        on_line: Callable[[bytes], bool],
    ) -> bool:
        """Watch a list from `version`, each event's line to `on_line` until it answers False (then
        False) or the server ends the watch after `timeout_s` (then True)."""
        spec = KINDS[kind]
        query = [("watch", "true"), ("allowWatchBookmarks", "true"), ("resourceVersion", version),
                 ("timeoutSeconds", str(timeout_s))]  # fmt: skip
        query += [(k, v) for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector)) if v]
        what = f"watch {spec.kind}" + (f" in {namespace}" if namespace and spec.namespaced else "")
        path = spec.path(namespace)
        stream = self._call(what, lambda: self._send(path, query, {"Accept": "application/json"}, timeout_s + slack_s))
        if not 200 <= stream.status <= 299:
            stream.read()
            stream.release_conn()
            raise KubeError(f"{what}: HTTP {stream.status}", status=stream.status)
        pending = b""
        try:
            for chunk in stream.stream(64 * 1024):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip() and not on_line(line):
                        return False
            return True
        finally:
            stream.close()
            stream.release_conn()

    def _list_page(
        self,
        spec: _Kind,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        cont: str | None,
    ) -> dict:
        query = {
            "limit": str(PAGE_SIZE),
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
            "continue": cont,
        }
        what = f"list {spec.kind}" + (f" in {namespace}" if namespace and spec.namespaced else "")
        accept = METADATA_ONLY_ACCEPT if spec.metadata_only else "application/json"
        raw = self._call(what, lambda: self._get(what, spec.path(namespace), query, accept), retry_within=self._timeout)
        return _json_object(raw, what)

    # ------------------------------------------------------------------ logs

    def pod_log(self, namespace: str, pod: str, container: str | None, tail_lines: int, previous: bool = False) -> str:
        """`kubectl logs <pod> -c <container> --tail=N [--previous]`, at most MAX_LOG_BYTES."""
        query = {
            "container": container,
            "tailLines": str(tail_lines),
            "limitBytes": str(MAX_LOG_BYTES),
            "previous": "true" if previous else None,
        }
        what = f"logs of {namespace}/{pod}" + (f" container {container}" if container else "")
        path = f"/api/v1/namespaces/{_seg(namespace)}/pods/{_seg(pod)}/log"
        raw = self._call(what, lambda: self._get(what, path, query), retry_within=self._timeout)
        return raw.decode("utf-8", errors="replace")

    def _get(
        self, what: str, resource_path: str, query: Mapping[str, str | None], accept: str = "application/json"
    ) -> bytes:
        """GET a path of the API server and read its body (at most the cap, within the timeout); an
        answer outside 2xx raises KubeError with the message of the API server's metav1.Status."""
        given = [(key, value) for key, value in query.items() if value is not None]
        response = self._send(resource_path, given, {"Accept": accept}, self._timeout)
        if not 200 <= response.status <= 299:
            body = self._body(what, response, self._timeout)
            raise _answer_error(what, response.status, response.reason, body, response.headers.get("Retry-After"))
        return self._body(what, response, self._timeout)

    def _send(
        self, resource_path: str, query: list[tuple[str, str]], headers: Mapping[str, str], timeout: float
    ) -> Any:
        """One GET through the pool, with the connection's credential; the urllib3 answer, unread."""
        import urllib3

        url = f"{self.server}{resource_path}" + (f"?{urlencode(query, quote_via=quote)}" if query else "")
        return self._pool.request(
            "GET",
            url,
            headers=self._request_headers(headers),
            timeout=urllib3.Timeout(total=timeout),
            retries=self._retries,
            preload_content=False,
        )

    def _request_headers(self, headers: Mapping[str, str]) -> dict[str, str]:
        merged = {**self._headers, **headers}
        if (authorization := self._connection.authorization()) is not None:
            merged["Authorization"] = authorization
        return merged

    # ------------------------------------------------------------------ proxies

    def pod_proxy_get(self, namespace: str, pod: str, port: int | str, path: str, timeout: float) -> tuple[int, bytes]:
        """GET http://<pod>:<port>/<path> through the API server's pod proxy: (HTTP status, body).

        Any answer of the pod comes back, 200 or 503 alike. An answer of the API server itself (a
        metav1.Status: forbidden, no such pod, "error trying to reach service: ... connection
        refused") raises KubeError with its message and status.
        """
        return self.proxy_answer("pods", namespace, pod, port, path, timeout)[:2]

    def service_proxy_get(
        self,
        namespace: str,
        service: str,
        port: int | str,
        path: str,
        timeout: float,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, bytes]:
        """GET through the API server's service proxy (port: number or port name): (HTTP status, body).
        `headers` travel on to the service (the API server keeps all but Authorization for itself)."""
        return self.proxy_answer("services", namespace, service, port, path, timeout, headers)[:2]

    def proxy_answer(
        self,
        kind: str,
        namespace: str,
        name: str,
        port: int | str,
        path: str,
        timeout: float,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, bytes, str | None]:
        """GET through the pod ("pods") or service ("services") proxy: (status, body, Retry-After)."""
        base = f"/api/v1/namespaces/{_seg(namespace)}/{kind}/{_seg(name)}:{_seg(str(port))}"
        # The generated connect_get_*_proxy_with_path methods percent-encode "/" and "?" inside the
        # path; the URL is built here instead so that "api/v0/nodes?detail=1" reaches the pod as is.
        parts = urlsplit(path)
        resource_path = f"{base}/proxy/{quote(parts.path.lstrip('/'), safe='/')}"
        query = parse_qsl(parts.query, keep_blank_values=True)
        what = f"GET {resource_path}"
        started = time.monotonic()
        response = self._call(
            what, lambda: self._send(resource_path, query, {**(headers or {}), "Accept": "*/*"}, timeout)
        )
        body = self._call(what, lambda: self._body(what, response, timeout - (time.monotonic() - started)))
        failure = _api_status_failure(body)
        if failure is not None:
            hint = f" ({RBAC_HINT})" if response.status == 403 else ""
            raise KubeError(f"{what}: {failure}{hint}", status=response.status)
        return response.status, body, response.headers.get("Retry-After")

    # ------------------------------------------------------------------ exec

    def exec_fixed(self, namespace: str, pod: str, container: str | None, argv: list[str], timeout: float) -> str:
        """Run a FIXED argument list in a container (no shell) and return its stdout.

        Over the websocket protocol the API server speaks (channel.k8s.io: stdout 1, stderr 2,
        a metav1.Status on 3). A non-zero exit or a failure to start raises KubeError.
        """
        if not argv or not all(isinstance(a, str) for a in argv):
            raise KubeError("exec needs a non-empty list of string arguments")
        query: list[tuple[str, str]] = [("command", a) for a in argv]
        query += [("stdout", "true"), ("stderr", "true"), ("stdin", "false"), ("tty", "false")]
        if container:
            query.append(("container", container))
        what = f"exec {argv[0]} in {namespace}/{pod}"
        path = f"/api/v1/namespaces/{_seg(namespace)}/pods/{_seg(pod)}/exec"
        url = f"{self.server}{path}?{urlencode(query, quote_via=quote)}"
        ws = self._call(what, lambda: self._websocket(what, url))
        try:
            channels = self._call(what, lambda: _read_channels(what, ws, time.monotonic() + timeout, self._max_bytes))
        finally:
            ws.close()
        if channels is None:
            raise KubeTimeout(f"{what}: no exit after {timeout:g}s")
        stdout, stderr, status = (bytes(channels[n]).decode("utf-8", errors="replace") for n in (1, 2, 3))
        _check_exec_status(what, status, stderr)
        return stdout

    def _websocket(self, what: str, url: str) -> Any:
        """The exec websocket (channel.k8s.io), opened with this connection's TLS, proxy and headers
        (its credential, and --as/--as-group)."""
        import ssl

        import websocket

        connection = self._connection
        tls: dict[str, Any] = {"cert_reqs": ssl.CERT_REQUIRED if connection.verify else ssl.CERT_NONE}
        if not connection.verify:
            tls["check_hostname"] = False
        files = {"ca_certs": connection.ca_file, "certfile": connection.cert_file, "keyfile": connection.key_file}
        tls.update({key: value for key, value in files.items() if value})
        if connection.tls_server_name:
            tls["server_hostname"] = connection.tls_server_name
        options: dict[str, Any] = {
            "header": [f"{k}: {v}" for k, v in self._request_headers({}).items()],
            "subprotocols": list(EXEC_PROTOCOLS),
            "timeout": self._timeout,  # the handshake, and each wait for a frame after it
        }
        if connection.proxy:
            proxy = urlsplit(connection.proxy)
            options.update(http_proxy_host=proxy.hostname, http_proxy_port=proxy.port,
                           proxy_type=proxy.scheme if proxy.scheme.startswith("socks") else "http")  # fmt: skip
            if proxy.username:
                options["http_proxy_auth"] = (proxy.username, proxy.password or "")
        ws = websocket.WebSocket(sslopt=tls, skip_utf8_validation=True)
        scheme, rest = url.split("://", 1)
        try:
            ws.connect(f"{'wss' if scheme == 'https' else 'ws'}://{rest}", **options)
        except websocket.WebSocketBadStatusException as e:
            body = e.resp_body if isinstance(e.resp_body, bytes) else b""
            raise _answer_error(what, e.status_code, e.status_message or "", body, None) from e
        except websocket.WebSocketTimeoutException as e:
            raise KubeTimeout(f"{what}: timed out after {self._timeout:g}s") from e
        except websocket.WebSocketException as e:
            raise KubeError(f"{what}: {_one_line(e)}") from e
        return ws

    # ------------------------------------------------------------------ plumbing

    def _body(self, what: str, response: Any, timeout: float) -> bytes:
        """The body of a urllib3 response, read up to the cap and `timeout` seconds; then released."""
        started = time.monotonic()
        try:
            body = read_capped(response.read, self._max_bytes, started, started + max(0.0, timeout))
        except (AnswerTooLarge, AnswerTooSlow) as e:
            response.close()  # the rest is never read: this connection must not go back to the pool
            response.release_conn()
            raise (KubeError if isinstance(e, AnswerTooLarge) else KubeTimeout)(f"{what}: {e}") from e
        except BaseException:
            response.close()
            response.release_conn()
            raise
        response.release_conn()
        return body

    def _call(self, what: str, fn: Any, retry_within: float | None = None) -> Any:
        """Run one client call; every failure becomes a KubeError with one readable line. With
        `retry_within` (seconds), a GET the API server throttles (429) or cannot serve now (503) is
        asked again, honouring Retry-After, while another attempt fits in that time."""
        started = time.monotonic()
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                return self._call_once(what, fn, started)
            except KubeError as e:
                if retry_within is None or e.status not in RETRY_STATUSES or attempt == MAX_ATTEMPTS:
                    raise
                delay = retry_after_s(e.retry_after, attempt)
                if time.monotonic() + delay >= started + retry_within:
                    raise
                time.sleep(delay)
        raise AssertionError("unreachable")  # the loop returns or raises

    def _call_once(self, what: str, fn: Any, started: float) -> Any:
        import urllib3

        try:
            return fn()
        except urllib3.exceptions.HTTPError as e:
            raise _transport_error(what, e, time.monotonic() - started) from e
        except TimeoutError as e:
            raise KubeTimeout(f"{what}: timed out after {time.monotonic() - started:.1f}s") from e
        except OSError as e:
            raise KubeError(f"{what}: {_one_line(e)}") from e


def _transport_error(what: str, error: Exception, elapsed_s: float) -> KubeError:
    """No HTTP answer: the connection was refused (NewConnectionError is a ConnectTimeoutError in
    urllib3, so it is told apart first), it timed out, or something else broke."""
    import urllib3

    reason = error.reason if isinstance(error, urllib3.exceptions.MaxRetryError) and error.reason else error
    if isinstance(reason, urllib3.exceptions.NewConnectionError):
        return KubeError(f"{what}: cannot connect to the API server ({str(reason).rsplit(': ', 1)[-1]})")
    if isinstance(reason, urllib3.exceptions.TimeoutError):
        return KubeTimeout(f"{what}: timed out after {elapsed_s:.1f}s")
    return KubeError(f"{what}: cannot reach the API server ({_one_line(reason)})")


def _seg(text: str) -> str:
    return quote(text, safe="")


def _json_object(raw: bytes, what: str) -> dict:
    try:
        data = json.loads(raw)
    except ValueError as e:
        raise KubeError(f"{what}: the API server did not answer JSON ({e})") from e
    if not isinstance(data, dict):
        raise KubeError(f"{what}: the API server answered {type(data).__name__}, not an object")
    return data


def _api_status_failure(body: bytes) -> str | None:
    """The message of a metav1.Status failure (the API server's own answer), else None."""
    if not body.startswith(b"{") or b'"Status"' not in body:
        return None
    try:
        status = json.loads(body)
    except ValueError:
        return None
    if isinstance(status, dict) and status.get("kind") == "Status" and status.get("status") == "Failure":
        return _one_line(status.get("message") or status.get("reason") or "failed")
    return None


def _answer_error(what: str, status: int, reason: str, body: bytes, retry_after: str | None) -> KubeError:
    """An answer outside 2xx: the `message` of the metav1.Status the API server sent, else the status."""
    line = _status_message(body) or f"HTTP {status} {reason}".strip()
    if status == 403:
        line = f"{line} ({RBAC_HINT})"
    return KubeError(f"{what}: {line}", status=status, retry_after=retry_after)


def _status_message(body: str | bytes) -> str | None:
    try:
        message = json.loads(body or "").get("message")
    except (ValueError, AttributeError):
        return None
    return _one_line(message) if message else None


def _read_channels(what: str, ws: Any, deadline: float, max_bytes: int) -> dict[int, bytearray] | None:
    """What the exec's streams carried until the server closed the websocket (stdout 1, stderr 2, the
    metav1.Status 3); None where `deadline` came first. More than `max_bytes` raises KubeError."""
    import websocket

    channels: dict[int, bytearray] = {1: bytearray(), 2: bytearray(), 3: bytearray()}
    total = 0
    while (left := deadline - time.monotonic()) > 0:
        ws.settimeout(left)
        try:
            opcode, frame = ws.recv_data_frame(control_frame=True)
        except websocket.WebSocketTimeoutException:
            return None
        except websocket.WebSocketConnectionClosedException:
            return channels
        except websocket.WebSocketException as e:
            raise KubeError(f"{what}: the websocket broke ({_one_line(e)})") from e
        if opcode == websocket.ABNF.OPCODE_CLOSE:
            return channels
        data = frame.data if isinstance(frame, websocket.ABNF) else frame
        if opcode in (websocket.ABNF.OPCODE_BINARY, websocket.ABNF.OPCODE_TEXT) and data:
            data = data.encode() if isinstance(data, str) else data
            if data[0] in channels:
                channels[data[0]] += data[1:]
                total += len(data) - 1
                if total > max_bytes:
                    raise KubeError(f"{what}: more than {max_bytes} bytes of output")
    return None


def _check_exec_status(what: str, status_text: str, stderr: str) -> None:
    """Channel 3 carries a metav1.Status: Success, or Failure with the exit code among its causes."""
    if not status_text:
        raise KubeError(f"{what}: the connection closed without an exit status")
    try:
        status = json.loads(status_text)
    except ValueError as e:
        raise KubeError(f"{what}: unreadable exit status ({e})") from e
    if not isinstance(status, dict) or status.get("status") == "Success":
        return
    detail = _one_line(stderr) or _one_line(status.get("message") or "failed")
    causes = (status.get("details") or {}).get("causes") or []
    code = next((c.get("message") for c in causes if isinstance(c, dict) and c.get("reason") == "ExitCode"), None)
    raise KubeError(f"{what}: exit code {code}: {detail}" if code else f"{what}: {detail}")


def _one_line(value: object) -> str:
    text = str(value).strip()
    return text.splitlines()[0] if text else ""


def kubeconfig_problem(kubeconfig: str | None, context: str | None) -> str | None:
    """Why the kubeconfig (`--kubeconfig`, else $KUBECONFIG, else ~/.kube/config) or the context named
    cannot be used, in one line naming the path and the contexts there are; None when it can be tried.
    Inside a pod with neither given, the in-cluster configuration is used: None."""
    if kubeconfig is None and context is None and "KUBERNETES_SERVICE_HOST" in os.environ:
        return None
    where, files = kubeconfig_module.kubeconfig_paths(kubeconfig)
    if not any(os.path.isfile(path) for path in files):
        if kubeconfig is not None:
            return f"kubeconfig {kubeconfig}: no such file"
        named = f"$KUBECONFIG ({where})" if os.environ.get("KUBECONFIG") else where
        return f"no kubeconfig: {named} does not exist, and this is not a pod in a cluster (give --kubeconfig)"
    if context is None:
        return None
    try:
        names, _ = kubeconfig_module.contexts(kubeconfig)
    except (kubeconfig_module.ConfigError, OSError, ValueError):
        return None  # loading it says what is wrong
    if context in names:
        return None
    shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
    return f"context {context!r} is not in the kubeconfig {where} (its contexts: {shown or 'none'})"


def _pool(connection: kubeconfig_module.Connection, retries: Any) -> Any:
    """One urllib3 pool for every request, with the connection's TLS and proxy."""
    import ssl
    import warnings

    import urllib3

    options: dict[str, Any] = {
        "cert_reqs": ssl.CERT_REQUIRED if connection.verify else ssl.CERT_NONE,
        "ca_certs": connection.ca_file,
        "cert_file": connection.cert_file,
        "key_file": connection.key_file,
        "retries": retries,
        "maxsize": CONNECTION_POOL_SIZE,
    }
    if connection.tls_server_name:
        options["server_hostname"] = connection.tls_server_name
    if (
        not connection.verify
    ):  # the kubeconfig asked for it; kubectl says nothing either, where urllib3 warns each request
        warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)
    if not connection.proxy:
        return urllib3.PoolManager(**options)
    if connection.proxy.split("://", 1)[0].lower() in ("socks5", "socks5h", "socks4", "socks4a"):
        from urllib3.contrib.socks import SOCKSProxyManager

        return SOCKSProxyManager(connection.proxy, **options)
    return urllib3.ProxyManager(connection.proxy, **options)
