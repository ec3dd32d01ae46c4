"""The snapshot as rule conditions see it: plain dicts, one per subject, grouped by scope.

Every subject dict carries two keys the engine reads and rules may ignore:
  `_subject`  how the report names it ("pod/llm-serving/vllm-0", "gpu/node-a/0")
  `_links`    the subjects it is joined to, for causal links between findings
Each layer's module adds the derived values its rules need (counts, parsed messages, cross-layer
lookups), so that conditions stay short and read like the symptom they test.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from diag.core.errors import unexpected
from diag.core.rules_dir import default_settings
from diag.facts import gpu, kubernetes, kubernetes_events, ray, vllm
from diag.link.prometheus_join import history_window
from diag.snapshot.clock import Clock, iso
from diag.snapshot.model import Snapshot, SourceStatus

T = TypeVar("T")
E = TypeVar("E")

Subject = dict


@dataclass
class Facts:
    scopes: dict[str, list[Subject]] = field(default_factory=dict)
    cluster: dict = field(default_factory=dict)
    # the Kubernetes lookups they were built with: they read no clock, so the history pass keeps them
    lookups: kubernetes.Lookups | None = field(default=None, repr=False, compare=False)


SCOPES = (
    "cluster",
    "pod",
    "node",
    "service",
    "workload",
    "hpa",
    "ingress",
    "pdb",
    "network_policy",
    "route",
    "raycluster",
    "daemonset",
    "unlisted_object",
    "ray_node",
    "actor",
    "placement_group",
    "gpu",
    "gpu_node",
    "vllm_server",
)


def build_facts(snap: Snapshot, clock: Clock | None = None, settings: dict | None = None) -> Facts:
    """`clock`: the collection time and history window; by default none, so everything counts as current.
    `settings`: the thresholds, for the facts that find when a condition held in Prometheus' history.
    A builder that fails on this bundle's content costs its facts only: a failed source `facts/<part>`
    says so (a gap, so the verdict cannot be healthy) and the other layers are still built."""
    clock = clock or Clock.of(snap)
    if settings is None:
        settings = default_settings()
    # one index for both Kubernetes parts; a failure to build it is each part's failure
    k8s_index = functools.cache(lambda: kubernetes.lookups(snap, clock))
    cluster: dict = guarded(snap, "kubernetes cluster", lambda: kubernetes.cluster_facts(snap, k8s_index()), {})
    cluster |= guarded(snap, "ray cluster", lambda: ray.cluster_facts(snap), {})
    cluster |= guarded(snap, "gpu cluster", lambda: gpu.cluster_facts(snap), {})
    cluster |= bundle_facts(snap, clock)
    scopes: dict[str, list[Subject]] = {"cluster": [cluster]}
    scopes.update(guarded(snap, "kubernetes", lambda: kubernetes.scopes(snap, k8s_index()), {}))
    scopes.update(guarded(snap, "kubernetes events", lambda: kubernetes_events.scopes(snap), {}))
    scopes.update(guarded(snap, "ray", lambda: ray.scopes(snap, clock), {}))
    scopes.update(guarded(snap, "gpu", lambda: gpu.scopes(snap, settings, clock), {}))
    scopes.update(guarded(snap, "vllm", lambda: vllm.scopes(snap, settings, clock), {}))
    # built by the parts above already; had that failed, they said so under the same name
    return Facts(scopes=scopes, cluster=cluster, lookups=guarded(snap, "kubernetes", k8s_index, None))


def bundle_facts(snap: Snapshot, clock: Clock) -> dict:
    """The cluster facts about the bundle itself: how each source fared, when it was collected, the
    history window and the range of Prometheus' history."""
    # "partial": a cut-off list whose complete items were recovered; rules that need it still run
    sources = {
        name: "partial" if s.status == "failed" and s.recovered is not None else s.status
        for name, s in snap.sources.items()
    }
    window = guarded(snap, "prometheus window", lambda: history_window(snap), None)
    return {
        "sources": sources,
        "collected_at": iso(clock.now) if clock.now else None,
        "history_window_s": clock.window_s,
        "prometheus_window": dataclasses.asdict(window) if window else None,
        "_subject": "cluster",
        "_links": [],
    }


def guarded(snap: Snapshot, part: str, build: Callable[[], T], empty: E) -> T | E:
    """`build()`, or `empty` when it fails on content no builder foresaw: that costs the part (a failed
    source `facts/<part>`), not the analysis."""
    try:
        return build()
    except MemoryError:
        raise
    except Exception as e:
        name = f"facts/{part.replace(' ', '-')}"
        snap.sources[name] = SourceStatus(
            "failed", f"{name}: the {part} facts could not be built from this bundle: {unexpected(e)}"
        )
        return empty
