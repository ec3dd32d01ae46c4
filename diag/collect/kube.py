"""Read-only access to the Kubernetes API server: the one door a laptop with a kubeconfig has.

Every layer is reached through the API server: objects and logs directly, the Ray dashboard and the
vLLM endpoints through its pod/service proxy, nvidia-smi and `ray status` through exec of a fixed
argument list. Nothing here writes to the cluster; exec is the only "create" (pods/exec in RBAC).

Answers are kept as the API's own JSON (`_preload_content=False`), never the client's snake_case
models, so the bundle holds what `kubectl get -o json` would have printed. Every body is read as a
stream up to `max_answer_bytes` and the request's timeout (diag.collect.bounds).

Tested with the real `kubernetes` client against a real API server with kwok nodes (tests/live/), exec
and logs included, and against tests/replay (a recorded-API replay server) for what that server cannot serve.
"""

from __future__ import annotations

import ast
import json
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, urlsplit

from diag.collect import exec_credential
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
IN_CLUSTER_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
_HANDSHAKE = re.compile(r"Handshake status (?P<status>\d+)[^\n]*? -\+-\+- .*? -\+-\+- (?P<body>.*)$", re.DOTALL)


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
        import websocket
        from kubernetes import client, config

        self._configuration = client.Configuration()
        # No retry after a read timeout: a hung pod behind the proxy would cost 4x the caller's timeout.
        self._configuration.retries = urllib3.Retry(total=None, connect=2, read=0, status=0, other=0, redirect=3)
        self._timeout = request_timeout_s
        self._max_bytes = max_answer_bytes
        # The exec websocket takes no connect timeout of its own; without one a silent API server
        # would hold the collector's thread (and the process's exit) forever.
        websocket.setdefaulttimeout(request_timeout_s)
        self.in_cluster = kubeconfig is None and context is None and "KUBERNETES_SERVICE_HOST" in os.environ
        try:
            if self.in_cluster:
                config.load_incluster_config(client_configuration=self._configuration)
                self.context: str | None = None
                self._namespace = _in_cluster_namespace()
            else:
                if (problem := kubeconfig_problem(kubeconfig, context)) is not None:
                    raise KubeError(problem)
                exec_credential.install(credential_timeout_s or request_timeout_s)
                config.load_kube_config(
                    config_file=kubeconfig, context=context, client_configuration=self._configuration
                )
                if (failed := exec_credential.failure()) is not None:
                    raise KubeError(f"cannot load Kubernetes configuration: {failed}")
                self.context, self._namespace = _kubeconfig_context(kubeconfig, context)
        except (config.ConfigException, OSError, ValueError, TypeError) as e:
            raise KubeError(f"cannot load Kubernetes configuration: {_one_line(e)}") from e
        self._configuration.connection_pool_maxsize = CONNECTION_POOL_SIZE  # before the client builds its pools
        self._client = client.ApiClient(self._configuration)
        # kubectl --as / --as-group: the API server checks RBAC as that user (and acts as nothing else:
        # llmdiag still only reads). The client's headers are a dict: one group at most (checked by the CLI).
        if impersonate_user:
            self._client.set_default_header("Impersonate-User", impersonate_user)
        for group in impersonate_groups:
            self._client.set_default_header("Impersonate-Group", group)
        self.server = self._configuration.host
        self.warm: WarmLists | None = None  # lists kept current by watches, for a process that stays up

    def preflight(self, timeout_s: float) -> str | None:
        """GET /version once, without retries, within `timeout_s`: None when the API server answered
        (any HTTP status but 401 shows it is there), else one line naming the server and context."""
        import urllib3

        headers = dict(self._client.default_headers)
        self._client.update_params_for_auth(headers, [], ["BearerToken"], "/version", "GET", None)
        where = f"the API server {self.server}" + (f" (context {self.context})" if self.context else "")
        started = time.monotonic()
        try:
            answer = self._client.rest_client.pool_manager.request(
                "GET",
                f"{self.server.rstrip('/')}/version",
                headers=headers,
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
    ) -> dict:
        """`kubectl get <kind> -o json` (namespace None: all namespaces, or a cluster-scoped kind); from
        the watched copy of `warm` where one is set (diag/collect/watch.py)."""
        max_items = max_items or MAX_ITEMS
        if self.warm is not None:
            return self.warm.list_json(self, kind, namespace, label_selector, field_selector, max_items)
        items, cont, _ = self._list(kind, namespace, label_selector, field_selector, max_items)
        metadata: dict[str, Any] = {"resourceVersion": ""}
        if cont is not None:
            metadata["continue"] = cont  # more exist: the cap was reached
        return {"apiVersion": "v1", "items": items[:max_items], "kind": "List", "metadata": metadata}

    def list_items(
        self, kind: str, namespace: str | None, label_selector: str | None, field_selector: str | None
    ) -> tuple[list[dict], str]:
        """Every item of a list (no cap: a watched copy must hold them all) and its resourceVersion."""
        items, _, version = self._list(kind, namespace, label_selector, field_selector, None)
        return items, version

    def _list(
        self,
        kind: str,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        max_items: int | None,
    ) -> tuple[list[dict], str | None, str]:
        """(items, the continue token where the cap stopped the paging, the list's resourceVersion)."""
        spec = KINDS.get(kind)
        if spec is None:
            raise KubeError(f"unknown kind {kind!r} (known: {', '.join(sorted(KINDS))})")
        items: list[dict] = []
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
                    items.append(item)
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
        response = self._call(
            what, lambda: self._send(path, query, {"Accept": "application/json"}, timeout_s + slack_s)
        )
        if not 200 <= response.status <= 299:
            response.read()
            raise KubeError(f"{what}: HTTP {response.status}", status=response.status)
        stream = response.response  # the client's wrapper holds urllib3's response, unread
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
        answer outside 2xx raises as the client's generated methods raise it. Built on the client's
        ApiClient, not its generated API classes: loading CoreV1Api's models cost CPU at the start
        of every collection, on the way to the pods (bench/triage.md)."""
        from kubernetes.client.exceptions import ApiException

        given = [(key, value) for key, value in query.items() if value is not None]
        response = self._send(resource_path, given, {"Accept": accept}, self._timeout)
        if not 200 <= response.status <= 299:
            response.read()
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return self._body(what, response.response, self._timeout)

    def _send(
        self, resource_path: str, query: list[tuple[str, str]], headers: Mapping[str, str], timeout: float
    ) -> Any:
        """One GET through the client's ApiClient (its authentication, TLS and pool); the answer unread."""
        request = self._client.param_serialize(
            "GET", resource_path, query_params=query or None, header_params=dict(headers), auth_settings=["BearerToken"]
        )
        return self._client.call_api(*request, _request_timeout=timeout)

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
        body = self._call(what, lambda: self._body(what, response.response, timeout - (time.monotonic() - started)))
        failure = _api_status_failure(body)
        if failure is not None:
            hint = f" ({RBAC_HINT})" if response.status == 403 else ""
            raise KubeError(f"{what}: {failure}{hint}", status=response.status)
        return response.status, body, response.getheader("Retry-After")

    # ------------------------------------------------------------------ exec

    def exec_fixed(self, namespace: str, pod: str, container: str | None, argv: list[str], timeout: float) -> str:
        """Run a FIXED argument list in a container (no shell) and return its stdout.

        Over the websocket protocol the API server speaks (channel.k8s.io: stdout 1, stderr 2,
        a metav1.Status on 3). A non-zero exit or a failure to start raises KubeError.
        """
        if not argv or not all(isinstance(a, str) for a in argv):
            raise KubeError("exec needs a non-empty list of string arguments")
        from kubernetes.stream.ws_client import websocket_call

        query: list[tuple[str, Any]] = [("command", list(argv)), ("stdout", True), ("stderr", True),
                                        ("stdin", False), ("tty", False)]  # fmt: skip
        if container:
            query.append(("container", container))
        what = f"exec {argv[0]} in {namespace}/{pod}"
        # The websocket call of the client's own `stream()`, with the request its generated
        # connect_get_namespaced_pod_exec would serialize, but without loading that generated API
        # class: importing CoreV1Api and its models costs more CPU than the whole rest of a triage.
        method, url, headers, _, _ = self._client.param_serialize(
            "GET",
            f"/api/v1/namespaces/{_seg(namespace)}/pods/{_seg(pod)}/exec",
            query_params=query,
            header_params={"Accept": "*/*"},
            auth_settings=["BearerToken"],
            collection_formats={"command": "multi"},
        )
        ws = self._call(
            what, lambda: websocket_call(self._configuration, method, url, headers=headers, _preload_content=False)
        )
        try:
            ws.run_forever(timeout=timeout)
            if ws.is_open():
                raise KubeTimeout(f"{what}: no exit after {timeout:g}s")
            stdout, stderr = ws.read_stdout(timeout=0), ws.read_stderr(timeout=0)
            status = ws.read_channel(3)
        finally:
            ws.close()
        _check_exec_status(what, status, stderr)
        return stdout

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
        from kubernetes.client.exceptions import ApiException

        try:
            return fn()
        except ApiException as e:
            if e.status == 0 and "timed out" in str(e.reason).lower():
                raise KubeTimeout(f"{what}: timed out after {time.monotonic() - started:.1f}s") from e
            status, line = _api_error(e)
            if status == 403:
                line = f"{line} ({RBAC_HINT})"
            retry_after = (e.headers or {}).get("Retry-After") if hasattr(e, "headers") else None
            raise KubeError(f"{what}: {line}", status=status, retry_after=retry_after) from e
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


