"""vLLM servers: /metrics read N times for counter rates, /health, /v1/models - raw, one file each.

Finding the servers is the Kubernetes collector's job; it hands over endpoints built with
`pod_endpoint` (through the API server's pod proxy), and `--vllm-url` gives `url_endpoint`. All
servers are read at once, so the scrape interval is paid once, not once per server.

For a URL on this machine's loopback the listening process's argv is written too
(vllm/<name>.cmdline.txt): the engine flags of a server that has no pod spec to read them from.
"""

from __future__ import annotations

import ipaddress
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from diag.collect.base import SourceResult, Sink, Target
from diag.collect.http import (
    DEFAULT_MAX_ANSWER_BYTES,
    REFUSED,
    TIMEOUT,
    HttpGet,
    Unreachable,
    body_excerpt,
    direct_get,
    normalize_base_url,
    pod_proxy_get,
)

if TYPE_CHECKING:
    from diag.collect.kube import KubeAccess

DEFAULT_PORT = 8000
_TCP_LISTEN = "0A"  # socket state column of /proc/net/tcp{,6}


@dataclass(frozen=True)
class VllmEndpoint:
    name: str  # the bundle file stem: pod name, <namespace>.<pod>, or host_port
    get: HttpGet
    where: str  # for messages: "pod ns/name:8000" or the URL
    loopback_port: int | None = None  # set when the server listens on this machine's loopback


def url_endpoint(url: str, max_bytes: int = DEFAULT_MAX_ANSWER_BYTES) -> VllmEndpoint:
    """A server outside Kubernetes, e.g. http://127.0.0.1:8000 -> name 127.0.0.1_8000."""
    base = normalize_base_url(url)
    parts = urlsplit(base)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return VllmEndpoint(f"{host}_{port}", direct_get(base, max_bytes=max_bytes), base, port if _is_loopback(host) else None)


def pod_endpoint(
    kube: "KubeAccess", namespace: str, pod: str, port: int | str = DEFAULT_PORT, name: str | None = None
) -> VllmEndpoint:
    """A server in a pod, read through the API server's pod proxy on its vLLM port."""
    get = pod_proxy_get(kube, namespace, pod, port)
    return VllmEndpoint(name or pod, get, f"pod {namespace}/{pod}:{port}")


def collect_vllm(endpoints: list[VllmEndpoint], sink: Sink, target: Target) -> list[SourceResult]:
    """Read every server in parallel; `target.scrapes` reads of /metrics, `scrape_interval_s` apart."""
    if not endpoints:
        return []
    with ThreadPoolExecutor(max_workers=len(endpoints)) as pool:
        per_server = list(pool.map(lambda e: _collect_server(e, sink, target), endpoints))
    return [result for results in per_server for result in results]


def _collect_server(endpoint: VllmEndpoint, sink: Sink, target: Target) -> list[SourceResult]:
    timeout = target.source_timeout_s
    start = time.monotonic()
    scrapes = _Scrapes(endpoint, sink, max(1, target.scrapes))
    scrapes.take(timeout)
    results = [_read_health(endpoint, sink, timeout), _read_models(endpoint, sink, timeout)]
    if endpoint.loopback_port is not None:
        results.append(_write_cmdline(endpoint, endpoint.loopback_port, sink))
    for n in range(1, scrapes.wanted):
        if scrapes.stopped:
            break
        time.sleep(max(0.0, start + n * target.scrape_interval_s - time.monotonic()))
        scrapes.take(timeout)
    return [scrapes.result(), *results]


class _Scrapes:
    """The /metrics reads of one server: files numbered by successful read, times in the Sink."""

    def __init__(self, endpoint: VllmEndpoint, sink: Sink, wanted: int) -> None:
        self.endpoint, self.sink, self.wanted = endpoint, sink, wanted
        self.kept = 0
        self.problems: list[str] = []
        self.stopped = False  # no answer at all: the later reads would only wait out their timeouts

    def take(self, timeout: float) -> None:
        attempt = self.kept + len(self.problems) + 1
        try:
            status, body = self.endpoint.get("/metrics", timeout)
        except Unreachable as e:
            self.problems.append(f"read {attempt}: {e.detail}")
            self.stopped = True
            return
        if status != 200:
            self.problems.append(f"read {attempt}: HTTP {status} {body_excerpt(body)}".rstrip())
            return
        suffix = "metrics.txt" if self.kept == 0 else f"metrics.{self.kept}.txt"
        self.sink.write(f"vllm/{self.endpoint.name}.{suffix}", body)
        self.sink.record_scrape(self.endpoint.name)
        self.kept += 1

    def result(self) -> SourceResult:
        name = f"vllm/{self.endpoint.name}.metrics"  # all its reads: .metrics.txt, .metrics.1.txt, ...
        attempts = self.kept + len(self.problems)
        summary = f"{self.endpoint.where}: {self.kept} of {self.wanted} reads of /metrics"
        if self.stopped and attempts < self.wanted:
            self.problems.append("the rest not tried")
        detail = summary + (f" ({'; '.join(self.problems)})" if self.problems else "")
        return SourceResult(name, "ok" if self.kept else "failed", detail)


