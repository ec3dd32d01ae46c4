"""Now versus history: a fault whose only trace is older than the window (events, a container's last
termination, a Ray death) is reported as history, not as a current finding. Each case ages a fixture
by ten days with the collection time left where it was, and checks the same fixture inside the window."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from timeshift import collection_time, shifted

from diag.analyze import Report, analyze_bundle
from diag.bundle.files import Bundle
from diag.bundle.load import load_bundle
from diag.engine.config import Config, ConfigError
from diag.facts import build_facts
from diag.link.join import join
from diag.report.json_report import to_dict
from diag.report.markdown import render_markdown
from diag.report.terminal import print_report
from diag.snapshot.clock import Clock, age_text, parse_duration, parse_time

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
TEN_DAYS = 10 * 86400
TEN_MINUTES = 600


def fixture(name: str) -> Bundle:
    return Bundle.open(FIXTURES / name)


def fired(report: Report) -> set[tuple[str, str]]:
    return {(f.rule, f.subject) for f in report.findings}


def history(report: Report) -> set[tuple[str, str]]:
    assert report.history is not None
    return {(h.rule, h.subject) for h in report.history.items}


# --------------------------------------------------------------------------- events


def test_aged_mount_events_are_history():
    """A pod Pending on FailedAttachVolume / FailedMount events: ten days later they are history."""
    now = analyze_bundle(fixture("k8s-model-volume-multi-attach"))
    aged = analyze_bundle(shifted(fixture("k8s-model-volume-multi-attach"), TEN_DAYS))
    moved = {(r, s) for r, s in fired(now) if r == "K8S-212"}
    assert moved and not moved & fired(aged)
    assert moved <= history(aged)
    item = next(h for h in aged.history.items if h.rule == "K8S-212")
    assert item.age_seconds == pytest.approx(TEN_DAYS, abs=3600) and item.when is not None
    assert any("FailedMount" in text or "FailedAttachVolume" in text for text in item.items)
    assert aged.verdict.layer is None  # nothing current is left


def test_events_within_the_window_still_count():
    now = analyze_bundle(fixture("k8s-model-volume-multi-attach"))
    later = analyze_bundle(shifted(fixture("k8s-model-volume-multi-attach"), TEN_MINUTES))
    assert fired(later) == fired(now) and history(later) == set()


def test_every_event_fact_has_its_age():
    snap = join(load_bundle(shifted(fixture("k8s-model-volume-multi-attach"), TEN_DAYS)))
    facts = build_facts(snap, Clock.of(snap, 3600))
    events = [e for pod in facts.scopes["pod"] for e in pod["events"]]
    assert events and all(e["age_seconds"] >= TEN_DAYS and e["recent"] is False for e in events)
    pending = next(p for p in facts.scopes["pod"] if p["failed_mounts"] != [] or p["phase"] == "Pending")
    assert pending["failed_mounts"] == [] and pending["event_reasons"] == []


def test_the_window_is_a_setting_and_since_overrides_it():
    aged = shifted(fixture("k8s-model-volume-multi-attach"), TEN_DAYS)
    wide = analyze_bundle(aged, Config(settings={"history_window_seconds": parse_duration("30d")}))
    assert "K8S-212" in {r for r, _ in fired(wide)} and history(wide) == set()


# --------------------------------------------------------------------------- last terminations


def _running_since_the_kill(bundle: Bundle) -> Bundle:
    """k8s-oomkilled's vLLM pod after its last OOM kill: Running and Ready ever since."""
    files = dict(bundle.files)
    pods = json.loads(files["k8s/pods.json"])
    for pod in pods["items"]:
        for status in pod["status"].get("containerStatuses", []):
            killed = status.get("lastState", {}).get("terminated", {})
            if killed.get("reason") == "OOMKilled":
                status["state"] = {"running": {"startedAt": killed["finishedAt"]}}
                status["ready"] = status["started"] = True
                for condition in pod["status"]["conditions"]:
                    condition["status"] = (
                        "True" if condition["type"] in ("Ready", "ContainersReady") else condition["status"]
                    )
    files["k8s/pods.json"] = json.dumps(pods).encode()
    return Bundle(files, origin=bundle.origin)