def _api_error(e: Any) -> tuple[int | None, str]:
    """(HTTP status, one line): the `message` of the metav1.Status the API server sent, else the
    status and reason. A refused exec websocket arrives as status 0 with "Handshake status 403
    Forbidden -+-+- <headers> -+-+- <body>" in the reason."""
    status, body, reason = e.status or None, e.body, str(e.reason or "")
    handshake = _HANDSHAKE.match(reason)
    if handshake is not None:
        status, body = int(handshake["status"]), handshake["body"]
        if body.startswith(("b'", 'b"')):
            body = ast.literal_eval(body)
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    try:
        message = json.loads(body or "").get("message")
    except (ValueError, AttributeError):
        message = None
    if message:
        return status, _one_line(message)
    return status, _one_line(f"HTTP {status} {reason.split(' -+-+- ')[0]}" if status else reason) or "no answer"


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
    from kubernetes import config

    if kubeconfig is None and context is None and "KUBERNETES_SERVICE_HOST" in os.environ:
        return None
    where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    files = [os.path.expanduser(path) for path in where.split(os.pathsep) if path]
    if not any(os.path.isfile(path) for path in files):
        if kubeconfig is not None:
            return f"kubeconfig {kubeconfig}: no such file"
        named = f"$KUBECONFIG ({where})" if os.environ.get("KUBECONFIG") else where
        return f"no kubeconfig: {named} does not exist, and this is not a pod in a cluster (give --kubeconfig)"
    if context is None:
        return None
    try:
        contexts, _ = config.list_kube_config_contexts(config_file=kubeconfig)
    except (config.ConfigException, OSError, ValueError, TypeError):
        return None  # loading it says what is wrong
    names = [str(c.get("name")) for c in contexts or []]
    if context in names:
        return None
    shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
    return f"context {context!r} is not in the kubeconfig {where} (its contexts: {shown or 'none'})"


def _kubeconfig_context(kubeconfig: str | None, context: str | None) -> tuple[str | None, str]:
    from kubernetes import config

    contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else active
    namespace = ((chosen or {}).get("context") or {}).get("namespace") or "default"
    return (chosen or {}).get("name"), namespace


def _in_cluster_namespace() -> str:
    try:
        with open(IN_CLUSTER_NAMESPACE_FILE, encoding="utf-8") as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"
