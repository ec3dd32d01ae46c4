"""manifest.json: what a live collection looked at, when, and how every source fared.

The loader reads `sources` (a collector's own failure, e.g. a dashboard that did not answer, exists
only here) and `scrapes` (when each /metrics read was taken, for counter rates).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone

from diag import __version__
from diag.bundle.files import Bundle
from diag.collect.base import SourceResult, Target
from diag.collect.prometheus_access import public_url
from diag.collect.redact import RULES, redact

SCHEMA = "llmdiag/manifest/v1"
_SEVERITY = {"ok": 0, "skipped": 1, "missing": 2, "failed": 3}


@dataclass
class CollectionRecord:
    """The facts of one run that the manifest reports, gathered by the runner."""

    target: Target
    started_at: float  # unix seconds
    finished_at: float
    results: list[SourceResult]
    kube_context: str | None = None
    kube_server: str | None = None
    namespace: str | None = None  # None: all namespaces (or no Kubernetes at all, see kube_context)
    scrape_times: dict[str, list[float]] = field(default_factory=dict)
    redactions: dict[str, int] = field(default_factory=dict)  # rule -> how many values it replaced
    prometheus: dict[str, object] | None = None  # where it was reached and the window asked (no credentials)


def build_manifest(record: CollectionRecord) -> dict:
    target = record.target
    return {
        "schema": SCHEMA,
        "tool": "llmdiag",
        "version": __version__,
        "collected_at": _iso(record.started_at),
        "duration_s": round(record.finished_at - record.started_at, 3),
        "kubernetes": {
            "context": record.kube_context,
            "server": record.kube_server,
            "namespaces": ["*"] if target.all_namespaces else ([record.namespace] if record.namespace else []),
        },
        "selectors": {
            "label": target.selector,
            "pod": target.pod,
            "ray_cluster": target.ray_cluster,
        },
        "outside": {
            "vllm_urls": list(target.vllm_urls),
            "ray_address": target.ray_address,
            "prometheus_url": public_url(target.prometheus_url),
        },
        "prometheus": record.prometheus,
        "settings": {
            "scrapes": target.scrapes,
            "scrape_interval_s": target.scrape_interval_s,
            "log_tail_lines": target.log_tail_lines,
            "source_timeout_s": target.source_timeout_s,
            "total_timeout_s": target.total_timeout_s,
            "max_answer_bytes": target.max_answer_bytes,
        },
        "sources": merged_sources(record.results),
        "scrapes": {server: list(times) for server, times in sorted(record.scrape_times.items())},
        "redaction": {
            "rules": list(RULES),
            "applied": {rule: n for rule, n in sorted(record.redactions.items()) if n},
        },
    }


def merged_sources(results: list[SourceResult]) -> dict[str, dict[str, str]]:
    """One entry per source name; where a name was reported twice the worse status wins, details join."""
    sources: dict[str, dict[str, str]] = {}
    for r in results:
        known = sources.get(r.name)
        if known is None:
            sources[r.name] = {"status": r.status, "detail": r.detail}
            continue
        if _SEVERITY.get(r.status, 0) > _SEVERITY.get(known["status"], 0):
            known["status"] = r.status
        known["detail"] = "; ".join(d for d in (known["detail"], r.detail) if d)
    return dict(sorted(sources.items()))


def write_manifest(bundle: Bundle, record: CollectionRecord) -> None:
    """Add manifest.json; it goes through the redactor too (a URL may carry user:password)."""
    raw = (json.dumps(build_manifest(record), indent=2) + "\n").encode()
    bundle.add("manifest.json", redact("manifest.json", raw))


def _iso(unix: float) -> str:
    return datetime.fromtimestamp(unix, tz=timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
