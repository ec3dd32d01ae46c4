"""Live collection: run the collectors into one redacted Bundle, then the analyzer reads it as any other.

Every collector that needs nothing from Kubernetes (vLLM, Ray and Prometheus given by URL, this
host's GPUs) starts at once, beside the phase-1 collector that reads the Kubernetes objects; those
that need the pod list (logs, GPU exec, servers found in pods) start as soon as it has parsed the
pods, while it still reads the other lists and the events and writes its files: the vLLM scrape
interval passes beside that work. A hung API server therefore takes no time
from the sources given by URL. The Kubernetes collectors wait for one
short GET /version (the pre-flight): when the API server is not there they never start, and one
line naming the server and context stands for them all. Each collector has a timeout of its
own, counted from its own start, inside the run's one; a collector that raises or runs out of time is
one "failed" line naming it and the time it had, never a crash. On Ctrl-C the
run stops waiting, keeps what came back and marks the rest "failed: interrupted". Progress goes to
stderr.

The Kubernetes path is tested against a real API server (tests/live/) and tests/replay over real HTTP.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

from diag.bundle.files import Bundle
from diag.collect.base import Sink, SourceResult, Target
from diag.collect.manifest import CollectionRecord, write_manifest
from diag.collect.redact import Redactor, redact_text
from diag.snapshot.model import Pod, SourceState

if TYPE_CHECKING:
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    from diag.collect.kube import KubeAccess
    from diag.collect.vllm import VllmEndpoint
    from diag.collect.watch import WarmLists

MAX_PARALLEL_COLLECTORS = 12  # every default collector at once: none waits for a pool slot
INTERRUPTED = "interrupted"
WAIT_SLICE_S = 0.2


@dataclass
class CollectContext:
    """What a collector gets: the target, where to write, the API server, and phase 1's pods."""

    target: Target
    sink: Sink
    kube: KubeAccess | None  # None: no Kubernetes configuration could be loaded
    pods: list[Pod] = field(default_factory=list)  # filled by the phase-1 Kubernetes collector
    # done once `pods` is final: the phase-1 collector says so before its events and files, so that
    # the collectors waiting for the pods (and the vLLM scrape interval) run beside that work
    pods_known: Future[None] = field(default_factory=Future)
    # "namespace/pod" of the vLLM servers whose rates Prometheus' history holds, once it has answered
    prometheus_rates: Future[frozenset[str]] = field(default_factory=Future)

    def publish_pods(self, pods: list[Pod]) -> None:
        self.pods = pods
        self.pods_known.set_result(None)


@dataclass(frozen=True)
class Collector:
    name: str  # shown in the progress display; the SourceResult name when the collector itself fails
    run: Callable[[CollectContext], list[SourceResult]]
    phase: int = 2  # 1: Kubernetes objects, which the collectors that need pods wait for
    timeout_s: float | None = None  # None: the target's per-source timeout
    needs_pods: bool = True  # False: starts at once, whatever the API server does
    kube_only: bool = False  # reads nothing but through the API server: not run when the pre-flight failed


class _RunSink(Sink):
    """A Sink that stops accepting files once the run is over, so a collector abandoned at its
    timeout cannot change the bundle after the manifest has been written."""

    def __init__(self, bundle: Bundle, redact: Callable[[str, bytes], bytes]) -> None:
        super().__init__(bundle, redact)
        self._gate = threading.Lock()
        self._closed = False

    def _add(self, rel: str, raw: bytes, parsed: list | None = None) -> None:
        with self._gate:
            if not self._closed:
                super()._add(rel, raw, parsed)

    def close(self) -> None:
        with self._gate:
            self._closed = True


THREAD_PREFIX = "llmdiag-collect"


