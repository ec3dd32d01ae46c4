"""One way to GET a path from a server, whether it is reached directly or through the API server's proxy.

The Ray and vLLM collectors do not care how a request travels: they get an `HttpGet` and either an
answer (status, body) - any status, 200 or 503 alike - or an `Unreachable` that says in one line
why no answer came back ("timeout", "connection refused", or something else).

Both ways are bounded (diag.collect.bounds): the body is read as a stream up to a size cap, the
timeout covers the whole request (connection, answer and body, retries included), and 429/503 are
asked again while the timeout allows.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from diag.collect.bounds import DEFAULT_MAX_ANSWER_BYTES, AnswerTooLarge, AnswerTooSlow, read_capped, with_retries

if TYPE_CHECKING:
    from diag.collect.kube import KubeAccess

# path (with its query), timeout in seconds -> (HTTP status, body); raises Unreachable
HttpGet = Callable[[str, float], tuple[int, bytes]]

TIMEOUT = "timeout"
REFUSED = "connection refused"


class Unreachable(Exception):
    """No HTTP answer came back. `reason` is "timeout", "connection refused", or one readable line;
    `detail` adds how long a timeout waited."""

    def __init__(self, reason: str, elapsed_s: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.elapsed_s = elapsed_s

    @property
    def detail(self) -> str:
        if self.reason == TIMEOUT and self.elapsed_s is not None:
            return f"{TIMEOUT} after {self.elapsed_s:.1f}s"
        return self.reason


def direct_get(
    base_url: str,
    headers: Mapping[str, str] | None = None,
    ca_file: str | None = None,
    max_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    watch: Callable[[], Callable[[bytes], None]] | None = None,
) -> HttpGet:
    """GET <base_url><path> with plain requests (a server outside Kubernetes, or port-forwarded);
    `headers` go with every request, `ca_file` verifies its TLS. `watch` makes, per answer, what sees
    its chunks as they arrive (`read_capped`); what that raises reaches the caller as it is."""
    base = normalize_base_url(base_url)
    sent_headers = dict(headers or {})
    verify: str | bool = ca_file or True

    def once(path: str, started: float, deadline: float) -> tuple[int, bytes, str | None]:
        import requests
        import urllib3

        remaining = max(0.001, deadline - time.monotonic())
        try:
            with requests.get(
                base + path, timeout=remaining, stream=True, headers=sent_headers, verify=verify
            ) as response:
                body = read_capped(
                    lambda n: response.raw.read(n, decode_content=True),
                    max_bytes,
                    started,
                    deadline,
                    watch() if watch is not None else None,
                )
                return response.status_code, body, response.headers.get("Retry-After")
        except requests.Timeout as e:
            raise Unreachable(TIMEOUT, time.monotonic() - started) from e
        except requests.ConnectionError as e:
            if "timed out" in str(e).lower():  # a body read that timed out arrives as a ConnectionError
                raise Unreachable(TIMEOUT, time.monotonic() - started) from e
            raise Unreachable(REFUSED if _refused(e) else f"cannot connect: {_first_line(e)}") from e
        except requests.RequestException as e:
            raise Unreachable(_first_line(e)) from e
        except (AnswerTooLarge, AnswerTooSlow) as e:
            raise Unreachable(str(e)) from e
        except urllib3.exceptions.ReadTimeoutError as e:  # the body is read from urllib3 directly
            raise Unreachable(TIMEOUT, time.monotonic() - started) from e
        except urllib3.exceptions.HTTPError as e:  # e.g. the server closed before the whole body came
            raise Unreachable(f"the answer broke off: {_first_line(e)}") from e
        except OSError as e:  # the socket, while the body was read
            raise Unreachable(_first_line(e)) from e

    def get(path: str, timeout: float) -> tuple[int, bytes]:
        started = time.monotonic()
        return with_retries(lambda deadline: once(path, started, deadline), timeout)

    return get


def pod_proxy_get(kube: KubeAccess, namespace: str, pod: str, port: int | str) -> HttpGet:
    """GET through the API server's pod proxy."""
    return _proxied(lambda path, timeout: kube.proxy_answer("pods", namespace, pod, port, path, timeout))


def service_proxy_get(
    kube: KubeAccess, namespace: str, service: str, port: int | str, headers: Mapping[str, str] | None = None
) -> HttpGet:
    """GET through the API server's service proxy (port: number or port name)."""
    return _proxied(
        lambda path, timeout: kube.proxy_answer("services", namespace, service, port, path, timeout, headers)
    )


def _proxied(call: Callable[[str, float], tuple[int, bytes, str | None]]) -> HttpGet:
    def get(path: str, timeout: float) -> tuple[int, bytes]:
        started = time.monotonic()
        return with_retries(lambda deadline: once(path, started, deadline), timeout)

    def once(path: str, started: float, deadline: float) -> tuple[int, bytes, str | None]:
        from diag.collect.kube import KubeError, KubeTimeout

        try:
            return call(path, max(0.001, deadline - time.monotonic()))
        except KubeTimeout as e:
            raise Unreachable(TIMEOUT, time.monotonic() - started) from e
        except KubeError as e:
            # The API server's own answer, not the server's: forbidden, no such pod, or
            # "error trying to reach service: dial tcp ...: connect: connection refused".
            message = str(e)
            if "connection refused" in message:
                raise Unreachable(REFUSED) from e
            if "i/o timeout" in message:
                raise Unreachable(TIMEOUT, time.monotonic() - started) from e
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
