"""The engine gives CEL only the facts the rules read (diag.engine.rules._view): on every fixture, the
findings, their evidence and remediation, and every rule's outcome must be what the whole facts give."""

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
    return findings, outcomes


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name)
def test_the_facts_rules_read_give_what_the_whole_facts_give(fixture: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cut = _what_it_says(fixture)
    monkeypatch.setattr(engine, "_view", lambda facts, paths: facts)
    assert cut == _what_it_says(fixture)
    fires = json.loads((fixture / "expected.json").read_text())["fires"]
    assert {finding[0] for finding in cut[0]} >= set(fires)  # not vacuous: the fixture's faults are there
