"""The release: one version in pyproject.toml, `llmdiag --version` and the CHANGELOG; the sdist and
wheel as `python -m build` makes them (the wheel from the sdist), valid metadata for an index, the
rule files in the wheel and no tests; and the wheel installed with its dependencies into a fresh
virtualenv, run outside the checkout."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml

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


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`python -m build`: the sdist, then the wheel built from it, in an isolated environment."""
    out = tmp_path_factory.mktemp("dist")
    result = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
                            capture_output=True, text=True, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return out


def test_sdist_and_wheel_pass_twine_check(dist: Path) -> None:
    sdist, wheel = dist / f"llmdiag-{VERSION}.tar.gz", dist / f"llmdiag-{VERSION}-py3-none-any.whl"
    assert sorted(dist.iterdir()) == sorted([sdist, wheel])
    result = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(wheel)],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0 and result.stdout.count("PASSED") == 2, result.stdout + result.stderr


def test_the_sdist_holds_the_sources_and_their_tests_and_no_local_state(dist: Path) -> None:
    with tarfile.open(dist / f"llmdiag-{VERSION}.tar.gz") as sdist:
        names = {n.partition("/")[2] for n in sdist.getnames()}
    assert {"pyproject.toml", "PKG-INFO", "README.md", "CHANGELOG.md", "diag/cli.py", "rules/settings.yaml"} <= names
    assert {"tests/test_packaging.py", "fixtures/demo/expected.json"} <= names
    tops = {n.split("/")[0] for n in names if n}
    assert not {t for t in tops if t.startswith(".") and t != ".gitignore"}, tops  # no .venv, caches, .ci


def test_wheel_ships_every_rule_file_and_no_tests(dist: Path) -> None:
    wheel = zipfile.ZipFile(dist / f"llmdiag-{VERSION}-py3-none-any.whl")
    names = set(wheel.namelist())
    expected = {f"diag/rules/{p.name}" for p in (ROOT / "rules").glob("*.yaml")}
    assert expected and expected <= names
    assert not [n for n in names if Path(n).name.startswith("test_") or n.startswith(("tests/", "fixtures/"))]
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    scripts = wheel.read(entry_points).decode()
    assert "llmdiag = diag.cli:main" in scripts and "kubectl-llmdiag = diag.cli:main" in scripts


def test_the_wheel_installs_and_runs_in_a_fresh_virtualenv(dist: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    wheel = dist / f"llmdiag-{VERSION}-py3-none-any.whl"
    # its dependencies resolved from the index, as a user's install does; not byte-compiled: a third faster
    install = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-compile", str(wheel)],
                             capture_output=True, text=True, timeout=600)  # fmt: skip
    assert install.returncode == 0, install.stderr[-3000:]

    def run(*argv: str) -> subprocess.CompletedProcess:  # outside the checkout: its diag/ is not importable
        return subprocess.run([str(venv / "bin" / argv[0]), *argv[1:]], cwd=tmp_path, capture_output=True,
                              text=True, timeout=300, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})  # fmt: skip

    assert run("llmdiag", "--version").stdout == f"llmdiag {VERSION}\n"
    where = run("python", "-c", "import diag; print(diag.__file__)")
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout + where.stderr
    result = run("llmdiag", "analyze", str(ROOT / "fixtures" / "demo"), "-o", "json")
    assert result.returncode == 2, result.stderr[-2000:]  # the demo's critical fault
    report = json.loads(result.stdout)
    assert report["verdict"]["layer"] == "kubernetes" and report["context"]["tool_version"] == VERSION


def test_every_deployable_names_this_version() -> None:
    chart = yaml.safe_load((ROOT / "deploy" / "helm" / "llmdiag" / "Chart.yaml").read_text())
    assert chart["appVersion"] == chart["version"] == VERSION
    texts = [ROOT / "Dockerfile", ROOT / "README.md", ROOT / "docs" / "runbook.md", *(ROOT / "deploy").glob("*.*")]
    tags = {(p.name, tag) for p in texts for tag in re.findall(r"llmdiag:(\d+\.\d+\.\d+)\b", p.read_text())}
    assert tags and {tag for _, tag in tags} == {VERSION}, sorted(tags)
