"""Each rule's unit cases (rules/tests/<rule file>.yaml), run through the real engine in a second.

A case gives one subject's facts (only what the rule reads), the cluster facts it reads and setting
overrides, and expects the rule to fire with the given evidence, or to stay silent. The fixture suite
(test_catalogue.py) proves the rules on whole bundles; these cases say what each condition means at
its edge, the way `promtool test rules` files do for Prometheus' alerts. Format: docs/writing-rules.md.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from diag.analyze import settings_with_overrides
from diag.core.rules_dir import builtin_rules_dir
from diag.engine.config import Config
from diag.engine.rules import Rule, RuleOutcome, evaluate, load_rules
from diag.facts import Facts

CASES_DIR = Path(__file__).resolve().parents[2] / "rules" / "tests"
RULES = {r.id: r for r in load_rules([builtin_rules_dir()])}
DEFAULTS = settings_with_overrides(builtin_rules_dir(), Config())
_KEYS = {"rule", "case", "cluster", "settings", "fires", "links", "silent"}


@dataclass
class Case:
    rule: str
    case: str
    subject: dict[str, Any]
    cluster: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    fires: list[str] | None = None  # the evidence lines; None: silent
    links: list[str] | None = None

    @property
    def id(self) -> str:
        return f"{self.rule} {'fires' if self.fires is not None else 'silent'}: {self.case}"


def load_cases(directory: Path = CASES_DIR) -> list[Case]:
    cases = []
    for path in sorted(directory.glob("*.yaml")):
        for raw in yaml.safe_load(path.read_text())["tests"]:
            assert raw.get("rule") in RULES and raw.get("case"), (
                f"{path.name}: each case names a `rule:` and its `case:`"
            )
            rule = RULES[raw["rule"]]
            assert rule.file == path.name, f"{path.name}: {rule.id} is a rule of {rule.file}"
            extra = set(raw) - _KEYS - {rule.scope}
            assert not extra, f"{path.name}: {rule.id}: unknown keys {sorted(extra)}"
            assert ("fires" in raw) != ("silent" in raw), f"{path.name}: {rule.id}: say `fires:` or `silent: true`"
            assert raw.get("silent", True) is True
            cases.append(
                Case(
                    rule=rule.id,
                    case=raw["case"],
                    subject=raw["cluster"] if rule.scope == "cluster" else raw[rule.scope],
                    cluster=raw.get("cluster", {}),
                    settings=raw.get("settings", {}),
                    fires=raw.get("fires"),
                    links=raw.get("links"),
                )
            )
    return cases


def run(rule: Rule, case: Case) -> tuple[RuleOutcome, list[list[str]], list[list[str]]]:
    """The rule on the case's one subject, as analyze evaluates it: its outcome, and each finding's
    evidence and links. The sources the rule requires count as read."""
    cluster = dict(case.cluster)
    cluster["sources"] = {prefix: "ok" for prefix in rule.requires} | cluster.get("sources", {})
    subject = cluster if rule.scope == "cluster" else dict(case.subject)
    subject["_subject"] = f"{rule.scope}/case"
    facts = Facts(scopes={"cluster": [cluster], rule.scope: [subject]}, cluster=cluster)
    settings = (
        settings_with_overrides(builtin_rules_dir(), Config(settings=case.settings)) if case.settings else DEFAULTS
    )
    result = evaluate([rule], facts, settings)
    return result.outcomes[rule.id], [f.evidence for f in result.findings], [f.links for f in result.findings]


def failure(rule: Rule, case: Case) -> str | None:
    """What is wrong with the rule on this case; None when it does what the case expects."""
    outcome, evidence, links = run(rule, case)
    if case.fires is None:
        if outcome.status != "silent":
            return f"expected silent, got {outcome.status} ({outcome.detail}) {evidence}"
        return None
    if outcome.status != "fired":
        return f"expected it to fire, got {outcome.status} ({outcome.detail})"
    if evidence != [case.fires]:
        return f"evidence {evidence[0]} != expected {case.fires}"
    if case.links is not None and links != [case.links]:
        return f"links {links[0]} != expected {case.links}"
    return None


CASES = load_cases()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_rule_case(case: Case) -> None:
    assert failure(RULES[case.rule], case) is None, failure(RULES[case.rule], case)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_case_holds_only_what_the_rule_reads(case: Case) -> None:
    """Each top-level fact a case gives is one the rule names (`pod.phase`, `cluster.nodes`): a case is
    the rule's inputs, not a dump of a fixture's subject."""
    rule = RULES[case.rule]
    text = " ".join([rule.when, rule.links, *rule.evidence, rule.remediation])
    given = [(rule.scope, case.subject)] + ([("cluster", case.cluster)] if rule.scope != "cluster" else [])
    unread = [f"{var}.{key}" for var, facts in given for key in facts if not re.search(rf"\b{var}\.{key}\b", text)]
    assert unread == []


def test_every_rule_has_a_firing_and_a_silent_case() -> None:
    fires = {c.rule for c in CASES if c.fires is not None}
    silent = {c.rule for c in CASES if c.fires is None}
    assert sorted(set(RULES) - fires) == [], "rules with no `fires` case"
    assert sorted(set(RULES) - silent) == [], "rules with no `silent` case"


def test_each_case_file_is_named_for_a_rule_file() -> None:
    rule_files = {r.file for r in RULES.values()}
    assert sorted(p.name for p in CASES_DIR.glob("*.yaml") if p.name not in rule_files) == []


@functools.cache
def _raw_rules(file: str) -> dict[str, dict]:
    return {r["id"]: r for r in yaml.safe_load((builtin_rules_dir() / file).read_text())["rules"]}


def with_condition(rule_id: str, when: str, directory: Path) -> Rule:
    """The rule as its file has it, with another condition: loaded alone from a copy (without its
    `explains`, as the rules it names are not beside it)."""
    raw = _raw_rules(RULES[rule_id].file)[rule_id]
    directory.mkdir()
    # JSON is YAML, and much faster to write
    (directory / RULES[rule_id].file).write_text(json.dumps({"rules": [{**raw, "when": when, "explains": []}]}))
    return load_rules([directory])[0]


def test_a_flipped_threshold_fails_its_cases(tmp_path: Path) -> None:
    rule = RULES["GPU-105"]
    assert "gpu.utilization_gpu_pct >= settings.gpu_in_use_pct" in rule.when
    flipped = with_condition("GPU-105", rule.when.replace(">=", "<"), tmp_path / "flipped")
    failed = [c.case for c in CASES if c.rule == "GPU-105" and failure(flipped, c) is not None]
    assert failed == [c.case for c in CASES if c.rule == "GPU-105"]  # each firing case is silent, each silent one fires


_STRING = re.compile(r"'[^']*'|\"[^\"]*\"")
_OPERATOR = re.compile(r"&&|\|\||[<>=!]=|<|>")
_TURNED = {">=": ">", ">": ">=", "<=": "<", "<": "<=", "==": "!=", "!=": "==", "&&": "||", "||": "&&"}
# Mutants no subject can tell from the rule: K8S-101 already asks gpu_request > 0 and
# gpu_request <= gpu_allocatable_max, so gpu_allocatable_max > 0 and >= 0 are the same there.
_EQUIVALENT = {("K8S-101", "pod.placement.gpu_allocatable_max >= 0")}


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_each_comparison_and_junction_is_held_by_a_case(tmp_path: Path, rule_id: str) -> None:
    """Each `>=` of the condition turned `>`, `<` turned `<=`, `==` turned `!=`, `&&` turned `||` (and back)
    fails some case of the rule: its cases sit at the thresholds and on each branch."""
    rule = RULES[rule_id]
    cases = [c for c in CASES if c.rule == rule_id]
    masked = _STRING.sub(lambda m: "_" * len(m.group()), rule.when)
    uncaught = []
    for i, match in enumerate(_OPERATOR.finditer(masked)):
        when = rule.when[: match.start()] + _TURNED[match.group()] + rule.when[match.end() :]
        if any(r == rule_id and snippet in " ".join(when.split()) for r, snippet in _EQUIVALENT):
            continue
        mutant = with_condition(rule_id, when, tmp_path / str(i))
        if all(failure(mutant, c) is None for c in cases):
            uncaught.append(" ".join(when.split()))
    assert uncaught == []
