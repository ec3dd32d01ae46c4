"""diag/collect/watch.py: what a watched copy holds and hands out (the live behaviour against a real
API server is tests/live/test_serve_watch.py)."""

from __future__ import annotations

import copy
import json
import queue
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import pytest

from diag.bundle.files import Bundle
from diag.collect.base import Sink
from diag.collect.kube import KubeError
from diag.collect.redact import Redactor
from diag.collect.watch import ABSENT_S, WarmLists

if TYPE_CHECKING:
    from diag.collect.kube import KubeAccess


def event(name: str, managed: bool = True) -> dict:
    meta: dict = {"name": name, "namespace": "tenant", "resourceVersion": "5", "uid": f"uid-{name}"}
    if managed:
        meta["managedFields"] = [{"manager": "kubelet", "operation": "Update", "fieldsV1": {"f:count": {}}}]
    return {"metadata": meta, "involvedObject": {"kind": "Pod", "name": name}, "reason": "Pulled", "type": "Normal"}


class FakeKube:
    """list_items answers a deep copy of `items`; the watch delivers the lines put on `lines`."""

    def __init__(self, items: list[dict]) -> None:
        self.items = items
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.lists = 0

    def list_items(self, kind: str, *args: object) -> tuple[list, str]:
        self.lists += 1
        each = cast("Callable[[dict], object]", args[-1])
        return [each(item) for item in copy.deepcopy(self.items)], "5"

    def watch_lines(self, *args: object) -> bool:
        on_line = cast("Callable[[bytes], bool]", args[-1])
        while (line := self.lines.get()) is not None:
            on_line(line)
            self.lines.task_done()
        return True

    def send(self, kind: str, item: dict) -> None:
        self.lines.put(json.dumps({"type": kind, "object": item}).encode())
        self.lines.join()


def listed(warm: WarmLists, kube: FakeKube, max_items: int) -> dict:
    return warm.list_json(cast("KubeAccess", kube), "events", "tenant", None, None, max_items)


def written(document: dict) -> tuple[bytes, dict[str, int]]:
    redactor = Redactor()
    sink = Sink(Bundle(), redactor)
    sink.write_json("k8s/events.json", document)
    return sink.bundle.files["k8s/events.json"], dict(redactor.applied)


def test_a_copy_written_to_the_bundle_is_the_list_the_api_server_gave() -> None:
    items = [event(f"e{i}") for i in range(3)] + [event("plain", managed=False)]
    kube = FakeKube(items)
    warm = WarmLists()
    try:
        served = listed(warm, kube, 5000)
        given = {  # the list without a watch (diag/collect/kube.py KubeAccess.list_json)
            "apiVersion": "v1",
            "items": copy.deepcopy(items),
            "kind": "List",
            "metadata": {"resourceVersion": ""},
        }
        for item in given["items"]:
            item.update(apiVersion="v1", kind="Event")
        given["items"].sort(key=lambda i: i["metadata"]["name"])
        assert written(served) == written(given)
        assert written(served)[1]["managed-fields-dropped"] == 3
        assert all(not i["metadata"].get("managedFields") for i in served["items"])
    finally:
        warm.stop()
        kube.lines.put(None)


def test_items_past_the_cap_come_back_whole_when_they_come_under_it() -> None:
    items = [event(f"e{i}") for i in range(5)]
    kube = FakeKube(items)
    warm = WarmLists()
    try:
        first = listed(warm, kube, 2)
        assert [i["metadata"]["name"] for i in first["items"]] == ["e0", "e1"]
        assert first["metadata"]["continue"]
        again = listed(warm, kube, 2)
        assert again == first
        assert all(a.raw is b.raw and a is not b for a, b in zip(first["items"], again["items"], strict=True))

        kube.send("DELETED", event("e0"))
        changed = event("e4")
        changed["reason"] = "Killing"
        kube.send("MODIFIED", changed)
        after = listed(warm, kube, 4)
        assert [i["metadata"]["name"] for i in after["items"]] == ["e1", "e2", "e3", "e4"]
        assert "continue" not in after["metadata"]
        expected = {**event("e2"), "apiVersion": "v1", "kind": "Event"}
        expected["metadata"]["managedFields"] = []
        assert after["items"][1] == expected  # kept as text past the cap, parsed back as it was
        assert after["items"][3]["reason"] == "Killing" and kube.lists == 1
    finally:
        warm.stop()
        kube.lines.put(None)


