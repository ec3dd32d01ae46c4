"""What the HTML report draws on its time axis, read from the analysis alone: for each affected vLLM
server and GPU, its series (Prometheus' history, else its /metrics scrapes), the episodes its findings
report, and the Kubernetes events, Ray deaths and Xid lines about its pod and node.

An episode is shaded where a rule said it held: the dates a finding's evidence gives ("from
2026-12-03 16:33 to 2026-12-03 16:52 UTC", "since 2026-12-03 16:56 UTC ... still going on"), so what
is shaded is what the report says, to the minute it says it. Nothing here is judged again.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone

from diag.analyze import Report
from diag.engine.rules import Finding
from diag.snapshot.clock import parse_time
from diag.snapshot.model import GPU, Scrape, Snapshot, VllmServer

MAX_TIMELINES = 8  # the root cause's subjects first; a fleet's report stays small and quick to open
MAX_MARKS = 40  # per timeline, the newest

# A history name -> the first stem with data wins (old and new vLLM names, as diag/facts/vllm_episodes.py).
_SERVER_PANELS: list[tuple[str, str, list[tuple[str, tuple[str, ...], str]]]] = [
    ("KV-cache usage", "fraction", [("KV cache", ("vllm_kv_cache_usage_perc", "vllm_gpu_cache_usage_perc"), "kv")]),
    (
        "Requests",
        "requests",
        [
            ("running", ("vllm_num_requests_running",), "running"),
            ("waiting", ("vllm_num_requests_waiting",), "waiting"),
        ],
    ),
    ("Preemptions", "per s", [("preemptions", ("vllm_preemptions_rate_5m",), "preemptions_per_s")]),
    (
        "Token throughput",
        "tokens/s",
        [
            ("generated", ("vllm_generation_tokens_rate_5m",), "generation_per_s"),
            ("prompt", ("vllm_prompt_tokens_rate_5m",), "prompt_per_s"),
        ],
    ),
]
_GPU_PANELS: list[tuple[str, str, list[tuple[str, tuple[str, ...], str]]]] = [
    ("GPU memory used", "MiB", [("framebuffer used", ("dcgm_fb_used",), "")]),
    ("GPU utilisation", "%", [("utilisation", ("dcgm_gpu_util",), "")]),
]
_SCRAPE_GAUGES = {
    "kv": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "running": ("vllm:num_requests_running",),
    "waiting": ("vllm:num_requests_waiting",),
}
_SCRAPE_COUNTERS = {
    "preemptions_per_s": ("vllm:num_preemptions_total", "vllm:num_preemptions"),
    "generation_per_s": ("vllm:generation_tokens_total", "vllm:generation_tokens"),
    "prompt_per_s": ("vllm:prompt_tokens_total", "vllm:prompt_tokens"),
}
_STAMP = r"(\d{4}-\d{2}-\d{2} \d{2}:\d{2}(?::\d{2})?)"
_SPAN = re.compile(rf"\b(?:from {_STAMP} to {_STAMP}|since {_STAMP}) UTC")


@dataclass
class Series:
    label: str
    points: list[tuple[float, float]]  # (unix seconds, value)
    from_scrapes: bool = False  # the /metrics scrapes at collection, not Prometheus' history


@dataclass
class Panel:
    title: str
    unit: str
    series: list[Series]


@dataclass
class Episode:
    start: float
    end: float
    rule: str
    anchor: str  # the finding's anchor in the page
    text: str  # the evidence line that dates it
    when: str = ""  # the words of that line that date it ("from ... to ... UTC")


@dataclass
class Mark:
    at: float
    kind: str  # "event" | "warning event" | "Ray death" | "Xid"
    about: str  # the object
    text: str
    number: int = 0  # its label on the chart, set once the marks are sorted


@dataclass
class Timeline:
    subject: str  # a finding's subject: vllm/<ns>/<name> or gpu/<host>/<index>
    title: str
    panels: list[Panel]
    episodes: list[Episode] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    marks_left_out: int = 0
    undated: list[str] = field(default_factory=list)  # Xid lines with no time of their own


@dataclass
class Timelines:
    items: list[Timeline]
    start: float
    end: float
    left_out: list[str]  # subjects with series not drawn past MAX_TIMELINES


def episodes_of(finding: Finding, anchor: str, collected: float | None) -> list[Episode]:
    """The spans of the first evidence line that dates any: the rule's own claim (a later line may date
    what it is compared with, another server's minutes). One still going on ends at collection
    (unknown: at its start)."""
    for line in finding.evidence:
        found = []
        for m in _SPAN.finditer(line):
            start_text, end_text, since_text = m.groups()
            start = _stamp(start_text or since_text)
            end = _stamp(end_text) if end_text else collected
            if start is not None:
                end = max(start, end if end is not None else start)
                found.append(Episode(start, end, finding.rule, anchor, line, m.group(0)))
        if found:
            return found
    return []


def _stamp(text: str) -> float | None:
    for fmt in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M"):
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=timezone.utc).timestamp()
        except ValueError:
            continue
    return None


def build(report: Report, anchors: dict[int, str]) -> Timelines | None:
    """The timelines of the affected servers and GPUs that have series; None when none has.
    `anchors`: id(finding) -> its anchor in the page."""
    snap = report.snapshot
    if snap is None:
        return None
    collected_at = parse_time(report.context.collected_at) if report.context else None
    collected = collected_at.timestamp() if collected_at else None
    servers = {_server_subject(s): s for s in snap.vllm_servers}
    gpus = {f"gpu/{g.host}/{g.index}": g for g in snap.gpus}
    gpu_by_uuid = {g.uuid: g for g in snap.gpus if g.uuid}
    order: list[str] = []
    for f in _ordered(report):
        subjects = [f.subject]
        if f.subject in servers:
            subjects += [_gpu_subject(g) for g in _gpus_of(servers[f.subject], gpus, gpu_by_uuid)]
        elif f.subject in gpus:
            serving = set(gpus[f.subject].serving_pods)
            subjects += [subject for subject, s in servers.items() if s.pod in serving]
        order += [s for s in subjects if s not in order and (s in servers or s in gpus)]
    drawn: list[Timeline] = []
    left_out: list[str] = []
    for subject in order:
        if subject in servers:
            timeline = _server_timeline(subject, servers[subject])
        else:
            timeline = _gpu_timeline(subject, gpus[subject])
        if not any(s.points for p in timeline.panels for s in p.series):
            continue
        if len(drawn) == MAX_TIMELINES:
            left_out.append(subject)
            continue
        drawn.append(timeline)
    if not drawn:
        return None
    start, end = _axis(report, drawn)
    for timeline in drawn:
        for f in report.findings:
            if f.subject == timeline.subject:
                timeline.episodes += [
                    e for e in episodes_of(f, anchors[id(f)], collected) if e.end >= start and e.start <= end
                ]
        host = servers[timeline.subject] if timeline.subject in servers else gpus[timeline.subject]
        _add_marks(timeline, host, snap, start, end)
    return Timelines(drawn, start, end, left_out)


def _ordered(report: Report) -> list[Finding]:
    """The root cause, its consequences, then every other serving-path finding, then the rest."""
    root = report.verdict.finding
    rest = sorted(report.findings, key=lambda f: (not f.serving, f.explained_by is None, f.rule))
    return ([root] if root is not None else []) + [f for f in rest if f is not root]


def _server_subject(server: VllmServer) -> str:
    return f"vllm/{server.namespace + '/' if server.namespace else ''}{server.name}"


def _gpu_subject(gpu: GPU) -> str:
    return f"gpu/{gpu.host}/{gpu.index}"


def _gpus_of(server: VllmServer, gpus: dict[str, GPU], by_uuid: dict[str, GPU]) -> list[GPU]:
    found = []
    for name in server.gpus:
        gpu = by_uuid.get(name) or gpus.get(f"gpu/{name}")
        if gpu is not None:
            found.append(gpu)
    return found


def _history(history: dict[str, list[tuple[float, float]]], stems: tuple[str, ...]) -> list[tuple[float, float]]:
    """The first stem's samples that has any; a value that is not a finite number is left out (a gap)."""
    points = next((history[s] for s in stems if history.get(s)), [])
    return [(t, v) for t, v in points if math.isfinite(v) and math.isfinite(t)]


