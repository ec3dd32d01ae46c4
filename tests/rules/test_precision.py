"""Precision as a number: healthy bundles, and the ordinary variation of real ones, raise no alarm.

Every healthy fixture (expected verdict layer null) is analysed as it is and perturbed the way a
healthy cluster differs from one collection to the next (tests/perturb.py): a request more or less
waiting in every scrape, KV usage jittered within its normal range, events ten days older, a serving
pod restarted once days ago, another tenant's pods and events added, one more scrape with the
counters grown as before. The count of warning and critical findings on the serving path over all of
them is the false-alarm count; it must be zero. The counts are printed at the end of the run
(tests/conftest.py).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from diag.analyze import analyze_bundle
from diag.bundle.files import Bundle
from tests import perturb

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
HEALTHY = sorted(
    p.parent for p in FIXTURES.rglob("expected.json") if json.loads(p.read_text())["verdict"]["layer"] is None
)
PERTURBATIONS: dict[str, Callable[[perturb.Files], perturb.Files | None]] = {
    "as collected": dict,
    "one more request waiting": partial(perturb.queue_shifted, delta=1),
    "one request fewer waiting": partial(perturb.queue_shifted, delta=-1),
    "KV usage jittered": perturb.kv_jittered,
    "events ten days older": perturb.aged,
    "a serving pod restarted once, 3 days ago": perturb.restarted_long_ago,
    "another tenant's crash-looping pod and its events": perturb.with_unrelated_crashloop,
    "same-named healthy pods in another namespace": perturb.with_healthy_twins,
    "one more scrape, counters grown as before": perturb.with_extra_scrape,
}
TALLY: Counter[str] = Counter()


def _files(scenario: Path) -> perturb.Files:
    return {str(p.relative_to(scenario)): p.read_bytes() for p in scenario.rglob("*") if p.is_file()}


def _alarms(files: perturb.Files) -> list[str]:
    report = analyze_bundle(Bundle({k: v for k, v in files.items() if not k.endswith(perturb.SKIP)}))
    return [f"{f.rule} {f.severity} {f.subject}: {f.evidence[:2]}" for f in report.findings
            if f.serving and f.severity in ("warning", "critical")]  # fmt: skip


def _applicable() -> list[tuple[Path, str]]:
    """Each healthy fixture with each perturbation that finds something to change in it."""
    return [
        (scenario, how)
        for scenario in HEALTHY
        for how, perturbation in PERTURBATIONS.items()
        if perturbation(_files(scenario)) is not None
    ]


@pytest.mark.parametrize(
    ("scenario", "how"), _applicable(), ids=lambda v: str(v.relative_to(FIXTURES)) if isinstance(v, Path) else v
)
def test_no_alarm_on_a_healthy_bundle(scenario: Path, how: str) -> None:
    files = PERTURBATIONS[how](_files(scenario))
    assert files is not None
    alarms = _alarms(files)
    TALLY["bundles analysed"] += 1
    TALLY["serving-path warning/critical findings (false alarms)"] += len(alarms)
    assert alarms == []


@pytest.mark.parametrize("how", [h for h in PERTURBATIONS if h != "as collected"])
def test_every_perturbation_changes_some_healthy_bundle(how: str) -> None:
    changed = 0
    for scenario in HEALTHY:
        files = _files(scenario)
        perturbed = PERTURBATIONS[how](files)
        changed += perturbed is not None and perturbed != files
    assert changed > 0


def test_some_healthy_fixtures_are_busy() -> None:
    """The busy ones are where false alarms hide: requests waiting at some scrape of a healthy server."""

    def waiting_somewhere(scenario: Path) -> bool:
        files = _files(scenario)
        scrapes = [n for names in perturb.scrapes_by_server(files).values() for n in names]
        return any(perturb.waiting_values(files[n]) and max(perturb.waiting_values(files[n])) > 0 for n in scrapes)

    busy = [s.name for s in HEALTHY if waiting_somewhere(s)]
    assert len(busy) >= 3, busy


def test_one_request_waiting_once_is_no_queue_for_the_vllm_and_hpa_rules() -> None:
    """k8s-hpa-pinned-at-max, its queues replaced by one request waiting at the last scrape behind a busy batch."""
    scenario = FIXTURES / "k8s-hpa-pinned-at-max"
    files = _files(scenario)
    fired = {
        f.rule
        for f in analyze_bundle(Bundle({k: v for k, v in files.items() if not k.endswith(perturb.SKIP)})).findings
    }
    assert {"K8S-311", "VLLM-114"} <= fired
    for scrapes in perturb.scrapes_by_server(files).values():
        for n, name in enumerate(scrapes):
            files[name] = perturb.with_waiting(files[name], 1.0 if n == len(scrapes) - 1 else 0.0)
    assert _alarms(files) == []
