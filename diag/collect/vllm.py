"""vLLM servers: /metrics read for counter rates where they matter, /health, /v1/models - raw, one file each.

A second /metrics read only tells the rules something where the first showed work: requests running
or waiting (or a server that does not say). An idle server has no rate to measure (its counters stand
still, and a rate over a few seconds of nothing is noise), a first read that failed has nothing to
compare with: both are read once, and so is a server with no request waiting whose rates Prometheus'
history already holds (where --prometheus-url or --prometheus-service answered before its first reads
were in), unless the target asks for the present (`scrape_beside_history`: serve's alert triages): a
queue younger than the history's judgements is seen only by the server's own reads. A server with requests
waiting is read `--scrapes` times, `--scrape-interval` apart; one with requests running and none
waiting, MOVING_S apart (at most), its second read after only PEEK_S where its token counters have
moved by then (else once more at MOVING_S). Where those reads show requests running and no token
counted, one more read makes their span HANG_SPAN_S, the span from which the hang rule believes
counters that stood still.

Finding the servers is the Kubernetes collector's job; it hands over endpoints built with
`pod_endpoint` (through the API server's pod proxy), and `--vllm-url` gives `url_endpoint`. All
servers are read at once, so the scrape interval is paid once, not once per server: each server's
reads are steps, due when its previous read has ended (its second /metrics `scrape_interval_s` after
its first answered, so the recorded scrape times are at least the interval apart), run by at most
MAX_READS_AT_ONCE threads, as many as the Kubernetes client keeps connections (diag/collect/kube.py).
A read that has run SLOW_READ_S no longer counts against that bound, so a hung server holds up the
others by at most SLOW_READ_S, never by its timeout.

For a URL on this machine's loopback the listening process's argv is written too
(vllm/<name>.cmdline.txt): the engine flags of a server that has no pod spec to read them from.
"""

from __future__ import annotations

import heapq
import ipaddress
import itertools
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from diag.bundle.layout import server_stem
from diag.collect.base import Sink, SourceResult, Target
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
from diag.parsers.prom_text import parse_exposition
from diag.parsers.vllm_metrics import (
    GENERATION_TOKENS,
    KV_CACHE_USAGE,
    PROMPT_TOKENS,
    REQUESTS_RUNNING,
    REQUESTS_WAITING,
)

if TYPE_CHECKING:
    from diag.collect.kube import KubeAccess

DEFAULT_PORT = 8000
MAX_READS_AT_ONCE = 64  # threads reading at once; kube.CONNECTION_POOL_SIZE keeps a connection for each
SLOW_READ_S = 1.0  # a read running longer no longer counts against MAX_READS_AT_ONCE (a hung server)
# rules/settings.yaml hang_min_interval_s (its default): token counters that stood still over a shorter
# span prove no hang, so a server that looks hung is read once more, this long after its first read
HANG_SPAN_S = 5.0
# A busy server with no request waiting and its KV cache under KV_ROOMY has no queue or preemptions for
# a longer interval to measure:
# its later reads come this soon, enough for the token counters of a working engine to move (one that
# looks hung is still read again at HANG_SPAN_S).
MOVING_S = 0.5
# The second of those reads comes this soon first: a working engine counts tokens at every step (tens of
# milliseconds), so most busy servers are done here; one whose counters stood still is read at MOVING_S.
PEEK_S = 0.15
KV_ROOMY = 0.5  # KV-cache usage below which a server with no queue is no saturation in the making
_TCP_LISTEN = "0A"  # socket state column of /proc/net/tcp{,6}


@dataclass(frozen=True)
class VllmEndpoint:
    name: str  # the bundle file stem: pod name, <namespace>.<pod>, or host_port
    get: HttpGet
    where: str  # for messages: "pod ns/name:8000" or the URL
    loopback_port: int | None = None  # set when the server listens on this machine's loopback
    pod_key: str | None = None  # "namespace/pod" for a server in a pod, as Prometheus' labels name it


def url_endpoint(url: str, max_bytes: int = DEFAULT_MAX_ANSWER_BYTES) -> VllmEndpoint:
    """A server outside Kubernetes, e.g. http://127.0.0.1:8000 -> name 127.0.0.1_8000."""
    base = normalize_base_url(url)
    parts = urlsplit(base)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return VllmEndpoint(
        server_stem(base), direct_get(base, max_bytes=max_bytes), base, port if _is_loopback(host) else None
    )


def pod_endpoint(
    kube: KubeAccess, namespace: str, pod: str, port: int | str = DEFAULT_PORT, name: str | None = None
) -> VllmEndpoint:
    """A server in a pod, read through the API server's pod proxy on its vLLM port."""
    get = pod_proxy_get(kube, namespace, pod, port)
    return VllmEndpoint(name or pod, get, f"pod {namespace}/{pod}:{port}", pod_key=f"{namespace}/{pod}")


