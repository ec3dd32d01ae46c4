"""Every scenario of the live catalogue (k8s_scenarios.CATALOGUE) at once, one namespace each, on a
REAL control plane of its own (the scenarios cordon nodes and fill pools that other test files count):
`llmdiag triage -n NS` names each scenario's cause as the rule of its verdict, and a healthy namespace
has no fault. bench/bench_live.py times the same scenarios against kubectl, k8sgpt and Popeye.

A scenario whose cause llmdiag does not name yet is listed in NOT_YET with why: it must fail (strict
xfail), so that the day it passes, it leaves the list."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack

import pytest
from k8s_cluster import ControlPlane, running_control_plane
from k8s_scenarios import CATALOGUE, build_all, fired, triage, vllm_stand_in
from live_services import ServiceUnavailable

pytestmark = pytest.mark.live

NOT_YET: dict[str, str] = {}


@pytest.fixture(scope="module")
def catalogue() -> Iterator[tuple[ControlPlane, dict[str, str]]]:
    with ExitStack() as stack:
        try:
            cluster = stack.enter_context(running_control_plane())
        except ServiceUnavailable as e:
            if os.environ.get("LLMDIAG_REQUIRE_LIVE") == "1":  # CI builds the control plane: there it fails
                pytest.fail(f"{e} (LLMDIAG_REQUIRE_LIVE=1)", pytrace=False)
            pytest.skip(str(e))
        chosen = list(CATALOGUE.values())
        failed = build_all(cluster, chosen)
        stack.enter_context(vllm_stand_in(cluster, chosen))
        yield cluster, failed


@pytest.mark.parametrize(
    "ns",
    [pytest.param(ns, marks=pytest.mark.xfail(reason=NOT_YET[ns], strict=True)) if ns in NOT_YET else ns
     for ns in CATALOGUE],
)  # fmt: skip
def test_the_verdict_names_the_scenarios_cause(catalogue: tuple[ControlPlane, dict[str, str]], ns: str) -> None:
    cluster, failed = catalogue
    assert ns not in failed, failed[ns]
    s = CATALOGUE[ns]
    report = triage(cluster, ns)
    if s.rule is None:
        assert report["verdict"]["status"] == "healthy", report["verdict"]
        assert not report["findings"], [f["rule"] for f in report["findings"]]
    else:
        assert s.rule in fired(report), report["findings"]
        assert report["verdict"]["rule"] == s.rule, report["verdict"]
