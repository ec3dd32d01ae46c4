"""Log signals as data: the built-in files, the one-line errors, and a signal added without Python."""

from __future__ import annotations

from pathlib import Path

import pytest

from diag.analyze import analyze_bundle
from diag.bundle.files import Bundle
from diag.parsers.logs import scan_log
from diag.parsers.signals import SignalError, builtin_signals, load_signals

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"


def test_every_builtin_pattern_has_its_source_and_matches_its_example() -> None:
    import yaml

    from diag.core.rules_dir import builtin_rules_dir

    for path in sorted((builtin_rules_dir() / "signals").glob("*.yaml")):
        for name, spec in yaml.safe_load(path.read_text())["signals"].items():
            for pattern in spec["patterns"]:
                assert pattern["source"] and pattern["example"], f"{path.name}: {name}"
                assert name in scan_log(pattern["example"]), f"{path.name}: {name}: {pattern['example']}"
    assert {"model_not_found", "xid", "ray_cannot_schedule"} <= set(builtin_signals().names())


def _signals_dir(tmp_path: Path, text: str) -> Path:
    (tmp_path / "signals").mkdir(parents=True, exist_ok=True)
    (tmp_path / "signals" / "mine.yaml").write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("signals: [1]", "expected a top-level `signals:` mapping"),
        ("signals:\n  Bad-Name: {}", "is not lower_snake_case"),
        (
            "signals:\n  x:\n    layer: vllm\n    description: d\n    patterns: [{regex: 'a(', source: s}]",
            "does not compile",
        ),
        (
            "signals:\n  x:\n    layer: vllm\n    description: d\n    patterns: [{regex: '(?i)abc', source: s}]",
            "write flags scoped",
        ),
        (
            "signals:\n  x:\n    layer: cloud\n    description: d\n    patterns: [{regex: a, source: s}]",
            "layer must be one of",
        ),
        ("signals:\n  x:\n    layer: vllm\n    description: d\n    patterns: [{regex: a}]", "needs a `source`"),
        (
            "signals:\n  x:\n    layer: vllm\n    description: d\n"
            "    patterns: [{regex: abc, source: s, example: xyz}]",
            "example does not match",
        ),
        (
            "signals:\n  x:\n    layer: vllm\n    description: d\n"
            "    colour: red\n    patterns: [{regex: a, source: s}]",
            "unknown key(s) colour",
        ),
    ],
)
def test_a_wrong_signal_file_is_one_line_naming_file_and_signal(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(SignalError) as error:
        load_signals([_signals_dir(tmp_path, text)])
    assert says in str(error.value) and "mine.yaml" in str(error.value) and "\n" not in str(error.value)


def test_a_signal_and_a_rule_added_beside_each_other_fire_without_python(tmp_path: Path) -> None:
    """A user adds a pattern from a new thread and a rule that reads it, in a folder given with --rules."""
    extra = _signals_dir(
        tmp_path / "mine",
        """\
signals:
  lora_adapter_failed:
    layer: vllm
    description: a LoRA adapter did not load
    patterns:
      - regex: 'Loading lora \\S+ failed'
        source: our own incident, 2026-12-01
        example: "ValueError: Loading lora my-adapter failed: No adapter found for /adapters/my-adapter"
""",
    )
    (extra / "mine.yaml").write_text("""\
rules:
  - id: MINE-001
    layer: vllm
    severity: warning
    title: A LoRA adapter failed to load
    scope: vllm_server
    when: size(vllm_server.log_signals.lora_adapter_failed) > 0
    evidence: ["{{ vllm_server.log_signals.lora_adapter_failed }}"]
    remediation: Check the adapter's path.
""")
    bundle = Bundle.open(FIXTURES / "busy-but-healthy")
    logs = sorted(name for name in bundle.files if name.startswith("k8s/logs/") and "llama-70b" in name)
    line = (
        "(APIServer pid=1) ERROR 12-01 10:00:00 [serving.py:99] "
        "ValueError: Loading lora my-adapter failed: No adapter found\n"
    )
    bundle.files[logs[0]] = bundle.files[logs[0]] + line.encode()
    fired = [f for f in analyze_bundle(bundle, extra_rule_dirs=[extra]).findings if f.rule == "MINE-001"]
    assert len(fired) == 1 and "Loading lora my-adapter failed" in fired[0].evidence[0]
    assert not [
        f
        for f in analyze_bundle(Bundle.open(FIXTURES / "busy-but-healthy"), extra_rule_dirs=[extra]).findings
        if f.rule == "MINE-001"
    ]


def test_without_the_folder_the_builtin_signals_stand_alone(tmp_path: Path) -> None:
    assert load_signals([tmp_path]).names() == []


@pytest.mark.parametrize(("crash_cause", "named"), [("", True), ("    crash_cause: false\n", False)])
def test_a_signal_added_by_a_user_names_the_crash_loops_cause_unless_it_says_it_is_none(
    tmp_path: Path, crash_cause: str, named: bool
) -> None:
    extra = _signals_dir(
        tmp_path,
        f"""\
signals:
  cli_argument_refused:
    layer: vllm
    description: vLLM's command line holds an argument it does not know
{crash_cause}    patterns:
      - regex: 'error: unrecognized arguments: '
        source: argparse, as vllm serve prints it
        example: "vllm serve: error: unrecognized arguments: --max-num-batch-tokens 16384"
""",
    )
    assert ("cli_argument_refused" in load_signals([extra]).crash_causes) is named
    report = analyze_bundle(Bundle.open(FIXTURES / "k8s-crashloop-bad-flag"), extra_rule_dirs=[extra])
    [crash] = [f for f in report.findings if f.rule == "K8S-213"]
    wanted = "known failure line: vllm serve: error: unrecognized arguments: --max-num-batch-tokens 16384"
    assert (wanted in crash.evidence) is named
    # not a known cause: the decisive line of the crashed run's log stands in (diag.parsers.decisive)
    decisive = (
        "no known failure line; the decisive line of its log: vllm serve: "
        "error: unrecognized arguments: --max-num-batch-tokens 16384 (vllm layer)"
    )
    assert named or decisive in crash.evidence


def test_crash_cause_must_be_a_boolean(tmp_path: Path) -> None:
    text = (
        "signals:\n  x:\n    layer: vllm\n    description: d\n"
        "    crash_cause: 'no'\n    patterns: [{regex: a, source: s}]"
    )
    with pytest.raises(SignalError, match="crash_cause must be true or false"):
        load_signals([_signals_dir(tmp_path, text)])


def test_symptoms_and_frames_of_the_catalogue_name_no_crash_cause() -> None:
    causes = builtin_signals().crash_causes
    assert {"cuda_oom", "model_not_found", "xid", "ray_gcs_unreachable"} <= set(causes)
    assert not {"engine_dead", "preemption", "model_load_frame"} & set(causes)
