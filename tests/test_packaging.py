"""The release: one version in pyproject.toml, `llmdiag --version` and the CHANGELOG; the wheel carries
the rule files (found at run time without a source checkout) and no tests."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = (ROOT / "pyproject.toml").read_text()  # read as text: tomllib is not in Python 3.10
(VERSION,) = re.findall(r'^version = "([^"]+)"$', PYPROJECT, re.MULTILINE)


def test_llmdiag_version_is_pyprojects() -> None:
    llmdiag = Path(sys.executable).parent / "llmdiag"
    result = subprocess.run([str(llmdiag), "--version"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout == f"llmdiag {VERSION}\n", result.stdout + result.stderr


def test_the_changelog_has_the_release_under_unreleased() -> None:
    headings = re.findall(r"^## (.+)$", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert headings[0] == "Unreleased"
    dated = [h for h in headings if h.startswith(f"{VERSION} ")]
    assert len(dated) == 1 and re.fullmatch(rf"{re.escape(VERSION)} \(\d{{4}}-\d{{2}}-\d{{2}}\)", dated[0]), headings
    assert headings[1] == dated[0]  # the newest release comes first


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
