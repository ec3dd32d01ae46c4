"""Lint over every rule: a condition never turns missing data into "checked, silent".

Null in the facts means "not known". The engine counts a condition that reads null as unknown, and
CEL's && / || decide around an unknown side where the other side settles it. A guard such as
`x != null && x > 3` answers false when x is unknown, so the rule would read as checked and silent on
data it never saw: that is how a wrong "healthy" is made. Null checks stay allowed in evidence and
remediation text, where they only choose what to print.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from diag.core.rules_dir import builtin_rules_dir
from diag.engine.rules import _HOLE, Rule, compiled, load_rules

_NULL_GUARD = re.compile(r"(?:[!=]=\s*null\b)|(?:\bnull\s*[!=]=)|\bhas\(")

RULES = load_rules([builtin_rules_dir()])

# Rules still being converted (each one's facts must first tell "none seen" from "not collected").
# This list only shrinks.
_BEING_CONVERTED = {"GPU-104", "VLLM-114", "VLLM-108", "VLLM-112"}


def null_guards(rule: Rule) -> list[str]:
    return [m.group(0) for m in _NULL_GUARD.finditer(rule.when)]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_condition_has_no_null_guard(rule: Rule) -> None:
    assert null_guards(rule) == [], f"{rule.file}: {rule.id} guards against null in `when`; let null stay unknown"


@pytest.mark.parametrize(
    ("condition", "guards"),
    [
        ("pod.x != null && pod.x > 1", ["!= null"]),
        ("null == pod.x || pod.y", ["null =="]),
        ("has(pod.x) && pod.x", ["has("]),
        ("pod.x > 1 && pod.y == 'nullable'", []),
    ],
)
def test_lint_sees_each_form_of_guard(condition: str, guards: list[str]) -> None:
    rule = Rule(
        id="T-001", layer="vllm", severity="info", title="t", scope="pod", when=condition, evidence=[], remediation=""
    )
    assert null_guards(rule) == guards


def test_rule_files_are_by_layer() -> None:
    """One layer a file, named for it (`<layer>.yaml`, `<layer>-<topic>.yaml`): provenance is in each rule's
    references, not in where it is filed."""
    wrong = [
        f"{rule.id} ({rule.layer}) in {Path(rule.file).name}"
        for rule in load_rules([builtin_rules_dir()])
        if Path(rule.file).name.split(".")[0].split("-")[0] != rule.layer
    ]
    assert wrong == []


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_every_hole_of_the_evidence_and_fix_compiles(rule: Rule) -> None:
    """A user's rules are checked whole when they load; the built-in ones' holes here, once, not per run."""
    for text in [*rule.evidence, rule.remediation]:
        for hole in _HOLE.findall(text):
            compiled(hole.strip())
