"""The terminal report: verdict first, its evidence and fix, then layer by layer, then the sources.

Everything is printed as rich `Text` (never as markup), every string from the bundle through
`safe.plain`: a bundle's `[bold]`, `[link=...]` or escape sequences print as harmless text.

A fix is printed outside any box: its prose wrapped to the width with a hanging indent, never inside
a word or a URL; each command on a line of its own from the first column, never wrapped by us (the
terminal folds a long one), so that a triple-click copies exactly the command."""

from __future__ import annotations

import re
import textwrap

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from diag.analyze import Report
from diag.core.shell import COMMAND_LINE
from diag.engine.rules import Finding
from diag.report import history_section
from diag.report.safe import block, plain
from diag.report.view import rule_names, view
from diag.verdict.diagnosis import Verdict

_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}
_RULE_ID = "bold blue"  # every rule id, wherever it is printed
# In a rule's remediation, a line indented by two or more spaces that is not a list item is a command
# (or a manifest field to paste); prose and "- " items start at the first column.
_COMMAND = COMMAND_LINE
_ITEM = re.compile(r"^ *- ")


def print_report(report: Report, console: Console) -> None:
    v = view(report)
    verdict = report.verdict
    if verdict.status == "healthy":
        console.print(
            Panel(
                Text(plain(verdict.summary), style="bold green"), title="llmdiag verdict: healthy", border_style="green"
            )
        )
    elif verdict.status == "inconclusive":
        console.print(
            Panel(_gaps_body(verdict), title="llmdiag verdict: inconclusive (could not decide)", border_style="magenta")
        )
    else:
        title = Text.assemble(
            f"llmdiag verdict: {plain(str(verdict.layer))} layer at fault (", (plain(str(verdict.rule)), _RULE_ID), ")"
        )
        assert v.root is not None  # a "fault" verdict carries its root finding
        console.print(Panel(_finding_body(v.root), title=title, border_style=_STYLE[v.root.severity]))
        _print_fix(v.root, console)
        _print_caveats(verdict, console)
        if v.consequences:
            console.print(
                Text.assemble("\n", ("Consequences", "bold"), " (explained by the root cause, not separate problems):")
            )
            for f in v.consequences:
                console.print(
                    _hanging(
                        Text.assemble((plain(f.rule), _RULE_ID), f" {plain(f.title)} — {plain(f.subject)}"), "  • "
                    )
                )
    for layer, findings in v.by_layer.items():
        console.print(Text.assemble("\n", (plain(layer), "bold underline")))
        _print_findings(findings, console)
    if v.other_problems:
        console.print(
            Text.assemble("\n", ("Other problems", "bold underline"), " (not on the serving path: not the verdict)")
        )
        _print_findings(v.other_problems, console)
    history_section.print_section(report, console)
    console.print(
        Text.assemble(
            "\n", ("Checked", "bold"), f": {v.rules_checked} rules had the data they need, {v.rules_fired} fired."
        )
    )
    if v.rules_unknown:
        console.print(Text(f"Not decidable from this bundle: {plain(', '.join(v.rules_unknown))}", style="dim"))
    if report.config_file:
        style = "yellow" if report.suppressed else ""
        console.print(
            Text(f"Config: {plain(report.config_file)} applied, {report.suppressed} finding(s) suppressed", style=style)
        )
    console.print(Text.assemble(("Sources", "bold"), f": {len(v.sources_ok)} read"))
    if v.history_window:
        console.print(Text(f"  {v.history_window}"))
    if v.sources_missing:
        console.print(Text(f"  missing: {plain(', '.join(v.sources_missing))}", style="yellow"))
    for status, detail in v.sources_failed:
        console.print(Text.assemble("  ", (status, "red" if status == "failed" else "dim"), f" {plain(detail)}"))


def _print_findings(findings: list[Finding], console: Console) -> None:
    for f in findings:
        console.print(_hanging(_finding_line(f), "  "))
        for line in f.evidence:
            console.print(_hanging(Text(plain(line), style="dim"), "    "))
        if f.explained_by is None:  # a consequence's fix is its cause's
            _print_fix(f, console)


def _print_fix(f: Finding, console: Console) -> None:
    console.print(Text("Fix:", style="bold"))
    width = max(40, console.width)
    for line in block(f.remediation).rstrip("\n").split("\n"):
        if not line.strip():
            continue
        if _COMMAND.match(line):
            console.print(Text(line.strip()), no_wrap=True, overflow="ignore", crop=False)
            continue
        hanging = "    " if _ITEM.match(line) else "  "
        wrapped = textwrap.fill(line.strip(), width=width, initial_indent="  ", subsequent_indent=hanging,
                                break_long_words=False, break_on_hyphens=False)  # fmt: skip
        console.print(Text(wrapped), no_wrap=True, overflow="ignore", crop=False)
    for reference in f.references:
        console.print(Text(f"  see {plain(reference)}", style="dim"), no_wrap=True, overflow="ignore", crop=False)


def _print_caveats(verdict: Verdict, console: Console) -> None:
    if not verdict.caveats:
        return
    console.print(
        Text.assemble(
            "\n", ("Not read, and could change this verdict", "bold"), f" (confidence: {verdict.confidence}):"
        )
    )
    for caveat in verdict.caveats:
        console.print(_hanging(Text(f"{plain(caveat.gap.problem)} ({rule_names(caveat.rules)} would read it)"), "  • "))
        console.print(Text(plain(caveat.gap.remedy)), no_wrap=True, overflow="ignore", crop=False)


def _gaps_body(verdict: Verdict) -> Group:
    parts = [Text(plain(verdict.summary), style="bold"), Text("Could not read, and how to get it:", style="bold")]
    for gap in verdict.gaps:
        parts += [Text(f"  • {plain(gap.problem)}"), Text(f"      {plain(gap.remedy)}", style="dim")]
    return Group(*parts)


def _finding_body(f: Finding) -> Group:
    parts: list[Text | Table] = [
        Text(plain(f.title), style="bold"),
        Text(f"subject: {plain(f.subject)}   severity: {f.severity}"),
    ]
    parts += [Text("Evidence:", style="bold")] + [_hanging(Text(plain(line)), "  • ") for line in f.evidence]
    return Group(*parts)


def _hanging(text: Text, lead: str) -> Table:
    """`text` after `lead`, its wrapped lines under its first word rather than under `lead`."""
    grid = Table.grid()
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row(lead, text)
    return grid


def _finding_line(f: Finding) -> Text:
    line = Text.assemble(
        (f"{f.severity:<8}", _STYLE[f.severity]),
        " ",
        (plain(f.rule), _RULE_ID),
        f" {plain(f.title)} — {plain(f.subject)}",
    )
    if f.explained_by:
        line.append(f" (explained by {plain(f.explained_by)})", style="dim")
    return line
