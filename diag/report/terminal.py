"""The terminal report: verdict first, its evidence and fix, then layer by layer, then the sources.

Everything is printed as rich `Text` (never as markup), every string from the bundle through
`safe.plain`: a bundle's `[bold]`, `[link=...]` or escape sequences print as harmless text.

A fix is printed outside any box: its prose wrapped to the width with a hanging indent, never inside
a word or a URL; each command on a line of its own from the first column, never wrapped by us (the
terminal folds a long one), so that a triple-click copies exactly the command.

By default the first screen (`SCREEN` rows at the console's width) is the answer: the verdict, the
root cause, as much of its evidence as fits beside its whole fix, and the sources not read that could
change it (`_first_screen` decides what fits). What follows is condensed: a few rows of evidence per
finding, the root's references after its consequences and none for the others, the rules that could
not be decided counted by prefix. `verbose` prints every evidence line, every reference, every source
not read and every undecided rule id. A fix is printed once: a later finding with the same fix points
back to it."""

from __future__ import annotations

import io
import math
import re
import textwrap
from collections import Counter
from collections.abc import Callable
from typing import NamedTuple

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
SCREEN = 24  # rows of the first screen: a terminal's default height
EVIDENCE_ROWS = 4  # rows of evidence per finding after the first screen, unless verbose
_MORE_EVIDENCE = "--verbose prints it whole"


def print_report(report: Report, console: Console, verbose: bool = False) -> None:
    v = view(report)
    verdict = report.verdict
    printed: dict[str, str] = {}  # each fix printed so far -> the rule whose finding printed it
    if verdict.status == "healthy":
        console.print(
            Panel(
                Text(plain(verdict.summary), style="bold green"), title="llmdiag verdict: healthy", border_style="green"
            )
        )
    elif verdict.status == "inconclusive":
        panel = Panel(
            Text(plain(verdict.summary), style="bold"),
            title="llmdiag verdict: inconclusive (could not decide)",
            border_style="magenta",
        )
        console.print(panel)
        _print_gaps(verdict, console, None if verbose else SCREEN - _height(panel, console))
    else:
        title = Text.assemble(
            f"llmdiag verdict: {plain(str(verdict.layer))} layer at fault (", (plain(str(verdict.rule)), _RULE_ID), ")"
        )
        assert v.root is not None  # a "fault" verdict carries its root finding
        fit = _Fit(None, True, None) if verbose else _first_screen(verdict, v.root, title, console)
        console.print(
            Panel(_finding_body(v.root, console, fit.evidence_rows), title=title, border_style=_STYLE[v.root.severity])
        )
        _print_fix(v.root, console, printed, fit.references)
        _print_caveats(verdict, console, fit.caveat_rows)
        later = [] if fit.references else v.root.references
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
        if later:  # the references that did not fit on the first screen
            console.print(Text.assemble("\n", ("Read more", "bold"), " on ", (plain(v.root.rule), _RULE_ID), ":"))
            for reference in later:
                console.print(Text(f"  {plain(reference)}", style="dim"), no_wrap=True, overflow="ignore", crop=False)
    for layer, findings in v.by_layer.items():
        console.print(Text.assemble("\n", (plain(layer), "bold underline")))
        _print_findings(findings, console, printed, verbose)
    if v.other_problems:
        console.print(
            Text.assemble("\n", ("Other problems", "bold underline"), " (not on the serving path: not the verdict)")
        )
        _print_findings(v.other_problems, console, printed, verbose)
    history_section.print_section(report, console)
    console.print(
        Text.assemble(
            "\n", ("Checked", "bold"), f": {v.rules_checked} rules had the data they need, {v.rules_fired} fired."
        )
    )
    if v.rules_unknown and verbose:
        console.print(Text(f"Not decidable from this bundle: {plain(', '.join(v.rules_unknown))}", style="dim"))
    elif v.rules_unknown:
        console.print(
            Text(f"Not decidable from this bundle: {_counted(v.rules_unknown)}; --verbose lists them", style="dim")
        )
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


def _print_findings(findings: list[Finding], console: Console, printed: dict[str, str], verbose: bool) -> None:
    for f in findings:
        console.print(_hanging(_finding_line(f), "  "))
        rows = None if verbose else EVIDENCE_ROWS
        for line in _evidence(f.evidence, console, console.width, rows, "    ", "dim"):
            console.print(line)
        if f.explained_by is None:  # a consequence's fix is its cause's
            _print_fix(f, console, printed, references=verbose)


