"""Where the API server is and who llmdiag is to it: a kubeconfig, or the pod's service account.

The `kubernetes` package's loader costs about 150 ms of imports on every run (it pulls in pydantic,
oauthlib, dateutil and its generated client); triage's own work takes less than that. This module reads
what most kubeconfigs hold itself and hands the rest to the package:
- the server, its CA (file or data), `insecure-skip-tls-verify`, `tls-server-name`, `proxy-url` (else
  the environment's HTTPS_PROXY/NO_PROXY);
- the user's token or tokenFile, client certificate and key (file or data), username and password,
  and exec credential plugins (diag.collect.exec_credential);
- KUBECONFIG lists of files; relative paths are resolved against the file that names them.
A user with an `auth-provider` (gcp, oidc, azure) is loaded by the package, as before.

Where the package and kubectl disagree, this follows kubectl, so that llmdiag talks to the cluster that
`kubectl` does: the first file of KUBECONFIG that sets current-context wins (the package takes the
last), a token read from a file is trimmed, NO_PROXY does not override a kubeconfig's proxy-url, and
only a YAML true in insecure-skip-tls-verify turns certificate checks off (the package took "false").
tests/unit/collect/test_kubeconfig_differential.py loads the same kubeconfigs with both.
"""

from __future__ import annotations

import atexit
import base64
import datetime
import ipaddress
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from diag.collect import exec_credential

IN_CLUSTER_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
DEFAULT_PATH = "~/.kube/config"
TOKEN_FILE_REREAD_S = 60.0  # a projected service-account token is rotated in place; kubectl re-reads it too
EXPIRY_SKEW = datetime.timedelta(minutes=5)  # an exec credential is renewed this long before it expires


class ConfigError(Exception):
    """The kubeconfig cannot be used; one line naming what is wrong."""


@dataclass
class Connection:
    """What a request to the API server needs: where, which TLS, and the Authorization header."""

    server: str  # scheme://host[:port], no trailing "/"
    context: str | None = None
    namespace: str = "default"
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True
    tls_server_name: str | None = None
    proxy: str | None = None
    authorization: Callable[[], str | None] = field(default=lambda: None, repr=False)


# ------------------------------------------------------------------ the merged kubeconfig


@dataclass
class _Entry:
    """A named cluster, user or context, and the folder of the file that named it."""

    value: dict
    folder: str


@dataclass
class _Merged:
    paths: list[str]
    clusters: dict[str, _Entry] = field(default_factory=dict)
    users: dict[str, _Entry] = field(default_factory=dict)
    contexts: dict[str, _Entry] = field(default_factory=dict)
    current_context: str | None = None


def kubeconfig_paths(kubeconfig: str | None) -> tuple[str, list[str]]:
    """(what the user gave or the default, as shown; the files it names), as kubectl reads them."""
    where = kubeconfig or os.environ.get("KUBECONFIG") or DEFAULT_PATH
    return where, [os.path.expanduser(path) for path in where.split(os.pathsep) if path]


def _read(kubeconfig: str | None) -> _Merged:
    import yaml

    where, paths = kubeconfig_paths(kubeconfig)
    merged = _Merged([path for path in paths if os.path.isfile(path)])
    if not merged.paths:
        raise ConfigError(f"no kubeconfig at {where}")
    for path in merged.paths:
        try:
            with open(path, encoding="utf-8") as f:
                data = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except (yaml.YAMLError, UnicodeDecodeError) as e:
            raise ConfigError(f"kubeconfig {path} is not YAML ({_one_line(e)})") from e
        except OSError as e:
            raise ConfigError(f"kubeconfig {path}: {e.strerror or e}") from e
        if data is None:
            continue
        if not isinstance(data, dict):
            raise ConfigError(f"kubeconfig {path} holds a {type(data).__name__}, not a Config object")
        folder = os.path.dirname(os.path.abspath(path))
        for key, into in (("clusters", merged.clusters), ("users", merged.users), ("contexts", merged.contexts)):
            entries = data.get(key) or []
            if not isinstance(entries, list):
                raise ConfigError(f"kubeconfig {path}: {key} is not a list")
            for item in entries:
                if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                    raise ConfigError(f"kubeconfig {path}: an entry of {key} has no name")
                inner = item.get(key[:-1])
                into.setdefault(item["name"], _Entry(inner if isinstance(inner, dict) else {}, folder))
        if merged.current_context is None and data.get("current-context"):
            merged.current_context = str(data["current-context"])
    return merged


def contexts(kubeconfig: str | None) -> tuple[list[str], str | None]:
    """The kubeconfig's context names and its current context."""
    merged = _read(kubeconfig)
    return list(merged.contexts), merged.current_context


# ------------------------------------------------------------------ loading


