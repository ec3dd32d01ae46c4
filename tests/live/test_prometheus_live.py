"""diag.collect.prometheus against a real Prometheus whose history was backfilled with promtool:
the contract's queries, scoped to the triaged namespace, over the --since window; Prometheus' own
basic auth; what a refused login and a rejected query say."""

from __future__ import annotations

import json
import time

import pytest
from live_services import (
    LOOPBACK,
    OTHER_NAMESPACE,
    OTHER_WAITING,
    PROMETHEUS_BASIC_AUTH,
    SERVED_MODEL,
    VLLM_NAMESPACE,
    PromServer,
    free_port,
)

from diag.bundle.files import Bundle
from diag.bundle.prometheus_queries import RANGE_QUERIES, RangeQuery
from diag.collect.base import Sink, SourceResult, Target
from diag.collect.prometheus import DEFAULT_WINDOW_S, collect_prometheus, collect_target, window_ending
from diag.collect.prometheus_access import PASSWORD_ENV, TOKEN_ENV, PromAccess, prometheus_access

pytestmark = pytest.mark.live


@pytest.fixture(autouse=True)
def _no_credentials_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    monkeypatch.delenv(PASSWORD_ENV, raising=False)


def collect(**target: object) -> tuple[Bundle, dict[str, SourceResult], float]:
    """collect_target as the runner calls it, without Kubernetes: -n names the namespace."""
    bundle = Bundle()
    started = time.time()
    sink = Sink(bundle)
    results = collect_target(Target(source_timeout_s=10, **target), None, sink)
    bundle.add("manifest-prometheus.json", json.dumps(sink.prometheus))  # what the runner puts in the manifest
    return bundle, {r.name: r for r in results}, started


@pytest.fixture(scope="module")
def collected(prometheus: PromServer) -> tuple[Bundle, dict[str, SourceResult], float]:
    return collect(prometheus_url=prometheus.url, namespace=VLLM_NAMESPACE)


def answer(bundle: Bundle, stem: str) -> dict:
    return json.loads(bundle.files[f"prometheus/{stem}.json"])


def only_series_values(bundle: Bundle, stem: str) -> list[float]:
    data = answer(bundle, stem)["data"]
    assert data["resultType"] == "matrix"
    assert len(data["result"]) == 1, data["result"]
    return [float(v) for _, v in data["result"][0]["values"]]


def test_every_query_of_the_contract_is_one_file_with_its_query_and_window(collected) -> None:
    bundle, results, started = collected
    assert {f"prometheus/{q.stem}.json" for q in RANGE_QUERIES} == set(bundle.names("prometheus"))
    for q in RANGE_QUERIES:
        saved = answer(bundle, q.stem)
        assert saved["status"] == "success"
        scope = f'{{namespace="{VLLM_NAMESPACE}"}}' if q.subject == "vllm" else ""
        assert saved["query"] == q.promql.replace("{selector}", scope)
        window = saved["window"]
        assert window["step"] == 15
        assert window["end"] - window["start"] == pytest.approx(DEFAULT_WINDOW_S)
        assert started - 1 <= window["end"] <= time.time()
    assert all(r.status == "ok" for r in results.values()), results


def test_range_covers_the_window_at_its_step(collected) -> None:
    bundle, _, _ = collected
    saved = answer(bundle, "vllm_num_requests_waiting")
    times = [t for t, _ in saved["data"]["result"][0]["values"]]
    assert times == sorted(times)
    assert times[0] >= saved["window"]["start"] and times[-1] <= saved["window"]["end"]
    assert {b - a for a, b in zip(times, times[1:], strict=False)} == {15}
    assert len(times) > 100  # the backfilled half hour, 15 s apart


