"""Every fixture, perturbed as real bundles are: never a wrong "healthy", never an unrelated verdict.

For each fixture bundle with an expected.json:
  - each file deleted, emptied and cut in half: a faulty bundle never becomes "healthy"; it keeps its
    layer, becomes inconclusive, or names another layer with low confidence and a caveat naming the
    damaged source and a rule of the right layer that would read it (the damage hid the evidence, and
    the report says which read would decide);
  - a healthy namespace added whose pods have the same names: a faulty bundle is never "healthy";
  - an unrelated crash-looping pod added: the verdict does not change, and the crash is reported as
    an other problem, off the serving path;
  - every event ten days older: a fault that disappears must appear under history.
The counts of every outcome are printed at the end of the run (tests/conftest.py).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from functools import cache
from pathlib import Path

import pytest

from diag.analyze import Report, analyze_bundle
from diag.bundle.files import Bundle
from diag.core.rules_dir import builtin_rules_dir
from diag.engine.rules import load_rules
from tests import perturb

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SCENARIOS = sorted(p.parent for p in FIXTURES.rglob("expected.json"))
WITH_PODS = [s for s in SCENARIOS if (s / "k8s" / "pods.json").exists()]
WITH_EVENTS = [s for s in SCENARIOS if (s / "k8s" / "events.json").exists()]
TALLY: Counter[str] = Counter()


def _ids(scenario: Path) -> str:
    return str(scenario.relative_to(FIXTURES))


def _files(scenario: Path) -> perturb.Files:
    return {str(p.relative_to(scenario)): p.read_bytes() for p in scenario.rglob("*") if p.is_file()}


def _expected(scenario: Path) -> dict:
    return json.loads((scenario / "expected.json").read_text())


def _expected_layer(scenario: Path) -> str | None:
    return _expected(scenario)["verdict"]["layer"]


def _analyze(files: perturb.Files) -> Report:
    return analyze_bundle(Bundle({k: v for k, v in files.items() if not k.endswith(perturb.SKIP)}))


@cache
def _pool() -> ProcessPoolExecutor:
    """Thousands of analyses: spread over the machine's cores (the pool ends with the test process)."""
    return ProcessPoolExecutor(max_workers=os.cpu_count() or 1)


def _damage_outcome(layer: str | None, files: perturb.Files, damaged: str, fires: list[str]) -> str:
    report = _analyze(files)
    outcome = _outcome(report, layer, damaged)
    if outcome == "other layer" and report.verdict.rule in fires and damaged in {g.source for g in report.verdict.gaps}:
        return "another true finding"  # the damage hid the deeper one's evidence, and the report names the damaged file
    return outcome


def _outcome(report: Report, layer: str | None, damaged: str | None = None) -> str:
    if report.verdict.status == "healthy":
        return "healthy"
    if report.verdict.status == "inconclusive":
        return "inconclusive"
    if report.verdict.layer == layer:
        return "same layer"
    layers = _rule_layers()
    caveats = report.verdict.caveats
    if report.verdict.confidence == "low" and any(
        c.gap.source == damaged or layers.get(r) == layer for c in caveats for r in c.rules
    ):
        return "caveated"
    return "other layer"


@cache
def _rule_layers() -> dict[str, str]:
    return {r.id: r.layer for r in load_rules([builtin_rules_dir()])}


@pytest.mark.parametrize("scenario", SCENARIOS, ids=_ids)
def test_damaged_files_never_make_a_fault_healthy(scenario: Path) -> None:
    layer = _expected_layer(scenario)
    wrong = []
    variants = list(perturb.damaged(_files(scenario)))
    outcomes = _pool().map(
        _damage_outcome,
        [layer] * len(variants),
        [files for _, _, files in variants],
        [name for name, _, _ in variants],
        [_expected(scenario)["fires"]] * len(variants),
        chunksize=8,
    )
    for (name, how, _), outcome in zip(variants, outcomes, strict=True):
        kind = "faulty" if layer else "healthy"
        TALLY[f"damage ({how}) of {kind} fixtures -> {outcome}"] += 1
        if layer is not None and outcome in ("healthy", "other layer"):
            wrong.append(f"{how} {name}: {outcome}")
    assert wrong == []


def _perturbed(perturbation: Callable[[perturb.Files], perturb.Files | None], scenario: Path) -> perturb.Files:
    files = perturbation(_files(scenario))
    assert files is not None, f"{perturbation.__name__} found nothing to change in {scenario.name}"
    return files


@pytest.mark.parametrize("scenario", WITH_PODS, ids=_ids)
def test_same_named_pods_elsewhere_never_hide_a_fault(scenario: Path) -> None:
    files = _perturbed(perturb.with_healthy_twins, scenario)
    layer = _expected_layer(scenario)
    outcome = _outcome(_analyze(files), layer)
    TALLY[f"healthy twins in another namespace, {'faulty' if layer else 'healthy'} fixtures -> {outcome}"] += 1
    if layer is not None:
        assert outcome in ("same layer", "inconclusive", "caveated")
    else:
        assert outcome in ("healthy", "inconclusive")


@pytest.mark.parametrize("scenario", WITH_PODS, ids=_ids)
def test_an_unrelated_crashloop_never_takes_the_verdict(scenario: Path) -> None:
    files = _perturbed(perturb.with_unrelated_crashloop, scenario)
    before = _analyze(_files(scenario)).verdict
    report = _analyze(files)
    after = report.verdict
    TALLY[
        "unrelated crash-looping pod -> verdict "
        + ("kept" if (after.status, after.rule) == (before.status, before.rule) else "changed")
    ] += 1
    assert (after.status, after.layer, after.rule) == (before.status, before.layer, before.rule), after.summary
    web = [f for f in report.findings if perturb.UNRELATED_NAMESPACE in f.subject]
    if _namespaces_of(files) is None:
        assert web and not any(f.serving for f in web), [(f.rule, f.subject, f.serving) for f in web]
    else:  # a triage of other namespaces: another namespace's pod is not its question
        assert not web, [(f.rule, f.subject) for f in web]


def _namespaces_of(files: dict[str, bytes]) -> list[str] | None:
    """The namespaces the bundle's manifest says were triaged; None for all of them (or no manifest)."""
    manifest = json.loads(files["manifest.json"]) if "manifest.json" in files else {}
    namespaces = (manifest.get("kubernetes") or {}).get("namespaces")
    return None if not namespaces or "*" in namespaces else namespaces


@pytest.mark.parametrize("scenario", WITH_EVENTS, ids=_ids)
def test_aged_events_become_history_not_silence(scenario: Path) -> None:
    files = _perturbed(perturb.aged, scenario)
    layer = _expected_layer(scenario)
    report = _analyze(files)
    outcome = _outcome(report, layer)
    history = report.history.items
    TALLY[
        f"events aged ten days, {'faulty' if layer else 'healthy'} fixtures -> {outcome}"
        + (" + history" if history else "")
    ] += 1
    if layer is not None and outcome == "healthy":
        assert history, "the fault vanished without a trace in the history"
