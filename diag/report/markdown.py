"""`--output markdown`: the same reading order as the terminal, for pasting into an incident ticket."""

from __future__ import annotations

from diag.analyze import Report
from diag.engine import Finding
from diag.report import history_section
from diag.report.view import view


def render_markdown(report: Report) -> str:
    v = view(report)
    out = ["# llmdiag report", ""]
    if report.verdict.status == "healthy":
        out += ["**Verdict: healthy.** " + report.verdict.summary, ""]
    elif report.verdict.status == "inconclusive":
        out += ["**Verdict: inconclusive.** " + report.verdict.summary, "", "Could not read, and how to get it:", ""]
        out += [f"- {g.problem}: `{g.remedy}`" for g in report.verdict.gaps] + [""]
    else:
        out += [f"**Verdict: {report.verdict.layer} layer** — {report.verdict.summary}", ""]
        out += _finding_section(v.root, "Root cause")
        if v.consequences:
            out += ["### Consequences", ""]
            out += [f"- `{f.rule}` {f.title} — `{f.subject}`" for f in v.consequences] + [""]
    for layer, findings in v.by_layer.items():
        out += [f"## {layer}", ""]
        for f in findings:
            cause = f" (explained by `{f.explained_by}`)" if f.explained_by else ""
            out += [f"- **{f.severity}** `{f.rule}` {f.title} — `{f.subject}`{cause}"]
            out += [f"  - {line}" for line in f.evidence]
        out.append("")
    if v.other_problems:
        out += ["## Other problems (not on the serving path)", ""]
        out += [f"- **{f.severity}** `{f.rule}` {f.title} — `{f.subject}`" for f in v.other_problems] + [""]
    out += history_section.markdown_lines(report)
    out += ["## Sources", "", f"- read: {len(v.sources_ok)}"]
    if v.sources_missing:
        out.append(f"- missing: {', '.join(f'`{s}`' for s in v.sources_missing)}")
    out += [f"- {status}: {detail}" for status, detail in v.sources_failed]
    out += ["", f"{v.rules_checked} rules had the data they need; {v.rules_fired} fired.", ""]
    return "\n".join(out)


def _finding_section(f: Finding, heading: str) -> list[str]:
    lines = [f"## {heading}: `{f.rule}` {f.title}", "", f"Subject: `{f.subject}` · severity: **{f.severity}**", "", "Evidence:", ""]
    lines += [f"- {e}" for e in f.evidence]
    lines += ["", "Fix:", "", "```", f.remediation, "```", ""]
    if f.references:
        lines += ["References: " + ", ".join(f.references), ""]
    return lines