def test_only_the_triaged_namespace_comes_back(collected, prometheus: PromServer) -> None:
    bundle, _, _ = collected
    series = answer(bundle, "vllm_num_requests_waiting")["data"]["result"]
    assert [s["metric"]["namespace"] for s in series] == [VLLM_NAMESPACE]
    other, results, _ = collect(prometheus_url=prometheus.url, namespace=OTHER_NAMESPACE)
    assert only_series_values(other, "vllm_num_requests_waiting") == [OTHER_WAITING] * len(
        only_series_values(other, "vllm_num_requests_waiting")
    )
    assert answer(other, "vllm_preemptions_rate_5m")["data"]["result"] == []  # the preempting server is not theirs
    assert len(answer(other, "dcgm_xid_errors")["data"]["result"]) == 1  # GPU queries are not scoped


def test_all_namespaces_and_several_namespaces_see_both_servers(prometheus: PromServer) -> None:
    every, _, _ = collect(prometheus_url=prometheus.url, all_namespaces=True)
    namespaces = {s["metric"]["namespace"] for s in answer(every, "vllm_num_requests_waiting")["data"]["result"]}
    assert namespaces == {VLLM_NAMESPACE, OTHER_NAMESPACE}
    assert answer(every, "vllm_num_requests_waiting")["query"] == "vllm:num_requests_waiting"
    # several namespaces: one regex matcher (the CLI's -n takes one; the collector takes a list)
    from diag.collect.prometheus import vllm_selector

    selector = vllm_selector([OTHER_NAMESPACE, VLLM_NAMESPACE, "no-such-ns"])
    both = _ask(prometheus, RangeQuery("waiting", "vllm:num_requests_waiting{selector}", "vllm"), selector)
    assert {s["metric"]["namespace"] for s in both["data"]["result"]} == {VLLM_NAMESPACE, OTHER_NAMESPACE}


def test_extra_selector_narrows_every_vllm_query(prometheus: PromServer) -> None:
    bundle, _, _ = collect(
        prometheus_url=prometheus.url, all_namespaces=True, prometheus_selector=f'instance="{LOOPBACK}:8001"'
    )
    series = answer(bundle, "vllm_kv_cache_usage_perc")["data"]["result"]
    assert [s["metric"]["namespace"] for s in series] == [OTHER_NAMESPACE]
    bundle, results, _ = collect(
        prometheus_url=prometheus.url, namespace=VLLM_NAMESPACE, prometheus_selector='job="not-vllm"'
    )
    assert answer(bundle, "vllm_num_requests_waiting")["data"]["result"] == []
    assert results["prometheus/vllm_num_requests_waiting.json"].detail == "0 series"


def test_gauges_rates_and_quantiles_come_back_as_backfilled(collected) -> None:
    bundle, _, _ = collected
    waiting = only_series_values(bundle, "vllm_num_requests_waiting")
    assert waiting[-1] == 20 and waiting[0] < 5 and waiting == sorted(waiting)
    kv = only_series_values(bundle, "vllm_kv_cache_usage_perc")
    assert kv[-1] == pytest.approx(0.99) and kv[0] < 0.5
    series = answer(bundle, "vllm_num_requests_waiting")["data"]["result"][0]["metric"]
    assert series["model_name"] == SERVED_MODEL and series["engine"] == "0"
    preemptions = only_series_values(bundle, "vllm_preemptions_rate_5m")
    assert preemptions[0] == 0 and preemptions[-1] > 0
    assert max(preemptions) == pytest.approx(2 / 15, rel=0.02)  # 2 preemptions per 15 s sample
    ttft = only_series_values(bundle, "vllm_ttft_p99_5m")
    assert ttft[0] <= 0.5
    assert 4.5 < ttft[-1] <= 5.0  # p99 inside the 2.5-5 s bucket


def test_dcgm_series_keep_their_gpu_labels(collected) -> None:
    bundle, _, _ = collected
    xid = answer(bundle, "dcgm_xid_errors")["data"]["result"]
    assert len(xid) == 1
    assert xid[0]["metric"]["gpu"] == "0" and xid[0]["metric"]["UUID"].startswith("GPU-")
    values = [float(v) for _, v in xid[0]["values"]]
    assert values[0] == 0 and values[-1] == 79
    assert only_series_values(bundle, "dcgm_fb_used")[-1] == 140000