def collect_vllm(
    endpoints: list[VllmEndpoint],
    sink: Sink,
    target: Target,
    max_at_once: int = MAX_READS_AT_ONCE,
    slow_s: float = SLOW_READ_S,
    rates_elsewhere: Callable[[VllmEndpoint], bool] = lambda endpoint: False,
) -> list[SourceResult]:
    """Read every server in parallel; a busy one `target.scrapes` times, `scrape_interval_s` apart, unless
    `rates_elsewhere` says, when its first reads are in, that Prometheus' history already holds its rates."""
    if not endpoints:
        return []
    per_server: list[list[SourceResult]] = [[] for _ in endpoints]
    steps = [_server_steps(e, sink, target, out, rates_elsewhere) for e, out in zip(endpoints, per_server, strict=True)]
    _Steps(steps, max_at_once, min(slow_s, target.source_timeout_s)).run()
    return [result for results in per_server for result in results]


def _server_steps(
    endpoint: VllmEndpoint,
    sink: Sink,
    target: Target,
    out: list[SourceResult],
    rates_elsewhere: Callable[[VllmEndpoint], bool],
) -> Iterator[float]:
    """One server's reads, one per step; each yield says when the next step is due (monotonic).
    Its results go to `out` when the last step has run."""
    timeout = target.source_timeout_s
    scrapes = _Scrapes(endpoint, sink, max(1, target.scrapes))
    scrapes.take(timeout)
    first_answered = time.monotonic()  # at or after the first read's recorded time
    yield first_answered
    results = [_read_health(endpoint, sink, timeout)]
    yield time.monotonic()
    results.append(_read_models(endpoint, sink, timeout))
    if endpoint.loopback_port is not None:
        results.append(_write_cmdline(endpoint, endpoint.loopback_port, sink))
    if not scrapes.busy_at_first():
        if scrapes.kept:  # else the first read's own failure says why there is no other
            scrapes.once_because = "nothing running or waiting: no rate to measure"
    elif rates_elsewhere(endpoint) and not scrapes.queued_at_first():
        scrapes.once_because = "its rates are in Prometheus' history"
    else:
        queued = scrapes.queued_at_first()
        interval = target.scrape_interval_s if queued else min(target.scrape_interval_s, MOVING_S)
        span = 0.0
        for n in range(1, scrapes.wanted):
            if scrapes.stopped:
                break
            if n == 1 and not queued and PEEK_S < interval:
                yield first_answered + PEEK_S
                scrapes.take(timeout)
                span = PEEK_S
                if scrapes.stopped or not scrapes.looks_hung():
                    continue
                scrapes.wanted += 1  # too soon to tell: the read at the interval follows
            yield first_answered + n * interval
            scrapes.take(timeout)
            span = n * interval
        if scrapes.looks_hung() and span < HANG_SPAN_S:
            scrapes.wanted += 1
            yield first_answered + HANG_SPAN_S
            scrapes.take(timeout)
    out.extend([scrapes.result(), *results])


class _Steps:
    """Runs the servers' steps, the earliest due first (every first /metrics before any /health).
    A thread is started when a step is due, no thread is free, and fewer than `max_at_once` threads
    are free or in a step younger than `slow_s`. One server's steps never run at once, so there are
    never more threads than servers. The first error of a step is raised once every server is done."""

    def __init__(self, steps: list[Iterator[float]], max_at_once: int, slow_s: float) -> None:
        self._order = itertools.count()
        self._due: list[tuple[float, int, Iterator[float]]] = [(0.0, next(self._order), s) for s in steps]
        self._left = len(steps)  # servers with steps to run
        self._max, self._slow_s = max(1, max_at_once), slow_s
        lock = threading.Lock()
        self._for_steps = threading.Condition(lock)  # free threads wait here for a step that is due
        self._for_run = threading.Condition(lock)  # run() waits here to start threads
        self._free = 0
        self._reading: dict[int, float] = {}  # thread ident -> when its step began
        self._threads: list[threading.Thread] = []
        self._error: BaseException | None = None

    def run(self) -> None:
        with self._for_run:
            while self._left:
                now = time.monotonic()
                fresh = [t for t in self._reading.values() if now - t < self._slow_s]
                due = bool(self._due) and self._due[0][0] <= now
                if due and not self._free and len(fresh) < self._max and len(self._threads) < self._left:
                    thread = threading.Thread(target=self._work, name=f"llmdiag-vllm-{len(self._threads)}")
                    self._threads.append(thread)
                    self._free += 1  # until it takes its first step
                    thread.start()
                    continue
                wake = [t + self._slow_s for t in fresh]  # a step turns slow: another thread may start
                if self._due and not due:
                    wake.append(self._due[0][0])
                self._for_run.wait(max(0.0, min(wake) - now) if wake else None)
        for thread in self._threads:
            thread.join()
        if self._error is not None:
            raise self._error

    def _work(self) -> None:
        me = threading.get_ident()
        while True:
            with self._for_steps:
                while True:
                    if not self._left:
                        return
                    now = time.monotonic()
                    if self._due and self._due[0][0] <= now:
                        _, _, step = heapq.heappop(self._due)
                        self._free -= 1
                        self._reading[me] = now
                        self._for_run.notify()  # a new step is running: when it turns slow
                        break
                    self._for_steps.wait(self._due[0][0] - now if self._due else None)
            next_due: float | None = None
            try:
                next_due = next(step)
            except StopIteration:
                pass
            except BaseException as e:  # raised by run() once every server is done
                with self._for_steps:
                    self._error = self._error or e
            with self._for_steps:
                del self._reading[me]
                self._free += 1
                if next_due is None:
                    self._left -= 1
                    if not self._left:
                        self._for_steps.notify_all()
                else:
                    heapq.heappush(self._due, (next_due, next(self._order), step))
                    self._for_steps.notify()
                self._for_run.notify()


