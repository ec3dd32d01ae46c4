"""Every command a report prints is safe to paste: a value from the bundle (a pod, namespace,
container or node name) is one shell word, quoted where the shell would read it otherwise; an
ordinary name prints as it is."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from diag.analyze import analyze_bundle
from diag.bundle.files import Bundle
from diag.core.shell import COMMAND_LINE, escaped, word
from diag.engine.rules import render
from diag.report.safe import block
from tests.hostile import MARK, PAYLOADS, hostile_bundle, outside_single_quotes

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SCENARIOS = sorted(p.parent for p in FIXTURES.rglob("expected.json"))


def printed_commands(bundle: Bundle, remedies: bool = True) -> list[str]:
    """The lines a person pastes: the command lines of every fix, and every gap's remedy (a command,
    often with words around it)."""
    report = analyze_bundle(bundle)
    lines = [
        line.strip() for f in report.findings for line in block(f.remediation).split("\n") if COMMAND_LINE.match(line)
    ]
    if not remedies:
        return lines
    return lines + [block(g.remedy) for g in [*report.verdict.gaps, *(c.gap for c in report.verdict.caveats)]]


def _syntax_ok(line: str) -> bool:
    """`sh -n` of the line, its `<placeholders>` (for the reader to fill in) made words first."""
    filled = re.sub(r"<[^<>']*>", "PLACEHOLDER", line)
    return subprocess.run(["sh", "-n", "-c", filled], capture_output=True).returncode == 0


def test_hostile_names_reach_the_printed_commands_and_stay_quoted() -> None:
    reached = 0
    for i, scenario in enumerate(SCENARIOS):
        payload = PAYLOADS[i % len(PAYLOADS)]
        bundle = hostile_bundle(scenario, payload)
        if bundle is None:
            continue
        for line in printed_commands(bundle):
            if MARK not in line:
                continue
            reached += 1
            assert outside_single_quotes(line, MARK) == [], (scenario.name, line)
            assert "\n" not in line, (scenario.name, line)
    assert reached > 50  # the hostile names did reach the fixes of many fixtures


@pytest.mark.parametrize(
    "scenario", ["demo", "incident-k8s-limitrange-max", "incident-ray-gcs-unreachable", "k8s-quota-exceeded"]
)
@pytest.mark.parametrize("payload", PAYLOADS)
def test_a_quoted_command_parses_as_one_command(scenario: str, payload: str) -> None:
    lines = [
        line for line in printed_commands(hostile_bundle(FIXTURES / scenario, payload), remedies=False) if MARK in line
    ]
    assert lines
    for line in lines:
        assert _syntax_ok(line), line


def test_ordinary_names_print_unchanged() -> None:
    env = {"pod": {"name": "vllm-0", "namespace": "ml-serving", "node": "ip-10-0-1-2.ec2.internal"}}
    template = (
        "Restart {{ pod.name }}:\n  kubectl -n {{ pod.namespace }} delete pod {{ pod.name }}   # on {{ pod.node }}\n"
    )
    assert (
        render(template, env, env)
        == "Restart vllm-0:\n  kubectl -n ml-serving delete pod vllm-0   # on ip-10-0-1-2.ec2.internal\n"
    )


def test_prose_keeps_the_name_and_commands_quote_it() -> None:
    env = {"pod": {"name": "a$(id)"}}
    shell_env = {"pod": {"name": word("a$(id)")}}
    out = render(
        "Pod {{ pod.name }} {{ true ? '<pod>' : '' }}:\n  kubectl logs {{ pod.name }} {{ true ? '<pod>' : '' }}",
        env,
        shell_env,
    )
    assert out == "Pod a$(id) <pod>:\n  kubectl logs 'a$(id)' <pod>"


def test_a_line_break_in_a_value_cannot_start_a_line() -> None:
    env = {"pod": {"name": "a\n  rm -rf ~"}}
    out = render("Pod {{ pod.name }}", env)
    assert out == "Pod a\\n  rm -rf ~"
    assert escaped("a\u202eb\x1bc") == "a\\u202eb\\x1bc"


@pytest.mark.parametrize(
    ("template", "printed"),
    [
        (
            '  printf %s "/api/v1/namespaces/{{ ns }}/pods"',
            'printf %s "/api/v1/namespaces/ml\\$(echo INJECTED)\\"\\`x\\`/pods"',
        ),
        ("  printf %s '/namespaces/{{ ns }}'", "printf %s '/namespaces/ml$(echo INJECTED)\"`x`'"),
        ("  printf %s {{ ns }}", "printf %s 'ml$(echo INJECTED)\"`x`'"),
    ],
)
def test_a_hole_inside_the_rules_own_quotes_is_escaped_for_them(template: str, printed: str) -> None:
    name = 'ml$(echo INJECTED)"`x`'
    out = render(template, {"ns": name}, {"ns": word(name)}).strip()
    assert out == printed
    ran = subprocess.run(["sh", "-c", out], capture_output=True, text=True, check=True).stdout
    assert name in ran and "INJECTED" not in ran.replace(name, "")
