"""The terminal report as a person reads it at 80 columns: fixes outside any box, commands whole on
lines of their own, URLs never split, a fix for every finding that is not a consequence."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from diag.analyze import analyze_bundle
from diag.bundle.files import Bundle
from diag.core.shell import COMMAND_LINE
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


FIXTURES = DEMO.parent
SCENARIOS = sorted(p.parent for p in FIXTURES.rglob("expected.json"))


def _rows(text: str, width: int) -> list[str]:
    """The screen rows a terminal of `width` columns shows: longer lines fold."""
    rows = []
    for line in text.splitlines():
        rows += [line[i : i + width] for i in range(0, max(len(line), 1), width)]
    return rows


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_the_first_screen_at_80x24_holds_the_verdict_the_root_fix_and_what_could_change_it(scenario: Path) -> None:
    report = analyze_bundle(Bundle.open(scenario))
    out = io.StringIO()
    print_report(report, Console(file=out, width=80, color_system=None, force_terminal=False))
    screen = _rows(out.getvalue(), 80)[:24]
    assert any(row.lstrip("╭─ ").startswith("llmdiag verdict:") for row in screen), screen
    root = report.verdict.finding
    if root is not None:
        commands = [line.strip() for line in root.remediation.splitlines() if COMMAND_LINE.match(line)]
        if commands:
            assert commands[0][:80] in screen, "\n".join(screen)
    if report.verdict.caveats:  # the first source not read that could change the verdict, and how to get it
        assert report.verdict.caveats[0].gap.remedy[:80] in screen, "\n".join(screen)
    # each fix once: a finding whose fix was printed points back to it
    fixes = {f.remediation for f in report.findings if f.explained_by is None}
    assert out.getvalue().splitlines().count("Fix:") == len(fixes)
    unknown = [r for r, o in report.outcomes.items() if o.status in ("unknown", "skipped")]
    if len(unknown) > 1:
        assert not any(all(r in line for r in unknown[:2]) for line in out.getvalue().splitlines())


def test_verbose_prints_every_evidence_line_reference_and_undecided_rule() -> None:
    report = analyze_bundle(Bundle.open(DEMO))
    short, verbose = io.StringIO(), io.StringIO()
    print_report(report, Console(file=short, width=80, color_system=None))
    print_report(report, Console(file=verbose, width=80, color_system=None), verbose=True)
    unknown = sorted(r for r, o in report.outcomes.items() if o.status in ("unknown", "skipped"))
    assert len(unknown) > 10
    flat = " ".join(verbose.getvalue().split())
    assert all(r in flat for r in unknown)
    assert f"Not decidable from this bundle: {len(unknown)} rules (" in " ".join(short.getvalue().split())
    for f in report.findings:
        for reference in f.references if f.explained_by is None else []:
            assert reference in verbose.getvalue()
    assert "more rows of evidence: --verbose" in short.getvalue()
    assert "more rows of evidence" not in verbose.getvalue()
    assert len(short.getvalue().splitlines()) < len(verbose.getvalue().splitlines())


def test_a_fix_shared_by_two_findings_is_printed_once() -> None:
    report = analyze_bundle(Bundle.open(FIXTURES / "k8s-tcp-readiness"))
    for verbose in (False, True):
        out = io.StringIO()
        print_report(report, Console(file=out, width=120, color_system=None), verbose=verbose)
        text = out.getvalue()
        first_command = next(
            line.strip() for line in report.findings[0].remediation.splitlines() if COMMAND_LINE.match(line)
        )
        assert text.splitlines().count(first_command) == 1
        assert "Fix: the same as K8S-203's above" in text


def test_an_inconclusive_verdict_with_many_gaps_fits_its_first_screen() -> None:
    from diag.bundle.layout import KUBE_LISTS

    report = analyze_bundle(Bundle({f"k8s/{k.kind}.json": b"{damaged" for k in KUBE_LISTS}))
    assert report.verdict.status == "inconclusive" and len(report.verdict.gaps) > 10
    short, verbose = io.StringIO(), io.StringIO()
    print_report(report, Console(file=short, width=80, color_system=None))
    print_report(report, Console(file=verbose, width=80, color_system=None), verbose=True)
    screen = _rows(short.getvalue(), 80)[:24]
    assert any("llmdiag verdict: inconclusive" in row for row in screen[:1])
    shown = [g for g in report.verdict.gaps if g.remedy in short.getvalue().splitlines()]
    assert shown and all(g.remedy[:80] in screen for g in shown)  # each command whole, on the first screen
    assert f"… {len(report.verdict.gaps) - len(shown)} more sources not read: --verbose lists them" in "\n".join(screen)
    assert all(g.remedy in verbose.getvalue().splitlines() for g in report.verdict.gaps)


def test_a_sentence_the_rule_file_breaks_across_lines_is_one_paragraph() -> None:
    from diag.engine.rules import Finding
    from diag.report.terminal import _fix_lines

    remediation = (
        "With a driver preinstalled on the host, enable the daemon in the node\n"
        "image or its bootstrap script.\n"
        "Then check it:\n"
        "  nvidia-smi -q\n"
        "Lines that end a sentence stay apart.\n"
        "kubectl uncordon gpu-node-b once the GPU passes.\n"
        "- an item that goes\n"
        "on here\n"
    )
    f = Finding("GPU-207", "gpu", "warning", "t", "s", [], remediation)
    rows = [row for text in _fix_lines(f, 120, False) for row in text.plain.split("\n")]
    assert rows == [
        "  With a driver preinstalled on the host, enable the daemon in the node image or its bootstrap script.",
        "  Then check it:",
        "nvidia-smi -q",
        "  Lines that end a sentence stay apart.",
        "  kubectl uncordon gpu-node-b once the GPU passes.",
        "  - an item that goes on here",
    ]
