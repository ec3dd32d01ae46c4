"""`--output markdown` for a ticket: a header that says what the report is about, and a fix for every
finding that is not a consequence, each fix printed once."""

from __future__ import annotations

from pathlib import Path

from diag import __version__
from diag.analyze import analyze_bundle
from diag.bundle.files import Bundle
from diag.report.markdown import render_markdown

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"


def _header(markdown: str) -> dict[str, str]:
    lines = markdown.split("\n\n")[1].splitlines()
    return dict(line[2:].split(": ", 1) for line in lines)


def test_the_header_names_bundle_cluster_namespaces_time_version_and_verdict() -> None:
    scenario = FIXTURES / "k8s-quota-exceeded"  # collected live: its manifest names the cluster
    report = analyze_bundle(Bundle.open(scenario))
    header = _header(render_markdown(report))
    assert header["Bundle"] == f"`{scenario}`"
    ctx = report.context
    assert ctx is not None and ctx.server and ctx.kube_context and ctx.namespaces and ctx.collected_at
    assert header["Cluster"] == f"`{ctx.server}`, context `{ctx.kube_context}`"
    assert header["Namespaces"] == ", ".join(f"`{n}`" for n in ctx.namespaces)
    assert header["Collected at"].startswith(ctx.collected_at.replace("_", "\\_"))
    assert header["llmdiag"] == __version__
    assert header["Verdict"].startswith(f"{report.verdict.layer} layer at fault (`{report.verdict.rule}`")


def test_a_bundle_without_a_manifest_says_unknown() -> None:
    header = _header(render_markdown(analyze_bundle(Bundle.open(FIXTURES / "demo"))))
    assert header["Cluster"] == "unknown" and header["Namespaces"] == "unknown"


def test_every_finding_that_is_not_a_consequence_has_its_fix_once() -> None:
    for name in ("demo", "k8s-tcp-readiness", "incident-gpu-persistence-off", "stacked-kv-saturated-hpa-at-max"):
        report = analyze_bundle(Bundle.open(FIXTURES / name))
        markdown = render_markdown(report)
        causes = [f for f in report.findings if f.explained_by is None]
        assert len(causes) >= 2, name
        fixes = {f.remediation for f in causes}
        for fix in fixes:
            first = next(line.strip() for line in fix.splitlines() if line.strip())
            assert sum(line.strip() == first for line in markdown.splitlines()) == 1, (name, first)
        assert markdown.count("Fix: the same as") == len(causes) - len(fixes)