def load(kubeconfig: str | None, context: str | None, credential_timeout_s: float) -> Connection:
    """The connection of `context` (else the current context) of the kubeconfig."""
    merged = _read(kubeconfig)
    name = context or merged.current_context
    if not name:
        raise ConfigError(f"the kubeconfig {' '.join(merged.paths)} has no current-context (give --context)")
    chosen = merged.contexts.get(name)
    if chosen is None:
        raise ConfigError(f"context {name!r} is not in the kubeconfig")
    cluster_name, user_name = chosen.value.get("cluster"), chosen.value.get("user")
    cluster = merged.clusters.get(str(cluster_name))
    if cluster is None:
        raise ConfigError(f"context {name!r} names the cluster {cluster_name!r}, which the kubeconfig does not hold")
    server = str(cluster.value.get("server") or "").rstrip("/")
    if not server:
        raise ConfigError(f"the cluster {cluster_name!r} of the kubeconfig has no server")
    user = merged.users.get(str(user_name)) if user_name else None
    namespace = str(chosen.value.get("namespace") or "default")
    if user is not None and user.value.get("auth-provider"):
        return _from_package(kubeconfig, name, namespace)
    connection = Connection(server=server, context=name, namespace=namespace)
    _cluster_tls(connection, cluster)
    if user is not None:
        _user(connection, user, cluster, credential_timeout_s)
    return connection


def in_cluster() -> Connection:
    """The pod's service account, as a process in a pod reaches its API server."""
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise ConfigError("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not both set")
    ca = os.path.join(IN_CLUSTER_DIR, "ca.crt")
    if not os.path.isfile(ca) or os.path.getsize(ca) == 0:
        raise ConfigError(f"the service account's CA {ca} is missing or empty")
    token = _TokenFile(os.path.join(IN_CLUSTER_DIR, "token"))
    token.read()
    try:
        with open(os.path.join(IN_CLUSTER_DIR, "namespace"), encoding="utf-8") as f:
            namespace = f.read().strip() or "default"
    except OSError:
        namespace = "default"
    bracketed = f"[{host}]" if ":" in host or "%" in host else host
    return Connection(
        server=f"https://{bracketed}:{port}", namespace=namespace, ca_file=ca, authorization=token.authorization
    )


def _cluster_tls(connection: Connection, cluster: _Entry) -> None:
    value = cluster.value
    if connection.server.startswith("https"):
        connection.ca_file = _file_or_data(value, "certificate-authority", cluster.folder, base64_data=True)
    # only a YAML true turns verification off: the package also took a quoted "false" as true
    connection.verify = value.get("insecure-skip-tls-verify") is not True
    if value.get("tls-server-name"):
        connection.tls_server_name = str(value["tls-server-name"])
    connection.proxy = str(value["proxy-url"]) if value.get("proxy-url") else _environment_proxy(connection.server)


def _user(connection: Connection, user: _Entry, cluster: _Entry, credential_timeout_s: float) -> None:
    """The first credential of token, tokenFile, exec plugin, username and password (the package's
    order); a client certificate and key besides, over https."""
    value = user.value
    authorization = _token(value, user.folder)
    if authorization is None and isinstance(value.get("exec"), dict):
        plugin = exec_credential.Plugin(value["exec"], user.folder, cluster.value, credential_timeout_s)
        authorization = _ExecCredential(plugin).start(connection)
    if authorization is None and "username" in value and "password" in value:
        basic = base64.b64encode(f"{value['username']}:{value['password']}".encode()).decode()
        authorization = lambda: f"Basic {basic}"  # noqa: E731
    if authorization is not None:
        connection.authorization = authorization
    if connection.server.startswith("https") and connection.cert_file is None:
        connection.cert_file = _file_or_data(value, "client-certificate", user.folder, base64_data=True)
        connection.key_file = _file_or_data(value, "client-key", user.folder, base64_data=True)


def _token(value: dict, folder: str) -> Callable[[], str | None] | None:
    """A bearer token: `token` where the key is there (empty: none), else `tokenFile`."""
    if "token" in value:
        token = str(value["token"] or "")
        return (lambda: f"Bearer {token}") if token else None
    if value.get("tokenFile"):
        source = _TokenFile(_path(str(value["tokenFile"]), folder))
        source.read()
        return source.authorization
    return None


class _TokenFile:
    """A token kept in a file that is rotated in place: read again once TOKEN_FILE_REREAD_S have passed."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._token = ""
        self._read_at = 0.0
        self._lock = threading.Lock()

    def read(self) -> str:
        try:
            with open(self._path, encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as e:
            raise ConfigError(f"token file {self._path}: {e.strerror or e}") from e
        if not token:
            raise ConfigError(f"token file {self._path} is empty")
        self._token, self._read_at = token, time.monotonic()
        return token

    def authorization(self) -> str:
        with self._lock:
            if time.monotonic() - self._read_at >= TOKEN_FILE_REREAD_S:
                try:
                    self.read()
                except ConfigError:
                    pass  # keep the last token: the API server says whether it still holds
            return f"Bearer {self._token}"


class _ExecCredential:
    """A credential from an exec plugin, run again when it is about to expire."""

    def __init__(self, plugin: exec_credential.Plugin) -> None:
        self._plugin = plugin
        self._token: str | None = None
        self._expiry: datetime.datetime | None = None
        self._lock = threading.Lock()

    def start(self, connection: Connection) -> Callable[[], str | None]:
        """Run the plugin; a client certificate it gives goes to the connection's TLS."""
        status = self._plugin.run()
        if status.get("token"):
            self._token = str(status["token"])
        elif status.get("clientCertificateData") and status.get("clientKeyData"):
            connection.cert_file = _temp_file(str(status["clientCertificateData"]).encode())
            connection.key_file = _temp_file(str(status["clientKeyData"]).encode())
        else:
            raise ConfigError(f"{self._plugin.what} gave neither a token nor a client certificate and key")
        self._expiry = _rfc3339(status.get("expirationTimestamp"))
        return self.authorization

    def authorization(self) -> str | None:
        with self._lock:
            expiry = self._expiry
            if (
                self._token
                and expiry is not None
                and expiry - EXPIRY_SKEW <= datetime.datetime.now(datetime.timezone.utc)
            ):
                try:
                    status = self._plugin.run()
                    self._token = str(status.get("token") or self._token)
                    self._expiry = _rfc3339(status.get("expirationTimestamp"))
                except exec_credential.CredentialError:
                    pass  # the API server answers 401 to the old token, and that is reported
            return f"Bearer {self._token}" if self._token else None


