"""What runs beside what in a live collection: the collectors that need the pods start once the
Kubernetes collector has them (not when it has also listed the events and written every file), and
one collector's slow redaction holds up no other collector's writes."""

from __future__ import annotations

import sys
import threading
from collections import Counter

import pytest

from diag.bundle.files import Bundle
from diag.collect.base import Sink, SourceResult, Target
from diag.collect.redact import Redactor
from diag.collect.runner import CollectContext, Collector, _RunSink, collect
from diag.snapshot.model import Pod

NO_CLUSTER = Target(kubeconfig="/nonexistent", local_gpu=False)


def test_collectors_needing_pods_start_once_the_pods_are_published() -> None:
    phase_two_ran = threading.Event()
    seen: list[list[str]] = []

    def objects(ctx: CollectContext) -> list[SourceResult]:
        ctx.publish_pods([Pod("llm", "vllm-0"), Pod("llm", "vllm-1")])
        overlapped = phase_two_ran.wait(10)  # where the events are listed and the files written
        return [SourceResult("k8s/pods.json", "ok", "overlapped" if overlapped else "waited")]

    def logs(ctx: CollectContext) -> list[SourceResult]:
        seen.append([p.name for p in ctx.pods])
        phase_two_ran.set()
        return [SourceResult("k8s/logs", "ok")]

    _, results = collect(NO_CLUSTER, [Collector("kubernetes objects", objects, phase=1), Collector("logs", logs)])
    assert seen == [["vllm-0", "vllm-1"]]
    assert {r.name: r.detail for r in results}["k8s/pods.json"] == "overlapped"


def test_a_phase_one_collector_that_publishes_nothing_still_releases_the_others_when_it_ends() -> None:
    order: list[str] = []

    def objects(ctx: CollectContext) -> list[SourceResult]:
        order.append("objects")
        return [SourceResult("k8s/pods.json", "failed", "forbidden")]

    def logs(ctx: CollectContext) -> list[SourceResult]:
        order.append(f"logs with {len(ctx.pods)} pods")
        return []

    collect(NO_CLUSTER, [Collector("kubernetes objects", objects, phase=1), Collector("logs", logs)])
    assert order == ["objects", "logs with 0 pods"]


def test_pods_published_before_the_phase_one_timeout_are_used() -> None:
    release = threading.Event()
    seen: list[int] = []

    def objects(ctx: CollectContext) -> list[SourceResult]:
        ctx.publish_pods([Pod("llm", "vllm-0")])
        release.wait(10)  # hangs on the events, past its timeout
        return []

    def logs(ctx: CollectContext) -> list[SourceResult]:
        seen.append(len(ctx.pods))
        return [SourceResult("k8s/logs", "ok")]

    try:
        _, results = collect(
            NO_CLUSTER, [Collector("kubernetes objects", objects, phase=1, timeout_s=0.5), Collector("logs", logs)]
        )
    finally:
        release.set()
    assert seen == [1]
    statuses = {r.name: r.status for r in results}
    assert statuses["kubernetes objects"] == "failed" and statuses["k8s/logs"] == "ok"


@pytest.mark.parametrize("make_sink", [Sink, _RunSink], ids=["Sink", "the run's sink"])
def test_a_slow_redaction_holds_up_no_other_write(make_sink: type[Sink]) -> None:
    redacting = threading.Event()
    finish = threading.Event()

    def redact(rel: str, raw: bytes) -> bytes:
        if rel == "k8s/pods.json":
            redacting.set()
            assert finish.wait(10)
        return raw

    sink = make_sink(Bundle(), redact)
    big = threading.Thread(target=sink.write, args=("k8s/pods.json", b"{}"))
    big.start()
    try:
        assert redacting.wait(10)
        sink.write("vllm/llm.vllm-0.metrics.txt", b"vllm:num_requests_waiting 0\n")  # while pods.json is redacted
        assert sorted(sink.bundle.files) == ["vllm/llm.vllm-0.metrics.txt"]
    finally:
        finish.set()
        big.join(10)
    assert sorted(sink.bundle.files) == ["k8s/pods.json", "vllm/llm.vllm-0.metrics.txt"]


def test_the_redactor_counts_every_hit_when_threads_redact_at_once() -> None:
    redactor = Redactor()
    env = b'{"items": [{"env": [{"name": "HF_TOKEN", "value": "hf_abcdefghijklmnopqrstuvwxyz0123456789"}]}]}'
    single: Counter[str] = Counter()
    single_redactor = Redactor()
    single_redactor("k8s/pods.json", env)
    single.update(single_redactor.applied)
    threads = [
        threading.Thread(target=lambda: [redactor(f"k8s/pods-{i}.json", env) for i in range(500)]) for _ in range(8)
    ]
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads change places inside any unguarded update
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(switch)
    assert single["env-secret-value"] == 1
    assert redactor.applied == Counter({k: v * 4000 for k, v in single.items()})
