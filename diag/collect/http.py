"""One way to GET a path from a server, whether it is reached directly or through the API server's proxy.

The Ray and vLLM collectors do not care how a request travels: they get an `HttpGet` and either an
answer (status, body) - any status, 200 or 503 alike - or an `Unreachable` that says in one line
why no answer came back ("timeout", "connection refused", or something else).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from diag.collect.kube import KubeAccess

# path (with its query), timeout in seconds -> (HTTP status, body); raises Unreachable
HttpGet = Callable[[str, float], tuple[int, bytes]]

TIMEOUT = "timeout"
REFUSED = "connection refused"


class Unreachable(Exception):
    """No HTTP answer came back. `reason` is "timeout", "connection refused", or one readable line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def direct_get(base_url: str, headers: Mapping[str, str] | None = None, ca_file: str | None = None) -> HttpGet:
    """GET <base_url><path> with plain requests (a server outside Kubernetes, or port-forwarded);
    `headers` go with every request, `ca_file` verifies its TLS."""
    base = normalize_base_url(base_url)
    options = {"headers": dict(headers or {}), "verify": ca_file or True}

    def get(path: str, timeout: float) -> tuple[int, bytes]:
        import requests

        try:
            response = requests.get(base + path, timeout=timeout, **options)
        except requests.Timeout as e:
            raise Unreachable(TIMEOUT) from e
        except requests.ConnectionError as e:
            raise Unreachable(REFUSED if _refused(e) else f"cannot connect: {_first_line(e)}") from e
        except requests.RequestException as e:
            raise Unreachable(_first_line(e)) from e
        return response.status_code, response.content

    return get


def pod_proxy_get(kube: "KubeAccess", namespace: str, pod: str, port: int | str) -> HttpGet:
    """GET through the API server's pod proxy."""
    return _proxied(lambda path, timeout: kube.pod_proxy_get(namespace, pod, port, path, timeout))


def service_proxy_get(
    kube: "KubeAccess", namespace: str, service: str, port: int | str, headers: Mapping[str, str] | None = None
) -> HttpGet:
    """GET through the API server's service proxy (port: number or port name)."""
    return _proxied(lambda path, timeout: kube.service_proxy_get(namespace, service, port, path, timeout, headers))


def _proxied(call: HttpGet) -> HttpGet:
    def get(path: str, timeout: float) -> tuple[int, bytes]:
        from diag.collect.kube import KubeError, KubeTimeout

        try:
            return call(path, timeout)
        except KubeTimeout as e:
            raise Unreachable(TIMEOUT) from e
        except KubeError as e:
            # The API server's own answer, not the server's: forbidden, no such pod, or
            # "error trying to reach service: dial tcp ...: connect: connection refused".
            message = str(e)
            if "connection refused" in message:
                raise Unreachable(REFUSED) from e
            if "i/o timeout" in message:
                raise Unreachable(TIMEOUT) from e
            raise Unreachable(message) from e

    return get


def normalize_base_url(url: str) -> str:
    """'127.0.0.1:8265' -> 'http://127.0.0.1:8265'; no trailing slash."""
    url = url.strip().rstrip("/")
    return url if "://" in url else f"http://{url}"


def body_excerpt(body: bytes, limit: int = 200) -> str:
    """The start of an error answer's body, on one line, for a SourceResult detail."""
    text = " ".join(body.decode("utf-8", errors="replace").split())
    return text if len(text) <= limit else text[:limit] + "..."


def _refused(error: BaseException) -> bool:
    # requests keeps the socket error only in its message: "...[Errno 111] Connection refused"
    return "Connection refused" in str(error)


def _first_line(value: object) -> str:
    text = str(value).strip()
    return text.splitlines()[0] if text else type(value).__name__
