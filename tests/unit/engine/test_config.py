""".llmdiag.yaml: every mistake is an error naming the file and line; nothing is silently ignored;
a suppression cannot hide every finding; the report says which file was applied and what it hid."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from diag.analyze import analyze_bundle
from diag.bundle.files import Bundle
from diag.core.rules_dir import builtin_rules_dir
from diag.engine.config import Config, ConfigError
from diag.engine.rules import load_rules

ROOT = Path(__file__).resolve().parents[3]
RULE_IDS = [r.id for r in load_rules([builtin_rules_dir()])]


def load(tmp_path: Path, text: str) -> Config:
    path = tmp_path / ".llmdiag.yaml"
    path.write_text(text)
    config = Config.load(path)
    config.check_rules(RULE_IDS)
    return config


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("supress:\n  - rule: VLLM-101\n", r":1: supress: unknown key"),
        ("suppress:\n  - rule: VLLM-101\n    subjct: pod/a/b\n", r":3: suppress\[0\].subjct: unknown key"),
        ("severity:\n  VLLM-101: loud\n", r":2: severity.VLLM-101: 'loud' is not one of"),
        ("min_severity: everything\n", r":1: min_severity: 'everything' is not one of"),
        ("settings:\n  kv_cache_high: high\n", r":2: settings.kv_cache_high: expected a number, found 'high'"),
        ("settings:\n  kv_cache_high: true\n", r":2: settings.kv_cache_high: expected a number"),
        ("settings:\n  application_xids: [13, x]\n", r":2: settings.application_xids: expected a list of numbers"),
        ("\n\nsettings:\n  kv_cache_hgh: 0.8\n", r":4: settings.kv_cache_hgh: no such setting"),
        ("suppress:\n  - namespace: prod\n", r":2: suppress\[0\]: a suppression needs a 'rule' or a 'subject'"),
        ("suppress:\n  - rule: VLLM-101\n  - {}\n", r":3: suppress\[1\]: a suppression needs"),
        ("suppress:\n  - rule: VLLM-999\n", r":2: suppress\[0\].rule: 'VLLM-999' names no rule"),
        ("severity:\n  GPU-1x: info\n", r":2: severity.GPU-1x: 'GPU-1x' names no rule"),
        (
            "suppress:\n  - rule: '*'\n    subject: '*'\n",
            r":2: suppress\[0\].rule: this suppression matches every finding",
        ),
        ("suppress:\n  - rule: '*'\n", r"matches every finding"),
        ("suppress:\n  - rule: '[A-Z]*'\n", r"matches every finding"),
        (
            "suppress:\n  - subject: '**'\n    namespace: '*'\n",
            r":2: suppress\[0\]: this suppression matches every finding",
        ),
        ("suppress:\n  - rule: VLLM-101\n    label: {}\n", r":3: suppress\[0\].label:"),
        ("suppress: VLLM-101\n", r":1: suppress: input should be a valid list"),
        ("- rule: VLLM-101\n", r":1: expected a mapping at the top level"),
        ("suppress:\n  - rule: [unclosed\n", r"not valid YAML"),
    ],
)
def test_a_mistake_is_an_error_with_its_line(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as caught:
        load(tmp_path, text)
    assert str(caught.value).startswith(str(tmp_path / ".llmdiag.yaml"))
    assert "\n" not in str(caught.value)


def test_a_valid_file_loads(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        "suppress:\n"
        "  - rule: GPU-1*\n    reason: known, OPS-42\n"
        "  - rule: '*'\n    namespace: batch-*\n"
        "  - subject: pod/llm/canary-*\n"
        "  - rule: K8S-*\n    label: {team: research}\n"
        "severity:\n  GPU-104: info\n"
        "settings:\n  kv_cache_high: 0.95\n  gpu_util_low_pct: 25\n"
        "  application_xids: [13, 31]\n  history_window_seconds: 2h\n"
        "min_severity: warning\n",
    )
    assert config.suppress[0] == {"rule": "GPU-1*"}  # the reason is for people, not for matching
    assert config.settings == {
        "kv_cache_high": 0.95,
        "gpu_util_low_pct": 25,
        "application_xids": [13, 31],
        "history_window_seconds": 7200,
    }
    assert config.severity == {"GPU-104": "info"} and config.min_severity == "warning"


def test_an_empty_file_is_no_configuration(tmp_path: Path) -> None:
    config = load(tmp_path, "# nothing yet\n")
    assert config.suppress == [] and config.settings == {} and config.path == tmp_path / ".llmdiag.yaml"


def test_a_rule_from_an_extra_folder_can_be_named(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("suppress:\n  - rule: SITE-001\n")
    config = Config.load(path)
    with pytest.raises(ConfigError, match="names no rule"):
        config.check_rules(RULE_IDS)
    config.check_rules([*RULE_IDS, "SITE-001"])


def test_the_report_names_the_file_and_what_it_suppressed(tmp_path: Path) -> None:
    demo = ROOT / "fixtures" / "demo"
    plain = analyze_bundle(Bundle.open(demo))
    assert plain.config_file is None and plain.suppressed == 0
    fired = sorted({f.rule for f in plain.findings})
    path = tmp_path / "c.yaml"
    path.write_text(f"suppress:\n  - rule: {fired[0]}\n")
    report = analyze_bundle(Bundle.open(demo), Config.load(path))
    hidden = sum(1 for f in plain.findings if f.rule == fired[0])
    assert hidden > 0 and report.suppressed == hidden
    assert report.config_file == str(path)
    assert fired[0] not in {f.rule for f in report.findings}
    shown = subprocess.run(
        [sys.executable, "-m", "diag.cli", "analyze", str(demo), "-o", "json", "--config", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert json.loads(shown.stdout)["config"] == {"path": str(path), "suppressed": hidden}


def test_a_wrong_config_on_the_command_line_is_one_line_and_exit_3(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("suppress:\n  - rule: VLLM-101\n    subjet: x\n")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "diag.cli",
            "analyze",
            str(ROOT / "fixtures" / "demo"),
            "-o",
            "json",
            "--config",
            str(path),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert run.returncode == 3 and run.stdout == ""
    assert run.stderr.strip() == f"llmdiag: {path}:3: suppress[0].subjet: unknown key (a misspelling?)"
