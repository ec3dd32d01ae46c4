"""The whole catalogue over every fixture bundle: each fires exactly what its expected.json says.

This proves both halves of every rule: it fires where its fixture says, and it stays silent on every
other fixture (healthy and busy-but-healthy ones included).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diag.analyze import analyze_bundle
from diag.bundle.files import Bundle
from diag.core.rules_dir import builtin_rules_dir
from diag.engine.rules import load_rules

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SCENARIOS = sorted(p.parent for p in FIXTURES.rglob("expected.json"))


def _expected(scenario: Path) -> dict:
    return json.loads((scenario / "expected.json").read_text())


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_fixture_fires_exactly_what_it_expects(scenario: Path) -> None:
    expected = _expected(scenario)
    report = analyze_bundle(Bundle.open(scenario))
    fired = sorted({f.rule for f in report.findings})
    assert fired == sorted(expected["fires"]), [f"{f.rule} {f.subject}: {f.evidence}" for f in report.findings]
    assert report.verdict.layer == expected["verdict"]["layer"], report.verdict.summary
    assert report.verdict.rule == expected["verdict"]["rule"], report.verdict.summary
    status = expected["verdict"].get("status", "healthy" if expected["verdict"]["layer"] is None else "fault")
    assert report.verdict.status == status, report.verdict.summary
    errors = {rid: o.detail for rid, o in report.outcomes.items() if o.status == "error"}
    assert errors == {}


def test_every_rule_has_a_fixture_where_it_fires() -> None:
    fired_somewhere = {rid for s in SCENARIOS for rid in _expected(s)["fires"]}
    rules = {r.id for r in load_rules([builtin_rules_dir()])}
    assert sorted(rules - fired_somewhere) == []


def test_healthy_fixtures_have_no_warning_or_critical() -> None:
    healthy = [s for s in SCENARIOS if _expected(s)["verdict"]["layer"] is None]
    assert healthy, "at least one healthy fixture"
    for scenario in healthy:
        report = analyze_bundle(Bundle.open(scenario))
        assert [f.rule for f in report.findings if f.severity != "info"] == [], scenario.name
