"""In what order the Kubernetes objects collector asks the API server: the pods come first (after the
Ray lists that may scope them), alone, and whoever waits for the pods gets them before the other lists
and the events are read. A fake API server records each list's start and end."""

from __future__ import annotations

import json
import threading
import time

from diag.bundle import Bundle
from diag.collect.base import Sink, Target
from diag.collect.k8s import collect_objects
from diag.model import Pod

_POD = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "vllm-0", "namespace": "llm", "uid": "u-1"},
    "spec": {"nodeName": "gpu-1", "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0"}]},
    "status": {"phase": "Running"},
}


class _RecordingApiServer:
    """Answers every list at once with an empty List (the pods with one pod); logs when each starts and ends."""

    def __init__(self, fail: tuple[str, ...] = ()) -> None:
        self.log: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._fail = fail

    def current_namespace(self) -> str:
        return "llm"

    def list_json(self, kind: str, namespace: str | None, label_selector: str | None = None,
                  field_selector: str | None = None, max_items: int | None = None) -> dict:
        from diag.collect.kube import KubeError

        self._note("start", kind)
        time.sleep(0.02)  # long enough for lists started together to overlap
        self._note("end", kind)
        if kind in self._fail:
            raise KubeError(f"list {kind}: forbidden", status=403)
        items = [_POD] if kind == "pods" else []
        return {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}}

    def _note(self, what: str, kind: str) -> None:
        with self._lock:
            self.log.append((what, kind))


def _collect(api: _RecordingApiServer) -> tuple[list, Bundle]:
    bundle = Bundle()

    def on_pods(pods: list[Pod]) -> None:
        api._note("pods published", ",".join(p.name for p in pods))

    results = collect_objects(api, Target(namespace="llm"), Sink(bundle), on_pods)  # type: ignore[arg-type]
    return results, bundle


def test_the_pods_are_listed_alone_and_published_before_the_other_lists_are_waited_for() -> None:
    api = _RecordingApiServer()
    results, bundle = _collect(api)
    log = api.log
    pods_end = log.index(("end", "pods"))
    started = [kind for what, kind in log if what == "start"]
    assert started[:2] == ["rayclusters", "rayservices"] and started[2] == "pods"
    # nothing else runs beside the pods list
    assert all(what == "end" for what, _ in log[log.index(("start", "pods")) + 1 : pods_end])
    assert {"services", "endpoints", "deployments", "statefulsets", "hpa", "nodes", "daemonsets"} <= {
        kind for what, kind in log[pods_end:] if what == "start"
    }
    published = log.index(("pods published", "vllm-0"))
    assert published < log.index(("start", "events"))
    # every list still written, as before
    assert {r.name for r in results if r.status == "ok"} >= {f"k8s/{k}.json" for k in ("pods", "nodes", "services", "events")}
    assert json.loads(bundle.files["k8s/pods.json"])["items"][0]["metadata"]["name"] == "vllm-0"


def test_a_failed_pods_list_still_releases_the_others_with_no_pods() -> None:
    api = _RecordingApiServer(fail=("pods",))
    results, _ = _collect(api)
    assert ("pods published", "") in api.log
    assert {r.name: r.status for r in results}["k8s/pods.json"] == "failed"
    assert {r.name: r.status for r in results}["k8s/nodes.json"] == "ok"