def test_an_item_is_made_once_while_the_copies_hand_it_out_unchanged() -> None:
    kube = FakeKube([event("a"), event("b")])
    warm = WarmLists()
    calls: list[list[str]] = []

    def parse(items: list[dict]) -> list[str]:
        calls.append([i["metadata"]["name"] for i in items])
        return [f"parsed {i['metadata']['name']} {i['reason']}" for i in items]

    try:
        assert warm.per_item("p", listed(warm, kube, 10)["items"], parse) == ["parsed a Pulled", "parsed b Pulled"]
        assert warm.per_item("p", listed(warm, kube, 10)["items"], parse) == ["parsed a Pulled", "parsed b Pulled"]
        kube.send("MODIFIED", {**event("b"), "reason": "Killing"})
        kube.send("ADDED", event("c"))
        assert warm.per_item("p", listed(warm, kube, 10)["items"], parse) == [
            "parsed a Pulled",
            "parsed b Killing",
            "parsed c Pulled",
        ]
        assert calls == [["a", "b"], ["b", "c"]]
        assert warm.per_item("other", listed(warm, kube, 1)["items"], parse) == ["parsed a Pulled"]
        assert calls[-1] == ["a"]  # each purpose keeps its own
        plain = [event("d")]  # not from a copy: made every time
        warm.per_item("p", plain, parse)
        warm.per_item("p", plain, parse)
        assert calls[-3:] == [["a"], ["d"], ["d"]]
    finally:
        warm.stop()
        kube.lines.put(None)


def test_a_copy_is_redacted_once_a_change_and_written_as_without_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    from diag.collect import redact

    secret = {**event("s"), "message": "pulled with password=hunter2hunter2"}
    kube = FakeKube([event("a"), secret])
    warm = WarmLists()
    cleaned: list[list[str]] = []
    real = redact._item_lines

    def cycle() -> None:
        served = listed(warm, kube, 10)
        expected = written(served)  # no copies: every item cleaned
        redactor = Redactor(warm.per_item)
        sink = Sink(Bundle(), redactor)
        with monkeypatch.context() as m:
            m.setattr(
                redact,
                "_item_lines",
                lambda items: cleaned.append([i["metadata"]["name"] for i in items]) or real(items),
            )
            sink.write_json("k8s/events.json", served)
        assert (sink.bundle.files["k8s/events.json"], dict(redactor.applied)) == expected
        assert b"hunter2" not in sink.bundle.files["k8s/events.json"] and redactor.applied

    try:
        cycle()
        cycle()  # cleans nothing again, and still counts what it hid
        kube.send("MODIFIED", {**event("a"), "reason": "Killing"})
        cycle()
        assert cleaned == [["a", "s"], ["a"]]
    finally:
        warm.stop()
        kube.lines.put(None)


