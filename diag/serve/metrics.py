"""`/metrics` in Prometheus' text exposition format (version 0.0.4), and the summary of a report that it
is made from (kept with the report, so a restart shows the same verdict).

The verdict, findings and sources are those of the latest kept report of each trigger (the schedule's,
an alert's): a series that no longer holds disappears, as Prometheus expects of a gauge of states.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from diag import __version__
from diag.bundle.layout import source_of

if TYPE_CHECKING:
    from diag.analyze import Report

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
SOURCE_STATES = ("ok", "failed", "missing", "skipped")
TRIGGERS = ("schedule", "alert")
NAMESPACED_SUBJECTS = frozenset(
    {"pod", "vllm", "service", "deployment", "daemonset", "hpa", "ingress", "raycluster", "rayservice"}
)


def summarize(report: Report) -> dict[str, Any]:
    """What the metrics and the listing read of a report: verdict, finding counts, source states."""
    verdict = report.verdict
    finding = verdict.finding
    counts: dict[tuple[str, str], int] = {}
    for f in report.findings:
        counts[(f.rule, f.severity)] = counts.get((f.rule, f.severity), 0) + 1
    return {
        "verdict": {
            "status": verdict.status,
            "layer": verdict.layer or "",
            "rule": verdict.rule or "",
            "severity": finding.severity if finding is not None else "",
            "namespace": _namespace(finding.subject) if finding is not None else "",
            "summary": verdict.summary,
        },
        "exit_code": report.exit_code,
        "findings": [[rule, severity, n] for (rule, severity), n in sorted(counts.items())],
        "sources": source_states(report.sources),
    }


def _namespace(subject: str) -> str:
    """`kind/namespace/name` subjects of namespaced kinds name a namespace; `cluster`, `node/x`, `gpu/host/i`,
    `actor/...` (Ray's) do not."""
    parts = subject.split("/")
    return parts[1] if len(parts) == 3 and parts[0] in NAMESPACED_SUBJECTS else ""


def source_states(sources: dict[str, Any]) -> dict[str, str]:
    """One state per source of the bundle layout (a row such as `vllm/<name>.metrics.txt`, however many
    files it had): failed where any of its files failed, else ok where any was read."""
    by_row: dict[str, set[str]] = {}
    for name, status in sources.items():
        found = source_of(name)
        row = found[0].path if found is not None else name.split("/", 1)[0]
        by_row.setdefault(row, set()).add(status.status)
    return {row: next(s for s in SOURCE_STATES if s in states) for row, states in by_row.items()}


class Counters:
    """The process' counters, by name and labels (reset by a restart, as Prometheus' counters may be)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    def inc(self, name: str, amount: float = 1.0, **labels: str) -> None:
        key = (name, tuple(sorted(labels.items())))
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def get(self, name: str, **labels: str) -> float:
        with self._lock:
            return self._values.get((name, tuple(sorted(labels.items()))), 0.0)

    def series(self, name: str) -> list[tuple[dict[str, str], float]]:
        with self._lock:
            return [(dict(labels), v) for (n, labels), v in sorted(self._values.items()) if n == name]


# name -> (type, help); the counters' names end in _total, as Prometheus' conventions ask
COUNTERS = {
    "llmdiag_cycles_total": "Triage cycles by trigger and outcome (ok, error, skipped: the previous one still ran).",
    "llmdiag_alerts_received_total": "Alerts received on /alertmanager, by their status (firing, resolved).",
    "llmdiag_alert_triages_total": "Firing alerts by what became of them (triaged, deduplicated, rate_limited, "
    "queue_full).",
    "llmdiag_notifications_total": "Verdicts sent to the outgoing webhook, by outcome (sent, failed).",
}


def render(latest: dict[str, dict[str, Any] | None], counters: Counters, kept: tuple[int, int]) -> str:
    """The exposition: `latest` is the newest kept report's meta of each trigger (None: none yet)."""
    out: list[str] = []

    def family(name: str, kind: str, help_text: str, samples: Iterable[tuple[dict[str, str], float]]) -> None:
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} {kind}")
        out.extend(f"{name}{_labels(labels)} {_value(value)}" for labels, value in samples)

    family("llmdiag_build_info", "gauge", "The llmdiag version serving, always 1.", [({"version": __version__}, 1)])
    verdicts, durations, successes = [], [], []
    for trigger in TRIGGERS:
        meta = latest.get(trigger)
        if meta is None:
            continue
        v = meta["verdict"]
        verdicts.append(({"trigger": trigger, "status": v["status"], "layer": v["layer"], "rule": v["rule"],
                          "severity": v["severity"], "namespace": v["namespace"]}, 1))  # fmt: skip
        durations.append(({"trigger": trigger}, meta["duration_seconds"]))
        successes.append(({"trigger": trigger}, meta["finished_at"]))
    family(
        "llmdiag_verdict",
        "gauge",
        "The latest verdict of each trigger, 1 on the series of its status (fault, healthy, inconclusive), "
        "layer, rule, severity and namespace.",
        verdicts,
    )
    family(
        "llmdiag_last_success_timestamp_seconds",
        "gauge",
        "When the latest triage of each trigger ended with a report (Unix time).",
        successes,
    )
    family("llmdiag_cycle_duration_seconds", "gauge", "How long the latest triage of each trigger took.", durations)
    scheduled = latest.get("schedule")
    family(
        "llmdiag_findings",
        "gauge",
        "Findings of the latest scheduled triage, by rule and severity.",
        [({"rule": r, "severity": s}, n) for r, s, n in (scheduled or {}).get("findings", [])],
    )
    family(
        "llmdiag_source_state",
        "gauge",
        "Each source of the latest scheduled triage: 1 on its state (ok, failed, missing, skipped), 0 on the others.",
        [
            ({"source": source, "state": s}, 1 if s == state else 0)
            for source, state in sorted((scheduled or {}).get("sources", {}).items())
            for s in SOURCE_STATES
        ],
    )
    family("llmdiag_reports_kept", "gauge", "Reports kept in the state folder.", [({}, kept[0])])
    family("llmdiag_reports_kept_bytes", "gauge", "Bytes the kept reports take on disk.", [({}, kept[1])])
    for name, help_text in COUNTERS.items():
        family(name, "counter", help_text, counters.series(name))
    return "\n".join(out) + "\n"


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _value(value: float) -> str:
    return repr(float(value)) if value != int(value) else str(int(value))
