"""diag/collect/watch.py against the real API server (tests/live/k8s_cluster.py): after the first cycle
lists, the next cycles list nothing (the API server's own request counter says so) and still see what
changed, as a fresh `kubectl get` does."""

from __future__ import annotations

import json
import re
import time
from collections import Counter

import pytest
from k8s_cluster import ControlPlane, wait_for
from k8s_scenarios import apply, get, namespace, pods, service, two_gpu_nodes, vllm_deployment

from diag.collect.base import Target
from diag.collect.runner import collect_live
from diag.collect.watch import WarmLists
from diag.parsers.kubernetes import parse_events, parse_pods

pytestmark = pytest.mark.live

NS = "serve-watch"
SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$", re.MULTILINE)


def requests(cluster: ControlPlane, verb: str) -> dict[str, float]:
    """The API server's requests of `verb` so far, by resource."""
    counts: dict[str, float] = {}
    for m in SAMPLE.finditer(cluster.kubectl("get", "--raw", "/metrics").stdout):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m["labels"]))
        if labels.get("verb") == verb:
            counts[labels.get("resource", "")] = counts.get(labels.get("resource", ""), 0) + float(m["value"])
    return counts


def listed_between(before: dict[str, float], after: dict[str, float], kinds: set[str]) -> float:
    return sum(after.get(k, 0) - before.get(k, 0) for k in kinds)


def no_namespace_terminating(cluster: ControlPlane) -> None:
    """The namespace controller lists every kind of a namespace it deletes (an earlier test's, deleted
    without waiting): those lists land in the API server's counters too, so they are let finish first."""
    deadline = time.monotonic() + 120  # then on regardless: a namespace stuck on a finalizer is listed rarely
    while time.monotonic() < deadline and any(
        n["status"].get("phase") == "Terminating" for n in get(cluster, "namespaces")["items"]
    ):
        time.sleep(1)


def listed_in_a_quiet_cycle(cluster: ControlPlane, target: Target, warm: WarmLists, kinds: set[str]):
    """Up to three cycles, stopping at the first the API server counts no LIST of `kinds` in: that
    cycle's lists by kind (empty) and its collection, else the last cycle's. The counter is the whole
    control plane's, and a controller's or kwok's own relist lands in it too (once in CI); a client
    that lists every cycle still lists in all three, and warm.lists (ours alone) must not move."""
    for _ in range(3):
        before = requests(cluster, "LIST")
        collected = collect_live(target, warm=warm)
        after = requests(cluster, "LIST")
        listed = {k: after.get(k, 0) - before.get(k, 0) for k in kinds if after.get(k, 0) > before.get(k, 0)}
        if not listed:
            break
    return listed, collected


def names(bundle_pods: bytes) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in json.loads(bundle_pods)["items"]}


def test_cycles_after_the_first_list_nothing_and_see_every_change(control_plane: ControlPlane) -> None:
    cluster = two_gpu_nodes(control_plane)
    apply(cluster, namespace(NS), vllm_deployment("llama", NS, gpus=1, tolerate=True), service("llama", NS))
    wait_for(
        "the llama pod running", lambda: any(p["status"].get("phase") == "Running" for p in pods(cluster, NS, "llama"))
    )
    no_namespace_terminating(cluster)
    target = Target(kubeconfig=str(cluster.kubeconfig), namespace=NS, local_gpu=False, scrapes=1, total_timeout_s=60)
    kinds = {"pods", "events", "nodes", "services", "endpoints", "deployments", "statefulsets", "daemonsets",
             "horizontalpodautoscalers", "ingresses"}  # fmt: skip
    warm = WarmLists()
    try:
        before = requests(cluster, "LIST")
        collect_live(target, warm=warm)
        first = listed_between(before, requests(cluster, "LIST"), kinds)
        assert first >= len(kinds) and warm.lists >= len(kinds) - 1
        made = warm.lists

        listed, second = listed_in_a_quiet_cycle(cluster, target, warm, kinds)
        assert listed == {} and warm.lists == made
        assert names(second.files["k8s/pods.json"]) == names(json.dumps(get(cluster, "pods", "-n", NS)).encode())
        # the pods the collection made, from their redacted items, are those the analysis would parse
        assert second.parsed["k8s/pods.json"] == parse_pods(second.text("k8s/pods.json")) != []
        assert second.parsed["k8s/events.json"] == parse_events(second.text("k8s/events.json")) != []

        # a change between cycles: one more replica, which the next cycles see without listing
        cluster.kubectl("scale", "deployment", "llama", "-n", NS, "--replicas=2")

        def running() -> int:
            return sum(p["status"].get("phase") == "Running" for p in pods(cluster, NS, "llama"))

        wait_for("two llama pods running", lambda: running() == 2)
        expected = names(json.dumps(get(cluster, "pods", "-n", NS)).encode())
        placed = {p["spec"]["nodeName"] for p in pods(cluster, NS, "llama")}
        before = requests(cluster, "LIST")
        wait_for(
            "a cycle to see both", lambda: names(collect_live(target, warm=warm).files["k8s/pods.json"]) == expected
        )
        assert listed_between(before, requests(cluster, "LIST"), kinds - {"pods"}) == 0 and len(expected) == 2
        # a GPU node new to the namespace's path is listed once, for every namespace's pods on it
        assert listed_between(before, requests(cluster, "LIST"), {"pods"}) <= len(placed) - 1
        made = warm.lists
        assert listed_in_a_quiet_cycle(cluster, target, warm, kinds)[0] == {} and warm.lists == made
        assert requests(cluster, "WATCH").get("pods", 0) >= 1
    finally:
        warm.stop()
        cluster.kubectl("delete", "namespace", NS, "--wait=false")