def collect(
    target: Target, collectors: list[Collector], progress: Console | None = None, warm: WarmLists | None = None
) -> tuple[Bundle, list[SourceResult]]:
    """Run `collectors` for `target` into a new in-memory bundle with manifest.json; `warm`: the lists
    kept current by watches of a process that collects again and again (diag/collect/watch.py)."""
    started = time.time()
    deadline = time.monotonic() + target.total_timeout_s
    redactor = Redactor(warm.per_item if warm is not None else None)
    sink = _RunSink(Bundle(), redactor)
    kube, results = _connect(target, collectors)
    if kube is not None:
        kube.warm = warm
    ctx = CollectContext(target, sink, kube)
    view = _ProgressView(progress)
    pool = ThreadPoolExecutor(max_workers=MAX_PARALLEL_COLLECTORS, thread_name_prefix=THREAD_PREFIX)
    # The pre-flight runs beside the sources given by URL: only the Kubernetes collectors wait for it.
    gate = pool.submit(_preflight, kube, target) if kube is not None and any(c.kube_only for c in collectors) else None
    try:
        with view:
            results += _run_all(pool, collectors, ctx, deadline, view, gate)
    finally:
        sink.close()
        pool.shutdown(wait=False, cancel_futures=True)
    record = CollectionRecord(
        target=target,
        started_at=started,
        finished_at=time.time(),
        results=results,
        kube_context=kube.context if kube else None,
        kube_server=kube.server if kube else None,
        namespace=_namespace(kube, target),
        scrape_times=dict(sink.scrape_times),
        redactions=dict(redactor.applied),
        prometheus=sink.prometheus,
    )
    write_manifest(sink.bundle, record)
    return sink.bundle, results


def kube_access(target: Target) -> KubeAccess:
    """The API client for `target`'s kubeconfig, context and flags; KubeError when none can be made."""
    from diag.collect.kube import REQUEST_TIMEOUT_S, KubeAccess

    return KubeAccess(
        target.kubeconfig,
        target.context,
        request_timeout_s=target.request_timeout_s or REQUEST_TIMEOUT_S,
        max_answer_bytes=target.max_answer_bytes,
        impersonate_user=target.impersonate_user,
        impersonate_groups=tuple(target.impersonate_groups),
        credential_timeout_s=min(target.source_timeout_s, target.total_timeout_s),
    )


def _connect(target: Target, collectors: list[Collector]) -> tuple[KubeAccess | None, list[SourceResult]]:
    from diag.collect.kube import KubeError

    try:
        return kube_access(target), []
    except KubeError as e:
        asked = any(
            (target.kubeconfig, target.context, target.namespace, target.selector, target.pod, target.ray_cluster)
        )
        outside = any((target.vllm_urls, target.ray_address, target.prometheus_url))
        status: SourceState = "failed" if asked or not outside else "skipped"
        return None, [SourceResult("kubernetes", status, str(e))] if collectors else []


def _preflight(kube: KubeAccess, target: Target) -> str | None:
    """One short GET /version before the Kubernetes collectors start: an API server that is not there
    is one line within seconds, not a timeout per Kubernetes source."""
    from diag.collect.kube import PREFLIGHT_TIMEOUT_S

    try:
        limits = (
            PREFLIGHT_TIMEOUT_S,
            target.request_timeout_s or PREFLIGHT_TIMEOUT_S,
            target.source_timeout_s,
            target.total_timeout_s,
        )
        return kube.preflight(min(limits))
    except Exception:  # a check that broke is no reason to skip the sources it guards
        return None


def collectors_still_running() -> bool:
    """A collector past its timeout is abandoned, not stopped (a blocked read cannot be interrupted);
    its thread may still be alive when the report is ready."""
    return any(t.name.startswith(THREAD_PREFIX) and t.is_alive() for t in threading.enumerate())


def _namespace(kube: KubeAccess | None, target: Target) -> str | None:
    from diag.collect.kubernetes import target_namespace

    return target_namespace(kube, target) if kube else None


@dataclass
class _Running:
    collector: Collector
    started: float  # monotonic
    limit: float  # monotonic: its own timeout from its start, within the run's deadline


