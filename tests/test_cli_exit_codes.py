"""Exit codes exactly as documented: one table in README.md, the same rows in docs/runbook.md and in
`llmdiag --help`, and each kind of input exits with the code its row names."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from diag.cli import EXIT_CODES
from tests.test_cli import REFERENCE, llmdiag

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def _doc_table(path: Path) -> dict[int, str]:
    """code -> meaning, from the Markdown table whose header starts `| code | meaning |`."""
    text = path.read_text()
    table = text[text.index("| code | meaning |") :].split("\n\n")[0].splitlines()[2:]
    return {int(row.split("|")[1]): row.split("|")[2].strip() for row in table}


def _help_table() -> dict[int, str]:
    result = llmdiag("--help")
    assert result.returncode == 0, result.stderr
    rows: dict[int, str] = {}
    code = None
    for line in result.stdout.splitlines():
        start = re.match(r"^    ([0-3])  (.*)$", line)
        if start:
            code = int(start.group(1))
            rows[code] = start.group(2)
        elif code is not None and line.startswith("       "):
            rows[code] += " " + line.strip()
        else:
            code = None
    return rows


def test_the_table_is_the_same_in_readme_runbook_and_help() -> None:
    table = dict(EXIT_CODES)
    assert _doc_table(ROOT / "README.md") == table
    assert _doc_table(ROOT / "docs" / "runbook.md") == table
    assert _help_table() == table


def _inconclusive_bundle(tmp_path: Path) -> Path:
    """Pods listed (none), one GPU read: the Kubernetes objects that would decide are missing."""
    bundle = tmp_path / "inconclusive"
    (bundle / "k8s").mkdir(parents=True)
    (bundle / "gpu").mkdir()
    (bundle / "k8s" / "pods.json").write_text('{"apiVersion": "v1", "kind": "List", "items": []}')
    (bundle / "gpu" / "node-a.xml").write_bytes(next((REFERENCE / "idle").rglob("*.xml")).read_bytes())
    return bundle


def _warning_explained_by_info(tmp_path: Path) -> Path:
    """A user's warning on every GPU, explained by an info finding: a warning, and no root cause."""
    folder = tmp_path / "rules"
    folder.mkdir()
    rule = """  - id: {id}
    layer: gpu
    severity: {severity}
    title: Site check {id}
    scope: gpu
    when: gpu.memory_total_mib != null
    evidence: ["{{{{ gpu.name }}}}"]
    remediation: nothing to do
"""
    (folder / "site.yaml").write_text(
        "rules:\n"
        + rule.format(id="SITE-010", severity="info")
        + "    explains: [SITE-011]\n"
        + rule.format(id="SITE-011", severity="warning")
    )
    return folder


# kind -> (its row in the table, the verdict the JSON report must carry; None: no report at all)
KINDS = {
    "healthy": (0, "healthy"),
    "warning only": (1, "fault"),
    "fault": (2, "fault"),
    "inconclusive": (3, "inconclusive"),
    "inconclusive with a warning": (3, "inconclusive"),
    "bad input": (3, None),
}


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_of_input_exits_as_the_table_says(kind: str, tmp_path: Path) -> None:
    if kind.startswith("inconclusive"):
        args = [str(_inconclusive_bundle(tmp_path))]
        if kind == "inconclusive with a warning":
            args += ["--rules", str(_warning_explained_by_info(tmp_path))]
    else:
        args = [
            str(
                {
                    "healthy": FIXTURES / "healthy-k8s-vllm",
                    "warning only": FIXTURES / "gpu-thermal-slowdown",
                    "fault": FIXTURES / "demo",
                    "bad input": tmp_path / "no-such-bundle",
                }[kind]
            )
        ]
    code, status = KINDS[kind]
    assert code in dict(EXIT_CODES)
    result = llmdiag("analyze", *args, "-o", "json")
    assert result.returncode == code, (kind, result.stderr)
    if status is None:
        assert result.stdout == "" and len(result.stderr.strip().splitlines()) == 1
        return
    report = json.loads(result.stdout)
    assert report["verdict"]["status"] == status and report["exit_code"] == code
    severities = {f["severity"] for f in report["findings"] if f["serving_path"]}
    if kind == "warning only":
        assert "warning" in severities and "critical" not in severities
    if kind == "inconclusive with a warning":
        assert "warning" in severities
    # --fail-on never and --exit-zero turn findings into 0, never 3
    relaxed = llmdiag("analyze", *args, "-o", "json", "--exit-zero").returncode
    assert relaxed == (3 if code == 3 else 0)