def test_a_pod_the_collector_cannot_read_is_placed_in_the_whole_list_with_the_copies_too() -> None:
    from diag.collect.kubernetes import _parsed_pods

    pods = {"apiVersion": "v1", "kind": "List", "items": [
        {"kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "n"}, "spec": {"containers": []}} for i in range(3)
    ]}  # fmt: skip
    warm = WarmLists()
    assert [p.name for p in _parsed_pods(pods, [], warm)[0]] == ["p0", "p1", "p2"]
    pods["items"][2] = {"kind": "Pod", "metadata": {"namespace": "n"}, "spec": {"containers": "not a list"}}
    with_copies: list = []
    without: list = []
    assert _parsed_pods(pods, with_copies, warm) == ([], False) == _parsed_pods(pods, without)
    assert with_copies == without and "items[2]" in without[0].detail


class AbsentKind(FakeKube):
    """An API server that does not serve the kind (its CRD is not installed)."""

    def list_items(self, kind: str, *_: object) -> tuple[list[dict], str]:
        self.lists += 1
        raise KubeError("list RayCluster: HTTP 404 Not Found", status=404)


def test_a_kind_not_served_is_asked_again_after_a_while_not_every_cycle(monkeypatch: pytest.MonkeyPatch) -> None:
    import diag.collect.watch as watch

    kube, warm = AbsentKind([]), WarmLists()
    clock = [1000.0]
    monkeypatch.setattr(watch.time, "monotonic", lambda: clock[0])
    for _ in range(3):
        with pytest.raises(KubeError, match="404") as raised:
            listed(warm, kube, 10)
        assert raised.value.status == 404
        clock[0] += 60
    assert kube.lists == 1
    clock[0] += ABSENT_S
    with pytest.raises(KubeError):
        listed(warm, kube, 10)
    assert kube.lists == 2


def test_pods_handed_out_as_text_are_read_and_written_as_the_parsed_list() -> None:
    from diag.collect.kubernetes import _pods_of
    from diag.parsers.kubernetes import parse_pods, parse_pods_document

    env = [{"name": "HF_TOKEN", "value": "hf_abcdefghijklmnopqrstuv"}]
    pods = [{"metadata": {"name": f"p{i}", "namespace": "n", "managedFields": [{"manager": "kubelet"}]},
             "spec": {"containers": [{"name": "c", "env": env}]}, "status": {"phase": "Running"}}
            for i in range(3)]  # fmt: skip
    kube = FakeKube(pods)
    warm = WarmLists()
    try:
        as_text = warm.list_json(cast("KubeAccess", kube), "pods", "n", None, None, 10, raw=True)
        parsed = warm.list_json(cast("KubeAccess", kube), "pods", "n", None, None, 10)
        assert all(isinstance(i, bytes) for i in as_text["items"]) and kube.lists == 1
        assert written(as_text) == written(parsed)  # written(): a Redactor without the copies
        redactor = Redactor(warm.per_item)
        sink = Sink(Bundle(), redactor)
        sink.write_json("k8s/pods.json", as_text)
        assert (sink.bundle.files["k8s/pods.json"], dict(redactor.applied)) == written(parsed)
        assert b"hf_abcdef" not in sink.bundle.files["k8s/pods.json"]
        # the pods are parsed from the redacted items: those the file written gives
        made, as_written = _pods_of(as_text, warm)
        assert as_written and made == parse_pods(sink.bundle.text("k8s/pods.json")) == _pods_of(as_text, warm)[0]
        assert made != parse_pods_document(parsed) and made[0].containers[0].env == {"HF_TOKEN": "<redacted>"}
    finally:
        warm.stop()
        kube.lines.put(None)


def test_events_are_parsed_once_from_their_redacted_items_as_the_file_written_gives_them() -> None:
    from diag.collect.kubernetes import _parsed_events
    from diag.parsers.kubernetes import parse_events

    secret = {**event("s"), "message": "pulled with password=hunter2hunter2"}
    kube = FakeKube([event("a"), secret])
    warm = WarmLists()
    made: list[list[str]] = []
    try:
        for _ in range(2):
            served = listed(warm, kube, 10)
            sink = Sink(Bundle(), Redactor(warm.per_item))
            parsed = _parsed_events(served, warm)
            sink.write_json("k8s/events.json", served, parsed)
            assert parsed == parse_events(sink.bundle.text("k8s/events.json")) == sink.bundle.parsed["k8s/events.json"]
            assert "hunter2" not in parsed[1].message
            made.append([id(e) for e in parsed])
        assert made[0] == made[1]  # unchanged: the same objects, made once
        assert _parsed_events(served, None) is None  # without copies the file is parsed
    finally:
        warm.stop()
        kube.lines.put(None)
