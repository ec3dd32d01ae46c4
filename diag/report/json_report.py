"""`--output json`: the report shape other programs rely on (docs/bundle-format.md, "llmdiag/report/v1").

Fields beyond the contract (verdict.status, verdict.gaps, verdict.confidence and verdict.caveats, title,
references, serving_path, rules, tool, bundle, prometheus_window, context, config) are additions; none
of the contract's fields is renamed or retyped.
"""

from __future__ import annotations

import json

from diag import __version__
from diag.analyze import Report
from diag.report import history_section
from diag.snapshot.clock import iso_time
from diag.verdict.context import AnalysisContext

SCHEMA = "llmdiag/report/v1"


def to_dict(report: Report) -> dict:
    return {
        "schema": SCHEMA,
        "verdict": {
            "layer": report.verdict.layer,
            "rule": report.verdict.rule,
            "summary": report.verdict.summary,
            "status": report.verdict.status,
            "gaps": [{"source": g.source, "problem": g.problem, "remedy": g.remedy} for g in report.verdict.gaps],
            "confidence": report.verdict.confidence,
            "caveats": [
                {
                    "source": c.gap.source,
                    "problem": c.gap.problem,
                    "remedy": c.gap.remedy,
                    "rules": list(c.rules),
                    "deeper": c.deeper,
                }
                for c in report.verdict.caveats
            ],
        },
        "findings": [
            {
                "rule": f.rule,
                "layer": f.layer,
                "severity": f.severity,
                "subject": f.subject,
                "evidence": f.evidence,
                "remediation": f.remediation,
                "explained_by": f.explained_by,
                "title": f.title,
                "references": f.references,
                "serving_path": f.serving,
            }
            for f in report.findings
        ],
        "sources": {name: {"status": s.status, "detail": s.detail} for name, s in sorted(report.sources.items())},
        "rules": {rid: {"status": o.status, "detail": o.detail} for rid, o in sorted(report.outcomes.items())},
        "exit_code": report.exit_code,
        "tool": {"name": "llmdiag", "version": __version__},
        "bundle": report.origin,
        "prometheus_window": _window(report),
        "context": _context(report),
        "config": {"path": report.config_file, "suppressed": report.suppressed},
    } | history_section.json_fields(report)


def _context(report: Report) -> dict:
    """Which cluster, namespaces and selectors, when, and over which history window (null: unknown)."""
    ctx = report.context or AnalysisContext()
    return {
        "tool_version": __version__,
        "kubernetes": {"server": ctx.server, "context": ctx.kube_context, "namespaces": ctx.namespaces},
        "selectors": ctx.selectors,
        "collected_at": ctx.collected_at,
        "collected_at_source": ctx.collection_time_source,
        "history_window_seconds": ctx.history_window_s,
    }


def _window(report: Report) -> dict | None:
    """The range of Prometheus history the analysis read; null when it read none."""
    window = report.prometheus_window
    if window is None:
        return None
    return {"start": iso_time(window.start), "end": iso_time(window.end), "step_seconds": window.step}


def render_json(report: Report) -> str:
    return json.dumps(to_dict(report), indent=2, sort_keys=False) + "\n"