def test_oom_kill_ten_days_ago_running_since_is_history():
    recovered = _running_since_the_kill(fixture("k8s-oomkilled"))
    now = analyze_bundle(recovered)
    aged = analyze_bundle(shifted(recovered, TEN_DAYS))
    assert "K8S-210" in {r for r, _ in fired(now)}  # a kill minutes ago is today's, even if running again
    assert "K8S-210" not in {r for r, _ in fired(aged)}
    item = next(h for h in aged.history.items if h.rule == "K8S-210")
    assert item.subject.startswith("pod/llm/llama-70b-") and item.age_seconds >= TEN_DAYS
    assert any("terminated OOMKilled (exit code 137)" in text for text in item.items)


def test_oom_kill_within_the_window_fires():
    recovered = _running_since_the_kill(fixture("k8s-oomkilled"))
    later = analyze_bundle(shifted(recovered, TEN_MINUTES))
    assert "K8S-210" in {r for r, _ in fired(later)} and history(later) == set()


def test_a_container_still_crash_looping_is_current_whatever_the_age():
    """CrashLoopBackOff is the container's state now: the restart loop is today's, not history."""
    aged = analyze_bundle(shifted(fixture("k8s-oomkilled"), TEN_DAYS))
    assert "K8S-210" in {r for r, _ in fired(aged)}


# --------------------------------------------------------------------------- Ray deaths


def test_ray_node_death_ten_days_ago_is_history():
    now = analyze_bundle(fixture("ray-node-died"))
    aged = analyze_bundle(shifted(fixture("ray-node-died"), TEN_DAYS))
    assert "RAY-105" in {r for r, _ in fired(now)}
    assert "RAY-105" not in {r for r, _ in fired(aged)}
    node = next(h for h in aged.history.items if h.rule == "RAY-105")
    assert node.age_seconds >= TEN_DAYS and "missing too many heartbeats" in node.items[0]
    # the replica that died with its node is at least as old as the node's death: history too
    replica = next(h for h in aged.history.items if h.rule == "RAY-104")
    assert "SERVE_REPLICA" in replica.subject or "ServeReplica" in replica.subject
    # the index actor is RESTARTING now: its state is today's
    assert any(r == "RAY-104" for r, _ in fired(aged))


def test_ray_node_death_within_the_window_fires():
    now = analyze_bundle(fixture("ray-node-died"))
    later = analyze_bundle(shifted(fixture("ray-node-died"), TEN_MINUTES))
    assert fired(later) == fired(now) and history(later) == set()


def test_ray_death_facts_carry_their_age():
    snap = join(load_bundle(shifted(fixture("ray-node-died"), TEN_DAYS)))
    facts = build_facts(snap, Clock.of(snap, 3600))
    dead = next(n for n in facts.scopes["ray_node"] if n["state"] == "DEAD")
    assert (
        dead["death_age_seconds"] >= TEN_DAYS and dead["death_recent"] is False and dead["died_unexpectedly"] is False
    )


# --------------------------------------------------------------------------- no clock


_ANY_DATE = re.compile(rb'"\d{4}-\d{2}-\d{2}[T ][^"]*"')


def _without_times(bundle: Bundle) -> Bundle:
    return Bundle({name: _ANY_DATE.sub(b'""', data) for name, data in bundle.files.items()}, origin=bundle.origin)


def test_no_clock_behaves_as_before_and_says_so():
    now = analyze_bundle(fixture("k8s-oomkilled"))
    timeless = analyze_bundle(_without_times(fixture("k8s-oomkilled")))
    assert fired(timeless) == fired(now)
    assert timeless.history is not None and not timeless.history.ages_known and timeless.history.items == []
    assert to_dict(timeless)["clock"] == {"collected_at": None, "source": "none", "window_s": 3600, "ages_known": False}
    assert "ages could not be computed" in render_markdown(timeless)
    console = Console(record=True, width=200)
    print_report(timeless, console)
    assert "ages could not be computed" in console.export_text()


def test_history_in_every_report_format():
    aged = analyze_bundle(shifted(fixture("ray-node-died"), TEN_DAYS))
    data = to_dict(aged)
    entry = next(h for h in data["history"] if h["rule"] == "RAY-105")
    assert set(entry) >= {"subject", "what", "when", "age"} and entry["age"].startswith("10d")
    assert data["clock"]["source"] == "manifest.json collected_at" and data["clock"]["ages_known"]
    assert "RAY-105" in render_markdown(aged).split("## History")[1]
    console = Console(record=True, width=200)
    print_report(aged, console)
    assert "History: older than 1h" in console.export_text()


# --------------------------------------------------------------------------- the clock itself