def test_renamed_metrics_one_line_when_neither_name_has_a_series(collected) -> None:
    bundle, results, _ = collected
    # kv_cache_usage_perc is in the history, gpu_cache_usage_perc (its old name) is not: two lines
    assert results["prometheus/vllm_gpu_cache_usage_perc.json"].detail == "0 series"
    assert answer(bundle, "vllm_gpu_cache_usage_perc")["data"]["result"] == []
    # neither inter_token_latency nor time_per_output_token was backfilled: one line, ok
    line = results["prometheus/vllm_itl_p99_5m.json"]
    assert line.status == "ok" and line.detail.startswith("neither name has a series in the last 30 min")
    assert "prometheus/vllm_tpot_p99_5m.json" not in results
    assert answer(bundle, "vllm_tpot_p99_5m")["data"]["result"] == []


def test_a_seven_day_window_is_accepted_by_prometheus(prometheus: PromServer) -> None:
    bundle, results, _ = collect(prometheus_url=prometheus.url, namespace=VLLM_NAMESPACE, since_s=7 * 24 * 3600)
    assert all(r.status == "ok" for r in results.values()), results
    window = answer(bundle, "vllm_num_requests_waiting")["window"]
    assert window["step"] == 55 and window["end"] - window["start"] == pytest.approx(7 * 24 * 3600)
    times = [t for t, _ in answer(bundle, "vllm_num_requests_waiting")["data"]["result"][0]["values"]]
    assert len(times) >= 30 * 60 // 55  # the backfilled half hour, every 55 s
    recorded = json.loads(bundle.files["manifest-prometheus.json"])
    assert recorded["window"]["since_s"] == 7 * 24 * 3600 and recorded["window"]["step"] == 55


def test_one_step_finer_than_the_limit_is_what_prometheus_refuses(prometheus: PromServer) -> None:
    """The 11,000-point limit is Prometheus', not ours: 7 days at 54 s is refused, at 55 s accepted."""
    window = window_ending(time.time(), 7 * 24 * 3600)
    query = RangeQuery("waiting", "vllm:num_requests_waiting{selector}", "vllm")
    finer = type(window)(window.start, window.end, window.step - 1)
    refused = _ask(prometheus, query, "", finer, expect_ok=False)
    assert refused["errorType"] == "bad_data" and "11,000 points" in refused["error"]
    assert _ask(prometheus, query, "", window)["status"] == "success"


def test_basic_auth_against_prometheus_own_web_config(prometheus_basic_auth: PromServer) -> None:
    auth = PROMETHEUS_BASIC_AUTH
    bundle, results, _ = collect(
        prometheus_url=prometheus_basic_auth.url,
        namespace=VLLM_NAMESPACE,
        prometheus_user=auth.user,
        prometheus_password=auth.password,
    )
    assert all(r.status == "ok" for r in results.values()), results
    assert only_series_values(bundle, "vllm_num_requests_waiting")[-1] == 20
    written = b"".join(bundle.files.values()).decode()
    assert auth.password not in written and auth.header().split()[1] not in written
    recorded = json.loads(bundle.files["manifest-prometheus.json"])
    assert recorded["login"] == "basic" and recorded["url"] == prometheus_basic_auth.url


def test_refused_credentials_are_one_line_per_query_and_the_rest_not_sent(prometheus_basic_auth: PromServer) -> None:
    bundle, results, _ = collect(
        prometheus_url=prometheus_basic_auth.url,
        all_namespaces=True,
        prometheus_user=PROMETHEUS_BASIC_AUTH.user,
        prometheus_password="wrong-pw",
    )
    details = [r.detail for r in results.values()]
    assert all(r.status == "failed" for r in results.values())
    assert any(d.startswith("Prometheus refused the credentials (HTTP 401, basic): Unauthorized") for d in details), (
        details
    )
    assert all("wrong-pw" not in d and "\n" not in d for d in details)
    assert not bundle.names("prometheus")
    bundle, results, _ = collect(prometheus_url=prometheus_basic_auth.url, all_namespaces=True)  # no credentials at all
    assert any(
        "asks for credentials (HTTP 401" in r.detail and "--prometheus-user" in r.detail for r in results.values()
    )


