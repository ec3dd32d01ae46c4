"""When a vLLM server went away and came back, from Prometheus' history, and what Kubernetes and Ray
said in the same minutes.

A restart is a new process behind the same server: `process_start_time_seconds` moved, or
kube-state-metrics' `kube_pod_container_status_restarts_total` went up. It went away at the first
sample where its target's `up` was 0 (or, without `up`, the first sample missing), and came back at
the first sample the new process answered. A rollout replaces the pod, so the old server's series
end and a new server's begin: no server of the two has a new process, and that is no restart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

from diag.facts.episodes import Timeline, Values
from diag.snapshot.clock import iso_time, parse_time
from diag.snapshot.model import PromWindow, Snapshot, VllmServer

SIGNALS: dict[str, tuple[str, ...]] = {
    "up": ("vllm_up",),
    "started": ("vllm_process_start_time",),
    "restarts": ("kube_container_restarts",),
    "running": ("vllm_num_requests_running",),
}
# Events that say why a pod stopped, whatever else happened: the cause of an episode they fall in.
CAUSE_REASONS = frozenset(
    {"Evicted", "Preempting", "TaintManagerEviction", "NodeNotReady", "OOMKilling", "SystemOOM", "RayNodeDied"}
)


def _clock(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%H:%M:%S")


@dataclass(frozen=True)
class Restart:
    went_away: float  # the first sample at which the server did not answer
    back: float  # the first sample at which the new process answered
    how: list[str] = field(default_factory=list)

    @property
    def minutes(self) -> float:
        return round((self.back - self.went_away) / 60, 1)

    def text(self) -> str:
        return (f"went away at {_clock(self.went_away)} UTC and answered again at {_clock(self.back)} UTC: "
                f"down {self.minutes:g} min ({'; '.join(self.how)})")  # fmt: skip

    def facts(self) -> dict:
        return {"found": True, "went_away": iso_time(self.went_away), "back": iso_time(self.back),
                "down_minutes": self.minutes, "text": self.text()}  # fmt: skip


def _answering(v: Values) -> bool:
    if "up" in v:
        return v["up"] >= 1
    return "running" in v


# Without a start time or a restart counter, a server away this long that answers again is taken as restarted.
_AWAY_WITHOUT_PROOF_S = 60.0


def restarts(server: VllmServer, window: PromWindow | None) -> list[Restart] | None:
    """Every restart of the server's process in the window; None where the history cannot tell. Where
    Prometheus has neither the process' start time nor the restart counter, a server that did not answer
    for at least _AWAY_WITHOUT_PROOF_S and then did counts, said so."""
    step = window.step if window else 15.0
    timeline = Timeline.of(server.history, SIGNALS, step, window.end if window else None)
    proof = timeline.has("started") or timeline.has("restarts")
    if not proof and not timeline.has("running"):
        return None
    found: list[Restart] = []
    last: tuple[float, Values] | None = None  # the last sample at which the server answered
    away: list[float] = []  # samples since then at which `up` was 0
    for t, v in timeline.rows:
        if not _answering(v):
            if last is not None and "up" in v:
                away.append(t)
            continue
        if last is not None:
            how = _new_process(last[1], v) if proof else _away_long(last[0], t, step)
            if how:
                went_away = away[0] if away else last[0] + step
                if away:
                    how.insert(0, f"`up` 0 for {len(away)} sample{'s' if len(away) != 1 else ''}")
                elif t - last[0] > 1.5 * step:
                    how.insert(0, f"no sample from {_clock(last[0] + step)} UTC")
                found.append(Restart(min(went_away, t), t, how))
        last, away = (t, v), []
    return found


def _away_long(last: float, now: float, step: float) -> list[str]:
    if now - last - step < max(_AWAY_WITHOUT_PROOF_S, 2 * step):
        return []
    return ["neither process_start_time_seconds nor kube_pod_container_status_restarts_total is in Prometheus: "
            "a server that long away is taken as restarted"]  # fmt: skip


def _new_process(before: Values, now: Values) -> list[str]:
    how = []
    if "started" in before and "started" in now and now["started"] > before["started"] + 1:
        how.append(f"process_start_time_seconds says the new process started at {_clock(now['started'])} UTC")
    if "restarts" in before and "restarts" in now and now["restarts"] > before["restarts"]:
        how.append(f"kube_pod_container_status_restarts_total {before['restarts']:g} -> {now['restarts']:g}")
    return how


def restart_facts(server: VllmServer, window: PromWindow | None, events: WindowEvents) -> dict | None:
    found = restarts(server, window)
    if found is None:
        return None
    if not found:
        return {"found": False}
    last = found[-1]
    pod = server.pod or server.history_pod
    around = events.between(last.went_away, last.back, {pod} if pod else set())
    cause = next((line for line, reason in around if reason in CAUSE_REASONS), None)
    return last.facts() | {
        "count": len(found),
        "events": [line for line, _ in around],
        "cause_event": cause,
        "from_outside": cause is not None,
    }


class WindowEvents:
    """Kubernetes events and Ray deaths on the history's time axis: those about given pods (and their
    nodes), and every Ray node or actor death, within settings.history_event_margin_s of an episode."""

    def __init__(self, snap: Snapshot, settings: dict) -> None:
        self.snap, self.settings = snap, settings
        self.loaded = False

    def _load(self) -> None:
        """Read on first use: most analyses have no episode to place events beside."""
        snap, self.loaded = self.snap, True
        self.margin = self.settings["history_event_margin_s"]
        self.node_of = {f"{p.namespace}/{p.name}": p.node_name for p in snap.pods if p.node_name}
        self.k8s: list[tuple[float, str, str, str | None, str]] = []  # (time, kind/name, reason, namespace, line)
        for e in snap.events:
            moment = parse_time(e.last_seen)
            if moment is None:
                continue
            t = moment.timestamp()
            message = " ".join(e.message.split())
            line = f"{_clock(t)} {e.type} {e.reason} {e.involved_kind.lower()}/{e.involved_name}: {message[:160]}"
            self.k8s.append((t, f"{e.involved_kind}/{e.involved_name}", e.reason, e.namespace, line))
        self.ray: list[tuple[float, str, str]] = []
        for node in snap.ray_nodes:
            if node.state == "DEAD" and (moment := parse_time(node.end_time)) is not None:
                t = moment.timestamp()
                said = f": {node.state_message}" if node.state_message else ""
                self.ray.append((t, "RayNodeDied", f"{_clock(t)} Ray node {node.node_ip or node.node_id} DEAD{said}"))
        for actor in snap.ray_actors:
            if actor.state == "DEAD" and (moment := parse_time(actor.end_time)) is not None:
                t = moment.timestamp()
                said = f": {actor.death_cause}" if actor.death_cause else ""
                self.ray.append((t, "RayActorDied", f"{_clock(t)} Ray actor {actor.class_name} DEAD{said}"))
        self.k8s.sort()
        self.ray.sort()

    def between(self, start: float, end: float, pods: set[str]) -> list[tuple[str, str]]:
        """(line, reason) of the events from `start` - margin to `end` + margin, oldest first."""
        if not self.loaded:
            self._load()
        low, high = start - self.margin, end + self.margin
        nodes = {self.node_of[p] for p in pods if p in self.node_of}
        about = {("Pod", p.split("/", 1)[1], p.split("/", 1)[0]) for p in pods} | {("Node", n, None) for n in nodes}
        picked = [
            (t, line, reason)
            for t, obj, reason, namespace, line in self.k8s
            if low <= t <= high and (*obj.split("/", 1), namespace if obj.startswith("Pod/") else None) in about
        ]
        picked += [(t, line, reason) for t, reason, line in self.ray if low <= t <= high]
        return [(line, reason) for _, line, reason in sorted(picked)]