def _print_fix(f: Finding, console: Console, printed: dict[str, str], references: bool = True) -> None:
    remediation = block(f.remediation)
    if remediation in printed:
        first = printed[remediation]
        said = f"the same as {first}'s above"
        console.print(Text.assemble(("Fix:", "bold"), f" {plain(said)}"))
        return
    printed[remediation] = f.rule
    console.print(Text("Fix:", style="bold"))
    for line in _fix_lines(f, console.width, references):
        console.print(line, no_wrap=True, overflow="ignore", crop=False)


def _fix_lines(f: Finding, width: int, references: bool) -> list[Text]:
    """The fix under its `Fix:` line: prose wrapped to the width, each command whole on a line."""
    width = max(40, width)
    lines = []
    for line, command in _paragraphs(block(f.remediation)):
        if command:
            lines.append(Text(line.strip()))
            continue
        hanging = "    " if _ITEM.match(line) else "  "
        wrapped = textwrap.fill(line.strip(), width=width, initial_indent="  ", subsequent_indent=hanging,
                                break_long_words=False, break_on_hyphens=False)  # fmt: skip
        lines.append(Text(wrapped))
    if references:
        lines += [Text(f"  see {plain(reference)}", style="dim") for reference in f.references]
    return lines


def _paragraphs(remediation: str) -> list[tuple[str, bool]]:
    """The remediation's lines as (text, is a command), its prose joined into paragraphs: rule files
    break a sentence across lines at their own width, and each piece wrapped on its own would leave a
    short row in the middle of a sentence. A line continues the prose above it when that one does not
    end a sentence (or a lead-in: `:`)."""
    out: list[tuple[str, bool]] = []
    for line in remediation.rstrip("\n").split("\n"):
        if not line.strip():
            continue
        command = bool(_COMMAND.match(line))
        if out and not command and not out[-1][1] and not _ITEM.match(line):
            above = out[-1][0].rstrip()
            if not above.endswith((".", ":", "!", "?")):
                out[-1] = (f"{above} {line.strip()}", False)
                continue
        out.append((line, command))
    return out


def _rows(lines: list[Text], width: int) -> int:
    """Screen rows of lines printed unwrapped: the terminal folds each longer than its width."""
    return sum(max(1, math.ceil(len(row) / width)) for line in lines for row in line.plain.split("\n"))


class _Fit(NamedTuple):
    """What of the root cause goes on the first screen beside the box and the whole fix (None: all)."""

    evidence_rows: int | None
    references: bool
    caveat_rows: int | None


def _first_screen(verdict: Verdict, root: Finding, title: Text, console: Console) -> _Fit:
    """The box, the whole fix and the sources not read that could change the verdict on the first
    screen: the fix's references go after it first, then the evidence and the sources not read are cut
    down, each keeping a few rows."""
    box = _height(Panel(_finding_body(root, console, 0), title=title), console)
    fix = 1 + _rows(_fix_lines(root, console.width, False), console.width)  # with its "Fix:" line
    references = _rows(_fix_lines(root, console.width, True), console.width) + 1 - fix
    evidence = _height(Panel(_finding_body(root, console, None), title=title), console) - box
    caveats = _screen_rows(lambda scratch: _print_caveats(verdict, scratch), console)
    if box + evidence + fix + references + caveats <= SCREEN:
        return _Fit(None, True, None)
    if box + evidence + fix + caveats <= SCREEN:
        return _Fit(None, False, None)
    rest = SCREEN - box - fix
    first = 0  # the heading, the first source on one row, its command, and the count of the others
    if verdict.caveats:
        remedy = Text(plain(verdict.caveats[0].gap.remedy))
        first = 2 + 1 + _rows([remedy], console.width) + (1 if len(verdict.caveats) > 1 else 0)
    caveat_rows = min(caveats, max(first, rest - min(evidence, EVIDENCE_ROWS)))
    used = _screen_rows(lambda scratch: _print_caveats(verdict, scratch, caveat_rows), console)
    evidence_rows = max(3, rest - used)
    return _Fit(None if evidence_rows >= evidence else evidence_rows, False, caveat_rows)


def _height(renderable: Panel | Table, console: Console) -> int:
    return _screen_rows(lambda scratch: scratch.print(renderable), console)


def _screen_rows(draw: Callable[[Console], None], console: Console) -> int:
    """The rows of what `draw` prints, on a terminal as wide as `console` (which folds longer lines)."""
    out = io.StringIO()
    draw(Console(file=out, width=console.width, color_system=None))
    return sum(max(1, math.ceil(len(line) / console.width)) for line in out.getvalue().splitlines())