def _run_all(
    pool: ThreadPoolExecutor,
    collectors: list[Collector],
    ctx: CollectContext,
    deadline: float,
    view: _ProgressView,
    gate: Future[str | None] | None = None,
) -> list[SourceResult]:
    """Start every collector that can start, the ones needing pods once phase 1 has published them (or
    is over); wait for each until its own limit. With a `gate` (the API server's pre-flight), the
    Kubernetes-only collectors start once it passed; when it failed they never start and its one line
    stands for them all.
    On Ctrl-C stop waiting: what has not come back is "interrupted"."""
    providers = [c for c in collectors if c.phase == 1]
    waits = [c.phase != 1 and c.needs_pods and bool(providers) for c in collectors]
    held = (
        [c for c, wait_for_pods in zip(collectors, waits, strict=True) if c.kube_only and not wait_for_pods]
        if gate
        else []
    )
    later = [c for c, wait_for_pods in zip(collectors, waits, strict=True) if wait_for_pods]
    running: dict[Future[list[SourceResult]], _Running] = {}
    results: list[SourceResult] = []
    reported: set[int] = set()  # id() of the collectors whose lines are in

    def start(c: Collector) -> None:
        now = time.monotonic()
        limit = min(deadline, now + (c.timeout_s or ctx.target.source_timeout_s))
        running[pool.submit(_guarded, c, ctx)] = _Running(c, now, limit)
        view.started(c.name)

    def report(c: Collector, got: list[SourceResult]) -> None:
        reported.add(id(c))
        results.extend(got)
        view.finished(c.name, got)

    try:
        for c, wait_for_pods in zip(collectors, waits, strict=True):
            if not wait_for_pods and c not in held:
                start(c)
        providers_left = len(providers)
        while running or later or held:
            if held and gate is not None and gate.done():
                problem = gate.result()
                if problem is None:
                    for c in held:
                        start(c)
                else:
                    ctx.kube = None
                    skipped = [c for c in collectors if c.kube_only]
                    for c in skipped:
                        reported.add(id(c))
                    later = [c for c in later if not c.kube_only]
                    providers_left -= sum(1 for c in skipped if c.phase == 1)
                    report_line = SourceResult("kubernetes", "failed", problem)
                    results.append(report_line)
                    view.finished("kubernetes", [report_line])  # said once, not once per Kubernetes source
                held = []
            now = time.monotonic()
            for future, run in list(running.items()):
                if not future.done() and run.limit > now:
                    continue
                del running[future]
                if future.done():
                    got = future.result()
                elif future.cancel():  # still waiting for a thread: it never ran
                    got = [SourceResult(run.collector.name, "failed", _not_started(run.collector, ctx.target, "first"))]
                else:
                    got = [_timed_out(run, now, deadline)]
                report(run.collector, got)
                if run.collector.phase == 1:
                    providers_left -= 1
            if later and (providers_left == 0 or ctx.pods_known.done()):
                for c in later:
                    if deadline > time.monotonic():
                        start(c)
                    else:
                        why = "while the Kubernetes objects were read"
                        report(c, [SourceResult(c.name, "failed", _not_started(c, ctx.target, why))])
                later = []
            if running or held:
                next_limit = min((r.limit for r in running.values()), default=now + WAIT_SLICE_S)
                waited: list[Future[Any]] = [
                    *running,
                    *([gate] if held and gate is not None else []),
                    *([ctx.pods_known] if later else []),
                ]
                # short waits: a Ctrl-C that lands just before the main thread blocks is seen soon
                wait(waited, timeout=min(WAIT_SLICE_S, max(0.0, next_limit - now)), return_when=FIRST_COMPLETED)
    except KeyboardInterrupt:
        for future in running:
            future.cancel()
        # every collector without its line, including one whose start the Ctrl-C cut short
        for c in collectors:
            if id(c) not in reported:
                report(c, [SourceResult(c.name, "failed", INTERRUPTED)])
    return results


def _not_started(c: Collector, target: Target, why: str) -> str:
    return f"{c.name}: not started, the run's {target.total_timeout_s:g}s ran out {why}"


def _timed_out(run: _Running, now: float, deadline: float) -> SourceResult:
    """ "<name>: timed out after 12.3s (its limit)" or "(the run's --timeout)": the real time it had."""
    which = "the run's --timeout" if run.limit >= deadline else "its --source-timeout share"
    return SourceResult(
        run.collector.name, "failed", f"{run.collector.name}: timed out after {now - run.started:.1f}s ({which})"
    )


def _guarded(collector: Collector, ctx: CollectContext) -> list[SourceResult]:
    try:
        return collector.run(ctx)
    except Exception as e:  # a collector's bug is one failed source, never a crash
        text = str(e).strip()
        first = text.splitlines()[0] if text else ""
        return [SourceResult(collector.name, "failed", f"{type(e).__name__}: {first}" if first else type(e).__name__)]


# ----------------------------------------------------------------------------- progress


