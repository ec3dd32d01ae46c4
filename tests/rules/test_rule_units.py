"""Each rule's unit cases (rules/tests/<rule file>.yaml), run through the real engine in a second.

A case gives one subject's facts (only what the rule reads), the cluster facts it reads and setting
overrides, and expects the rule to fire with the given evidence, or to stay silent. The fixture suite
(test_catalogue.py) proves the rules on whole bundles; these cases say what each condition means at
its edge, the way `promtool test rules` files do for Prometheus' alerts. Format: docs/writing-rules.md.
"""

from __future__ import annotations

import re
import shutil
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
    settings = settings_with_overrides(builtin_rules_dir(), Config(settings=case.settings))
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


# A changed condition must fail its cases: each mutation turns a firing case silent or a silent one firing.
MUTATIONS = [
    (
        "GPU-105",
        "gpu.utilization_gpu_pct >= settings.gpu_in_use_pct",
        "gpu.utilization_gpu_pct < settings.gpu_in_use_pct",
    ),
    ("K8S-101", "pod.gpu_request > 0", "pod.gpu_request >= 0"),
]


@pytest.mark.parametrize(("rule_id", "old", "new"), MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_a_changed_condition_fails_its_cases(tmp_path: Path, rule_id: str, old: str, new: str) -> None:
    for path in builtin_rules_dir().glob("*.yaml"):
        shutil.copy(path, tmp_path)
    mutated = tmp_path / RULES[rule_id].file
    assert mutated.read_text().count(old) == 1
    mutated.write_text(mutated.read_text().replace(old, new))
    rule = {r.id: r for r in load_rules([tmp_path])}[rule_id]
    cases = [c for c in CASES if c.rule == rule_id]
    assert [failure(RULES[rule_id], c) for c in cases] == [None] * len(cases)
    assert [c.case for c in cases if failure(rule, c) is not None] != []