def test_collection_time_is_the_manifest_else_the_newest_timestamp():
    bundle = fixture("k8s-oomkilled")
    assert collection_time(bundle) == "2026-12-01T14:16:02Z"  # the newest event, no manifest
    files = dict(bundle.files) | {"manifest.json": b'{"collected_at": "2026-12-05T00:00:00Z"}'}
    assert collection_time(Bundle(files)) == "2026-12-05T00:00:00Z"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-12-01T14:13:58Z", "2026-12-01T14:13:58+00:00"),
        ("2026-12-01T14:13:58.123456789Z", "2026-12-01T14:13:58.123456+00:00"),  # nanoseconds
        ("2026-12-02 16:50:40.925000", "2026-12-02T16:50:40.925000+00:00"),  # Ray, no zone: UTC
        ("2026-12-01T15:13:58+01:00", "2026-12-01T14:13:58+00:00"),
        (1796230240.925, "2026-12-02T16:50:40.925000+00:00"),
    ],
)
def test_parse_time(text, expected):
    assert parse_time(text).isoformat() == expected


@pytest.mark.parametrize("text", ["", "yesterday", None])
def test_unreadable_time_is_unknown_and_counts_as_current(text):
    clock = Clock(parse_time("2026-12-01T00:00:00Z"), "test", 3600)
    assert parse_time(text) is None
    assert (clock.age(text), clock.recent(text), clock.current(text)) == (None, None, True)


def test_ages():
    clock = Clock(parse_time("2026-12-01T12:00:00Z"), "test", 3600)
    assert clock.age("2026-12-01T11:00:00Z") == 3600 and clock.recent("2026-12-01T11:00:00Z") is True
    assert clock.recent("2026-12-01T10:59:59Z") is False
    assert clock.age("2026-12-01T12:05:00Z") == 0  # after the collection: clock skew, not the future
    assert clock.without_window().recent("2016-12-01T00:00:00Z") is True
    assert Clock(None, "none", 3600).current("2016-12-01T00:00:00Z") is True
    assert [age_text(s) for s in (5, 600, 3600, 3900, 10 * 86400 + 7200)] == ["5s", "10m", "1h", "1h 5m", "10d 2h"]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30m", 1800),
        ("1h", 3600),
        ("2d", 172800),
        ("90", 90),
        ("1.5h", 5400),
        ("1h30m", 5400),
        ("2m30s", 150),
        ("500ms", 0.5),
    ],
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "-1h", "0", "1h30", "h30m", "0s0m"])
def test_bad_durations(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_window_in_the_config_file(tmp_path: Path):
    path = tmp_path / ".llmdiag.yaml"
    path.write_text("settings:\n  history_window_seconds: 2h\n")
    assert Config.load(path).settings["history_window_seconds"] == 7200
    path.write_text("settings:\n  history_window_seconds: later\n")
    with pytest.raises(ConfigError, match="history_window_seconds: 'later' is not a duration"):
        Config.load(path)


def test_since_on_the_command_line(tmp_path: Path):
    folder = shifted(fixture("k8s-model-volume-multi-attach"), TEN_DAYS).save(tmp_path / "aged")
    run = lambda *args: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "diag.cli", "analyze", str(folder), "-o", "json", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    default, wide = json.loads(run().stdout), json.loads(run("--since", "30d").stdout)
    assert "K8S-212" in {h["rule"] for h in default["history"]} and "K8S-212" not in {
        f["rule"] for f in default["findings"]
    }
    assert "K8S-212" in {f["rule"] for f in wide["findings"]} and wide["history"] == []
    assert wide["clock"]["window_s"] == 30 * 86400
    bad = run("--since", "soon")
    assert (
        bad.returncode == 3
        and bad.stderr.strip() == "llmdiag: --since: 'soon' is not a duration (use e.g. 30m, 1h30m, 2d)"
    )


def test_an_autoscaler_limit_met_ten_days_ago_is_history():
    """K8S-505 reads the pod's current refusals only: Karpenter's "exceed limits for nodepool" ten days
    old does not say that the NodePool is at its limit now."""
    now = analyze_bundle(fixture("incident-k8s-karpenter-nodepool-limit"))
    aged = analyze_bundle(shifted(fixture("incident-k8s-karpenter-nodepool-limit"), TEN_DAYS))
    moved = {(r, s) for r, s in fired(now) if r == "K8S-505"}
    assert moved and not moved & fired(aged)
    assert moved <= history(aged)