def _from_package(kubeconfig: str | None, context: str, namespace: str) -> Connection:
    """An auth-provider user (gcp, oidc, azure): the `kubernetes` package loads it, refreshes included,
    without writing a refreshed token back into the user's kubeconfig."""
    from kubernetes import client, config

    configuration = client.Configuration()
    try:
        config.load_kube_config(
            config_file=kubeconfig, context=context, client_configuration=configuration, persist_config=False
        )
    except config.ConfigException as e:
        raise ConfigError(_one_line(e)) from e
    return Connection(
        server=configuration.host,
        context=context,
        namespace=namespace,
        ca_file=configuration.ssl_ca_cert,
        cert_file=configuration.cert_file,
        key_file=configuration.key_file,
        verify=configuration.verify_ssl,
        tls_server_name=configuration.tls_server_name,
        proxy=configuration.proxy,
        authorization=lambda: configuration.get_api_key_with_prefix("BearerToken", alias="authorization"),
    )


# ------------------------------------------------------------------ files and values


def _path(path: str, folder: str) -> str:
    return os.path.normpath(os.path.join(folder, os.path.expanduser(path)))


def _file_or_data(value: dict, key: str, folder: str, base64_data: bool) -> str | None:
    """The path of `key`, or of a private file holding `key`-data (which wins, as in kubectl)."""
    data = value.get(f"{key}-data")
    if data:
        try:
            content = base64.b64decode(str(data), validate=False) if base64_data else str(data).encode()
        except ValueError as e:
            raise ConfigError(f"{key}-data of the kubeconfig is not base64 ({e})") from e
        return _temp_file(content)
    if value.get(key):
        path = _path(str(value[key]), folder)
        if not os.path.isfile(path):
            raise ConfigError(f"{key} {path}: no such file")
        return path
    return None


_temp_lock = threading.Lock()
_temp_files: dict[bytes, str] = {}
_temp_dir: list[str] = []


def _temp_file(content: bytes) -> str:
    """A file readable by this user only, removed when the process ends (TLS needs paths, not bytes)."""
    with _temp_lock:
        if content in _temp_files:
            return _temp_files[content]
        if not _temp_dir:
            _temp_dir.append(tempfile.mkdtemp(prefix="llmdiag-kube-"))
            atexit.register(shutil.rmtree, _temp_dir[0], True)
        fd, path = tempfile.mkstemp(dir=_temp_dir[0])
        with os.fdopen(fd, "wb") as f:
            f.write(content)
        _temp_files[content] = path
        return path


def _rfc3339(text: Any) -> datetime.datetime | None:
    if not text:
        return None
    value = str(text).strip().replace("Z", "+00:00").replace("z", "+00:00")
    if "." in value:  # Python 3.10 reads at most six digits of a fraction
        head, _, rest = value.partition(".")
        digits = len(rest) - len(rest.lstrip("0123456789"))
        value = f"{head}.{rest[: min(digits, 6)]}{rest[digits:]}"
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.timezone.utc)


def _environment_proxy(server: str) -> str | None:
    """HTTPS_PROXY (HTTP_PROXY for http://) or ALL_PROXY, unless NO_PROXY covers the server."""
    from urllib.request import getproxies

    proxies = getproxies()
    proxy = proxies.get(urlsplit(server).scheme) or proxies.get("all")
    if proxy and not _bypassed(server, proxies.get("no") or ""):
        return proxy
    return None


def _bypassed(url: str, no_proxy: str) -> bool:
    """Whether NO_PROXY (names, domain suffixes, host:port, IP networks, "*") covers the URL."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if not host:
        return True
    host_port = parts.netloc.lower().rpartition("@")[2]
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if not entry:
            continue
        if entry == "*":
            return True
        if address is not None:
            try:
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                pass
        entry = entry.lstrip(".")
        if host == entry or host.endswith("." + entry) or host_port == entry:
            return True
    return False


def _one_line(value: object) -> str:
    text = str(value).strip()
    return text.splitlines()[0] if text else ""
