"""The command line in scripts and pipes: stdout holds the report only, --quiet, --fail-on / --exit-zero,
shell completion, `kubectl llmdiag` naming itself, and collect's --out / --force."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from diag.cli import FailOn, exit_code, program_name
from tests.test_cli import gpu_bundle, llmdiag, user_rule  # noqa: F401 - gpu_bundle is a fixture

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("severity", "flags", "code"),
    [
        ("warning", [], 1),
        ("critical", [], 2),
        ("warning", ["--fail-on", "warning"], 1),
        ("warning", ["--fail-on", "critical"], 0),
        ("critical", ["--fail-on", "critical"], 2),
        ("warning", ["--fail-on", "never"], 0),
        ("critical", ["--fail-on", "never"], 0),
        ("critical", ["--exit-zero"], 0),
    ],
)
def test_fail_on_decides_which_findings_fail(
    gpu_bundle: Path,  # noqa: F811
    tmp_path: Path,
    severity: str,
    flags: list[str],
    code: int,
) -> None:
    result = llmdiag("analyze", str(gpu_bundle), "--rules", str(user_rule(tmp_path, severity)), "-o", "json", *flags)
    assert result.returncode == code, result.stderr
    report = json.loads(result.stdout)
    assert [f["severity"] for f in report["findings"]] == [severity]  # the report itself is unchanged


def test_exit_zero_never_hides_an_analysis_that_could_not_decide(tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    (bundle / "k8s").mkdir(parents=True)
    (bundle / "k8s" / "pods.json").write_text('{"apiVersion": "v1", "kind": "List", "items": []}')
    assert llmdiag("analyze", str(bundle), "--exit-zero").returncode == 3
    assert llmdiag("analyze", str(tmp_path / "absent"), "--fail-on", "never").returncode == 3


def test_the_exit_code_table() -> None:
    table = {(code, f): exit_code(code, f) for code in (0, 1, 2, 3) for f in FailOn}
    assert table == {
        (0, FailOn.warning): 0, (1, FailOn.warning): 1, (2, FailOn.warning): 2, (3, FailOn.warning): 3,
        (0, FailOn.critical): 0, (1, FailOn.critical): 0, (2, FailOn.critical): 2, (3, FailOn.critical): 3,
        (0, FailOn.never): 0, (1, FailOn.never): 0, (2, FailOn.never): 0, (3, FailOn.never): 3,
    }  # fmt: skip


def test_quiet_leaves_stderr_empty(gpu_bundle: Path) -> None:  # noqa: F811
    loud = llmdiag("analyze", str(gpu_bundle), "--profile")
    assert loud.stderr.strip()
    quiet = llmdiag("analyze", str(gpu_bundle), "--profile", "--quiet")
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_profile_times_phases_parsers_and_each_rule(gpu_bundle: Path) -> None:  # noqa: F811
    shown = llmdiag("analyze", str(gpu_bundle), "--profile").stderr
    for part in ("read", "parse", "join", "facts", "rules (evaluate)", "report", "slowest parsers", "slowest rules"):
        assert part in shown
    rules_table = shown.split("slowest rules:", 1)[1]
    assert any(
        line.split()[0].startswith(("GPU-", "K8S-", "VLLM-", "RAY-"))
        for line in rules_table.splitlines()
        if line.strip()
    )


def test_each_rule_is_timed_only_when_asked() -> None:
    from diag.analyze import analyze_bundle
    from diag.bundle.files import Bundle
    from diag.core.stopwatch import Stopwatch

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "demo"
    quiet, timed = Stopwatch(), Stopwatch(times_rules=True)
    analyze_bundle(Bundle.open(fixture), stopwatch=quiet)
    report = analyze_bundle(Bundle.open(fixture), stopwatch=timed)
    assert quiet.rules == {} and quiet.phases.keys() == timed.phases.keys()
    evaluated = {rule for rule, outcome in report.outcomes.items() if outcome.subjects}  # run on some subject
    assert evaluated and evaluated <= timed.rules.keys()


def test_whatever_a_library_prints_while_analyzing_stays_off_stdout() -> None:
    probe = (
        "import os, sys\n"
        "from diag.cli import Output, _stdout_for_the_report\n"
        "with _stdout_for_the_report(Output.json):\n"
        "    print('a library talking')\n"
        "    os.write(1, b'a C library talking\\n')\n"
        "sys.stdout.write('{\"report\": 1}\\n')\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.stdout == '{"report": 1}\n'
    assert "a library talking" in done.stderr and "a C library talking" in done.stderr


def test_shell_completion_is_offered() -> None:
    help_text = llmdiag("--help").stdout
    assert "--install-completion" in help_text and "--show-completion" in help_text
    # In a terminal typer finds the shell among the process' ancestors; a test may have none (a job in
    # the background), so it names the shell, the way typer's own tests do.
    env = {**os.environ, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    script = subprocess.run(
        [sys.executable, "-m", "diag.cli", "--show-completion", "bash"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env=env,
    )
    assert script.returncode == 0 and "_LLMDIAG_COMPLETE" in script.stdout and "complete -o" in script.stdout


def test_completion_answers_with_the_commands() -> None:
    env = {**os.environ, "_LLMDIAG_COMPLETE": "complete_bash", "COMP_WORDS": "llmdiag tri", "COMP_CWORD": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "diag.cli"], capture_output=True, text=True, cwd=ROOT, timeout=60, env=env
    )
    assert "triage" in done.stdout.split()


def test_as_a_kubectl_plugin_it_names_itself_kubectl_llmdiag() -> None:
    assert program_name("/usr/local/bin/kubectl-llmdiag") == "kubectl llmdiag"
    assert program_name("/usr/local/bin/llmdiag") == "llmdiag"
    probe = (
        "import sys\nsys.argv = ['/usr/local/bin/kubectl-llmdiag', *sys.argv[1:]]\nfrom diag.cli import main\nmain()\n"
    )
    run = lambda *args: subprocess.run(  # noqa: E731
        [sys.executable, "-c", probe, *args], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert "Usage: kubectl llmdiag triage" in run("triage", "--help").stdout
    failed = run("analyze")
    assert (
        failed.returncode == 3
        and failed.stderr.startswith("kubectl llmdiag: ")
        and "`kubectl llmdiag --help`" in failed.stderr
    )


def test_collect_out_is_the_path_and_o_a_deprecated_alias(tmp_path: Path) -> None:
    missing = llmdiag("collect", "--kubeconfig", str(tmp_path / "none"))
    assert (
        missing.returncode == 3
        and missing.stderr.strip() == "llmdiag: collect: missing --out PATH (a folder, or FILE.tar.gz)"
    )
    both = llmdiag("collect", "-o", str(tmp_path / "a"), "--out", str(tmp_path / "b"))
    assert both.returncode == 3 and "give the path once, with --out" in both.stderr
    full = tmp_path / "full"
    full.mkdir()
    (full / "notes.txt").write_text("mine\n")
    old = llmdiag("collect", "--kubeconfig", str(tmp_path / "none"), "-o", str(full))
    lines = old.stderr.strip().splitlines()
    assert lines[0] == "llmdiag: collect -o is deprecated and goes in the next release: use --out"
    assert old.returncode == 3 and "the folder is not empty" in lines[-1] and "--force" in lines[-1]
    forced = llmdiag("collect", "--kubeconfig", str(tmp_path / "none"), "--out", str(full), "--force")
    assert forced.returncode == 3 and "no earlier bundle" in forced.stderr
    assert [p.name for p in full.iterdir()] == ["notes.txt"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--request-timeout", "soon"], "llmdiag: --request-timeout: 'soon' is not a duration"),
        (["--request-timeout", "0"], "llmdiag: --request-timeout: '0': the timeout must be longer than 0"),
    ],
)
def test_request_timeout_mistakes_are_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    result = llmdiag("triage", "--kubeconfig", str(tmp_path / "none"), "--no-local-gpu", *args)
    assert result.returncode == 3 and result.stderr.startswith(message), result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--as-group", "oncall"], "llmdiag: --as-group needs --as"),
        (["--as", "jane", "--as-group", "a", "--as-group", "b"], "llmdiag: one --as-group at a time"),
    ],
)
def test_impersonation_mistakes_are_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    result = llmdiag("triage", "--kubeconfig", str(tmp_path / "none"), "--no-local-gpu", *args)
    assert result.returncode == 3 and result.stdout == "" and result.stderr.startswith(message), result.stderr


def test_h_is_help_for_the_tool_and_every_command() -> None:
    for args in ([], ["analyze"], ["rules", "list"]):
        done = subprocess.run(
            [sys.executable, "-m", "diag.cli", *args, "-h"], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0 and done.stdout.startswith("Usage: "), (args, done.stderr)


def test_a_reader_that_stops_reading_ends_it_by_sigpipe_not_an_exit_code() -> None:
    """`llmdiag analyze ... | head -1`: exit 1 would read as "warnings only" in a runbook. The reader here
    closes the pipe at once (`true`), so the report is always written after it did, whatever the load."""
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "demo"
    done = subprocess.run(
        [
            "bash",
            "-c",
            f'"{sys.executable}" -m diag.cli analyze "{fixture}" | true; echo "${{PIPESTATUS[0]}}"',
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.stdout.strip() == "141", done.stderr
