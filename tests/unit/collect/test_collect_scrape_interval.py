"""The vLLM scrape interval passes beside the rest of the collection: both /metrics reads of a
stand-in server on 127.0.0.1 are taken while the Kubernetes objects collector still waits for its
other lists, and the manifest's scrape times are at least the interval apart. Everything asserted
is a recorded time or an order, never a wall-clock duration."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from diag.bundle.files import Bundle
from diag.collect.base import Sink, SourceResult, Target
from diag.collect.kubernetes import collect_objects
from diag.collect.runner import CollectContext, Collector, collect
from diag.collect.vllm import collect_vllm, url_endpoint

INTERVAL_S = 0.3
# a server with work: the one a second read is taken of
METRICS = b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1.0\n"
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "vllm-0", "namespace": "llm", "uid": "u-0"},
    "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.6.3"}], "nodeName": "gpu-0"},
    "status": {"phase": "Running"},
}


class StandIn:
    """A vLLM server on 127.0.0.1."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = METRICS if self.path == "/metrics" else b'{"object": "list", "data": []}'
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.name = f"127.0.0.1_{self.server.server_address[1]}"


@pytest.fixture
def stand_in() -> Iterator[StandIn]:
    server = StandIn()
    thread = threading.Thread(target=server.server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.server.shutdown()
    thread.join(10)


class SlowLists:
    """A KubeAccess for collect_objects: the Services list answers only once the run's sink has
    recorded two /metrics reads of `server` (or after `hold_s`), and says when it answered."""

    warm = None  # no watched copies (KubeAccess.warm)

    def __init__(self, server: str, hold_s: float = 30.0) -> None:
        self.server, self.hold_s = server, hold_s
        self.sink: Sink | None = None
        self.released_in_time = False
        self.services_answered_at = 0.0

    def current_namespace(self) -> str:
        return "llm"

    def list_json(self, kind: str, namespace: str | None, label_selector=None, field_selector=None, raw=False) -> dict:
        if kind == "services":
            self.released_in_time = self._two_scrapes_recorded()
            self.services_answered_at = time.time()
        items = [POD] if kind == "pods" else []
        return {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}

    def _two_scrapes_recorded(self) -> bool:
        give_up = time.monotonic() + self.hold_s
        while time.monotonic() < give_up:
            if self.sink is not None and len(self.sink.scrape_times.get(self.server, [])) >= 2:
                return True
            time.sleep(0.01)
        return False


def test_both_scrapes_are_taken_while_the_other_lists_are_read_and_an_interval_apart(stand_in: StandIn) -> None:
    kube = SlowLists(stand_in.name)
    target = Target(
        kubeconfig="/nonexistent", namespace="llm", local_gpu=False, scrapes=2, scrape_interval_s=INTERVAL_S
    )
    pods_seen: list[str] = []

    def objects(ctx: CollectContext) -> list[SourceResult]:
        kube.sink = ctx.sink
        return collect_objects(kube, ctx.target, ctx.sink, on_pods=ctx.publish_pods)

    def vllm(ctx: CollectContext) -> list[SourceResult]:
        pods_seen.extend(p.key for p in ctx.pods)
        return collect_vllm([url_endpoint(stand_in.url)], ctx.sink, ctx.target)

    bundle, results = collect(target, [Collector("kubernetes objects", objects, phase=1), Collector("vllm", vllm)])

    assert pods_seen == ["llm/vllm-0"]  # the vLLM collector started from the pods list
    # the Services list was still being read when the second /metrics was answered: the interval
    # was spent beside it, not after it
    assert kube.released_in_time
    scrapes = json.loads(bundle.files["manifest.json"])["scrapes"][stand_in.name]
    assert len(scrapes) == 2
    assert scrapes[1] - scrapes[0] >= INTERVAL_S
    assert scrapes[1] <= kube.services_answered_at
    assert {r.name: r.status for r in results}["k8s/services.json"] == "ok"
    assert bundle.text(f"vllm/{stand_in.name}.metrics.1.txt") == METRICS.decode()


def test_a_slow_first_read_still_leaves_the_interval_between_the_recorded_scrapes(stand_in: StandIn) -> None:
    """The second read is due the interval after the first answered, not after it began: a first read
    that took long (a cold TLS connection through the API server) cannot shorten the recorded gap."""
    endpoint = url_endpoint(stand_in.url)
    reads = 0

    def slow_first(path: str, timeout: float) -> tuple[int, bytes]:
        nonlocal reads
        if path == "/metrics":
            reads += 1
            if reads == 1:
                time.sleep(INTERVAL_S)  # as long as the interval itself
        return endpoint.get(path, timeout)

    sink = Sink(Bundle())
    collect_vllm(
        [endpoint.__class__(endpoint.name, slow_first, endpoint.where)],
        sink,
        Target(scrapes=2, scrape_interval_s=INTERVAL_S),
    )
    first, second = sink.scrape_times[endpoint.name]
    assert second - first >= INTERVAL_S
