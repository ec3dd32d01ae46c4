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
from dataclasses import dataclass, field, replace
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
    # the Kubernetes lookups they were built with: the history pass reads no clock in them, so it keeps them
    lookups: kubernetes.Lookups | None = field(default=None, repr=False, compare=False)


SCOPES = (
    "cluster",
    "pod",
    "node",
    "service",
    "workload",
    "hpa",
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


def build_facts(
    snap: Snapshot, clock: Clock | None = None, settings: dict | None = None, unwindowed_of: Facts | None = None
) -> Facts:
    """`clock`: the collection time and history window; by default none, so everything counts as current.
    `settings`: the thresholds, for the facts that find when a condition held in Prometheus' history.
    `unwindowed_of`: facts built with a history window, for the history pass that builds them again
    without one: only the Kubernetes facts and Ray's per-subject facts judge events, terminations and
    deaths by the window (GPU and vLLM facts read the clock for ages and episodes only, Ray's cluster
    facts and the Kubernetes lookups read none), so the others are taken as they are.
    A builder that fails on this bundle's content costs its facts only: a failed source `facts/<part>`
    says so (a gap, so the verdict cannot be healthy) and the other layers are still built."""
    clock = clock or Clock.of(snap)
    if settings is None:
        settings = default_settings()
    # one index for both Kubernetes parts; a failure to build it is each part's failure
    built = unwindowed_of.lookups if unwindowed_of is not None else None
    if built is not None:
        k8s_index = functools.cache(lambda: replace(built, clock=clock))
    else:
        k8s_index = functools.cache(lambda: kubernetes.lookups(snap, clock))
    cluster: dict = _guarded(snap, "kubernetes cluster", lambda: kubernetes.cluster_facts(snap, k8s_index()), {})
    if unwindowed_of is None:
        cluster |= _guarded(snap, "ray cluster", lambda: ray.cluster_facts(snap), {})
        cluster |= _guarded(snap, "gpu cluster", lambda: gpu.cluster_facts(snap), {})
    else:  # Ray's and the GPUs' cluster facts read no clock
        cluster |= {k: v for k, v in unwindowed_of.cluster.items() if k not in cluster}
    # "partial": a cut-off list whose complete items were recovered; rules that need it still run
    cluster["sources"] = {
        name: "partial" if s.status == "failed" and s.recovered is not None else s.status
        for name, s in snap.sources.items()
    }
    cluster["collected_at"] = iso(clock.now) if clock.now else None
    cluster["history_window_s"] = clock.window_s
    window = _guarded(snap, "prometheus window", lambda: history_window(snap), None)
    cluster["prometheus_window"] = dataclasses.asdict(window) if window else None
    cluster["_subject"] = "cluster"
    cluster["_links"] = []
    scopes: dict[str, list[Subject]] = {"cluster": [cluster]}
    windowed = None
    if unwindowed_of is not None:
        windowed = unwindowed_of.scopes, replace(clock, window_s=unwindowed_of.cluster.get("history_window_s"))
    scopes.update(_guarded(snap, "kubernetes", lambda: kubernetes.scopes(snap, k8s_index(), windowed), {}))
    if unwindowed_of is None:
        scopes.update(_guarded(snap, "kubernetes events", lambda: kubernetes_events.scopes(snap), {}))
    scopes.update(_guarded(snap, "ray", lambda: ray.scopes(snap, clock), {}))
    if unwindowed_of is None:
        scopes.update(_guarded(snap, "gpu", lambda: gpu.scopes(snap, settings, clock), {}))
        scopes.update(_guarded(snap, "vllm", lambda: vllm.scopes(snap, settings, clock), {}))
    else:  # in the order of the first build, so that findings come in the same order
        scopes = {scope: scopes.get(scope, subjects) for scope, subjects in unwindowed_of.scopes.items()} | scopes
    # built by the parts above already; had that failed, they said so under the same name
    return Facts(scopes=scopes, cluster=cluster, lookups=_guarded(snap, "kubernetes", k8s_index, None))


def _guarded(snap: Snapshot, part: str, build: Callable[[], T], empty: E) -> T | E:
    try:
        return build()
    except MemoryError:
        raise
    except Exception as e:  # content no builder foresaw costs that part, not the analysis
        name = f"facts/{part.replace(' ', '-')}"
        snap.sources[name] = SourceStatus(
            "failed", f"{name}: the {part} facts could not be built from this bundle: {unexpected(e)}"
        )
        return empty
