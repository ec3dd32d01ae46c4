"""deploy/krew/llmdiag.yaml: a krew v1alpha2 Plugin whose binary is the wheel's kubectl-llmdiag entry
point, one archive per platform, and digests that are visibly placeholders until a release fills them."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "deploy" / "krew" / "llmdiag.yaml"
PYPROJECT = (ROOT / "pyproject.toml").read_text()  # read as text: tomllib is not in Python 3.10


def test_the_krew_manifest_runs_the_wheels_plugin_entry_point() -> None:
    plugin = yaml.safe_load(MANIFEST.read_text())
    assert plugin["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2" and plugin["kind"] == "Plugin"
    assert plugin["metadata"]["name"] == "llmdiag"
    (version,) = re.findall(r'^version = "([^"]+)"$', PYPROJECT, re.MULTILINE)
    assert plugin["spec"]["version"] == f"v{version}"
    scripts = set(re.findall(r"^([a-z-]+) = \"diag\.cli:main\"$", PYPROJECT, re.MULTILINE))
    platforms = plugin["spec"]["platforms"]
    targets = [(p["selector"]["matchLabels"]["os"], p["selector"]["matchLabels"]["arch"]) for p in platforms]
    assert len(set(targets)) == len(targets) and {"linux", "darwin"} <= {os for os, _ in targets}
    for platform in platforms:
        assert platform["bin"] == "kubectl-llmdiag" and platform["bin"] in scripts
        assert {"from": "kubectl-llmdiag", "to": "."} in platform["files"]
        assert re.fullmatch(r"[0-9a-f]{64}", platform["sha256"])
        assert f"v{version}" in platform["uri"] and "-".join(targets[platforms.index(platform)]) in platform["uri"]


def test_every_placeholder_is_marked_to_be_filled_at_release() -> None:
    lines = MANIFEST.read_text().splitlines()
    placeholders = [line for line in lines if re.search(r"sha256: \"0{64}\"|example\.invalid", line)]
    assert placeholders and all("PLACEHOLDER" in line for line in placeholders)
    assert any("TO FILL AT RELEASE" in line for line in lines)