def _read_health(endpoint: VllmEndpoint, sink: Sink, timeout: float) -> SourceResult:
    """`<name>.health.txt` holds the status code, or why no answer came ("timeout", "connection refused")."""
    name = f"vllm/{endpoint.name}.health.txt"
    try:
        status, _ = endpoint.get("/health", timeout)
        line = str(status)
    except Unreachable as e:
        if e.reason not in (TIMEOUT, REFUSED):
            return SourceResult(name, "failed", f"{endpoint.where} GET /health: {e.detail}")
        line = e.reason
    sink.write(name, line + "\n")
    return SourceResult(name, "ok", f"{endpoint.where} GET /health: {line}")


def _read_models(endpoint: VllmEndpoint, sink: Sink, timeout: float) -> SourceResult:
    name = f"vllm/{endpoint.name}.models.json"
    try:
        status, body = endpoint.get("/v1/models", timeout)
    except Unreachable as e:
        return SourceResult(name, "failed", f"{endpoint.where} GET /v1/models: {e.detail}")
    if status != 200:
        return SourceResult(name, "failed", f"{endpoint.where} GET /v1/models: HTTP {status} {body_excerpt(body)}".rstrip())
    sink.write(name, body)
    return SourceResult(name, "ok", f"{endpoint.where} GET /v1/models")


def _write_cmdline(endpoint: VllmEndpoint, port: int, sink: Sink) -> SourceResult:
    name = f"vllm/{endpoint.name}.cmdline.txt"
    pid = listening_pid(port)
    argv = process_argv(pid) if pid is not None else None
    if not argv:
        why = f"no process of this user listens on loopback port {port}" if pid is None else f"pid {pid} ended"
        return SourceResult(name, "skipped", f"{why}: engine flags unknown")
    sink.write(name, "".join(arg + "\n" for arg in argv))
    return SourceResult(name, "ok", f"argv of pid {pid}, listening on port {port}")


# --------------------------------------------------------------------------- /proc


def listening_pid(port: int, proc: str = "/proc") -> int | None:
    """The pid of the process with a TCP socket listening on `port` on a loopback or wildcard address.

    Linux only: the socket's inode from /proc/net/tcp{,6}, then the process whose fd links to
    socket:[inode]. Processes whose fds this user cannot read are not found.
    """
    inodes = _listening_inodes(port, proc)
    if not inodes:
        return None
    try:
        pids = [entry for entry in os.listdir(proc) if entry.isdigit()]
    except OSError:
        return None
    for pid in pids:
        fd_dir = f"{proc}/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:  # not ours, or gone
            continue
        for fd in fds:
            try:
                link = os.readlink(f"{fd_dir}/{fd}")
            except OSError:
                continue
            if link.startswith("socket:[") and link[8:-1] in inodes:
                return int(pid)
    return None


def process_argv(pid: int, proc: str = "/proc") -> list[str] | None:
    try:
        with open(f"{proc}/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    if not raw:  # a kernel thread, or a process on its way out
        return None
    return [arg.decode("utf-8", errors="replace") for arg in raw.rstrip(b"\0").split(b"\0")]


def _listening_inodes(port: int, proc: str) -> set[str]:
    inodes: set[str] = set()
    for table in ("tcp", "tcp6"):
        try:
            with open(f"{proc}/net/{table}", encoding="ascii") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) < 10 or cols[3] != _TCP_LISTEN or ":" not in cols[1]:
                continue
            address_hex, port_hex = cols[1].split(":")
            if int(port_hex, 16) != port:
                continue
            address = _proc_net_address(address_hex)
            if address is not None and (address.is_loopback or address.is_unspecified or _mapped_loopback(address)):
                inodes.add(cols[9])
    return inodes


def _proc_net_address(hex_text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """/proc/net/tcp prints an address as 32-bit words in the kernel's byte order."""
    try:
        raw = bytes.fromhex(hex_text)
    except ValueError:
        return None
    if len(raw) not in (4, 16):
        return None
    if sys.byteorder == "little":
        raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return ipaddress.ip_address(raw)


def _mapped_loopback(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped is not None and mapped.is_loopback


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
