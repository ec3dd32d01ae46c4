"""The terminal report: verdict first, its evidence and fix, then layer by layer, then the sources.

Everything is printed as rich `Text` (never as markup), every string from the bundle through
`safe.plain`: a bundle's `[bold]`, `[link=...]` or escape sequences print as harmless text."""

from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.text import Text

from diag.analyze import Report
from diag.diagnosis import Verdict
from diag.engine import Finding
from diag.report import history_section
from diag.report.safe import block, plain
from diag.report.view import view

_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


def print_report(report: Report, console: Console) -> None:
    v = view(report)
    verdict = report.verdict
    if verdict.status == "healthy":
        console.print(Panel(Text(plain(verdict.summary), style="bold green"), title="llmdiag verdict: healthy", border_style="green"))
    elif verdict.status == "inconclusive":
        console.print(Panel(_gaps_body(verdict), title="llmdiag verdict: inconclusive (could not decide)", border_style="magenta"))
    else:
        title = Text(f"llmdiag verdict: {plain(str(verdict.layer))} layer at fault ({plain(str(verdict.rule))})")
        console.print(Panel(_finding_body(v.root), title=title, border_style=_STYLE[v.root.severity]))
        if v.consequences:
            console.print(Text.assemble(("Consequences", "bold"), " (explained by the root cause, not separate problems):"))
            for f in v.consequences:
                console.print(Text.assemble("  • ", (plain(f.rule), _STYLE[f.severity]), f" {plain(f.title)} — {plain(f.subject)}"))
    for layer, findings in v.by_layer.items():
        console.print(Text.assemble("\n", (plain(layer), "bold underline")))
        _print_findings(findings, console)
    if v.other_problems:
        console.print(Text.assemble("\n", ("Other problems", "bold underline"), " (not on the serving path: not the verdict)"))
        _print_findings(v.other_problems, console)
    history_section.print_section(report, console)
    console.print(Text.assemble("\n", ("Checked", "bold"), f": {v.rules_checked} rules had the data they need, {v.rules_fired} fired."))
    if v.rules_unknown:
        console.print(Text(f"Not decidable from this bundle: {plain(', '.join(v.rules_unknown))}", style="dim"))
    console.print(Text.assemble(("Sources", "bold"), f": {len(v.sources_ok)} read"))
    if v.history_window:
        console.print(Text(f"  {v.history_window}"))
    if v.sources_missing:
        console.print(Text(f"  missing: {plain(', '.join(v.sources_missing))}", style="yellow"))
    for status, detail in v.sources_failed:
        console.print(Text.assemble("  ", (status, "red" if status == "failed" else "dim"), f" {plain(detail)}"))


def _print_findings(findings: list[Finding], console: Console) -> None:
    for f in findings:
        console.print(_finding_line(f))
        for line in f.evidence:
            console.print(Text(f"    {plain(line)}", style="dim"))


def _gaps_body(verdict: Verdict) -> Group:
    parts = [Text(plain(verdict.summary), style="bold"), Text("Could not read, and how to get it:", style="bold")]
    for gap in verdict.gaps:
        parts += [Text(f"  • {plain(gap.problem)}"), Text(f"      {plain(gap.remedy)}", style="dim")]
    return Group(*parts)


def _finding_body(f: Finding) -> Group:
    parts = [Text(plain(f.title), style="bold"), Text(f"subject: {plain(f.subject)}   severity: {f.severity}")]
    parts += [Text("Evidence:", style="bold")] + [Text(f"  • {plain(line)}") for line in f.evidence]
    parts += [Text("Fix:", style="bold"), Text(block(f.remediation))]
    if f.references:
        parts.append(Text("See: " + "  ".join(plain(r) for r in f.references), style="dim"))
    return Group(*parts)


def _finding_line(f: Finding) -> Text:
    line = Text.assemble("  ", (f"{f.severity:<8}", _STYLE[f.severity]), f" {plain(f.rule)} {plain(f.title)} — {plain(f.subject)}")
    if f.explained_by:
        line.append(f" (explained by {plain(f.explained_by)})", style="dim")
    return line
