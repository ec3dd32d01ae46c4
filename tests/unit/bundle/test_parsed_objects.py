"""Objects a bundle carries parsed (`Bundle.parsed`, serve's pods and events): the loader takes them
for the file's parse, and the analysis is the one the file's text gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from diag.analyze import analyze_bundle
from diag.bundle.files import Bundle
from diag.bundle.load import load_bundle
from diag.parsers.kubernetes import parse_events, parse_pods
from diag.report.json_report import render_json

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
WITH_PODS = sorted(p.name for p in FIXTURES.iterdir() if (p / "k8s" / "pods.json").is_file())


def with_pods_parsed(path: Path) -> Bundle:
    """The bundle with its pods, and its events where it has them, parsed as serve hands them over."""
    bundle = Bundle.open(path)
    bundle.parsed["k8s/pods.json"] = parse_pods(bundle.text("k8s/pods.json"))
    if "k8s/events.json" in bundle.files:
        bundle.parsed["k8s/events.json"] = parse_events(bundle.text("k8s/events.json"))
    return bundle


def test_many_fixtures_hold_pods_and_events() -> None:
    assert len(WITH_PODS) >= 50
    assert sum((FIXTURES / name / "k8s" / "events.json").is_file() for name in WITH_PODS) >= 40


@pytest.mark.parametrize("name", WITH_PODS)
def test_the_analysis_with_the_pods_parsed_is_the_analysis_of_the_file(name: str) -> None:
    parsed = render_json(analyze_bundle(with_pods_parsed(FIXTURES / name)))
    assert parsed == render_json(analyze_bundle(Bundle.open(FIXTURES / name)))


def test_the_loader_takes_the_objects_themselves_not_a_parse_of_the_file() -> None:
    bundle = with_pods_parsed(FIXTURES / "healthy-k8s-vllm")
    made = bundle.parsed["k8s/pods.json"]
    snap = load_bundle(bundle)
    assert snap.pods and all(a is b for a, b in zip(snap.pods, made, strict=True))
    assert snap.sources["k8s/pods.json"].status == "ok"
    events = bundle.parsed["k8s/events.json"]
    assert snap.events and all(a is b for a, b in zip(snap.events, events, strict=True))


def test_a_file_written_again_without_objects_is_parsed() -> None:
    bundle = with_pods_parsed(FIXTURES / "healthy-k8s-vllm")
    bundle.add("k8s/pods.json", '{"apiVersion": "v1", "kind": "List", "items": []}')
    assert "k8s/pods.json" not in bundle.parsed
    assert load_bundle(bundle).pods == []


def test_objects_parsed_already_are_refused_where_the_file_is_over_the_work_budget() -> None:
    from diag.bundle import load
    from diag.bundle.budget import WorkBudget, WorkLimits

    loader = load._Loader(with_pods_parsed(FIXTURES / "healthy-k8s-vllm"))
    loader.budget = WorkBudget(WorkLimits(items_per_list=1))
    snap = loader.load()
    assert snap.pods == [] and snap.sources["k8s/pods.json"].status == "failed"
