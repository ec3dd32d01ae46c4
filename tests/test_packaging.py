"""The wheel carries the rule files (found at run time without a source checkout) and no tests."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_ships_every_rule_file_and_no_tests(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    wheel = next(tmp_path.glob("llmdiag-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {f"diag/rules/{p.name}" for p in (ROOT / "rules").glob("*.yaml")}
    assert expected and expected <= names
    assert not [n for n in names if Path(n).name.startswith("test_")]
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    scripts = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "llmdiag = diag.cli:main" in scripts and "kubectl-llmdiag = diag.cli:main" in scripts
