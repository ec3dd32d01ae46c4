"""The terminal report: verdict first, its evidence and fix, then layer by layer, then the sources."""

from __future__ import annotations

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.text import Text

from diag.analyze import Report
from diag.diagnosis import Verdict
from diag.engine import Finding
from diag.report import history_section
from diag.report.view import view

_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


def print_report(report: Report, console: Console) -> None:
    v = view(report)
    verdict = report.verdict
    if verdict.status == "healthy":
        console.print(Panel(Text(verdict.summary, style="bold green"), title="llmdiag verdict: healthy", border_style="green"))
    elif verdict.status == "inconclusive":
        console.print(Panel(_gaps_body(verdict), title="llmdiag verdict: inconclusive (could not decide)", border_style="magenta"))
    else:
        title = f"llmdiag verdict: {verdict.layer} layer at fault ({verdict.rule})"
        console.print(Panel(_finding_body(v.root), title=title, border_style=_STYLE[v.root.severity]))
        if v.consequences:
            console.print("[bold]Consequences[/] (explained by the root cause, not separate problems):")
            for f in v.consequences:
                console.print(f"  • [{_STYLE[f.severity]}]{f.rule}[/] {escape(f.title)} — {escape(f.subject)}")
    for layer, findings in v.by_layer.items():
        console.print(f"\n[bold underline]{layer}[/]")
        _print_findings(findings, console)
    if v.other_problems:
        console.print("\n[bold underline]Other problems[/] (not on the serving path: not the verdict)")
        _print_findings(v.other_problems, console)
    history_section.print_section(report, console)
    console.print(f"\n[bold]Checked[/]: {v.rules_checked} rules had the data they need, {v.rules_fired} fired.", highlight=False)
    if v.rules_unknown:
        console.print(f"[dim]Not decidable from this bundle: {', '.join(v.rules_unknown)}[/]")
    console.print(f"[bold]Sources[/]: {len(v.sources_ok)} read", highlight=False)
    if v.sources_missing:
        console.print(f"  missing: {escape(', '.join(v.sources_missing))}", style="yellow")
    for status, detail in v.sources_failed:
        style = "red" if status == "failed" else "dim"
        console.print(f"  [{style}]{status}[/] {escape(detail)}")


def _print_findings(findings: list[Finding], console: Console) -> None:
    for f in findings:
        console.print(_finding_line(f))
        for line in f.evidence:
            console.print(f"    {escape(line)}", style="dim")


def _gaps_body(verdict: Verdict) -> Group:
    parts = [Text(verdict.summary, style="bold"), Text("Could not read, and how to get it:", style="bold")]
    for gap in verdict.gaps:
        parts += [Text(f"  • {gap.problem}"), Text(f"      {gap.remedy}", style="dim")]
    return Group(*parts)


def _finding_body(f: Finding) -> Group:
    parts = [Text(f"{f.title}", style="bold"), Text(f"subject: {f.subject}   severity: {f.severity}")]
    parts += [Text("Evidence:", style="bold")] + [Text(f"  • {line}") for line in f.evidence]
    parts += [Text("Fix:", style="bold"), Text(f.remediation)]
    if f.references:
        parts.append(Text("See: " + "  ".join(f.references), style="dim"))
    return Group(*parts)


def _finding_line(f: Finding) -> str:
    cause = f" [dim](explained by {f.explained_by})[/]" if f.explained_by else ""
    return f"  [{_STYLE[f.severity]}]{f.severity:<8}[/] {f.rule} {escape(f.title)} — {escape(f.subject)}{cause}"
