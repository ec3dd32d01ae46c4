"""What the terminal and Markdown reports claim agrees with the JSON report on every fixture: the
verdict they name, the findings they list as the root cause's consequences (the JSON's explained_by
chains that lead to the root), and the findings they list at all (issue 29: a finding printed under
"Explains" while the JSON had it unexplained)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from diag.analyze import analyze_bundle
from diag.bundle.files import Bundle
from diag.report.json_report import render_json
from diag.report.markdown import render_markdown
from diag.report.terminal import print_report

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
SCENARIOS = sorted(p.parent for p in FIXTURES.rglob("expected.json"))
RULE = r"[A-Z0-9]+-\d+"


def _consequences_in_json(report: dict) -> set[tuple[str, str]]:
    """Findings whose explained_by chain reaches the verdict's root finding."""
    verdict = report["verdict"]
    if verdict.get("status") != "fault":
        return set()
    by_key = {(f["rule"], f["subject"]): f for f in report["findings"]}
    root = (verdict["rule"], verdict["subject"]) if verdict.get("subject") else None
    found = set()
    for key, finding in by_key.items():
        seen, cause = set(), finding.get("explained_by")
        while cause and cause not in seen:
            seen.add(cause)
            causes = [k for k in by_key if k[0] == cause]
            if root is not None and root in causes or (root is None and cause == verdict["rule"]):
                found.add(key)
                break
            cause = by_key[causes[0]].get("explained_by") if causes else None
    return found


def _section(text: str, start: str, end_pattern: str) -> str:
    if start not in text:
        return ""
    after = text.split(start, 1)[1]
    return re.split(end_pattern, after, maxsplit=1)[0]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_terminal_and_markdown_claim_what_the_json_says(scenario: Path) -> None:
    report = analyze_bundle(Bundle.open(scenario))
    as_json = json.loads(render_json(report))
    verdict = as_json["verdict"]
    buffer = io.StringIO()
    print_report(report, Console(file=buffer, width=400, color_system=None), verbose=True)
    terminal = buffer.getvalue()
    markdown = render_markdown(report)

    if verdict["status"] == "fault":
        assert f"{verdict['layer']} layer at fault ({verdict['rule']})" in terminal
        assert f"**Verdict: {verdict['layer']} layer**" in markdown
    else:
        assert verdict["status"] in terminal.lower() and verdict["status"] in markdown.lower()

    expected = {rule for rule, _ in _consequences_in_json(as_json)}
    listed_terminal = set(re.findall(rf"^  • ({RULE}) ", _section(terminal, "Consequences (", r"\n\S"), re.M))
    listed_markdown = set(re.findall(rf"^- `({RULE})`", _section(markdown, "### Consequences\n", r"\n#"), re.M))
    assert listed_terminal == expected, (listed_terminal, expected)
    assert listed_markdown == expected, (listed_markdown, expected)

    for finding in as_json["findings"]:
        assert finding["rule"] in terminal and finding["rule"] in markdown, finding["rule"]
