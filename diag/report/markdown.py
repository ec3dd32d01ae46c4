"""`--output markdown`: the same reading order as the terminal, for pasting into an incident ticket.

Every string that may come from the bundle goes through `safe`: as text (`md`), as an inline code
span (`code`) or as a fenced block (`fence`), so that none of its characters opens Markdown.

A ticket is read away from the terminal it came from: the report opens with what it is about (bundle,
cluster, namespaces, collection time, llmdiag's version, the verdict), and every finding that is not
a consequence carries its fix; a fix two findings share is printed once."""

from __future__ import annotations

from diag import __version__
from diag.analyze import Report
from diag.engine.rules import Finding
from diag.report import history_section
from diag.report.safe import code, fence, md, plain
from diag.report.view import rule_names, view


def render_markdown(report: Report) -> str:
    v = view(report)
    fixes: dict[str, str] = {}  # a fix's text -> the rule whose finding printed it first
    out = ["# llmdiag report", "", *_header(report), ""]
    if report.verdict.status == "healthy":
        out += ["**Verdict: healthy.** " + md(report.verdict.summary), ""]
    elif report.verdict.status == "inconclusive":
        out += [
            "**Verdict: inconclusive.** " + md(report.verdict.summary),
            "",
            "Could not read, and how to get it:",
            "",
        ]
        out += [f"- {md(g.problem)}: {code(g.remedy)}" for g in report.verdict.gaps] + [""]
    else:
        out += [f"**Verdict: {md(str(report.verdict.layer))} layer** — {md(report.verdict.summary)}", ""]
        assert v.root is not None  # a "fault" verdict carries its root finding
        out += _finding_section(v.root, "Root cause")
        fixes[v.root.remediation] = v.root.rule
        if report.verdict.caveats:
            out += [f"Not read, and could change this verdict (confidence: {md(str(report.verdict.confidence))}):", ""]
            out += [
                f"- {md(c.gap.problem)} ({md(rule_names(c.rules))} would read it): {code(c.gap.remedy)}"
                for c in report.verdict.caveats
            ] + [""]
        if v.consequences:
            out += ["### Consequences", ""]
            out += [f"- {code(f.rule)} {md(f.title)} — {code(f.subject)}" for f in v.consequences] + [""]
    for layer, findings in v.by_layer.items():
        out += [f"## {md(layer)}", ""]
        for f in findings:
            cause = f" (explained by {code(f.explained_by)})" if f.explained_by else ""
            out += [f"- **{md(f.severity)}** {code(f.rule)} {md(f.title)} — {code(f.subject)}{cause}"]
            out += [f"  - {md(line)}" for line in f.evidence]
            out += _fix_item(f, fixes)
        out.append("")
    if v.other_problems:
        out += ["## Other problems (not on the serving path)", ""]
        for f in v.other_problems:
            out += [f"- **{md(f.severity)}** {code(f.rule)} {md(f.title)} — {code(f.subject)}"]
            out += _fix_item(f, fixes)
        out.append("")
    out += history_section.markdown_lines(report)
    if report.config_file:
        out += [f"Config: {code(report.config_file)} applied, {report.suppressed} finding(s) suppressed.", ""]
    out += ["## Sources", "", f"- read: {len(v.sources_ok)}"]
    if v.history_window:
        out.append(f"- {v.history_window}")
    if v.sources_missing:
        out.append(f"- missing: {', '.join(code(s) for s in v.sources_missing)}")
    out += [f"- {md(status)}: {md(detail)}" for status, detail in v.sources_failed]
    out += ["", f"{v.rules_checked} rules had the data they need; {v.rules_fired} fired.", ""]
    return "\n".join(out)


def _header(report: Report) -> list[str]:
    """What the report is about, each value `unknown` where the bundle does not say."""
    ctx = report.context
    verdict = report.verdict
    cluster = "unknown"
    if ctx is not None and (ctx.server or ctx.kube_context):
        cluster = code(ctx.server or "unknown server") + (
            f", context {code(ctx.kube_context)}" if ctx.kube_context else ""
        )
    namespaces = "unknown"
    if ctx is not None and ctx.namespaces:
        namespaces = "all" if ctx.namespaces == ["*"] else ", ".join(code(n) for n in ctx.namespaces)
    collected = "unknown"
    if ctx is not None and ctx.collected_at:
        collected = f"{md(ctx.collected_at)} ({md(ctx.collection_time_source)})"
    if verdict.status == "fault":
        assert verdict.finding is not None
        said = (
            f"{md(str(verdict.layer))} layer at fault ({code(str(verdict.rule))}, {md(verdict.finding.severity)}, "
            f"confidence {md(str(verdict.confidence))})"
        )
    else:
        said = md(verdict.status)
    return [
        f"- Bundle: {code(report.origin) if report.origin else 'unknown'}",
        f"- Cluster: {cluster}",
        f"- Namespaces: {namespaces}",
        f"- Collected at: {collected}",
        f"- llmdiag: {plain(__version__)}",
        f"- Verdict: {said}",
    ]


def _fix_item(f: Finding, fixes: dict[str, str]) -> list[str]:
    """The fix of a finding in a list, as a nested item; a consequence's fix is its cause's."""
    if f.explained_by is not None:
        return []
    if f.remediation in fixes:
        return [f"  - Fix: the same as {code(fixes[f.remediation])}'s above."]
    fixes[f.remediation] = f.rule
    return ["  - Fix:", "", *(f"    {line}" if line else "" for line in fence(f.remediation))]


def _finding_section(f: Finding, heading: str) -> list[str]:
    lines = [
        f"## {heading}: {code(f.rule)} {md(f.title)}",
        "",
        f"Subject: {code(f.subject)} · severity: **{md(f.severity)}**",
        "",
        "Evidence:",
        "",
    ]
    lines += [f"- {md(e)}" for e in f.evidence]
    lines += ["", "Fix:", "", *fence(f.remediation), ""]
    if f.references:
        lines += ["References: " + ", ".join(plain(r) for r in f.references), ""]  # from the rule files, not the bundle
    return lines
