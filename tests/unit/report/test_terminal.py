"""The terminal report as a person reads it at 80 columns: fixes outside any box, commands whole on
lines of their own, URLs never split, a fix for every finding that is not a consequence."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from diag.analyze import analyze_bundle
from diag.bundle.files import Bundle
from diag.report.terminal import print_report

DEMO = Path(__file__).resolve().parents[3] / "fixtures" / "demo"
BOX = "│╭╮╰╯─"


def _at(width: int) -> tuple[list[str], object]:
    report = analyze_bundle(Bundle.open(DEMO))
    out = io.StringIO()
    print_report(report, Console(file=out, width=width, color_system=None, force_terminal=False))
    return out.getvalue().splitlines(), report


def test_each_command_of_a_fix_is_one_whole_line_from_the_first_column_outside_the_box() -> None:
    lines, report = _at(80)
    root = report.verdict.finding
    commands = [
        line.strip()
        for line in root.remediation.splitlines()
        if line.startswith("  ") and not line.strip().startswith("- ")
    ]
    assert commands
    for command in commands:
        assert command in lines, command  # the whole command, alone on its line, at column 0
    assert not any(c in line for line in lines if any(cmd in line for cmd in commands) for c in BOX)


def test_urls_are_never_split_and_prose_wraps_to_the_width() -> None:
    lines, report = _at(60)
    for url in report.verdict.finding.references:
        assert any(url in line for line in lines), url
    fix = lines[lines.index("Fix:") + 1 :]
    prose = [line for line in fix[:3] if line.startswith("  ")]
    assert prose and all(len(line) <= 60 for line in prose)


def test_every_finding_that_is_not_a_consequence_gets_its_fix() -> None:
    lines, report = _at(120)
    roots = [f for f in report.findings if f.explained_by is None]
    assert lines.count("Fix:") == len(roots) >= 2
    for consequence in (f for f in report.findings if f.explained_by):
        assert sum(consequence.rule in line for line in lines) == 1  # one line each
