"""The bundles customers really send: the verdict of every faulty fixture holds on less than the whole.

A support ticket carries `kubectl get pods,events,nodes -o json`, the logs, and the file the cause lives
in; `collect` run by hand often misses a list or two. From every faulty fixture:
  - the ticket bundle (k8s/pods.json, k8s/events.json, k8s/nodes.json, k8s/logs/, the files the root
    rule `requires`, and those its expected.json lists under `ticket_needs` where the cause lives in
    more than one file) gives the same verdict layer and rule as the whole bundle;
  - so does the whole bundle less any one optional list, unless that list is where the cause lives.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ProcessPoolExecutor
from functools import cache
from pathlib import Path

import pytest

from diag.analyze import analyze_bundle
from diag.bundle.files import Bundle
from diag.core.rules_dir import builtin_rules_dir
from diag.engine.rules import load_rules

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
FAULTY = sorted(
    p.parent for p in FIXTURES.rglob("expected.json") if json.loads(p.read_text())["verdict"]["layer"] is not None
)
TICKET = ("k8s/pods.json", "k8s/events.json", "k8s/nodes.json")
OPTIONAL = (
    "k8s/statefulsets.json",
    "k8s/hpa.json",
    "k8s/daemonsets.json",
    "k8s/endpoints.json",
    "k8s/endpointslices.json",
    "k8s/services.json",
    "k8s/deployments.json",
    "k8s/rayclusters.json",
    "k8s/rayservices.json",
)


def _files(scenario: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(scenario)): p.read_bytes()
        for p in scenario.rglob("*")
        if p.is_file() and p.name != "expected.json"
    }


def _verdict(files: dict[str, bytes]) -> tuple[str | None, str | None]:
    report = analyze_bundle(Bundle(dict(files)))
    return report.verdict.layer, report.verdict.rule


@cache
def _pool() -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=os.cpu_count() or 1)


def _where_the_cause_lives(scenario: Path) -> tuple[str, ...]:
    expected = json.loads((scenario / "expected.json").read_text())
    rules = {r.id: r for r in load_rules([builtin_rules_dir()])}
    return (*rules[expected["verdict"]["rule"]].requires, *expected.get("ticket_needs", []))


def _expected(scenario: Path) -> tuple[str, str]:
    verdict = json.loads((scenario / "expected.json").read_text())["verdict"]
    return verdict["layer"], verdict["rule"]


@pytest.mark.parametrize("scenario", FAULTY, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_the_ticket_bundle_gives_the_same_verdict(scenario: Path) -> None:
    cause = _where_the_cause_lives(scenario)
    ticket = {
        name: data
        for name, data in _files(scenario).items()
        if name in TICKET or name.startswith("k8s/logs/") or any(name.startswith(p) for p in cause)
    }
    assert _verdict(ticket) == _expected(scenario), sorted(ticket)


@pytest.mark.parametrize("scenario", FAULTY, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_a_missing_optional_list_leaves_the_verdict_standing(scenario: Path) -> None:
    files = _files(scenario)
    cause = _where_the_cause_lives(scenario)
    dropped = [name for name in OPTIONAL if name in files and not any(name.startswith(p) for p in cause)]
    variants = [{k: v for k, v in files.items() if k != name} for name in dropped]
    verdicts = list(_pool().map(_verdict, variants))
    changed = {name: got for name, got in zip(dropped, verdicts, strict=True) if got != _expected(scenario)}
    assert changed == {}
