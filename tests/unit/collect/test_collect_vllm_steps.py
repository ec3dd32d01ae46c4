"""The vLLM collector's reads with a bounded number of threads (diag/collect/vllm.py `_Steps`), and the
Kubernetes client's connection pool sized for them (diag/collect/kube.py). The servers here are
functions in this process: no socket is opened. Times are asserted as "within a limit plus a
margin", never exactly."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from diag.bundle.files import Bundle
from diag.collect import vllm
from diag.collect.base import Sink, Target
from diag.collect.http import TIMEOUT, Unreachable
from diag.collect.kube import CONNECTION_POOL_SIZE, KubeAccess
from diag.collect.kubernetes import PARALLEL_REQUESTS
from diag.collect.prometheus import MAX_PARALLEL_QUERIES
from diag.collect.ray import DASHBOARD_FILES
from diag.collect.vllm import MAX_READS_AT_ONCE, VllmEndpoint, collect_vllm

# a server with work: the one a second read is taken of
METRICS = b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1.0\n"
MARGIN_S = 1.0  # scheduling on a shared 2-core machine


def target(scrapes: int = 2, interval_s: float = 0.2, timeout_s: float = 5.0) -> Target:
    return Target(scrapes=scrapes, scrape_interval_s=interval_s, source_timeout_s=timeout_s)


class Fleet:
    """Fake servers that record every read: when, which path, and how many reads ran at once."""

    def __init__(self, read_s: float = 0.0) -> None:
        self.read_s = read_s
        self.lock = threading.Lock()
        self.at_once = self.most_at_once = 0
        self.reads: list[tuple[str, str, float]] = []  # (server, path, when it began)

    def endpoint(self, name: str, get=None) -> VllmEndpoint:
        def answer(path: str, timeout: float) -> tuple[int, bytes]:
            with self.lock:
                self.reads.append((name, path, time.monotonic()))
                self.at_once += 1
                self.most_at_once = max(self.most_at_once, self.at_once)
            try:
                if get is not None:
                    return get(path, timeout)
                time.sleep(self.read_s)
                return 200, METRICS if path == "/metrics" else b'{"data": []}'
            finally:
                with self.lock:
                    self.at_once -= 1

        return VllmEndpoint(name, answer, f"pod llm/{name}:8000")

    def times(self, name: str, path: str) -> list[float]:
        return [t for n, p, t in self.reads if n == name and p == path]


def test_every_server_is_read_in_full_and_in_order_with_at_most_the_bound_of_threads() -> None:
    fleet = Fleet(read_s=0.005)
    endpoints = [fleet.endpoint(f"vllm-{i}") for i in range(40)]
    bundle = Bundle()
    results = collect_vllm(endpoints, Sink(bundle), target(interval_s=0.05), max_at_once=4, slow_s=60)
    assert fleet.most_at_once <= 4
    names = [r.name for r in results]
    assert names == [n for i in range(40) for n in (f"vllm/vllm-{i}.metrics", f"vllm/vllm-{i}.health.txt",
                                                    f"vllm/vllm-{i}.models.json")]  # fmt: skip
    assert all(r.status == "ok" for r in results)
    assert all(bundle.text(f"vllm/vllm-{i}.metrics.1.txt") == METRICS.decode() for i in range(40))
    assert not [t for t in threading.enumerate() if t.name.startswith("llmdiag-vllm-")]


def test_each_second_scrape_is_due_the_interval_after_its_own_first_so_the_interval_is_paid_once() -> None:
    fleet = Fleet()
    endpoints = [fleet.endpoint(f"vllm-{i}") for i in range(12)]
    interval = 0.5
    started = time.monotonic()
    collect_vllm(endpoints, Sink(Bundle()), target(interval_s=interval), max_at_once=2, slow_s=60)
    took = time.monotonic() - started
    for i in range(12):
        first, second = fleet.times(f"vllm-{i}", "/metrics")
        assert second - first >= interval
    # once per batch of 2 threads would be 6 intervals (3 s)
    assert took < interval + MARGIN_S


def test_every_first_metrics_is_read_before_any_health_or_models() -> None:
    fleet = Fleet()
    endpoints = [fleet.endpoint(f"vllm-{i}") for i in range(10)]
    collect_vllm(endpoints, Sink(Bundle()), target(scrapes=1), max_at_once=3, slow_s=60)
    order = [path for _, path, _ in fleet.reads]
    assert order[:10] == ["/metrics"] * 10
    assert sorted(order[10:]) == ["/health"] * 10 + ["/v1/models"] * 10


def test_hung_servers_hold_up_the_others_by_the_slow_read_limit_not_their_timeout() -> None:
    fleet = Fleet()
    done = threading.Event()
    healthy_done_when_hung_gave_up: list[int] = []

    def hung(path: str, timeout: float) -> tuple[int, bytes]:
        done.wait(timeout)  # no answer within the timeout
        healthy_done_when_hung_gave_up.append(len(fleet.times("vllm-ok-4", "/metrics")))
        raise Unreachable(TIMEOUT, timeout)

    endpoints = [fleet.endpoint(f"vllm-hung-{i}", hung) for i in range(3)]
    endpoints += [fleet.endpoint(f"vllm-ok-{i}") for i in range(5)]

    def release_when_the_healthy_are_read() -> None:
        _wait_for(lambda: len(fleet.times("vllm-ok-4", "/metrics")) == 2)
        done.set()

    watcher = threading.Thread(target=release_when_the_healthy_are_read)
    watcher.start()
    # two threads, three hung servers first in line: a plain pool of two would read no healthy
    # server until two hung reads had timed out
    read = collect_vllm(endpoints, Sink(Bundle()), target(timeout_s=20), max_at_once=2, slow_s=0.1)
    results = {r.name: r for r in read}
    watcher.join()
    assert healthy_done_when_hung_gave_up and all(n == 2 for n in healthy_done_when_hung_gave_up)
    assert results["vllm/vllm-hung-0.metrics"].status == "failed"
    assert "timeout" in results["vllm/vllm-hung-0.metrics"].detail
    assert all(results[f"vllm/vllm-ok-{i}.metrics"].status == "ok" for i in range(5))


def _wait_for(condition, limit_s: float = 30.0) -> None:
    deadline = time.monotonic() + limit_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_the_error_of_one_server_is_raised_after_every_other_server_is_done() -> None:
    fleet = Fleet()

    def broken(path: str, timeout: float) -> tuple[int, bytes]:
        raise RuntimeError("a bug in a read")

    endpoints = [fleet.endpoint("vllm-broken", broken), *(fleet.endpoint(f"vllm-{i}") for i in range(6))]
    with pytest.raises(RuntimeError, match="a bug in a read"):
        collect_vllm(endpoints, Sink(Bundle()), target(interval_s=0.05), max_at_once=2, slow_s=60)
    assert all(len(fleet.times(f"vllm-{i}", "/metrics")) == 2 for i in range(6))


def test_one_server_needs_one_thread() -> None:
    started = threading.active_count()
    seen: list[int] = []
    fleet = Fleet()
    endpoint = fleet.endpoint(
        "vllm-0", lambda path, timeout: (seen.append(threading.active_count()), (200, METRICS))[1]
    )
    collect_vllm([endpoint], Sink(Bundle()), target(interval_s=0.05))
    assert max(seen) == started + 1


def test_the_api_client_keeps_a_connection_for_each_request_the_collectors_make_at_once(tmp_path: Path) -> None:
    assert CONNECTION_POOL_SIZE >= MAX_READS_AT_ONCE + PARALLEL_REQUESTS + len(DASHBOARD_FILES) + MAX_PARALLEL_QUERIES
    assert vllm.MAX_READS_AT_ONCE == MAX_READS_AT_ONCE
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))  # fmt: skip
    kube = KubeAccess(str(kubeconfig))
    assert kube._pool.connection_pool_kw["maxsize"] == CONNECTION_POOL_SIZE


def _exposition(running: float, waiting: float, tokens: float, kv: float = 0.1) -> bytes:
    return (
        f'# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{engine="0"}} {running}\n'
        f'# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{engine="0"}} {waiting}\n'
        f'# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{{engine="0"}} {kv}\n'
        f'# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{{engine="0"}} {tokens}\n'
        f'# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{{engine="0"}} {tokens}\n'
    ).encode()


def _serving(answers: list[bytes]):
    """A server whose /metrics answers are `answers` in turn (the last one again after them)."""
    left = list(answers)

    def get(path: str, timeout: float) -> tuple[int, bytes]:
        if path != "/metrics":
            return 200, b'{"data": []}'
        return 200, left.pop(0) if len(left) > 1 else left[0]

    return get


def test_an_idle_server_is_read_once_and_pays_no_interval() -> None:
    fleet = Fleet()
    endpoint = fleet.endpoint("vllm-idle", _serving([_exposition(0, 0, 500)]))
    started = time.monotonic()
    bundle = Bundle()
    results = {r.name: r for r in collect_vllm([endpoint], Sink(bundle), target(interval_s=5.0))}
    assert time.monotonic() - started < 5.0
    assert len(fleet.times("vllm-idle", "/metrics")) == 1
    assert "vllm/vllm-idle.metrics.1.txt" not in bundle.files
    metrics = results["vllm/vllm-idle.metrics"]
    assert metrics.status == "ok" and "nothing running or waiting" in metrics.detail


def test_a_server_with_requests_waiting_only_is_read_again() -> None:
    fleet = Fleet()
    endpoint = fleet.endpoint("vllm-queue", _serving([_exposition(0, 4, 500)]))
    collect_vllm([endpoint], Sink(Bundle()), target(interval_s=0.05))
    assert len(fleet.times("vllm-queue", "/metrics")) == 2


def test_a_first_read_that_failed_is_not_tried_again() -> None:
    fleet = Fleet()
    endpoint = fleet.endpoint("vllm-kwok", lambda path, timeout: (503, b"error trying to reach service"))
    results = {r.name: r for r in collect_vllm([endpoint], Sink(Bundle()), target(interval_s=5.0))}
    assert len(fleet.times("vllm-kwok", "/metrics")) == 1
    metrics = results["vllm/vllm-kwok.metrics"]
    assert metrics.status == "failed"
    assert "HTTP 503" in metrics.detail and "nothing running" not in metrics.detail


def test_a_busy_server_whose_tokens_move_is_read_scrapes_times_at_the_interval() -> None:
    fleet = Fleet()
    endpoint = fleet.endpoint("vllm-busy", _serving([_exposition(3, 0, 500), _exposition(3, 0, 900)]))
    collect_vllm([endpoint], Sink(Bundle()), target(interval_s=0.1))
    first, second = fleet.times("vllm-busy", "/metrics")
    assert second - first >= 0.1


def test_a_busy_server_with_nothing_waiting_is_read_again_soon_not_at_the_rates_interval() -> None:
    fleet = Fleet()
    endpoint = fleet.endpoint("vllm-busy", _serving([_exposition(3, 0, 500), _exposition(3, 0, 900)]))
    sink = Sink(Bundle())
    collect_vllm([endpoint], sink, target(interval_s=30.0))
    first, second = sink.scrape_times["vllm-busy"]
    assert vllm.PEEK_S <= second - first < 30.0


def test_a_busy_server_whose_tokens_stood_still_at_the_first_look_is_read_at_the_moving_span() -> None:
    fleet = Fleet()
    answers = [_exposition(3, 0, 500), _exposition(3, 0, 500), _exposition(3, 0, 900)]
    endpoint = fleet.endpoint("vllm-slow-step", _serving(answers))
    sink = Sink(Bundle())
    results = {r.name: r for r in collect_vllm([endpoint], sink, target(interval_s=30.0))}
    first, peek, moving = sink.scrape_times["vllm-slow-step"]
    assert vllm.PEEK_S <= peek - first < vllm.MOVING_S <= moving - first < vllm.HANG_SPAN_S
    assert "3 of 3 reads" in results["vllm/vllm-slow-step.metrics"].detail


def test_a_busy_server_whose_kv_cache_fills_is_read_again_at_the_rates_interval() -> None:
    fleet = Fleet()
    endpoint = fleet.endpoint(
        "vllm-full", _serving([_exposition(12, 0, 500, kv=0.97), _exposition(12, 0, 900, kv=0.97)])
    )
    sink = Sink(Bundle())
    collect_vllm([endpoint], sink, target(interval_s=vllm.MOVING_S + 0.5))
    first, second = sink.scrape_times["vllm-full"]
    assert second - first >= vllm.MOVING_S + 0.5


def test_a_busy_server_with_requests_waiting_is_read_again_at_the_rates_interval() -> None:
    fleet = Fleet()
    endpoint = fleet.endpoint("vllm-queue", _serving([_exposition(3, 2, 500), _exposition(3, 2, 900)]))
    sink = Sink(Bundle())
    collect_vllm([endpoint], sink, target(interval_s=vllm.MOVING_S + 0.5))
    first, second = sink.scrape_times["vllm-queue"]
    assert second - first >= vllm.MOVING_S + 0.5


def test_a_server_that_looks_hung_is_read_once_more_to_the_hang_span(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm, "HANG_SPAN_S", 0.5)
    fleet = Fleet()
    endpoint = fleet.endpoint("vllm-hung", _serving([_exposition(3, 0, 500)]))  # running, no token counted
    sink = Sink(Bundle())
    results = {r.name: r for r in collect_vllm([endpoint], sink, target(interval_s=0.1))}
    times = sink.scrape_times["vllm-hung"]
    assert len(times) == 3
    assert times[-1] - times[0] >= 0.5
    assert "3 of 3 reads" in results["vllm/vllm-hung.metrics"].detail


def test_the_hang_span_is_the_hang_rules_default_span() -> None:
    from diag.core.rules_dir import default_settings

    assert default_settings()["hang_min_interval_s"] == vllm.HANG_SPAN_S


def test_a_busy_server_whose_rates_prometheus_holds_is_read_once() -> None:
    fleet = Fleet()
    held = fleet.endpoint("vllm-held", _serving([_exposition(3, 0, 500)]))
    other = fleet.endpoint("vllm-other", _serving([_exposition(3, 2, 500), _exposition(3, 2, 900)]))
    results = {
        r.name: r
        for r in collect_vllm(
            [held, other], Sink(Bundle()), target(interval_s=0.05), rates_elsewhere=lambda e: e.name == "vllm-held"
        )
    }
    assert len(fleet.times("vllm-held", "/metrics")) == 1
    assert len(fleet.times("vllm-other", "/metrics")) == 2
    assert "Prometheus" in results["vllm/vllm-held.metrics"].detail


def test_a_queue_is_read_again_even_where_prometheus_holds_the_rates() -> None:
    """A queue younger than the history's history_min_minutes is seen only by the server's own reads."""
    fleet = Fleet()
    queued = fleet.endpoint("vllm-queued", _serving([_exposition(3, 4, 500), _exposition(3, 6, 900)]))
    collect_vllm([queued], Sink(Bundle()), target(interval_s=0.05), rates_elsewhere=lambda e: True)
    assert len(fleet.times("vllm-queued", "/metrics")) == 2


def test_the_pods_whose_rates_prometheus_holds_are_those_with_every_series() -> None:
    from diag.bundle.prometheus_queries import RATE_HISTORY
    from diag.collect.prometheus import pods_with_rates

    def answer(*pods: tuple[str, int]) -> bytes:
        series = [{"metric": {"namespace": "llm", "pod": pod}, "values": [[1700000000 + 15 * i, "1"] for i in range(n)]}
                  for pod, n in pods]  # fmt: skip
        return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": series}}).encode()

    files = {f"prometheus/{stem}.json": answer(("vllm-a", 20), ("vllm-b", 20), ("vllm-c", 1)) for stem in RATE_HISTORY}
    files[f"prometheus/{RATE_HISTORY[-1]}.json"] = answer(("vllm-a", 20), ("vllm-c", 1))
    assert pods_with_rates(files) == {"llm/vllm-a"}
    assert pods_with_rates({}) == frozenset()


def test_a_target_that_asks_for_the_present_reads_every_busy_server_again() -> None:
    """An alert's triage (serve): its storm may be younger than Prometheus' history must show."""
    from concurrent.futures import Future

    from diag.collect.runner import rates_held

    known: Future[frozenset[str]] = Future()
    held = VllmEndpoint("vllm-a", lambda path, timeout: (200, b""), "pod llm/vllm-a:8000", pod_key="llm/vllm-a")
    assert not rates_held(Target(), known)(held)  # Prometheus has not answered yet
    known.set_result(frozenset({"llm/vllm-a"}))
    assert rates_held(Target(), known)(held)
    assert not rates_held(Target(scrape_beside_history=True), known)(held)
