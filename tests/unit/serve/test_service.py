"""diag/serve/service.py: triages kept with what they answer, failures counted, alerts gated, the
schedule on time whatever a cycle does, and the outgoing webhook."""

from __future__ import annotations

import gc
import json
import threading
import time
import weakref
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from diag.collect.base import Target
from diag.engine.config import Config
from diag.serve.alerts import Alert
from diag.serve.service import Service, Settings
from diag.serve.store import Limits, ReportStore


def settings(**changes) -> Settings:
    base = {"every_s": 60.0, "deadline_s": 30.0, "target": Target(vllm_urls=["http://127.0.0.1:1"]),
            "config": Config(), "alert_limit": (2, 600.0)}  # fmt: skip
    return Settings(**(base | changes))


def alert(fingerprint: str, status: str = "firing", **labels: str) -> Alert:
    return Alert(
        fingerprint, status, "VLLMQueueBuilding", "2026-12-07T00:00:00Z", {"alertname": "VLLMQueueBuilding", **labels}
    )


def wait_for(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_triage_is_kept_with_its_verdict_and_the_target_held_under_the_deadline(tmp_path: Path, fault_report) -> None:
    seen: list[Target] = []
    service = Service(
        settings(deadline_s=7.0), ReportStore(tmp_path, Limits()), lambda t: seen.append(t) or fault_report
    )
    meta = service.run_triage("schedule", service.settings.target)
    assert meta is not None and meta["verdict"]["rule"] == "K8S-505" and meta["exit_code"] == 2
    # each source times out inside the deadline, three reads of a hung server one after another too
    assert seen[0].total_timeout_s == 7.0 and seen[0].source_timeout_s == 1.75
    assert json.loads(service.store.body(meta["id"], "json"))["verdict"]["rule"] == "K8S-505"
    assert service.store.body(meta["id"], "md").startswith(b"#")
    assert service.counters.get("llmdiag_cycles_total", trigger="schedule", outcome="ok") == 1


class Linked:
    other: Linked | None = None


@pytest.mark.parametrize("fails", [False, True])
def test_what_a_triage_left_in_cycles_is_freed_after_it_with_the_collector_off(
    tmp_path: Path, fault_report, fails: bool
) -> None:
    left: list[weakref.ref] = []

    def triage(target: Target):
        a, b = Linked(), Linked()
        a.other, b.other = b, a  # a cycle that nothing reaches once the triage is over
        left.append(weakref.ref(a))
        if fails:
            raise RuntimeError("boom")
        return fault_report

    service = Service(settings(), ReportStore(tmp_path, Limits()), triage)
    was_on = gc.isenabled()
    gc.disable()  # as diag.cli.main runs every command
    try:
        for _ in range(3):  # the first collection looks at every object, the next ones at the young
            service.run_triage("schedule", service.settings.target)
            assert left[-1]() is None
    finally:
        if was_on:
            gc.enable()


def test_a_cycle_that_became_garbage_after_it_had_lived_long_is_freed_by_a_full_collection(
    tmp_path: Path, fault_report
) -> None:
    from diag.serve.service import FULL_COLLECTION_EVERY

    kept: list[Linked] = []
    a, b = Linked(), Linked()
    a.other, b.other = b, a
    kept.append(a)
    old = weakref.ref(a)
    del a, b
    service = Service(settings(), ReportStore(tmp_path, Limits()), lambda target: fault_report)
    was_on = gc.isenabled()
    gc.disable()
    try:
        service.run_triage("schedule", service.settings.target)  # a full collection: the cycle is old now
        kept.clear()
        for _ in range(FULL_COLLECTION_EVERY - 1):
            service.run_triage("schedule", service.settings.target)
        assert old() is not None  # the young collections did not walk it
        service.run_triage("schedule", service.settings.target)
        assert old() is None
    finally:
        if was_on:
            gc.enable()


@pytest.mark.parametrize("fails", [False, True])
def test_the_memory_a_triage_freed_is_given_back_after_it(
    tmp_path: Path, fault_report, fails: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from diag.serve import memory

    released: list[bool] = []
    monkeypatch.setattr(memory, "release", lambda: released.append(True) or True)

    def triage(target: Target):
        if fails:
            raise RuntimeError("boom")
        return fault_report

    Service(settings(), ReportStore(tmp_path, Limits()), triage).run_triage("schedule", settings().target)
    assert released == [True]


def test_a_triage_that_raises_is_counted_and_keeps_nothing(tmp_path: Path) -> None:
    def broken(target: Target):
        raise RuntimeError("boom")

    service = Service(settings(), ReportStore(tmp_path, Limits()), broken)
    assert service.run_triage("schedule", service.settings.target) is None
    assert service.store.listing() == []
    assert service.counters.get("llmdiag_cycles_total", trigger="schedule", outcome="error") == 1


def test_alerts_of_one_scope_share_a_triage_scoped_by_their_labels(tmp_path: Path, fault_report) -> None:
    seen: list[Target] = []
    service = Service(settings(), ReportStore(tmp_path, Limits()), lambda t: seen.append(t) or fault_report)
    answer = service.receive([alert("a", namespace="llm", pod="p-0"), alert("b", namespace="llm", pod="p-0"),
                              alert("c", "resolved", namespace="llm")])  # fmt: skip
    assert answer == {"triaged": ["a", "b"]}
    service.start()
    try:
        wait_for(lambda: service.store.latest("alert") is not None)
    finally:
        service.stop()
    scheduled = service._bounded(service.settings.target)  # the schedule's first cycle may run beside it
    (target,) = [t for t in seen if t != scheduled]
    assert (target.namespace, target.pod, target.all_namespaces) == ("llm", "p-0", False)
    meta = service.store.latest("alert")
    assert meta["scope"] == {"namespace": "llm", "pod": "p-0"}
    assert [a["fingerprint"] for a in meta["alerts"]] == ["a", "b"]
    assert service.counters.get("llmdiag_alerts_received_total", status="resolved") == 1


def test_an_alert_sent_again_is_deduplicated_and_a_storm_of_them_rate_limited(tmp_path: Path, fault_report) -> None:
    service = Service(settings(alert_limit=(2, 600.0)), ReportStore(tmp_path, Limits()), lambda t: fault_report)
    assert service.receive([alert("a", namespace="one")]) == {"triaged": ["a"]}
    assert service.receive([alert("a", namespace="one")]) == {"deduplicated": ["a"]}
    assert service.receive([alert("b", namespace="two")]) == {"triaged": ["b"]}
    assert service.receive([alert("c", namespace="three")]) == {"rate_limited": ["c"]}
    assert service.counters.get("llmdiag_alert_triages_total", outcome="rate_limited") == 1


def test_an_alert_firing_again_is_triaged_again_only_where_its_triage_found_no_fault(
    tmp_path: Path, fault_report, healthy_report
) -> None:
    reports = iter([healthy_report, fault_report])
    service = Service(settings(), ReportStore(tmp_path, Limits()), lambda t: next(reports))
    service.start()  # its first scheduled cycle takes the healthy report
    try:
        wait_for(lambda: service.store.latest("schedule") is not None)

        def fires(starts_at: str) -> dict[str, list[str]]:
            return service.receive([Alert("kv", "firing", "VLLMKVCacheFull", starts_at, {"pod": "p-0"})])

        assert fires("2026-12-07T01:00:00Z") == {"triaged": ["kv"]}
        wait_for(lambda: service.store.latest("alert") is not None)
        assert service.store.latest("alert")["verdict"]["status"] == "fault"
        assert fires("2026-12-07T01:00:30Z") == {"deduplicated": ["kv"]}  # the same storm, flapping
    finally:
        service.stop()
    first = Service(settings(), ReportStore(tmp_path / "healthy", Limits()), lambda t: healthy_report)
    first.start()
    try:
        first.receive([Alert("kv", "firing", "VLLMKVCacheFull", "t0", {"pod": "p-0"})])
        wait_for(lambda: first.store.latest("alert") is not None)
        # it found nothing (the storm had not shown yet): firing again, it is looked at again
        assert first.receive([Alert("kv", "firing", "VLLMKVCacheFull", "t1", {"pod": "p-0"})]) == {"triaged": ["kv"]}
    finally:
        first.stop()


def test_after_a_restart_an_alert_a_kept_report_answers_is_not_triaged_again(tmp_path: Path, fault_report) -> None:
    first = Service(settings(), ReportStore(tmp_path, Limits()), lambda t: fault_report)
    first.run_triage("alert", first.settings.target, {"scope": {}, "alerts": [alert("a").record()]})
    again = Service(settings(), ReportStore(tmp_path, Limits()), lambda t: fault_report)
    assert again.receive([alert("a")]) == {"deduplicated": ["a"]}
    fired_again = Alert("a", "firing", "", "2026-12-07T01:05:00Z", {})  # resolved, then firing again
    assert again.receive([fired_again]) == {"deduplicated": ["a"]}
    assert 'llmdiag_verdict{trigger="alert"' in again.exposition()


def test_a_cycle_that_outlives_its_period_skips_ticks_and_the_grid_holds(tmp_path: Path, fault_report) -> None:
    starts: list[float] = []
    release = threading.Event()

    def slow(target: Target):
        starts.append(time.monotonic())
        if len(starts) == 1:
            release.wait(5)
        return fault_report

    service = Service(settings(every_s=0.3), ReportStore(tmp_path, Limits()), slow)
    service.start()
    try:
        wait_for(lambda: service.counters.get("llmdiag_cycles_total", trigger="schedule", outcome="skipped") >= 2)
        assert service.healthy()
        release.set()
        wait_for(lambda: len(starts) >= 3)
    finally:
        service.stop()
    # after the slow one, back on the 0.3 s grid: a whole number of periods later (a cycle's collection
    # of the garbage, in a test process holding every earlier test's objects, may cost a tick)
    periods = (starts[2] - starts[1]) / 0.3
    assert periods >= 0.9 and abs(periods - round(periods)) < 0.15, starts


def test_the_outgoing_webhook_gets_the_verdict_with_a_slack_text(tmp_path: Path, fault_report) -> None:
    got: list[dict] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    receiver = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{receiver.server_address[1]}/hook"
    service = Service(settings(notify_url=url, external_url="http://llmdiag:8080"), ReportStore(tmp_path, Limits()),
                      lambda t: fault_report)  # fmt: skip
    service.receive([alert("f1", namespace="llm")])
    service.start()
    try:
        wait_for(lambda: got)
    finally:
        service.stop()
        receiver.shutdown()
    (body,) = got
    meta = service.store.latest("alert")
    assert body["report"] == meta["id"] and body["verdict"]["rule"] == "K8S-505"
    assert body["fingerprints"] == ["f1"]
    assert body["text"].startswith("llmdiag fault for VLLMQueueBuilding: kubernetes layer")
    assert f"http://llmdiag:8080/reports/{meta['id']}" in body["text"]
    assert service.counters.get("llmdiag_notifications_total", outcome="sent") == 1


@pytest.mark.parametrize("status", [500, None])
def test_a_webhook_that_fails_is_counted(tmp_path: Path, fault_report, status: int | None) -> None:
    class Refuser(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(status or 500)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    refuser = ThreadingHTTPServer(("127.0.0.1", 0), Refuser)
    port = refuser.server_address[1]
    if status is None:
        refuser.server_close()  # nothing listens
    else:
        threading.Thread(target=refuser.serve_forever, daemon=True).start()
    service = Service(settings(notify_url=f"http://127.0.0.1:{port}/"), ReportStore(tmp_path, Limits()),
                      lambda t: fault_report)  # fmt: skip
    service.run_triage("alert", service.settings.target)
    service._notify(service.store.latest("alert"))
    assert service.counters.get("llmdiag_notifications_total", outcome="failed") == 1
    if status is not None:
        refuser.shutdown()


def test_a_change_of_the_scheduled_verdict_is_sent_on_and_a_repeat_is_not(
    tmp_path: Path, fault_report, healthy_report, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[dict] = []
    monkeypatch.setattr("diag.serve.notify.post", lambda url, body: sent.append(body))
    answers = iter([healthy_report, healthy_report, fault_report])
    service = Service(settings(notify_url="http://hook"), ReportStore(tmp_path, Limits()), lambda t: next(answers))
    for _ in range(3):
        service._scheduled_running.set()
        service._scheduled_cycle()
    assert [b["verdict"]["status"] for b in sent] == ["fault"]
    assert sent[0]["trigger"] == "schedule"


def test_a_report_that_cannot_be_written_is_an_error_and_the_next_is_kept(
    tmp_path: Path, fault_report, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ReportStore(tmp_path, Limits())
    service = Service(settings(), store, lambda t: fault_report)
    real_add = store.add
    calls = iter([OSError(28, "No space left on device"), None])

    def add(*args):
        problem = next(calls)
        if problem is not None:
            raise problem
        return real_add(*args)

    monkeypatch.setattr(store, "add", add)
    assert service.run_triage("schedule", service.settings.target) is None
    assert service.run_triage("schedule", service.settings.target) is not None
    assert service.counters.get("llmdiag_cycles_total", trigger="schedule", outcome="error") == 1
    assert len(store.listing()) == 1


def test_the_analysis_in_a_child_keeps_what_the_analysis_in_process_keeps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from diag.serve import child

    kept = []
    for forks in (True, False):
        monkeypatch.setattr(child, "FORKS", forks)
        service = Service(settings(), ReportStore(tmp_path / str(forks), Limits()))
        meta = service.run_triage("schedule", service.settings.target)
        assert meta is not None
        report = json.loads(service.store.body(meta["id"], "json"))
        kept.append((meta["verdict"], meta["exit_code"], report["verdict"], len(report["sources"])))
    assert kept[0] == kept[1] and kept[0][0]["status"] == "fault"  # the server at :1 does not answer


@pytest.mark.parametrize("forks", [True, False])
def test_the_pods_the_collection_made_are_as_made_after_the_analysis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forks: bool
) -> None:
    """The watched copies keep the pods they made for the next cycle; joining pods changes them (their
    events, their workload), so an analysis takes them only in a child of its own."""
    from diag.bundle.files import Bundle
    from diag.parsers.kubernetes import parse_pods
    from diag.serve import child
    from diag.serve import service as service_module

    fixture = Path(__file__).resolve().parents[3] / "fixtures" / "healthy-k8s-vllm"
    made = parse_pods(Bundle.open(fixture).text("k8s/pods.json"))
    untouched = parse_pods(Bundle.open(fixture).text("k8s/pods.json"))
    taken = tmp_path / "taken"  # a file: the child's memory goes with it

    def collected(target: Target, warm: object = None) -> Bundle:
        bundle = Bundle.open(fixture)
        bundle.parsed["k8s/pods.json"] = made
        return bundle

    real = service_module.analyze_bundle

    def analysis(bundle: Bundle, *args: object):
        with taken.open("a") as f:
            f.write(f"{bundle.parsed.get('k8s/pods.json') is made}\n")
        return real(bundle, *args)

    monkeypatch.setattr(child, "FORKS", forks)
    monkeypatch.setattr(service_module, "collect_live", collected)
    monkeypatch.setattr(service_module, "analyze_bundle", analysis)
    service = Service(settings(), ReportStore(tmp_path, Limits()))
    meta = service.run_triage("schedule", service.settings.target)
    assert meta is not None and meta["verdict"]["status"] == "healthy"
    assert made == untouched and all(p.events == [] and p.workload_kind is None for p in made)
    assert taken.read_text() == f"{forks}\n"