def _evidence(
    evidence: list[str], console: Console, width: int, rows: int | None, lead: str, style: str
) -> list[Table]:
    """Each line of evidence after `lead`, in `width` columns; with `rows`, only as many screen rows as
    that, the last of them saying how many are left out."""
    if rows is None:
        return [_hanging(Text(plain(line), style=style), lead) for line in evidence]
    room = max(10, width - len(lead))
    wrapped = [[row.plain for row in Text(plain(line)).wrap(console, room)] for line in evidence]
    shown: list[Table] = []
    left = rows
    for n, item in enumerate(wrapped):
        rest = sum(len(w) for w in wrapped[n:])
        if rest <= left:
            shown += [_hanging(Text(plain(line), style=style), lead) for line in evidence[n:]]
            break
        take = min(len(item), left - 1)  # one row kept to say what is left out
        if take == len(item):
            shown.append(_hanging(Text(plain(evidence[n]), style=style), lead))
            left -= take
            continue
        if take > 0:
            cut = item[:take]
            cut[-1] = cut[-1][: room - 2] + " …"
            shown.append(_hanging(Text("\n".join(cut), style=style), lead))
        hidden = rest - max(take, 0)
        more = f"… {hidden} more row{'s' if hidden != 1 else ''} of evidence: {_MORE_EVIDENCE}"
        shown.append(_hanging(Text(more, style="dim"), lead))
        break
    return shown


def _counted(rules: list[str]) -> str:
    """`52 rules (GPU-* 4, K8S-* 1, ...)`: how many, by the prefix that names their layer."""
    prefixes = Counter(rule.split("-", 1)[0] for rule in rules)
    by_prefix = ", ".join(f"{plain(prefix)}-* {n}" for prefix, n in sorted(prefixes.items()))
    return f"{len(rules)} rule{'s' if len(rules) != 1 else ''} ({by_prefix})"


def _print_caveats(verdict: Verdict, console: Console, rows: int | None = None) -> None:
    if not verdict.caveats:
        return
    console.print(
        Text.assemble(
            "\n", ("Not read, and could change this verdict", "bold"), f" (confidence: {verdict.confidence}):"
        )
    )
    unread = [(f"{c.gap.problem} ({rule_names(c.rules)} would read it)", c.gap.remedy, "") for c in verdict.caveats]
    _print_unread(unread, console, None if rows is None else rows - 2)


def _print_gaps(verdict: Verdict, console: Console, rows: int | None) -> None:
    console.print(Text("Could not read, and how to get it:", style="bold"))
    _print_unread([(g.problem, g.remedy, "dim") for g in verdict.gaps], console, None if rows is None else rows - 1)


def _print_unread(unread: list[tuple[str, str, str]], console: Console, rows: int | None) -> None:
    """Each source not read (problem, the command that gets it, its style), the command whole on a line
    of its own; with `rows`, each problem on one row and as many as fit in that many screen rows, then
    how many more there are."""
    left = rows
    for n, (problem, remedy, style) in enumerate(unread):
        said = _hanging(Text(plain(problem) if rows is None else _one_row(problem, console.width - 4)), "  • ")
        command = Text(plain(remedy), style=style)
        size = _height(said, console) + _rows([command], console.width)
        if left is not None and size > left - (1 if n < len(unread) - 1 else 0):
            more = len(unread) - n
            console.print(
                Text(f"  … {more} more source{'s' if more != 1 else ''} not read: --verbose lists them", style="dim")
            )
            return
        console.print(said)
        console.print(command, no_wrap=True, overflow="ignore", crop=False)
        if left is not None:
            left -= size


def _one_row(text: str, width: int) -> str:
    """`text` cut to the words that fit in `width` columns, marked when cut."""
    text = plain(text)
    if len(text) <= width:
        return text
    return text[: width - 2].rsplit(" ", 1)[0] + " …"


def _finding_body(f: Finding, console: Console, evidence_rows: int | None) -> Group:
    """The verdict's box; `evidence_rows`: as many rows of evidence as that (None: all of it)."""
    parts: list[Text | Table] = [
        Text(plain(f.title), style="bold"),
        Text(f"subject: {plain(f.subject)}   severity: {f.severity}"),
        Text("Evidence:", style="bold"),
    ]
    if evidence_rows != 0:
        parts += _evidence(f.evidence, console, console.width - 4, evidence_rows, "  • ", "")
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
