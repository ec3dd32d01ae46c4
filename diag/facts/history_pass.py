"""The facts again with every event, termination and Ray death counted as current, for the history
pass (diag.verdict.history), built from the facts the window gave.

Only what judges those by the window is built again: the Kubernetes facts (of a pod or node, only the
facts its events, terminations or eviction give, and only where one of them is past the window) and
Ray's per-subject facts. The rest is taken as it is: GPU and vLLM facts read the clock for ages and
episodes only, objects known from events only and Ray's and the GPUs' cluster facts read none, and
neither do the Kubernetes lookups.
"""

from __future__ import annotations

import functools
from dataclasses import replace

from diag.facts import Facts, Subject, bundle_facts, guarded, kubernetes, ray
from diag.facts.common import pod_window_times
from diag.snapshot.clock import Clock
from diag.snapshot.model import Snapshot


def without_window(snap: Snapshot, facts: Facts, clock: Clock) -> Facts:
    """`facts`: built with a history window; `clock`: the same clock without one (Clock.without_window)."""
    window = replace(clock, window_s=facts.cluster.get("history_window_s"))
    kept = facts.lookups
    k8s_index = functools.cache(
        lambda: replace(kept, clock=clock) if kept is not None else kubernetes.lookups(snap, clock)
    )
    cluster: dict = guarded(snap, "kubernetes cluster", lambda: kubernetes.cluster_facts(snap, k8s_index()), {})
    cluster |= {k: v for k, v in facts.cluster.items() if k not in cluster}
    cluster |= bundle_facts(snap, clock)
    scopes: dict[str, list[Subject]] = {"cluster": [cluster]}
    scopes.update(guarded(snap, "kubernetes", lambda: _kubernetes(snap, k8s_index(), facts, window), {}))
    scopes.update(guarded(snap, "ray", lambda: ray.scopes(snap, clock), {}))
    # in the order of the first build, so that findings come in the same order
    scopes = {scope: scopes.get(scope, subjects) for scope, subjects in facts.scopes.items()} | scopes
    return Facts(scopes=scopes, cluster=cluster)


def _kubernetes(snap: Snapshot, index: kubernetes.Lookups, facts: Facts, window: Clock) -> dict[str, list[dict]]:
    """A pod or node with nothing past the window keeps its facts; another has those the window changes
    built again. Without the first build's pods or nodes (it failed), they are built whole."""
    pods, nodes = facts.scopes.get("pod", []), facts.scopes.get("node", [])
    if len(pods) != len(snap.pods) or len(nodes) != len(snap.nodes):
        return kubernetes.scopes(snap, index)
    return {
        "pod": [
            old if all(window.current(t) for t in pod_window_times(p)) else old | kubernetes.pod_windowed(p, index)
            for p, old in zip(snap.pods, pods, strict=True)
        ],
        "node": [
            old
            if all(window.current(e.last_seen) for e in n.events if e.last_seen)
            else old | kubernetes.node_windowed(n, index)
            for n, old in zip(snap.nodes, nodes, strict=True)
        ],
    } | kubernetes.object_scopes(snap, index)