def test_a_query_prometheus_rejects_is_failed_with_its_error(prometheus: PromServer) -> None:
    bundle = Bundle()
    broken = RangeQuery("broken", "rate(vllm:num_preemptions_total{selector}[5m]", "vllm")
    access = PromAccess(prometheus.url, None)
    [result] = collect_prometheus(
        _getter(access), access, Sink(bundle), 10, "", window_ending(time.time(), 1800), (broken,)
    )
    assert result.status == "failed"
    assert result.detail.startswith("Prometheus rejected the query (HTTP 400, bad_data): ")
    assert "parse error" in result.detail and "\n" not in result.detail
    assert bundle.files == {}


def test_no_prometheus_listening_is_refused_in_one_line() -> None:
    url = f"http://{LOOPBACK}:{free_port()}"
    bundle, results, _ = collect(prometheus_url=url, all_namespaces=True)
    assert len(results) == len(RANGE_QUERIES)
    assert all(r.status == "failed" for r in results.values())
    sent = [r.detail for r in results.values() if not r.detail.startswith("not asked: ")]
    assert sent and all(d == f"Prometheus at {url} refused the connection" for d in sent)
    assert not bundle.names("prometheus")


def _getter(access: PromAccess):
    return access.getter(None)


def _ask(prometheus: PromServer, query: RangeQuery, selector: str, window=None, expect_ok: bool = True) -> dict:
    """One query straight to Prometheus through the collector's own request; the saved or error answer."""
    bundle = Bundle()
    access = prometheus_access(Target(prometheus_url=prometheus.url))
    assert access is not None
    window = window or window_ending(time.time(), DEFAULT_WINDOW_S)
    get = _getter(access)
    [result] = collect_prometheus(get, access, Sink(bundle), 10, selector, window, (query,))
    if expect_ok:
        assert result.status == "ok", result
        return json.loads(bundle.files[f"prometheus/{query.stem}.json"])
    assert result.status == "failed", result
    from urllib.parse import urlencode

    status, body = get("/api/v1/query_range?" + urlencode({"query": query.promql.replace("{selector}", selector),
                       "start": window.start, "end": window.end, "step": window.step}), 10)  # fmt: skip
    assert status == 400
    return json.loads(body)


def test_without_a_namespace_or_kubernetes_the_vllm_queries_are_unscoped_and_say_so(prometheus: PromServer) -> None:
    bundle, results, _ = collect(prometheus_url=prometheus.url)
    assert results["prometheus"].status == "ok" and "not scoped by namespace" in results["prometheus"].detail
    assert len(answer(bundle, "vllm_num_requests_waiting")["data"]["result"]) == 2


def test_the_service_proxy_reaches_the_real_prometheus(prometheus: PromServer, tmp_path) -> None:
    from diag.collect.kube import KubeAccess
    from tests.replay.server import ReplayCluster, ReplayServer

    cluster = ReplayCluster()
    cluster.upstreams[("services", "monitoring", "prometheus-operated", "web")] = prometheus.url
    with ReplayServer(cluster) as replay:
        kube = KubeAccess(str(replay.write_kubeconfig(tmp_path, namespace=VLLM_NAMESPACE)))
        bundle = Bundle()
        results = collect_target(Target(prometheus_service="monitoring/prometheus-operated:web"), kube, Sink(bundle))
    assert all(r.status == "ok" for r in results), results
    series = answer(bundle, "vllm_num_requests_waiting")["data"]["result"]
    assert [s["metric"]["namespace"] for s in series] == [VLLM_NAMESPACE]  # the kubeconfig context's namespace
