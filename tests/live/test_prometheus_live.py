"""diag.collect.prometheus against a real Prometheus whose history was backfilled with promtool."""

from __future__ import annotations

import json
import time

import pytest

from live_services import LOOPBACK, SERVED_MODEL, PromServer, free_port
from diag.bundle import Bundle
from diag.collect.base import Sink
from diag.collect.prometheus import RANGE_QUERIES, WINDOW_S, collect_prometheus

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def collected(prometheus: PromServer) -> tuple[Bundle, dict[str, object], float]:
    bundle = Bundle()
    started = time.time()
    results = collect_prometheus(prometheus.url, Sink(bundle), timeout_s=10)
    return bundle, {r.name: r for r in results}, started


def answer(bundle: Bundle, name: str) -> dict:
    return json.loads(bundle.files[f"prometheus/{name}.json"])


def only_series_values(bundle: Bundle, name: str) -> list[float]:
    data = answer(bundle, name)["data"]
    assert data["resultType"] == "matrix"
    assert len(data["result"]) == 1, data["result"]
    return [float(v) for _, v in data["result"][0]["values"]]


def test_every_query_is_one_file_with_its_query_recorded(collected) -> None:
    bundle, results, _ = collected
    assert set(results) == {f"prometheus/{name}.json" for name in RANGE_QUERIES}
    for name, query in RANGE_QUERIES.items():
        assert results[f"prometheus/{name}.json"].status == "ok", results[f"prometheus/{name}.json"]
        saved = answer(bundle, name)
        assert saved["query"] == query
        assert saved["status"] == "success"


def test_range_covers_the_last_30_minutes(collected) -> None:
    bundle, _, started = collected
    times = [t for t, _ in answer(bundle, "vllm_num_requests_waiting")["data"]["result"][0]["values"]]
    assert times == sorted(times)
    assert times[0] >= started - WINDOW_S - 1
    assert times[-1] <= time.time()
    assert len(times) > 60  # 15 s steps over the backfilled half hour


def test_gauges_come_back_as_backfilled(collected) -> None:
    bundle, _, _ = collected
    waiting = only_series_values(bundle, "vllm_num_requests_waiting")
    assert waiting[-1] == 20 and waiting[0] < 5
    assert waiting == sorted(waiting)
    kv = only_series_values(bundle, "vllm_kv_cache_usage_perc")
    assert kv[-1] == pytest.approx(0.99) and kv[0] < 0.5
    series = answer(bundle, "vllm_num_requests_waiting")["data"]["result"][0]["metric"]
    assert series["model_name"] == SERVED_MODEL and series["engine"] == "0"


def test_rates_and_quantiles_are_computed_by_prometheus(collected) -> None:
    bundle, _, _ = collected
    preemptions = only_series_values(bundle, "vllm_preemptions_rate_5m")
    assert preemptions[0] == 0
    assert max(preemptions) == pytest.approx(2 / 15, rel=0.02)  # 2 preemptions per 15 s sample
    assert preemptions[-1] > 0
    ttft = only_series_values(bundle, "vllm_ttft_p90_5m")
    assert ttft[0] <= 0.5
    assert 2.5 < ttft[-1] <= 5.0


def test_dcgm_series_keep_their_gpu_labels(collected) -> None:
    bundle, _, _ = collected
    xid = answer(bundle, "dcgm_xid_errors")["data"]["result"]
    assert len(xid) == 1
    assert xid[0]["metric"]["gpu"] == "0" and xid[0]["metric"]["UUID"].startswith("GPU-")
    values = [float(v) for _, v in xid[0]["values"]]
    assert values[0] == 0 and values[-1] == 79
    assert only_series_values(bundle, "dcgm_fb_used")[-1] == 140000


def test_a_metric_nobody_exports_is_an_empty_answer_not_a_failure(collected) -> None:
    bundle, results, _ = collected
    assert results["prometheus/vllm_gpu_cache_usage_perc.json"].status == "ok"
    assert "0 series" in results["prometheus/vllm_gpu_cache_usage_perc.json"].detail
    assert answer(bundle, "vllm_gpu_cache_usage_perc")["data"]["result"] == []


def test_a_query_prometheus_rejects_is_failed_with_its_error(prometheus: PromServer) -> None:
    bundle = Bundle()
    [result] = collect_prometheus(prometheus.url, Sink(bundle), timeout_s=10, queries={"broken": "rate(vllm:num_preemptions_total[5m]"})
    assert result.status == "failed"
    assert "HTTP 400" in result.detail and "parse error" in result.detail
    assert "\n" not in result.detail
    assert bundle.files == {}


def test_no_prometheus_listening_fails_every_query_in_one_line() -> None:
    bundle = Bundle()
    results = collect_prometheus(f"http://{LOOPBACK}:{free_port()}", Sink(bundle), timeout_s=5)
    assert len(results) == len(RANGE_QUERIES)
    assert all(r.status == "failed" and r.detail.endswith("connection refused") for r in results)
    assert bundle.files == {}
