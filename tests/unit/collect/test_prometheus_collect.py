"""The Prometheus collector in a live run, without a Prometheus: through the replay API server's
service proxy, straight to a recorded HTTP answer, and beside the Kubernetes listing, not after it."""

from __future__ import annotations

import base64
import json
import threading
import time
from pathlib import Path

import pytest

from diag.bundle.prometheus_queries import RANGE_QUERIES
from diag.collect.base import SourceResult, Target
from diag.collect.prometheus import RENAMED_PAIRS
from diag.collect.prometheus_access import PASSWORD_ENV, TOKEN_ENV
from diag.collect.runner import CollectContext, Collector, collect, default_collectors
from tests.replay.server import ReplayCluster, ReplayServer
from tests.replay.upstream import Answer, RecordedHttp

QUERY_RANGE = "/api/v1/query_range"
EMPTY_MATRIX = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}).encode()


def _prometheus_only(target: Target) -> list[Collector]:
    return [c for c in default_collectors(target) if c.name == "prometheus"]


def test_prometheus_service_is_read_through_the_service_proxy_with_the_scoped_query(tmp_path: Path) -> None:
    cluster = ReplayCluster()
    with ReplayServer(cluster) as replay, RecordedHttp({QUERY_RANGE: [Answer(200, EMPTY_MATRIX)]}) as prometheus:
        cluster.upstreams[("services", "monitoring", "prometheus-k8s", "9090")] = prometheus.url
        target = Target(
            kubeconfig=str(replay.write_kubeconfig(tmp_path, namespace="llm")),
            prometheus_service="monitoring/prometheus-k8s",
            prometheus_selector='job="vllm"',
            local_gpu=False,
            since_s=6 * 3600,
        )
        bundle, results = collect(target, _prometheus_only(target))
        proxied = [r for r in replay.seen() if r.info and r.info.subresource == "proxy"]
        assert prometheus.served(QUERY_RANGE) == len(RANGE_QUERIES)
    assert {r.path for r in proxied} == {
        f"/api/v1/namespaces/monitoring/services/prometheus-k8s:9090/proxy{QUERY_RANGE}"
    }
    assert all(r.method == "GET" for r in proxied)
    sent = {r.query["query"][0] for r in proxied}
    # the kubeconfig context's namespace scopes the vLLM queries; GPU queries are not scoped
    assert 'vllm:num_requests_waiting{namespace="llm",job="vllm"}' in sent
    assert "DCGM_FI_DEV_XID_ERRORS" in sent
    first = proxied[0].query
    assert float(first["end"][0]) - float(first["start"][0]) == pytest.approx(6 * 3600)
    assert first["step"] == ["15"]
    manifest = json.loads(bundle.files["manifest.json"])
    assert manifest["prometheus"]["service"] == "monitoring/prometheus-k8s:9090"
    assert manifest["prometheus"]["url"] is None
    assert manifest["prometheus"]["window"]["since_s"] == 6 * 3600
    assert manifest["prometheus"]["vllm_selector"] == '{namespace="llm",job="vllm"}'
    assert all(r.status == "ok" for r in results), results


def test_no_credential_reaches_the_manifest_or_any_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PASSWORD_ENV, "pw-from-env-123")
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with RecordedHttp({QUERY_RANGE: [Answer(200, EMPTY_MATRIX)]}) as prometheus:
        host = prometheus.url.removeprefix("http://")
        target = Target(
            kubeconfig=str(tmp_path / "no-kubeconfig"),
            prometheus_url=f"http://carol:{'pw-in-url-456'}@{host}/",
            prometheus_headers=["X-Scope-OrgID: tenant-secretish-789"],
            local_gpu=False,
            namespace="llm",
        )
        bundle, results = collect(target, _prometheus_only(target))
    written = b"".join(bundle.files.values()).decode()
    shown = " ".join(f"{r.name} {r.detail}" for r in results)
    secrets = ("pw-in-url-456", "tenant-secretish-789", base64.b64encode(b"carol:pw-in-url-456").decode())
    for secret in secrets:
        assert secret not in written and secret not in shown
    manifest = json.loads(bundle.files["manifest.json"])
    assert manifest["prometheus"]["url"] == f"http://{host}"
    assert manifest["outside"]["prometheus_url"] == f"http://{host}"
    assert manifest["prometheus"]["login"] == "basic"
    assert manifest["prometheus"]["headers"] == ["X-Scope-OrgID"]
    window = manifest["prometheus"]["window"]
    assert window["end"] - window["start"] == pytest.approx(1800) and window["step"] == 15
    from_prometheus = [r for r in results if r.name.startswith("prometheus/")]
    assert len(from_prometheus) == len(RANGE_QUERIES) - len(RENAMED_PAIRS)  # each empty renamed pair is one line
    assert all(r.status == "ok" for r in from_prometheus), results


def test_prometheus_starts_with_the_kubernetes_listing_not_after_it() -> None:
    listing_done = threading.Event()
    asked_while_listing: list[bool] = []

    def slow_listing(ctx: CollectContext) -> list[SourceResult]:
        time.sleep(0.5)
        listing_done.set()
        return [SourceResult("k8s/pods.json", "ok")]

    def prometheus(ctx: CollectContext) -> list[SourceResult]:
        asked_while_listing.append(not listing_done.is_set())
        return [SourceResult("prometheus/x.json", "ok")]

    collectors = [
        Collector("kubernetes objects", slow_listing, phase=1),
        Collector("logs", lambda ctx: [SourceResult("k8s/logs", "ok")]),
        Collector("prometheus", prometheus, needs_pods=False),
    ]
    _, results = collect(Target(kubeconfig="/nonexistent", local_gpu=False), collectors)
    assert asked_while_listing == [True]
    assert {r.name for r in results} >= {"k8s/pods.json", "k8s/logs", "prometheus/x.json"}


@pytest.mark.usefixtures("ctrl_c_interrupts")
def test_ctrl_c_during_the_listing_marks_a_still_running_prometheus_interrupted() -> None:
    import signal

    from diag.collect.runner import INTERRUPTED

    def listing_then_ctrl_c(ctx: CollectContext) -> list[SourceResult]:
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
        time.sleep(3)
        return []

    collectors = [
        Collector("kubernetes objects", listing_then_ctrl_c, phase=1),
        Collector("vllm", lambda ctx: []),
        Collector("prometheus", lambda ctx: time.sleep(3) or [], needs_pods=False),
    ]
    started = time.monotonic()
    bundle, results = collect(Target(kubeconfig="/nonexistent", local_gpu=False), collectors)
    assert time.monotonic() - started < 2.5
    interrupted = {r.name for r in results if r.detail == INTERRUPTED}
    assert interrupted == {"kubernetes objects", "vllm", "prometheus"}
    assert json.loads(bundle.files["manifest.json"])["sources"]["prometheus"]["detail"] == INTERRUPTED
