"""The reading order shared by the terminal and Markdown reports."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone

from diag.analyze import Report
from diag.engine.rules import SEVERITIES, Finding
from diag.snapshot.model import LAYERS, PromWindow


@dataclass
class ReportView:
    root: Finding | None
    consequences: list[Finding]  # explained (directly or through others) by the root cause
    by_layer: dict[str, list[Finding]]  # every other serving-path finding, deepest layer first
    other_problems: list[Finding]  # findings off the serving path: reported, never the verdict
    sources_ok: list[str]
    sources_missing: list[str]
    sources_failed: list[tuple[str, str]]  # (status, one-line reason): failed and skipped sources
    rules_fired: int
    rules_checked: int
    rules_unknown: list[str]
    history_window: str | None  # the Prometheus history read, in words; None when there was none


def view(report: Report) -> ReportView:
    root = report.verdict.finding
    consequences = _explained_by(root, report.findings) if root else []
    shown = {id(f) for f in consequences} | ({id(root)} if root else set())
    by_layer: dict[str, list[Finding]] = {}
    other_problems: list[Finding] = []
    for f in sorted(report.findings, key=lambda f: (LAYERS.index(f.layer), -SEVERITIES.index(f.severity), f.rule)):
        if id(f) in shown:
            continue
        if f.serving:
            by_layer.setdefault(f.layer, []).append(f)
        else:
            other_problems.append(f)
    outcomes = report.outcomes.values()
    return ReportView(
        root=root,
        consequences=consequences,
        by_layer=by_layer,
        other_problems=other_problems,
        sources_ok=sorted(n for n, s in report.sources.items() if s.status == "ok"),
        sources_missing=sorted(n for n, s in report.sources.items() if s.status == "missing"),
        sources_failed=_once_each(
            sorted((s.status, s.detail or n) for n, s in report.sources.items() if s.status in ("failed", "skipped"))
        ),
        rules_fired=sum(1 for o in outcomes if o.status == "fired"),
        rules_checked=sum(1 for o in outcomes if o.status in ("fired", "silent")),
        rules_unknown=sorted(r for r, o in report.outcomes.items() if o.status in ("unknown", "skipped")),
        history_window=_window_text(report.prometheus_window),
    )


def _once_each(reasons: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """One line for the sources one reason failed or skipped (the four Ray files of a cluster with no Ray)."""
    return [(status, detail + (f" ({n} sources)" if n > 1 else "")) for (status, detail), n in Counter(reasons).items()]


def rule_names(rules: tuple[str, ...]) -> str:
    """A few rule ids as they are; many as a count and the layers their ids name."""
    if len(rules) <= 3:
        return ", ".join(rules)
    prefixes = sorted({r.split("-", 1)[0] for r in rules})
    return f"{len(rules)} rules ({', '.join(f'{p}-*' for p in prefixes)})"


def _window_text(window: PromWindow | None) -> str | None:
    if window is None:
        return None
    start, end = (
        datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%d %H:%M") for t in (window.start, window.end)
    )
    return f"Prometheus history read from {start} to {end} UTC, a sample every {window.step:g} s"


def _explained_by(root: Finding, findings: list[Finding]) -> list[Finding]:
    """Findings whose chain of `explained_by` leads to the root's rule."""
    by_rule: dict[str, list[Finding]] = {}
    for f in findings:
        if f.explained_by:
            by_rule.setdefault(f.explained_by, []).append(f)
    chain, frontier, seen = [], [root.rule], {root.rule}
    while frontier:
        rule = frontier.pop(0)
        for f in by_rule.get(rule, []):
            chain.append(f)
            if f.rule not in seen:
                seen.add(f.rule)
                frontier.append(f.rule)
    return chain