def _server_timeline(subject: str, server: VllmServer) -> Timeline:
    scraped = _scrape_series(server.scrapes)
    panels = []
    for title, unit, lines in _SERVER_PANELS:
        series = []
        for label, stems, key in lines:
            if points := _history(server.history, stems):
                series.append(Series(label, points))
            if scraped.get(key):
                series.append(Series(f"{label} (/metrics)", scraped[key], from_scrapes=True))
        panels.append(Panel(title, unit, series))
    where = f" on node {server.node}" if server.node else ""
    return Timeline(subject, f"vLLM server {server.pod or server.name}{where}", panels)


def _gpu_timeline(subject: str, gpu: GPU) -> Timeline:
    panels = [
        Panel(title, unit, [Series(label, p) for label, stems, _ in lines if (p := _history(gpu.history, stems))])
        for title, unit, lines in _GPU_PANELS
    ]
    model = f" ({gpu.name})" if gpu.name else ""
    return Timeline(subject, f"GPU {gpu.index} on {gpu.node or gpu.host}{model}", panels)


def _scrape_series(scrapes: list[Scrape]) -> dict[str, list[tuple[float, float]]]:
    """Gauges at each dated scrape (the fullest engine's KV cache, requests summed over engines) and
    counter rates between consecutive scrapes."""
    dated = sorted((s for s in scrapes if s.taken_at is not None), key=lambda s: s.taken_at or 0.0)
    out: dict[str, list[tuple[float, float]]] = {}
    totals: dict[str, list[tuple[float, float]]] = {}
    for scrape in dated:
        at = float(scrape.taken_at or 0.0)
        for key, names in {**_SCRAPE_GAUGES, **_SCRAPE_COUNTERS}.items():
            values = [s.value for s in scrape.samples if s.name in names and math.isfinite(s.value)]
            if values:
                total = max(values) if key == "kv" else sum(values)
                (out if key in _SCRAPE_GAUGES else totals).setdefault(key, []).append((at, total))
    for key, points in totals.items():
        rates = [
            (t1, (v1 - v0) / (t1 - t0))
            for (t0, v0), (t1, v1) in zip(points, points[1:], strict=False)
            if t1 > t0 and v1 >= v0
        ]
        if rates:
            out[key] = rates
    return out


