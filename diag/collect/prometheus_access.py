"""How to reach the Prometheus a team runs, from the --prometheus-* flags: a URL or an in-cluster
Service, credentials, a CA, extra headers, and the extra label matchers of --prometheus-selector.

`prometheus_access` checks the flags (a `UserError` of one line for each mistake) and returns a
`PromAccess`. Credentials live only in its `headers`, which are never shown: what the manifest,
the report and stderr see comes from `PromAccess.describe()`, which names what was given, not what
it was.
"""

from __future__ import annotations

import base64
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from diag.collect.bounds import DEFAULT_MAX_ANSWER_BYTES
from diag.core.errors import UserError

if TYPE_CHECKING:
    from collections.abc import Callable

    from diag.collect.base import Target
    from diag.collect.http import HttpGet
    from diag.collect.kube import KubeAccess

TOKEN_ENV = "LLMDIAG_PROMETHEUS_TOKEN"
PASSWORD_ENV = "LLMDIAG_PROMETHEUS_PASSWORD"
DEFAULT_SERVICE_PORT = "9090"  # Prometheus' own port, and the Service port of the common charts

_LABEL_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_MATCHER = re.compile(
    rf"\s*(?P<name>{_LABEL_NAME})\s*(?P<op>=~|!~|!=|=)\s*"
    r"(?P<value>\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'|`[^`]*`)\s*(?P<end>,|$)"
)
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_PORT = re.compile(r"^(?:[0-9]{1,5}|[a-z0-9]([-a-z0-9]{0,13}[a-z0-9])?)$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


@dataclass(frozen=True)
class ServiceRef:
    """A Prometheus Service in the cluster, reached through the API server's service proxy."""

    namespace: str
    name: str
    port: str  # a port number or a port name

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}:{self.port}"


@dataclass(frozen=True)
class PromAccess:
    url: str | None  # without user:password, query or fragment
    service: ServiceRef | None
    matchers: tuple[str, ...] = ()  # --prometheus-selector, one `name op "value"` each
    headers: dict[str, str] = field(default_factory=dict, repr=False)  # credentials included
    login: str | None = None  # "bearer token" | "basic": what was given, never the secret
    ca_file: str | None = None

    @property
    def where(self) -> str:
        """For messages: the URL, or the Service."""
        return self.url if self.url else f"service {self.service}"

    def getter(
        self,
        kube: KubeAccess | None,
        max_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
        watch: Callable[[], Callable[[bytes], None]] | None = None,
    ) -> HttpGet:
        """Through the service proxy the kube client's own cap (--max-answer-bytes) holds; `watch` (see
        `direct_get`) sees the answers of a Prometheus reached directly."""
        from diag.collect.http import direct_get, service_proxy_get

        if self.service is None:
            return direct_get(
                self.url or "", headers=self.headers, ca_file=self.ca_file, max_bytes=max_bytes, watch=watch
            )
        if kube is None:
            raise UserError(f"--prometheus-service {self.service}: no Kubernetes configuration to reach it through")
        return service_proxy_get(
            kube, self.service.namespace, self.service.name, self.service.port, headers=self.headers
        )

    def describe(self) -> dict[str, object]:
        """What the manifest records: where, and which kinds of credentials, never their values."""
        return {
            "url": self.url,
            "service": str(self.service) if self.service else None,
            "login": self.login,  # the kind of credentials given, e.g. "bearer token"
            "headers": sorted(self.headers.keys() - {"Authorization"}) if self.login else sorted(self.headers),
            "ca_file": self.ca_file,
            "selector": ",".join(self.matchers) or None,
        }


def prometheus_asked(target: Target) -> bool:
    return bool(target.prometheus_url or target.prometheus_service)


