"""Objects known only from their events: a pod or node that k8s/events.json names but that no list
shows, because k8s/pods.json (or nodes.json) is missing or was cut off. The events still say what went
wrong, so each such object is a subject of the `unlisted_object` scope.

When the list was read whole, an object absent from it is gone (deleted, replaced, scaled down) and its
events are history: no subject is made for it.

Event reasons, by who writes them:
  FailedScheduling    kube-scheduler, on the pod (shared/reference/k8s/messages.md)
  NotTriggerScaleUp   cluster-autoscaler, on the pod: "pod didn't trigger scale-up: <reasons>"
                      (cluster-autoscaler/processors/status/eventing_scale_up_processor.go)
  Evicted             kubelet eviction manager, on the pod: "The node was low on resource: ..."
  OOMKilling          node-problem-detector's kernel monitor, on the node (the kernel's OOM-killer line)
  SystemOOM           kubelet's OOM watcher, on the node: "System OOM encountered, victim process: ..."

A pod's scale-up that the cloud refused (`scale_up_failures`, a fact of the pod scope):
  TriggeredScaleUp    cluster-autoscaler, on the pod: "pod triggered scale-up: [{<node group> 0->1 (max: 4)}]"
  FailedScaleUp       GKE's cluster-autoscaler, on the pod: "Node scale up in zones <zone> associated with
                      this pod failed: GCE quota exceeded. Pod is at risk of not being scheduled."
  ScaleUpFailed       cluster-autoscaler, on ConfigMap kube-system/cluster-autoscaler-status: "Failed adding
                      <n> nodes to group <node group> due to <error code>; source errors: <cloud messages>"
                      (clusterstate/clusterstate.go); it names the group, the pod's TriggeredScaleUp ties it
                      to the pod.
"""

from __future__ import annotations

import re

from diag.facts.common import link
from diag.snapshot.model import Event, Snapshot

SCOPE = "unlisted_object"
LIST_OF_KIND = {"Pod": "k8s/pods.json", "Node": "k8s/nodes.json"}
# fact name -> the event reasons it gathers
POD_FAULTS = {
    "failed_scheduling": ("FailedScheduling",),
    "no_scale_up": ("NotTriggerScaleUp",),
    "evicted": ("Evicted",),
}
NODE_FAULTS = {"oom": ("OOMKilling", "SystemOOM")}
# A pod that was placed after the scheduler or the autoscaler refused it is no longer waiting.
PLACED_REASON = "Scheduled"
CLEARED_BY_PLACEMENT = ("failed_scheduling", "no_scale_up")


SCALE_UP_TRIGGERED = "TriggeredScaleUp"
POD_SCALE_UP_FAILED = "FailedScaleUp"
GROUP_SCALE_UP_FAILED = "ScaleUpFailed"
AUTOSCALER_STATUS = (
    "ConfigMap",
    "kube-system",
    "cluster-autoscaler-status",
)  # key of Indexes.events_about (diag.snapshot.indexes)
_TRIGGERED_GROUP = re.compile(r"\{(\S+) \d+->\d+ \(max: \d+\)\}")


def scale_up_failures(all_pod_events: list[Event], pod_events: list[Event], status_events: list[Event]) -> list[dict]:
    """The scale-ups made for a pod that failed: its own FailedScaleUp events, and cluster-autoscaler's
    ScaleUpFailed on a node group the pod's TriggeredScaleUp named. `pod_events` and `status_events` are
    the current ones; the trigger is read from all of the pod's (it is sent once, when the scale-up starts)."""
    groups = {
        g for e in all_pod_events if e.reason == SCALE_UP_TRIGGERED for g in _TRIGGERED_GROUP.findall(e.message or "")
    }
    found = [e for e in pod_events if e.reason == POD_SCALE_UP_FAILED]
    found += [
        e
        for e in status_events
        if e.reason == GROUP_SCALE_UP_FAILED and any(f" group {g} " in (e.message or "") for g in groups)
    ]
    return [
        {"reason": e.reason, "source": e.source, "message": e.message, "count": e.count, "last_seen": e.last_seen}
        for e in found
    ]


def scopes(snap: Snapshot) -> dict[str, list[dict]]:
    return {SCOPE: unlisted_objects(snap)}


def unlisted_objects(snap: Snapshot) -> list[dict]:
    listed = {("Pod", p.namespace, p.name) for p in snap.pods} | {("Node", None, n.name) for n in snap.nodes}
    named: dict[tuple[str, str | None, str], list[Event]] = {}
    for event in snap.events:
        kind = event.involved_kind
        if kind not in LIST_OF_KIND or _list_whole(snap, kind):
            continue
        key = (kind, event.namespace if kind == "Pod" else None, event.involved_name)
        if key not in listed:
            named.setdefault(key, []).append(event)
    return [
        _subject(kind, namespace, name, events, snap)
        for (kind, namespace, name), events in sorted(named.items(), key=str)
    ]


def _list_whole(snap: Snapshot, kind: str) -> bool:
    status = snap.sources.get(LIST_OF_KIND[kind])
    return status is not None and status.status == "ok"


def _subject(kind: str, namespace: str | None, name: str, events: list[Event], snap: Snapshot) -> dict:
    newest_first = sorted(events, key=lambda e: e.last_seen or "", reverse=True)
    own_faults = POD_FAULTS if kind == "Pod" else NODE_FAULTS
    placed_at = max((e.last_seen or "" for e in events if e.reason == PLACED_REASON), default=None)
    facts: dict = {
        "kind": kind,
        "namespace": namespace,
        "name": name,
        "list": LIST_OF_KIND[kind],
        "list_status": snap.sources[LIST_OF_KIND[kind]].status if LIST_OF_KIND[kind] in snap.sources else "missing",
        "events": [_event(e) for e in newest_first],
    }
    for fact, reasons in (POD_FAULTS | NODE_FAULTS).items():
        found = [e for e in newest_first if e.reason in reasons and fact in own_faults]
        if fact in CLEARED_BY_PLACEMENT and placed_at is not None:
            found = [e for e in found if e.last_seen is None or e.last_seen > placed_at]
        facts[fact] = [_event(e) for e in found]
    if kind == "Pod":
        facts["_subject"] = f"pod/{namespace}/{name}"
        facts["_links"] = link("pod", f"{namespace}/{name}")
    else:
        facts["_subject"] = f"node/{name}"
        facts["_links"] = link("node", name)
    return facts


def _event(e: Event) -> dict:
    return {
        "reason": e.reason,
        "message": e.message,
        "type": e.type,
        "count": e.count,
        "last_seen": e.last_seen,
        "source": e.source,
        "line": f"{e.reason} ({e.source or 'reporter unknown'}, {e.count}x, "
        f"last {e.last_seen or 'at an unknown time'}): {e.message}",
    }
