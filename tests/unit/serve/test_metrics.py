"""diag/serve/metrics.py: the exposition of real reports, as promtool checks it."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from diag.parsers.prom_text import parse_exposition
from diag.serve.metrics import Counters, render, summarize


def exposition(fault_report, healthy_report) -> str:
    counters = Counters()
    counters.inc("llmdiag_cycles_total", trigger="schedule", outcome="ok")
    counters.inc("llmdiag_cycles_total", trigger="schedule", outcome="error")
    counters.inc("llmdiag_alert_triages_total", outcome="deduplicated")
    scheduled = {**summarize(fault_report), "duration_seconds": 1.5, "finished_at": 1_800_000_000.25}
    alert = {**summarize(healthy_report), "duration_seconds": 0.5, "finished_at": 1_800_000_100.0}
    return render({"schedule": scheduled, "alert": alert}, counters, (2, 4096))


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for s in parse_exposition(text).samples}


def test_the_verdict_of_each_trigger_with_its_labels(fault_report, healthy_report) -> None:
    got = samples(exposition(fault_report, healthy_report))
    fault = {"trigger": "schedule", "status": "fault", "layer": "kubernetes", "rule": "K8S-505",
             "severity": "critical", "namespace": "llm-serving"}  # fmt: skip
    healthy = {"trigger": "alert", "status": "healthy", "layer": "", "rule": "", "severity": "", "namespace": ""}
    assert got[("llmdiag_verdict", tuple(sorted(fault.items())))] == 1
    assert got[("llmdiag_verdict", tuple(sorted(healthy.items())))] == 1
    assert got[("llmdiag_last_success_timestamp_seconds", (("trigger", "schedule"),))] == 1_800_000_000.25
    assert got[("llmdiag_cycle_duration_seconds", (("trigger", "alert"),))] == 0.5
    assert got[("llmdiag_cycles_total", (("outcome", "error"), ("trigger", "schedule")))] == 1


def test_findings_by_rule_and_severity_and_each_source_in_one_state(fault_report, healthy_report) -> None:
    got = samples(exposition(fault_report, healthy_report))
    findings = {dict(labels)["rule"]: v for (name, labels), v in got.items() if name == "llmdiag_findings"}
    assert sum(findings.values()) == len(fault_report.findings)
    assert findings["K8S-505"] == 1
    states: dict[str, float] = {}
    for (name, labels), v in got.items():
        if name == "llmdiag_source_state":
            states[dict(labels)["source"]] = states.get(dict(labels)["source"], 0) + v
    assert states and set(states.values()) == {1}
    assert ("llmdiag_source_state", (("source", "k8s/pods.json"), ("state", "ok"))) in got


def test_promtool_finds_nothing_to_say(fault_report, healthy_report) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("LLMDIAG_REQUIRE_LIVE") == "1":  # CI installs it: there, its absence fails
            pytest.fail("no promtool (apt-get install prometheus)", pytrace=False)
        pytest.skip("no promtool (apt-get install prometheus)")
    checked = subprocess.run([promtool, "check", "metrics"], input=exposition(fault_report, healthy_report),
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    assert checked.returncode == 0 and checked.stdout + checked.stderr == "", checked.stdout + checked.stderr


def test_label_values_are_escaped() -> None:
    meta = {"verdict": {"status": "fault", "layer": "k", "rule": 'R"1\\\n', "severity": "critical", "namespace": ""},
            "duration_seconds": 1, "finished_at": 2}  # fmt: skip
    text = render({"schedule": meta}, Counters(), (0, 0))
    assert 'rule="R\\"1\\\\\\n"' in text
    assert parse_exposition(text).samples
