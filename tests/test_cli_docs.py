"""The docs and `--help` name the same flags: docs/cli.md lists every flag of every command's help and
no other, and every command line the docs show (README.md, docs/*.md) uses flags that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.test_cli import llmdiag

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = ["", "analyze", "triage", "collect", "serve", "layout", "rules", "rules list", "rules show", "rules docs"]
FLAG = re.compile(r"^--?[a-zA-Z][\w-]*$")


def help_flags(command: str) -> set[str]:
    """The flags `llmdiag COMMAND --help` lists under Options."""
    result = llmdiag(*command.split(), "--help")
    assert result.returncode == 0, result.stderr
    options = result.stdout.split("\nOptions:\n", 1)[1].split("\n\n", 1)[0]
    flags: set[str] = set()
    for line in options.splitlines():
        if re.match(r"^  -", line):  # an option's names; its help starts after two spaces or on the next line
            names = re.split(r"\s{2,}", line.strip())[0]
            flags |= {token for token in re.split(r"[\s,/]+", names) if FLAG.match(token)}
    return flags


def doc_flags() -> dict[str, set[str]]:
    """command -> the flags in the first column of its table in docs/cli.md."""
    sections: dict[str, set[str]] = {}
    command = None
    for line in (ROOT / "docs" / "cli.md").read_text().splitlines():
        heading = re.match(r"^## `llmdiag ?(.*)`$", line)
        if heading:
            command = heading.group(1)
            sections[command] = set()
        elif command is not None and line.startswith("| `"):
            first = line.split(" | ")[0]
            sections[command] |= {token for token in re.findall(r"`([^`]+)`", first) if FLAG.match(token)}
    return sections


@pytest.fixture(scope="module")
def flags_by_command() -> dict[str, set[str]]:
    return {command: help_flags(command) for command in COMMANDS}


def test_docs_cli_lists_exactly_the_flags_of_each_help(flags_by_command: dict[str, set[str]]) -> None:
    documented = doc_flags()
    assert sorted(documented) == sorted(COMMANDS)
    for command in COMMANDS:
        assert documented[command] == flags_by_command[command], command
    assert "--verbose" in flags_by_command["analyze"] and "--no-color" in flags_by_command["triage"]


def test_every_command_line_in_the_docs_uses_flags_that_exist(flags_by_command: dict[str, set[str]]) -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    seen = 0
    for page in pages:
        for match in re.finditer(
            r"(?:kubectl )?llmdiag (analyze|triage|collect|rules list|rules show|rules docs)\b([^`|#\n]*)",
            page.read_text(),
        ):
            command, rest = match.groups()
            for token in rest.split():
                if FLAG.match(token) and token != "-":
                    seen += 1
                    known = flags_by_command[command] | flags_by_command[""]
                    assert token in known, f"{page.name}: `llmdiag {command} ... {token}`"
    assert seen > 10


def test_no_command_in_the_docs_is_missing(flags_by_command: dict[str, set[str]]) -> None:
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for command in re.findall(r"llmdiag rules ([a-z]+)", page.read_text()):
            assert f"rules {command}" in flags_by_command, f"{page.name}: llmdiag rules {command}"


def test_rules_list_json_has_every_rule_with_its_fields() -> None:
    import json

    from diag.core.rules_dir import builtin_rules_dir
    from diag.engine.rules import load_rules

    result = llmdiag("rules", "list", "-o", "json")
    assert result.returncode == 0, result.stderr
    listed = json.loads(result.stdout)
    rules = {r.id: r for r in load_rules([builtin_rules_dir()])}
    assert [r["id"] for r in listed] == sorted(rules)
    for entry in listed:
        rule = rules[entry["id"]]
        assert entry == {
            "id": rule.id,
            "layer": rule.layer,
            "severity": rule.severity,
            "scope": rule.scope,
            "title": rule.title,
            "requires": rule.requires,
            "explains": rule.explains,
        }


def test_verbose_after_the_command_gives_the_long_report() -> None:
    demo = str(ROOT / "fixtures" / "demo")
    short, verbose = llmdiag("analyze", demo), llmdiag("analyze", demo, "-v", "--no-color")
    assert short.returncode == verbose.returncode == 2
    assert "--verbose lists them" in short.stdout and "--verbose lists them" not in verbose.stdout
    assert "VLLM-220" in verbose.stdout and "VLLM-220" not in short.stdout