class _Scrapes:
    """The /metrics reads of one server: files numbered by successful read, times in the Sink."""

    def __init__(self, endpoint: VllmEndpoint, sink: Sink, wanted: int) -> None:
        self.endpoint, self.sink, self.wanted = endpoint, sink, wanted
        self.kept = 0
        self.problems: list[str] = []
        self.stopped = False  # no answer at all: the later reads would only wait out their timeouts
        self.readings: list[_Reading] = []  # what each kept read says of the server's work
        self.once_because: str | None = None  # why a first read that came back is the only one

    def take(self, timeout: float) -> None:
        attempt = self.kept + len(self.problems) + 1
        try:
            status, body = self.endpoint.get("/metrics", timeout)
            answered = time.time()  # the scrape's time for counter rates: not after its redaction
        except Unreachable as e:
            self.problems.append(f"read {attempt}: {e.detail}")
            self.stopped = True
            return
        if status != 200:
            self.problems.append(f"read {attempt}: HTTP {status} {body_excerpt(body)}".rstrip())
            return
        suffix = "metrics.txt" if self.kept == 0 else f"metrics.{self.kept}.txt"
        self.sink.write(f"vllm/{self.endpoint.name}.{suffix}", body)
        self.sink.record_scrape(self.endpoint.name, answered)
        self.kept += 1
        self.readings.append(_Reading.of(body))

    def busy_at_first(self) -> bool:
        """The first read came back and showed requests running or waiting, or did not say: only then
        can later reads give a rate, a queue that held or a hang."""
        if not self.readings or self.kept != 1 or self.problems:
            return False
        first = self.readings[0]
        return first.running != 0 or first.waiting != 0

    def queued_at_first(self) -> bool:
        """The first read showed requests waiting or a KV cache at least KV_ROOMY full, or did not say:
        a queue or preemptions may be under way, which a longer interval measures."""
        first = self.readings[0]
        return first.waiting != 0 or first.kv is None or first.kv >= KV_ROOMY

    def looks_hung(self) -> bool:
        """Every read saw requests running, and the token counters did not move from the first to the last."""
        if len(self.readings) < 2 or any(not r.running for r in self.readings):
            return False
        first, last = self.readings[0].tokens, self.readings[-1].tokens
        return first is not None and first == last

    def result(self) -> SourceResult:
        name = f"vllm/{self.endpoint.name}.metrics"  # all its reads: .metrics.txt, .metrics.1.txt, ...
        attempts = self.kept + len(self.problems)
        summary = f"{self.endpoint.where}: {self.kept} of {self.wanted} reads of /metrics"
        if self.stopped and attempts < self.wanted:
            self.problems.append("the rest not tried")
        elif attempts == 1 and self.wanted > 1 and self.once_because:
            summary = f"{self.endpoint.where}: 1 read of /metrics ({self.once_because})"
        detail = summary + (f" ({'; '.join(self.problems)})" if self.problems else "")
        return SourceResult(name, "ok" if self.kept else "failed", detail)


@dataclass(frozen=True)
class _Reading:
    running: float | None  # requests running, summed over engines; None: not exposed or not exposition
    waiting: float | None
    tokens: float | None  # prompt and generation tokens counted so far
    kv: float | None = None  # the fullest engine's KV-cache usage, 0..1

    @classmethod
    def of(cls, body: bytes) -> _Reading:
        try:
            samples = parse_exposition(body.decode("utf-8", errors="replace")).samples
        except ValueError:  # not exposition at all: nothing said, so nothing known
            return cls(None, None, None)
        totals: dict[str, float] = {}
        kv: float | None = None
        for sample in samples:
            if sample.value == sample.value:  # NaN is unknown
                totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
                if sample.name in KV_CACHE_USAGE:
                    kv = sample.value if kv is None else max(kv, sample.value)
        counters = [totals.get(name[0]) for name in (PROMPT_TOKENS, GENERATION_TOKENS)]
        return cls(
            totals.get(REQUESTS_RUNNING[0]),
            totals.get(REQUESTS_WAITING[0]),
            None if None in counters else sum(c for c in counters if c is not None),
            kv,
        )


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
        return SourceResult(
            name, "failed", f"{endpoint.where} GET /v1/models: HTTP {status} {body_excerpt(body)}".rstrip()
        )
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
