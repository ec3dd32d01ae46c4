"""The krew plugin: deploy/krew/build.py builds the archive from the wheel and writes the manifest with
the archive's real sha256; the manifest holds to krew's v1alpha2 Plugin schema; the archive, unpacked
and linked as krew installs it, installs the wheel and runs."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "deploy" / "krew" / "build.py"
COMMITTED = ROOT / "deploy" / "krew" / "llmdiag.yaml"
PYPROJECT = (ROOT / "pyproject.toml").read_text()  # read as text: tomllib is not in Python 3.10
(VERSION,) = re.findall(r'^version = "([^"]+)"$', PYPROJECT, re.MULTILINE)
RELEASE_URL = f"https://github.com/llmdiag/llmdiag/releases/download/v{VERSION}/kubectl-llmdiag-v{VERSION}.tar.gz"


def assert_krew_plugin(plugin: dict) -> None:
    """The fields krew's v1alpha2 Plugin requires, with the values it accepts."""
    assert plugin["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2" and plugin["kind"] == "Plugin"
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", plugin["metadata"]["name"])
    spec = plugin["spec"]
    assert re.fullmatch(r"v\d+\.\d+\.\d+", spec["version"]) and spec["shortDescription"]
    assert len(spec["shortDescription"]) <= 80 and "\n" not in spec["shortDescription"]
    assert spec["platforms"]
    labels = [tuple(sorted(p["selector"]["matchLabels"].items())) for p in spec["platforms"]]
    assert len(set(labels)) == len(labels)
    for platform in spec["platforms"]:
        assert set(platform["selector"]["matchLabels"]) == {"os", "arch"}
        assert platform["uri"].startswith("https://") and re.fullmatch(r"[0-9a-f]{64}", platform["sha256"])
        assert platform["bin"] and all({"from", "to"} == set(f) for f in platform["files"])
        assert platform["bin"] in [f["from"] for f in platform["files"]]


def test_the_committed_manifest_is_the_releases() -> None:
    plugin = yaml.safe_load(COMMITTED.read_text())
    assert_krew_plugin(plugin)
    assert plugin["metadata"]["name"] == "llmdiag" and plugin["spec"]["version"] == f"v{VERSION}"
    targets = {
        (p["selector"]["matchLabels"]["os"], p["selector"]["matchLabels"]["arch"]) for p in plugin["spec"]["platforms"]
    }
    assert {"linux", "darwin"} == {os for os, _ in targets} and {"amd64", "arm64"} == {arch for _, arch in targets}
    for platform in plugin["spec"]["platforms"]:
        assert platform["uri"] == RELEASE_URL and platform["sha256"] != "0" * 64
        assert platform["bin"] == "kubectl-llmdiag" and re.search(
            r"\[project.scripts\][^[]*\nkubectl-llmdiag = ", PYPROJECT
        )
    assert "example.invalid" not in COMMITTED.read_text() and "PLACEHOLDER" not in COMMITTED.read_text()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("krew")
    result = subprocess.run(
        [sys.executable, str(BUILD), "--out", str(out)], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-2000:]
    archive, manifest = (Path(line) for line in result.stdout.split())
    assert archive.name == RELEASE_URL.rsplit("/", 1)[1] and manifest == out / "llmdiag.yaml"
    return archive, yaml.safe_load(manifest.read_text())


def test_the_manifest_carries_the_archives_real_digest(built: tuple[Path, dict], tmp_path: Path) -> None:
    archive, plugin = built
    assert_krew_plugin(plugin)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    assert {p["sha256"] for p in plugin["spec"]["platforms"]} == {digest}
    assert {p["uri"] for p in plugin["spec"]["platforms"]} == {RELEASE_URL}
    # the same wheel gives the same bytes: anyone can rebuild the archive and check the digest
    again = subprocess.run(
        [sys.executable, str(BUILD), "--out", str(tmp_path)], capture_output=True, text=True, timeout=600
    )
    assert again.returncode == 0 and hashlib.sha256((tmp_path / archive.name).read_bytes()).hexdigest() == digest
    with tarfile.open(archive) as tar:
        members = {m.name: m for m in tar.getmembers()}
    (platform,) = [
        p for p in plugin["spec"]["platforms"] if p["selector"]["matchLabels"] == {"os": "linux", "arch": "amd64"}
    ]
    assert {f["from"] for f in platform["files"]} == set(members)
    assert members["kubectl-llmdiag"].mode == 0o755 and any(n.endswith("-py3-none-any.whl") for n in members)


def test_installed_as_krew_does_the_plugin_installs_the_wheel_and_runs(
    built: tuple[Path, dict], tmp_path: Path
) -> None:
    archive, plugin = built
    (platform,) = [
        p for p in plugin["spec"]["platforms"] if p["selector"]["matchLabels"] == {"os": "linux", "arch": "amd64"}
    ]
    store, bin_dir, home = (
        tmp_path / "store" / "llmdiag" / plugin["spec"]["version"],
        tmp_path / "bin",
        tmp_path / "home",
    )
    for folder in (store, bin_dir, home):
        folder.mkdir(parents=True)
    with tarfile.open(archive) as tar:  # krew: unpack, move each `files` entry, link `bin` into its bin folder
        tar.extractall(tmp_path / "unpacked", filter="data")
    for entry in platform["files"]:
        (tmp_path / "unpacked" / entry["from"]).rename(store / entry["to"] / entry["from"])
    (bin_dir / "kubectl-llmdiag").symlink_to(store / platform["bin"])
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(home), "PIP_NO_COMPILE": "1"}
    env.update(
        {k: v for k, v in os.environ.items() if k.startswith("PIP_") or k.endswith("_PROXY") or k.endswith("_proxy")}
    )

    def run(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(bin_dir / "kubectl-llmdiag"), *argv], cwd=home, env=env, capture_output=True,
                              text=True, timeout=600)  # fmt: skip

    first = run("--version")
    assert first.returncode == 0 and first.stdout == f"llmdiag {VERSION}\n", first.stdout + first.stderr[-3000:]
    assert (
        "installing llmdiag" in first.stderr and (home / ".cache" / "kubectl-llmdiag" / VERSION / ".installed").exists()
    )
    result = run("analyze", str(ROOT / "fixtures" / "demo"), "-o", "json")
    assert result.returncode == 2 and "installing" not in result.stderr, result.stderr[-2000:]  # installed once
    assert json.loads(result.stdout)["verdict"]["layer"] == "kubernetes"
