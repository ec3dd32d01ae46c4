"""`--output html` as a user meets it: the page on stdout and nothing else, the exit code of the other
formats, one line when matplotlib is missing, and the other formats never importing matplotlib."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_cli import llmdiag

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = str(ROOT / "fixtures" / "history-kv-storm-ended")


def test_the_page_is_all_of_stdout_with_the_usual_exit_code() -> None:
    page = llmdiag("analyze", BUNDLE, "--output", "html")
    as_json = llmdiag("analyze", BUNDLE, "-o", "json")
    assert page.stdout.startswith("<!DOCTYPE html>\n") and page.stdout.endswith("</html>\n")
    assert page.returncode == as_json.returncode == 2
    assert page.stderr == ""


def test_without_matplotlib_one_line_and_exit_3() -> None:
    run = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['matplotlib'] = None; from diag.cli import main; main()",
         "analyze", BUNDLE, "--output", "html"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 3
    assert run.stdout == ""
    assert run.stderr.strip().splitlines() == [
        "llmdiag: the HTML report (--output html, serve --html) needs matplotlib: pip install 'llmdiag[html]'"
    ]


@pytest.mark.parametrize("output", ["terminal", "json", "markdown"])
def test_the_other_formats_never_import_matplotlib(output: str) -> None:
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "diag.cli", "analyze", BUNDLE, "--output", output],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "diag.report.timeline" not in run.stderr  # what the html path imports
    assert "matplotlib" not in run.stderr
    assert "| diag.analyze" in run.stderr  # the import times were read at all
