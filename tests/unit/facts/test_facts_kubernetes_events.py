"""Objects known only from their events: subjects exist only while the list that would show the object
is missing or cut off, and never for an object that list does show."""

from __future__ import annotations

from diag.facts import kubernetes_events
from diag.snapshot.model import Event, Node, Pod, Snapshot, SourceStatus

FAILED_SCHEDULING = Event(
    namespace="llm-serving",
    involved_kind="Pod",
    involved_name="vllm-1",
    reason="FailedScheduling",
    message="0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available: "
    "4 No preemption victims found for incoming pod.",
    type="Warning",
    count=14,
    last_seen="2026-12-02T09:31:12Z",
    source="default-scheduler",
)
NO_SCALE_UP = Event(
    namespace="llm-serving",
    involved_kind="Pod",
    involved_name="vllm-1",
    reason="NotTriggerScaleUp",
    message="pod didn't trigger scale-up: 1 max node group size reached",
    type="Normal",
    count=9,
    last_seen="2026-12-02T09:30:55Z",
    source="cluster-autoscaler",
)
NODE_OOM = Event(
    namespace="default",
    involved_kind="Node",
    involved_name="gpu-h100-3",
    reason="SystemOOM",
    message="System OOM encountered, victim process: python3, pid: 48213",
    type="Warning",
    count=2,
    last_seen="2026-12-02T09:14:52Z",
    source="kubelet",
)


def subjects(snap: Snapshot) -> dict[str, dict]:
    return {s["_subject"]: s for s in kubernetes_events.scopes(snap)["unlisted_object"]}


def test_lists_missing_the_events_speak_for_pod_and_node():
    snap = Snapshot(events=[FAILED_SCHEDULING, NO_SCALE_UP, NODE_OOM])
    found = subjects(snap)
    assert sorted(found) == ["node/gpu-h100-3", "pod/llm-serving/vllm-1"]
    pod = found["pod/llm-serving/vllm-1"]
    assert (pod["list"], pod["list_status"]) == ("k8s/pods.json", "missing")
    assert [e["count"] for e in pod["failed_scheduling"]] == [14]
    assert pod["failed_scheduling"][0]["line"] == (
        "FailedScheduling (default-scheduler, 14x, last 2026-12-02T09:31:12Z): " + FAILED_SCHEDULING.message
    )
    assert [e["reason"] for e in pod["no_scale_up"]] == ["NotTriggerScaleUp"]
    assert (pod["evicted"], pod["oom"]) == ([], [])
    node = found["node/gpu-h100-3"]
    assert [e["reason"] for e in node["oom"]] == ["SystemOOM"] and node["failed_scheduling"] == []
    assert node["_links"] == ["node:gpu-h100-3"] and pod["_links"] == ["pod:llm-serving/vllm-1"]


def test_an_object_its_list_shows_is_no_subject():
    snap = Snapshot(
        events=[FAILED_SCHEDULING, NODE_OOM],
        pods=[Pod(namespace="llm-serving", name="vllm-1")],
        nodes=[Node(name="gpu-h100-3")],
    )
    snap.sources["k8s/pods.json"] = SourceStatus(
        "failed", "k8s/pods.json: truncated after 1 complete item (those were used)"
    )
    assert subjects(snap) == {}


def test_a_whole_list_without_the_object_means_it_is_gone():
    snap = Snapshot(events=[FAILED_SCHEDULING, NODE_OOM])
    snap.sources["k8s/pods.json"] = SourceStatus("ok")
    snap.sources["k8s/nodes.json"] = SourceStatus("ok")
    assert subjects(snap) == {}


def test_a_cut_off_list_leaves_the_lost_objects_to_their_events():
    snap = Snapshot(events=[FAILED_SCHEDULING], pods=[Pod(namespace="llm-serving", name="vllm-0")])
    snap.sources["k8s/pods.json"] = SourceStatus(
        "failed", "k8s/pods.json: truncated after 1 complete item (those were used)"
    )
    (pod,) = subjects(snap).values()
    assert (pod["_subject"], pod["list_status"]) == ("pod/llm-serving/vllm-1", "failed")