class _ProgressView:
    """One line per collector on stderr: reading, or how it ended."""

    def __init__(self, console: Console | None) -> None:
        self._console = console
        self._lines: dict[str, str] = {}
        self._lock = threading.Lock()
        self._live: Live | None = None

    def __enter__(self) -> _ProgressView:
        if self._console is not None:
            from rich.live import Live

            self._live = Live(self._render(), console=self._console, transient=False, refresh_per_second=8)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.update(self._render())
            self._live.__exit__(None, None, None)
            if self._console is not None and not self._console.is_terminal:
                self._console.line()  # Live leaves its last line open off a terminal

    def started(self, name: str) -> None:
        self._set(name, f"[cyan]…[/] {name}: reading")

    def finished(self, name: str, results: list[SourceResult]) -> None:
        failed = [r for r in results if r.status == "failed"]
        ok = sum(r.status == "ok" for r in results)
        if failed:
            first = f"{failed[0].name}: {failed[0].detail}" if failed[0].name != name else failed[0].detail
            more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
            self._set(name, f"[red]✗[/] {name}: {ok} ok, {len(failed)} failed: {first}{more}")
        else:
            self._set(
                name, f"[green]✓[/] {name}: {ok} ok" + (f", {len(results) - ok} skipped" if len(results) > ok else "")
            )

    def _set(self, name: str, line: str) -> None:
        with self._lock:
            self._lines[name] = redact_text(line)  # a failure line may quote a URL with its password
            if self._live is not None:
                self._live.update(self._render())

    def _render(self) -> Text:
        from rich.text import Text

        return Text.from_markup("\n".join(self._lines.values()) or "collecting…")


# ----------------------------------------------------------------------------- the default set


def default_collectors(target: Target) -> list[Collector]:
    """Every source the target reaches: Kubernetes objects first for what needs pods (logs, GPU exec,
    servers in pods); the sources given by URL and this host's GPUs from the start."""
    from diag.collect.vllm import HANG_SPAN_S

    per_source = target.source_timeout_s
    vllm_time = per_source * 3 + max(target.scrape_interval_s * max(0, target.scrapes - 1), HANG_SPAN_S)
    collectors = [
        Collector("kubernetes objects", _kubernetes_objects, phase=1, timeout_s=per_source * 3, kube_only=True),
        Collector("kubernetes logs", _kubernetes_logs, timeout_s=per_source * 2, kube_only=True),
        Collector("gpu (nvidia-smi in pods)", _gpu_exec, timeout_s=per_source * 2, kube_only=True),
        Collector("vllm", _vllm_in_pods, timeout_s=vllm_time, kube_only=True),
        Collector(
            "ray", _ray, timeout_s=per_source * 3, needs_pods=not target.ray_address, kube_only=not target.ray_address
        ),
    ]
    if target.vllm_urls:
        collectors.append(Collector("vllm (--vllm-url)", _vllm_urls, timeout_s=vllm_time, needs_pods=False))
    if target.local_gpu or (target.local_gpu is None and not target.gpu_sweep):
        collectors.append(Collector("gpu (this host)", _local_gpu, timeout_s=per_source * 4, needs_pods=False))
    if target.gpu_sweep:
        collectors.append(Collector("gpu (every Ray node)", _gpu_sweep, timeout_s=per_source * 4, needs_pods=False))
    if target.prometheus_url or target.prometheus_service:
        collectors.append(Collector("prometheus", _prometheus, timeout_s=per_source * 2, needs_pods=False))
    return collectors


def collect_live(target: Target, progress: Console | None = None, warm: WarmLists | None = None) -> Bundle:
    """What `llmdiag triage`, `llmdiag collect` and `llmdiag serve` call: every source, one bundle."""
    bundle, _ = collect(target, default_collectors(target), progress, warm)
    return bundle


def _kubernetes_objects(ctx: CollectContext) -> list[SourceResult]:
    from diag.collect.kubernetes import collect_objects

    if ctx.kube is None:
        return [SourceResult("k8s", "skipped", "no Kubernetes configuration")]
    return collect_objects(ctx.kube, ctx.target, ctx.sink, on_pods=ctx.publish_pods)


def _kubernetes_logs(ctx: CollectContext) -> list[SourceResult]:
    from diag.collect.kubernetes import collect_logs

    if ctx.kube is None:
        return [SourceResult("k8s/logs", "skipped", "no Kubernetes configuration")]
    return collect_logs(ctx.kube, ctx.pods, ctx.sink, ctx.target.log_tail_lines)


def _gpu_exec(ctx: CollectContext) -> list[SourceResult]:
    from diag.collect.kubernetes import collect_gpu_exec

    if ctx.kube is None:
        return [SourceResult("gpu/exec", "skipped", "no Kubernetes configuration")]
    return collect_gpu_exec(ctx.kube, ctx.pods, ctx.sink, ctx.target.source_timeout_s)