NS_GROWN = "serve-watch-grown"
ONLY_COLLECTIONS = {"log", "proxy", "exec"}  # pod subresources no control-plane component asks for


def collection_requests(cluster: ControlPlane) -> Counter[str]:
    """The API server's requests so far that a collection makes and the control plane's own components
    do not (in steady state): every LIST, and the pods' logs, proxied reads and execs; by verb and
    resource."""
    counts: Counter[str] = Counter()
    for m in SAMPLE.finditer(cluster.kubectl("get", "--raw", "/metrics").stdout):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m["labels"]))
        sub = labels.get("subresource", "")
        if labels.get("verb") == "LIST" or sub in ONLY_COLLECTIONS:
            counts[f"{labels.get('verb')} {labels.get('resource', '')}{'/' + sub if sub else ''}"] += int(
                float(m["value"])
            )
    return counts


def steady_cycle(cluster: ControlPlane, target: Target, warm: WarmLists) -> Counter[str]:
    """A cycle's requests: the first of up to three with no LIST of a watched kind (a control-plane
    component's own relist is counted too; see listed_in_a_quiet_cycle), else the last."""
    for _ in range(3):
        before = collection_requests(cluster)
        collect_live(target, warm=warm)
        made = collection_requests(cluster) - before
        if not any(what.startswith("LIST") and what.split()[1] in WATCHED for what in made):
            break
    return made


def app_pod(name: str, node: str) -> dict:
    container = {"name": "app", "image": "busybox:1.36", "command": ["sleep", "infinity"]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS_GROWN},
            "spec": {"nodeName": node, "tolerations": [{"operator": "Exists"}], "containers": [container]}}  # fmt: skip


def normal_event(i: int) -> dict:
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": f"app-{i}.{i:06d}", "namespace": NS_GROWN},
            "involvedObject": {"kind": "Pod", "name": f"app-{i % 30}", "namespace": NS_GROWN},
            "reason": "Pulled", "type": "Normal", "count": 1, "message": "Container image already present on machine",
            "source": {"component": "kubelet"}}  # fmt: skip


def test_a_steady_cycle_asks_the_same_whatever_the_number_of_objects(control_plane: ControlPlane) -> None:
    """Ten times the pods and events in the namespace, and a steady cycle makes the same requests:
    the lists come from the watched copies, and what is asked each cycle (logs, scrapes, exec, the
    lists whose CRDs are absent) is for the serving pods only."""
    cluster = two_gpu_nodes(control_plane)
    apply(cluster, namespace(NS_GROWN), vllm_deployment("llama", NS_GROWN, gpus=1, tolerate=True),
          service("llama", NS_GROWN), *(app_pod(f"app-{i}", "gpu-h100-1") for i in range(3)))  # fmt: skip
    wait_for("4 pods running", lambda: len(running_pods(cluster)) == 4)
    no_namespace_terminating(cluster)
    target = Target(
        kubeconfig=str(cluster.kubeconfig), namespace=NS_GROWN, local_gpu=False, scrapes=1, total_timeout_s=60
    )
    warm = WarmLists()
    try:
        collect_live(target, warm=warm)  # the first cycle lists
        small = steady_cycle(cluster, target, warm)

        apply(cluster, *(app_pod(f"app-{i}", f"gpu-h100-{1 + i % 2}") for i in range(3, 30)))
        apply(cluster, *(normal_event(i) for i in range(300)))
        wait_for("31 pods running", lambda: len(running_pods(cluster)) == 31)
        expected = names(json.dumps(get(cluster, "pods", "-n", NS_GROWN)).encode())
        wait_for(
            "a cycle to see the new pods",
            lambda: names(collect_live(target, warm=warm).files["k8s/pods.json"]) == expected,
        )
        grown = steady_cycle(cluster, target, warm)
        assert grown == small, (small, grown)
        assert not any(what.startswith("LIST") and what.split()[1] in WATCHED for what in grown), grown
        assert any("pods/" in what for what in grown), grown  # the serving pod's log, scrapes and exec
    finally:
        warm.stop()
        cluster.kubectl("delete", "namespace", NS_GROWN, "--wait=false")


WATCHED = {"pods", "events", "nodes", "services", "endpoints", "deployments", "statefulsets", "daemonsets",
           "horizontalpodautoscalers", "ingresses", "configmaps", "secrets"}  # fmt: skip


def running_pods(cluster: ControlPlane) -> list[dict]:
    return [p for p in get(cluster, "pods", "-n", NS_GROWN)["items"] if p["status"].get("phase") == "Running"]
