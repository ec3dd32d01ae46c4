"""Conditions answered in Python (diag/engine/precheck.py) change nothing: on every fixture, the findings,
their evidence, and every rule's outcome (its unknown counts too) are what CEL alone gives."""

import json
from pathlib import Path

import pytest

from diag.analyze import analyze_bundle
from diag.bundle.files import Bundle
from diag.engine import rules as engine

FIXTURES = sorted(p for p in (Path(__file__).parents[3] / "fixtures").iterdir() if (p / "expected.json").exists())


def _what_it_says(fixture: Path) -> tuple:
    report = analyze_bundle(Bundle.open(fixture))
    findings = [(f.rule, f.subject, f.evidence, f.remediation, f.links) for f in report.findings]
    outcomes = {rule: (o.status, o.detail) for rule, o in report.outcomes.items()}
    history = [item.as_dict() for item in report.history.items] if report.history is not None else None
    return findings, outcomes, history


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name)
def test_conditions_answered_in_python_give_what_cel_gives(fixture: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    answered: list[int] = []
    prechecked = engine._prechecked

    def counted(rules, variables, tallies, stopwatch=None):
        left = prechecked(rules, variables, tallies, stopwatch)
        answered.append(len(rules) - len(left))
        return left

    monkeypatch.setattr(engine, "_prechecked", counted)
    with_precheck = _what_it_says(fixture)
    monkeypatch.setattr(engine, "_prechecked", lambda rules, variables, tallies, stopwatch=None: list(rules))
    assert with_precheck == _what_it_says(fixture)
    assert sum(answered) > 0  # not vacuous: Python answered some conditions on this fixture
    fires = json.loads((fixture / "expected.json").read_text())["fires"]
    assert {finding[0] for finding in with_precheck[0]} >= set(fires)