def prometheus_access(target: Target) -> PromAccess | None:
    """The checked --prometheus-* flags; None when no Prometheus was named. Raises UserError."""
    token = _given(target.prometheus_token) or _given(os.environ.get(TOKEN_ENV))
    password = _given(target.prometheus_password) or _given(os.environ.get(PASSWORD_ENV))
    if not prometheus_asked(target):
        # The env variables may be set for other runs; flags given on their own are a mistake.
        orphans = [
            flag
            for flag, value in (
                ("--prometheus-selector", target.prometheus_selector),
                ("--prometheus-token", target.prometheus_token),
                ("--prometheus-user", target.prometheus_user),
                ("--prometheus-password", target.prometheus_password),
                ("--prometheus-ca-file", target.prometheus_ca_file),
                ("--prometheus-header", target.prometheus_headers),
            )
            if value
        ]
        if orphans:
            raise UserError(f"{orphans[0]} needs --prometheus-url or --prometheus-service")
        return None
    if target.prometheus_url and target.prometheus_service:
        raise UserError("give --prometheus-url or --prometheus-service, not both")
    headers = _headers(target.prometheus_headers)
    matchers = parse_matchers(target.prometheus_selector) if target.prometheus_selector is not None else ()
    if target.prometheus_service:
        kept_out = [
            flag
            for flag, value in (
                ("--prometheus-token", target.prometheus_token),
                ("--prometheus-user", target.prometheus_user),
                ("--prometheus-password", target.prometheus_password),
                ("--prometheus-ca-file", target.prometheus_ca_file),
            )
            if value
        ]
        if kept_out or "authorization" in {h.lower() for h in headers}:
            flag = kept_out[0] if kept_out else "--prometheus-header 'Authorization: ...'"
            raise UserError(
                f"{flag} cannot go with --prometheus-service: the API server's service proxy is reached with the "
                "kubeconfig's credentials and TLS, and it drops the Authorization header; use --prometheus-url"
            )
        return PromAccess(None, parse_service(target.prometheus_service), matchers, headers)
    url, url_user, url_password = _split_url(target.prometheus_url or "")
    user = target.prometheus_user
    if url_user is not None:
        if user or target.prometheus_password:
            raise UserError(
                "--prometheus-url carries a user:password, so give neither --prometheus-user nor --prometheus-password"
            )
        user, password = url_user, url_password or ""  # http://token@host: the token as the user, as curl sends it
    login = None
    if token and user:
        raise UserError("give a bearer token (--prometheus-token) or a user and password (--prometheus-user), not both")
    if target.prometheus_password and not user:
        raise UserError("a password needs a user (--prometheus-user) to go with it")
    if user is not None:
        if password is None:
            raise UserError(
                f"--prometheus-user needs a password (--prometheus-password, or the variable {PASSWORD_ENV})"
            )
        headers = _with_authorization(headers, "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
        login = "basic"
    elif token:
        headers = _with_authorization(headers, f"Bearer {token}")
        login = "bearer token"
    ca_file = target.prometheus_ca_file
    if ca_file is not None and not Path(ca_file).is_file():
        raise UserError(f"--prometheus-ca-file: {ca_file} is not a file")
    return PromAccess(url, None, matchers, headers, login, ca_file)


def parse_matchers(text: str) -> tuple[str, ...]:
    """'job="vllm", cluster=~"a|b"' -> ('job="vllm"', 'cluster=~"a|b"'); braces around it are allowed."""
    body = text.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1]
    matchers: list[str] = []
    position = 0
    while position < len(body):
        m = _MATCHER.match(body, position)
        if m is None or (m["end"] == "," and m.end() == len(body)):
            raise UserError(
                f"--prometheus-selector: {text!r} is not a comma-separated list of label matchers "
                '(name="value", name!="value", name=~"regex", name!~"regex")'
            )
        if m["name"] == "__name__":
            raise UserError("--prometheus-selector: __name__ cannot be matched; the queries name their metrics")
        matchers.append(f"{m['name']}{m['op']}{m['value']}")
        position = m.end()
    if not matchers:
        raise UserError('--prometheus-selector: empty; give label matchers such as job="vllm"')
    return tuple(matchers)


def parse_service(text: str) -> ServiceRef:
    """'monitoring/prometheus-operated:web' -> ServiceRef; the port defaults to 9090."""
    namespace, slash, rest = text.partition("/")
    name, colon, port = rest.partition(":")
    port = port if colon else DEFAULT_SERVICE_PORT
    if not slash or not _DNS_LABEL.match(namespace) or not _DNS_LABEL.match(name) or not _PORT.match(port):
        raise UserError(
            f"--prometheus-service: {text!r} is not NAMESPACE/NAME[:PORT] (e.g. monitoring/prometheus-operated:9090)"
        )
    return ServiceRef(namespace, name, port)


def public_url(url: str | None) -> str | None:
    """The URL without user:password, query or fragment: what may be shown and recorded."""
    if not url:
        return url
    try:
        return _split_url(url)[0]
    except UserError:
        return None


def _split_url(url: str) -> tuple[str, str | None, str | None]:
    """(URL without userinfo, user, password); the scheme defaults to http."""
    text = url.strip()
    parts = urlsplit(text if "://" in text else f"http://{text}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"--prometheus-url: {public_url_hint(text)!r} is not an http(s) URL")
    if parts.query or parts.fragment:
        raise UserError(
            "--prometheus-url: a query string or fragment is not supported "
            "(credentials go in --prometheus-header, or --prometheus-token)"
        )
    try:
        port = parts.port
    except ValueError:
        raise UserError("--prometheus-url: the port is not a number") from None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    netloc = f"{host}:{port}" if port else host
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", "")), parts.username, parts.password


def public_url_hint(text: str) -> str:
    """A bad URL, for its error line, without anything that looks like user:password@."""
    return re.sub(r"//[^/@]*@", "//", text)


def _headers(given: list[str] | None) -> dict[str, str]:
    headers: dict[str, str] = {}
    for item in given or []:
        name, colon, value = item.partition(":")
        name, value = name.strip(), value.strip()
        if not colon or not _HEADER_NAME.match(name) or not value or "\n" in value or "\r" in value:
            missing = "a header name and a value" if colon else "a colon"
            raise UserError(
                f"--prometheus-header: expected 'Name: value' (e.g. 'X-Scope-OrgID: team-a'), got one without {missing}"
            )
        headers[name] = value
    return headers


def _with_authorization(headers: dict[str, str], value: str) -> dict[str, str]:
    if "authorization" in {h.lower() for h in headers}:
        raise UserError(
            "an Authorization header (--prometheus-header) cannot go with --prometheus-user, or --prometheus-token"
        )
    return {**headers, "Authorization": value}


def _given(value: str | None) -> str | None:
    return value.strip() if value and value.strip() else None