def test_the_same_name_in_another_namespace_is_another_pod():
    snap = Snapshot(events=[FAILED_SCHEDULING], pods=[Pod(namespace="other-team", name="vllm-1")])
    snap.sources["k8s/pods.json"] = SourceStatus(
        "failed", "k8s/pods.json: truncated after 1 complete item (those were used)"
    )
    assert list(subjects(snap)) == ["pod/llm-serving/vllm-1"]


def test_a_pod_placed_after_the_refusals_is_no_longer_waiting():
    scheduled = Event(
        namespace="llm-serving",
        involved_kind="Pod",
        involved_name="vllm-1",
        reason="Scheduled",
        message="Successfully assigned llm-serving/vllm-1 to gpu-h100-2",
        type="Normal",
        last_seen="2026-12-02T09:40:00Z",
        source="default-scheduler",
    )
    (pod,) = subjects(Snapshot(events=[FAILED_SCHEDULING, NO_SCALE_UP, scheduled])).values()
    assert (pod["failed_scheduling"], pod["no_scale_up"]) == ([], [])
    assert [e["reason"] for e in pod["events"]] == ["Scheduled", "FailedScheduling", "NotTriggerScaleUp"]


# ---------------------------------------------------------------- a scale-up the cloud refused (K8S-511)

GROUP = "https://www.googleapis.com/compute/v1/projects/acme-llm/zones/us-central1-a/instanceGroups/gke-llm-h100-pool-5f2c1a9e-grp"
TRIGGERED = Event(
    namespace="llm-serving",
    involved_kind="Pod",
    involved_name="vllm-1",
    reason="TriggeredScaleUp",
    message=f"pod triggered scale-up: [{{{GROUP} 0->1 (max: 4)}}]",
    type="Normal",
    count=1,
    last_seen="2026-12-02T08:02:52Z",
    source="cluster-autoscaler",
)


def group_failed(group: str) -> Event:
    return Event(
        namespace="kube-system",
        involved_kind="ConfigMap",
        involved_name="cluster-autoscaler-status",
        reason="ScaleUpFailed",
        message=f"Failed adding 1 nodes to group {group} due to QUOTA_EXCEEDED; "
        "source errors: Instance 'gke-x' creation failed: "
        "Quota 'NVIDIA_H100_GPUS' exceeded.  Limit: 16.0 in region us-central1.",
        type="Warning",
        count=6,
        last_seen="2026-12-02T09:12:31Z",
        source="cluster-autoscaler",
    )


def test_a_group_failure_counts_for_the_pod_whose_scale_up_named_that_group():
    [found] = kubernetes_events.scale_up_failures([TRIGGERED], [], [group_failed(GROUP)])
    assert found["reason"] == "ScaleUpFailed" and "QUOTA_EXCEEDED" in found["message"]
    assert kubernetes_events.scale_up_failures([TRIGGERED], [], [group_failed(GROUP + "-other")]) == []
    assert kubernetes_events.scale_up_failures([], [], [group_failed(GROUP)]) == []  # no scale-up was made for this pod


def test_gke_failed_scale_up_on_the_pod_counts_while_current():
    gke = Event(
        namespace="llm-serving",
        involved_kind="Pod",
        involved_name="vllm-1",
        reason="FailedScaleUp",
        message="Node scale up in zones us-central1-c associated with this pod "
        "failed: GCE quota exceeded. Pod is at risk of not being scheduled.",
        type="Warning",
        count=3,
        last_seen="2026-12-02T09:20:00Z",
        source="cluster-autoscaler",
    )
    assert [f["message"] for f in kubernetes_events.scale_up_failures([gke], [gke], [])] == [gke.message]
    assert kubernetes_events.scale_up_failures([gke], [], []) == []  # aged out of the window: history