def _vllm_in_pods(ctx: CollectContext) -> list[SourceResult]:
    from diag.collect.kubernetes import vllm_server_pods
    from diag.collect.vllm import collect_vllm, pod_endpoint

    servers = vllm_server_pods(ctx.pods) if ctx.kube is not None else []
    by_url = _addresses(ctx.target.vllm_urls)
    ips = {p.key: p.pod_ip for p in ctx.pods}
    # a pod's server that --vllm-url names by its address is read once, by URL (join puts it in its pod)
    servers = [s for s in servers if (ips.get(f"{s.namespace}/{s.pod}"), s.port) not in by_url]
    if not servers:
        if ctx.target.vllm_urls:
            return []  # the servers given by URL are read by their own collector
        return [
            SourceResult("vllm", "skipped", "no vLLM server found (no pod runs vLLM's OpenAI server; no --vllm-url)")
        ]
    kube = ctx.kube
    assert kube is not None
    endpoints = [pod_endpoint(kube, p.namespace, p.pod, p.port, name=p.file_stem) for p in servers]
    return collect_vllm(endpoints, ctx.sink, ctx.target, rates_elsewhere=rates_held(ctx.target, ctx.prometheus_rates))


def _addresses(urls: list[str]) -> set[tuple[str | None, int]]:
    """(host, port) of each URL, as a pod's IP and port would name it."""
    from diag.collect.http import normalize_base_url

    found = set()
    for url in urls:
        parts = urlsplit(normalize_base_url(url))
        try:
            found.add((parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)))
        except ValueError:  # a port that is no number: its own collector says so
            continue
    return found


def rates_held(target: Target, known: Future[frozenset[str]]) -> Callable[[VllmEndpoint], bool]:
    """Whether Prometheus' history holds a server's rates, so that one /metrics read does. Not waited
    for: where Prometheus has not answered yet, the second read is taken; and all of them are where the
    target asks for the servers' present (`scrape_beside_history`)."""
    return lambda endpoint: not target.scrape_beside_history and known.done() and endpoint.pod_key in known.result()


def _vllm_urls(ctx: CollectContext) -> list[SourceResult]:
    from diag.collect.vllm import collect_vllm, url_endpoint

    endpoints = [url_endpoint(url, ctx.target.max_answer_bytes) for url in ctx.target.vllm_urls]
    return collect_vllm(endpoints, ctx.sink, ctx.target)


def _ray(ctx: CollectContext) -> list[SourceResult]:
    from diag.collect.kubernetes import ray_head_pods
    from diag.collect.ray import RayHead, collect_ray_address, collect_ray_head

    if ctx.target.ray_address:
        return collect_ray_address(
            ctx.target.ray_address, ctx.sink, ctx.target.source_timeout_s, ctx.target.max_answer_bytes
        )
    heads = [p for p in ray_head_pods(ctx.pods) if p.ray_cluster]
    if ctx.kube is None or not heads:
        return [
            SourceResult("ray", "skipped", "no Ray head pod in scope (label ray.io/node-type=head); no --ray-address")
        ]
    head = heads[0]
    results = collect_ray_head(
        ctx.kube,
        RayHead(
            head.namespace, head.ray_cluster or "", head.name, head.containers[0].name if head.containers else None
        ),
        ctx.sink,
        ctx.target.source_timeout_s,
    )
    if len(heads) > 1:
        others = ", ".join(p.key for p in heads[1:])
        results.append(
            SourceResult("ray", "skipped", f"read {head.key} only; also heads {others} (choose with --ray-cluster)")
        )
    return results


def _local_gpu(ctx: CollectContext) -> list[SourceResult]:
    from diag.collect.gpu import collect_local

    files, statuses = collect_local(socket.gethostname())
    for rel, data in files.items():
        ctx.sink.write(rel, data)
    return [SourceResult(rel, cast(SourceState, status), detail) for rel, (status, detail) in statuses.items()]


def _gpu_sweep(ctx: CollectContext) -> list[SourceResult]:
    from diag.collect.ray_sweep import Sweep, sweep

    per_node = ctx.target.source_timeout_s
    return sweep(Sweep(ctx.target.ray_address or "", per_node, per_node * 3), ctx.sink)


def _prometheus(ctx: CollectContext) -> list[SourceResult]:
    from diag.collect.prometheus import collect_target, pods_with_rates

    try:
        return collect_target(ctx.target, ctx.kube, ctx.sink)
    finally:
        ctx.prometheus_rates.set_result(pods_with_rates(dict(ctx.sink.bundle.files)))
