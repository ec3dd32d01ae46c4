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

    def list_items(self, kind: str, *_: object) -> tuple[list[dict], str]:
        self.lists += 1
        return copy.deepcopy(self.items), "5"

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
        assert all(a is b for a, b in zip(first["items"], again["items"], strict=True))  # the same objects

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


def test_an_item_is_parsed_once_while_the_copies_hand_out_the_same_object() -> None:
    warm = WarmLists()
    calls: list[list[str]] = []

    def parse(items: list[dict]) -> list[str]:
        calls.append([i["metadata"]["name"] for i in items])
        return [f"parsed {i['metadata']['name']} {i['reason']}" for i in items]

    items = [event("a"), event("b")]
    assert warm.parsed(items, parse) == ["parsed a Pulled", "parsed b Pulled"]
    changed = {**items[1], "reason": "Killing"}  # a MODIFIED event: a new object in the copy
    assert warm.parsed([items[0], changed, event("c")], parse) == [
        "parsed a Pulled",
        "parsed b Killing",
        "parsed c Pulled",
    ]
    assert calls == [["a", "b"], ["b", "c"]]
    assert warm.parsed([items[0]], parse) == ["parsed a Pulled"] and len(calls) == 2


def test_a_pod_the_collector_cannot_read_is_placed_in_the_whole_list_with_the_copies_too() -> None:
    from diag.collect.kubernetes import _parsed_pods

    pods = {"apiVersion": "v1", "kind": "List", "items": [
        {"kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "n"}, "spec": {"containers": []}} for i in range(3)
    ]}  # fmt: skip
    warm = WarmLists()
    assert [p.name for p in _parsed_pods(pods, [], warm)] == ["p0", "p1", "p2"]
    pods["items"][2] = {"kind": "Pod", "metadata": {"namespace": "n"}, "spec": {"containers": "not a list"}}
    with_copies: list = []
    without: list = []
    assert _parsed_pods(pods, with_copies, warm) == [] and _parsed_pods(pods, without) == []
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
