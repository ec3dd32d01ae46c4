"""Every answer bounded, against servers on 127.0.0.1: an API server that accepts and never answers,
answers of 200 MB (fast and trickling), and 429 with Retry-After. Times are asserted as "within the
limit plus a margin", never exactly."""

from __future__ import annotations

import json
import socket
import threading
import time
import tracemalloc
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from diag.collect.base import Target
from diag.collect.bounds import MAX_ATTEMPTS, retry_after_s
from diag.collect.http import Unreachable, direct_get
from diag.collect.runner import collect, default_collectors
from tests.replay.upstream import Answer, RecordedHttp, vllm_routes

REPO = Path(__file__).resolve().parents[3]
RAY_LIVE = REPO / "tests" / "fixtures" / "ray-live"
MARGIN_S = 4.0  # scheduling on a shared 2-core machine; the limits asserted are far below the unbounded cases
TWO_HUNDRED_MB = 200 * 1024 * 1024


class HungServer:
    """Accepts every connection and never answers (an API server stuck behind its load balancer)."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._held: list[socket.socket] = []
        self._stop = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def __enter__(self) -> HungServer:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def _accept(self) -> None:
        self._listener.settimeout(0.1)
        while not self._stop.is_set():
            try:
                self._held.append(self._listener.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for conn in self._held:
            conn.close()
        self._listener.close()


class StreamingServer:
    """GET answers 200 with `total` bytes, `chunk` at a time, `pause_s` between chunks; counts what it
    sent to all readers together."""

    def __init__(self, total: int, chunk: int = 1024 * 1024, pause_s: float = 0.0) -> None:
        self.sent = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(total))
                self.end_headers()
                block = b"x" * chunk
                sent = 0
                try:
                    while sent < total:
                        self.wfile.write(block)
                        sent += len(block)
                        server.sent += len(block)
                        time.sleep(pause_s)
                except OSError:
                    pass  # the reader gave up: what we want

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> StreamingServer:
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


class RetryAfterServer(RecordedHttp):
    """RecordedHttp whose 429/503 answers carry Retry-After."""

    def __init__(self, routes: dict[str, list[Answer]], retry_after: str) -> None:
        super().__init__(routes)
        self.retry_after = retry_after
        self.times: list[float] = []

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                upstream.times.append(time.monotonic())
                answer = upstream.next_answer(self.path.split("?", 1)[0])
                self.send_response(answer.status)
                if answer.status in (429, 503):
                    self.send_header("Retry-After", upstream.retry_after)
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                self.wfile.write(answer.body)

        return Handler


def _ray_dashboard_routes() -> dict[str, list[Answer]]:
    """Our Ray 2.60 captures of the dashboard endpoints the collector reads."""
    files = {
        "/api/cluster_status": "http_api_cluster_status.json",
        "/api/v0/actors": "http_api_v0_actors_detail.json",
        "/api/v0/placement_groups": "http_api_v0_placement_groups.json",
        "/api/v0/nodes": "http_api_v0_nodes.json",
        "/nodes": "http_nodes_view_summary.json",
        "/logical/actors": "http_logical_actors.json",
    }
    return {path: [Answer(200, (RAY_LIVE / name).read_bytes())] for path, name in files.items()}


PROMETHEUS_ANSWER = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}).encode()


@pytest.fixture
def url_sources() -> Iterator[tuple[str, str, str]]:
    with (
        RecordedHttp(vllm_routes()) as vllm,
        RecordedHttp(_ray_dashboard_routes()) as ray,
        RecordedHttp({"/api/v1/query_range": [Answer(200, PROMETHEUS_ANSWER)]}) as prom,
    ):
        yield vllm.url, ray.url, prom.url


def _kubeconfig(folder: Path, server: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "hung", "cluster": {"server": server}}],
        "users": [{"name": "hung", "user": {"token": "t"}}],
        "contexts": [{"name": "hung", "context": {"cluster": "hung", "user": "hung", "namespace": "llm"}}],
        "current-context": "hung",
    }
    path = folder / "kubeconfig"
    path.write_text(json.dumps(config))
    return path


def test_a_hung_api_server_takes_no_time_from_the_sources_given_by_url(
    tmp_path: Path, url_sources: tuple[str, str, str]
) -> None:
    vllm, ray, prom = url_sources
    with HungServer() as api:
        api_url = api.url
        target = Target(
            kubeconfig=str(_kubeconfig(tmp_path, api_url)),
            vllm_urls=[vllm],
            ray_address=ray,
            prometheus_url=prom,
            local_gpu=False,
            scrapes=2,
            scrape_interval_s=0.2,
            source_timeout_s=2.0,
            total_timeout_s=5.0,
        )
        started = time.monotonic()
        bundle, results = collect(target, default_collectors(target))
        elapsed = time.monotonic() - started
    assert elapsed < target.total_timeout_s + MARGIN_S
    status = {r.name: r.status for r in results}
    assert status["vllm/127.0.0.1_" + vllm.rsplit(":", 1)[1] + ".metrics"] == "ok"
    assert status["ray/nodes.json"] == "ok" and status["prometheus/dcgm_gpu_util.json"] == "ok"
    manifest = json.loads(bundle.files["manifest.json"])
    first_scrape = min(t for times in manifest["scrapes"].values() for t in times)
    collected_at = datetime.fromisoformat(manifest["collected_at"].replace("Z", "+00:00")).timestamp()
    assert first_scrape - collected_at < target.source_timeout_s + 1  # it started at once, not after the API server
    # the pre-flight (GET /version, within the per-source timeout here) stands for every Kubernetes source
    (api_line,) = [r for r in results if r.name == "kubernetes"]
    assert api_line.status == "failed" and f"the API server {api_url}" in api_line.detail
    assert "no answer within 2.0s" in api_line.detail, api_line.detail
    assert not [
        r for r in results if r.name in ("kubernetes objects", "kubernetes logs", "gpu (nvidia-smi in pods)", "vllm")
    ]
    assert not [r.detail for r in results if "-0.0s" in r.detail]


def test_an_answer_over_the_cap_is_one_failure_and_memory_stays_bounded() -> None:
    cap = 4 * 1024 * 1024
    with StreamingServer(TWO_HUNDRED_MB) as server:
        get = direct_get(server.url, max_bytes=cap)
        tracemalloc.start()
        try:
            with pytest.raises(Unreachable) as failure:
                get("/metrics", 30)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        time.sleep(0.2)
        sent = server.sent
    assert failure.value.detail == "answer larger than 4 MiB (--max-answer-bytes); not kept"
    assert peak < 3 * cap
    assert sent < TWO_HUNDRED_MB / 4  # it stopped reading long before the end


def test_an_answer_that_trickles_past_the_timeout_stops_at_the_timeout() -> None:
    with StreamingServer(TWO_HUNDRED_MB, chunk=64 * 1024, pause_s=0.05) as server:
        started = time.monotonic()
        with pytest.raises(Unreachable) as failure:
            direct_get(server.url)("/metrics", 1.5)
        elapsed = time.monotonic() - started
    assert failure.value.detail.startswith("timeout after ")
    assert 1.5 <= elapsed < 1.5 + MARGIN_S


def test_an_answer_over_the_cap_fails_that_source_only_in_a_collection(tmp_path: Path) -> None:
    with (
        StreamingServer(TWO_HUNDRED_MB) as big,
        RecordedHttp({"/api/v1/query_range": [Answer(200, PROMETHEUS_ANSWER)]}) as prom,
    ):
        target = Target(
            kubeconfig=str(tmp_path / "none"),
            vllm_urls=[big.url],
            prometheus_url=prom.url,
            local_gpu=False,
            scrapes=1,
            source_timeout_s=10.0,
            total_timeout_s=20.0,
            max_answer_bytes=2 * 1024 * 1024,
        )
        bundle, results = collect(target, default_collectors(target))
    metrics = next(r for r in results if r.name.endswith(".metrics"))
    assert metrics.status == "failed" and "answer larger than 2 MiB" in metrics.detail
    assert all(r.status == "ok" for r in results if r.name.startswith("prometheus/"))
    assert max(len(data) for data in bundle.files.values()) < target.max_answer_bytes


@pytest.mark.parametrize("retry_after", ["1", "http-date"])
def test_429_is_asked_again_after_retry_after(retry_after: str) -> None:
    value = retry_after
    if retry_after == "http-date":
        value = format_datetime(datetime.now(timezone.utc) + timedelta(seconds=2), usegmt=True)
    routes = {"/api/v1/query_range": [Answer(429, b"slow down"), Answer(200, PROMETHEUS_ANSWER)]}
    with RetryAfterServer(routes, value) as server:
        status, body = direct_get(server.url)("/api/v1/query_range", 10)
    assert (status, body) == (200, PROMETHEUS_ANSWER)
    assert len(server.times) == 2 and server.times[1] - server.times[0] >= 0.9  # it waited before asking again


def test_retries_are_bounded_and_never_outlast_the_timeout() -> None:
    with RetryAfterServer({"/health": [Answer(503)]}, "0") as forever:
        assert direct_get(forever.url)("/health", 10)[0] == 503
        assert len(forever.times) == MAX_ATTEMPTS
    with RetryAfterServer({"/health": [Answer(429)]}, "3600") as later:
        started = time.monotonic()
        assert direct_get(later.url)("/health", 2)[0] == 429  # an hour's wait does not fit: the 429 is the answer
        assert time.monotonic() - started < 2 and len(later.times) == 1


def test_retry_after_reads_seconds_dates_and_falls_back_to_backoff() -> None:
    now = datetime(2026, 12, 3, 12, 0, 0, tzinfo=timezone.utc)
    assert retry_after_s("7", 1) == 7.0
    assert retry_after_s("Thu, 03 Dec 2026 12:00:05 GMT", 1, now=now.timestamp()) == pytest.approx(5.0)
    assert retry_after_s("Thu, 03 Dec 2026 11:00:00 GMT", 1, now=now.timestamp()) == 0.0  # already past
    assert retry_after_s(None, 1) == 0.5 and retry_after_s("soon", 2) == 1.0


def test_an_answer_that_breaks_off_is_one_line() -> None:
    class Truncating(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "1000000")
            self.end_headers()
            self.wfile.write(b"x" * 1000)  # then the connection closes

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Truncating)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        with pytest.raises(Unreachable) as failure:
            direct_get(f"http://127.0.0.1:{httpd.server_address[1]}")("/metrics", 5)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert failure.value.detail.startswith("the answer broke off: ") and "\n" not in failure.value.detail


def test_the_api_server_path_is_capped_too(tmp_path: Path) -> None:
    from diag.collect.kube import KubeAccess, KubeError
    from tests.replay.harness import VLLM_POD, recorded_cluster
    from tests.replay.server import ReplayServer

    cluster = recorded_cluster()
    with StreamingServer(8 * 1024 * 1024) as big:
        cluster.upstreams[("pods", *VLLM_POD)] = big.url
        with ReplayServer(cluster) as server:
            kube = KubeAccess(str(server.write_kubeconfig(tmp_path, namespace="llm")), max_answer_bytes=1024 * 1024)
            namespace, pod, port = VLLM_POD
            with pytest.raises(KubeError, match=r"answer larger than 1 MiB \(--max-answer-bytes\); not kept$"):
                kube.pod_proxy_get(namespace, pod, port, "/metrics", 10)
            assert kube.list_json("nodes", None)["items"]  # the connection pool still works after a cut
            small = KubeAccess(str(server.write_kubeconfig(tmp_path, namespace="llm")), max_answer_bytes=1024)
            with pytest.raises(KubeError, match=r"^list Pod in llm: answer larger than 1024 bytes"):
                small.list_json("pods", "llm")


def test_the_api_servers_own_throttling_is_asked_again_after_retry_after(tmp_path: Path) -> None:
    from diag.collect.kube import KubeAccess, KubeError

    pods = json.dumps(
        {"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": []}
    ).encode()
    throttled = (
        b'{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Too '
        b'many requests","reason":"TooManyRequests","code":429}'
    )
    with RetryAfterServer({"/api/v1/namespaces/llm/pods": [Answer(429, throttled), Answer(200, pods)]}, "1") as api:
        kube = KubeAccess(str(_kubeconfig(tmp_path, api.url)))
        assert kube.list_json("pods", namespace="llm")["items"] == []
        assert len(api.times) == 2 and api.times[1] - api.times[0] >= 0.9
    with RetryAfterServer({"/api/v1/namespaces/llm/pods": [Answer(429, throttled)]}, "3600") as api:
        kube = KubeAccess(str(_kubeconfig(tmp_path, api.url)))
        with pytest.raises(KubeError) as error:
            kube.list_json("pods", namespace="llm")  # an hour's wait does not fit: the 429 is the answer
        assert error.value.status == 429 and len(api.times) == 1


def test_a_collector_still_waiting_for_a_pool_slot_at_its_limit_is_named_as_not_started(tmp_path: Path) -> None:
    """Every pool slot held past its limit: the collector queued behind them is cancelled unstarted and
    named as not started, not read back as a cancelled future (which crashed the run)."""
    from diag.collect.runner import MAX_PARALLEL_COLLECTORS, Collector

    release = threading.Event()

    def hang(_ctx: object) -> list:
        release.wait(10)
        return []

    collectors = [
        Collector(f"slow {n}", hang, timeout_s=0.5, needs_pods=False) for n in range(MAX_PARALLEL_COLLECTORS + 1)
    ]
    target = Target(kubeconfig=str(tmp_path / "absent"), vllm_urls=["http://127.0.0.1:9"], local_gpu=False,
                    source_timeout_s=0.5, total_timeout_s=3.0)  # fmt: skip
    try:
        _, results = collect(target, collectors)
    finally:
        release.set()
    said = {r.name: r.detail for r in results if r.name != "kubernetes"}  # no kubeconfig: skipped
    queued = collectors[-1].name
    assert said.pop(queued) == f"{queued}: not started, the run's 3s ran out first"
    assert sorted(said) == sorted(c.name for c in collectors[:-1])
    assert all("timed out after" in detail for detail in said.values()), said