def _axis(report: Report, drawn: list[Timeline]) -> tuple[float, float]:
    window = report.prometheus_window
    times = [t for tl in drawn for p in tl.panels for s in p.series for t, _ in s.points]
    start, end = min(times), max(times)
    if window is not None:
        start, end = min(start, window.start), max(end, window.end)
    if end - start < 60:  # scrapes seconds apart: a minute around them
        middle = (start + end) / 2
        start, end = middle - 30, middle + 30
    return start, end


def _add_marks(timeline: Timeline, host: VllmServer | GPU, snap: Snapshot, start: float, end: float) -> None:
    node = host.node
    pod = host.pod if isinstance(host, VllmServer) else None
    pods = {pod} if pod else set(host.serving_pods if isinstance(host, GPU) else [])
    objects = _around(pods, snap)
    marks: list[Mark] = []
    for e in snap.events:
        if not (
            (e.involved_kind, e.namespace, e.involved_name) in objects
            or (e.involved_kind == "Node" and e.involved_name == node)
        ):
            continue
        at = parse_time(e.last_seen)
        if e.xid is not None and at is None:
            timeline.undated.append(e.message)
        if at is None or not start <= at.timestamp() <= end:
            continue
        kind = "Xid" if e.xid is not None else ("warning event" if e.type == "Warning" else "event")
        count = f" (x{e.count})" if e.count > 1 else ""
        named = f"{e.namespace}/{e.involved_name}" if e.namespace and e.involved_kind != "Node" else e.involved_name
        marks.append(Mark(at.timestamp(), kind, f"{e.involved_kind} {named}", f"{e.reason}{count}: {e.message}"))
    for ray_node in snap.ray_nodes:
        died = parse_time(ray_node.end_time)
        ray_pod = snap.pod(ray_node.pod) if ray_node.pod else None
        if died is None or not (ray_node.pod in pods or (node and ray_pod and ray_pod.node_name == node)):
            continue
        if start <= died.timestamp() <= end:
            marks.append(
                Mark(died.timestamp(), "Ray death", f"Ray node {ray_node.node_id}", ray_node.state_message or "died")
            )
    if isinstance(host, GPU):
        timeline.undated += host.xid_lines
        marks += _dcgm_xids(host, start, end)
    marks.sort(key=lambda m: m.at)
    timeline.marks_left_out = max(0, len(marks) - MAX_MARKS)
    timeline.marks = marks[-MAX_MARKS:]
    for number, mark in enumerate(timeline.marks, 1):
        mark.number = number


def _around(pods: set[str], snap: Snapshot) -> set[tuple[str, str | None, str]]:
    """The objects whose events tell what happened to these pods: each pod, its owner and workload, the
    HPAs that scale that workload, and the workload's other pods (a replica the scheduler could not place)."""
    objects: set[tuple[str, str | None, str]] = set()
    workloads: set[tuple[str, str, str]] = set()
    for key in pods:
        p = snap.pod(key)
        if p is None:
            continue
        objects.add(("Pod", p.namespace, p.name))
        if p.owner_kind and p.owner_name:
            objects.add((p.owner_kind, p.namespace, p.owner_name))
        if p.workload_kind and p.workload_name:
            objects.add((p.workload_kind, p.namespace, p.workload_name))
            workloads.add((p.namespace, p.workload_kind, p.workload_name))
    objects |= {("HorizontalPodAutoscaler", h.namespace, h.name) for h in snap.hpas
                if (h.namespace, h.target_kind, h.target_name) in workloads}  # fmt: skip
    objects |= {("Pod", p.namespace, p.name) for p in snap.pods
                if (p.namespace, p.workload_kind, p.workload_name) in workloads}  # fmt: skip
    return objects


def _dcgm_xids(gpu: GPU, start: float, end: float) -> list[Mark]:
    """dcgm-exporter's last Xid, each time it changes to a code (0: none since the driver loaded)."""
    marks, last = [], 0.0
    for at, code in _history(gpu.history, ("dcgm_xid_errors",)):
        if code and code != last and start <= at <= end:
            marks.append(
                Mark(at, "Xid", f"GPU {gpu.index} on {gpu.node or gpu.host}", f"DCGM_FI_DEV_XID_ERRORS = {code:g}")
            )
        last = code
    return marks
