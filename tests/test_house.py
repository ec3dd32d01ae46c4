"""The house rules hold: the import layers (import-linter), ruff's lint and ruff's format."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PATHS = ["diag", "tests", "bench", "ci", "deploy"]
BIN = Path(sys.executable).parent  # the test extra installs both tools beside this interpreter


@pytest.mark.parametrize(
    "command",
    [
        [str(BIN / "lint-imports")],
        [sys.executable, "-m", "ruff", "check", *PATHS],
        [sys.executable, "-m", "ruff", "format", "--check", *PATHS],
    ],
    ids=["lint-imports", "ruff-check", "ruff-format"],
)
def test_the_tree_passes(command: list[str]) -> None:
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
