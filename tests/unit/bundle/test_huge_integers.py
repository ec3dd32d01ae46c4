"""An integer of more than 4,300 digits (Python's limit for turning text into an int) anywhere in a
Kubernetes list is that file's one failed line, never the end of the analysis: whole, cut short (the
truncated-list recovery), or in any other JSON file of the bundle."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from diag.analyze import analyze_bundle
from diag.bundle.files import Bundle
from diag.bundle.layout import KUBE_LISTS
from diag.core.errors import ParseError
from diag.parsers.json_fields import load_json

FIXTURE = Path(__file__).resolve().parents[3] / "fixtures" / "k8s-gpu-cluster-full"
HUGE = "9" * 5000
LISTS = [row.path.removeprefix("k8s/") for row in KUBE_LISTS]


def _list_with_huge_integer(name: str) -> str:
    kind = {"hpa.json": "HorizontalPodAutoscaler"}.get(name, name.removesuffix(".json").rstrip("s").capitalize())
    item = (
        f'{{"apiVersion": "v1", "kind": "{kind}", "metadata": '
        f'{{"name": "a", "namespace": "ml", "generation": {HUGE}}}}}'
    )
    return f'{{"apiVersion": "v1", "kind": "List", "items": [{item}, {item}'


@pytest.mark.parametrize("cut", [True, False], ids=["cut short", "whole"])
@pytest.mark.parametrize("name", LISTS)
def test_a_huge_integer_in_any_list_is_one_failed_source(name: str, cut: bool, tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    shutil.copytree(FIXTURE, bundle)
    (bundle / "k8s" / name).write_text(_list_with_huge_integer(name) + ("" if cut else "]}"))
    report = analyze_bundle(Bundle.open(bundle))
    source = report.sources[f"k8s/{name}"]
    assert source.status == "failed"
    assert source.detail == f"k8s/{name}: not valid JSON: an integer of more than 4,300 digits"
    assert report.verdict.status != "healthy"


def test_the_cli_names_the_file_and_ends_normally(tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    shutil.copytree(FIXTURE, bundle)
    (bundle / "k8s" / "pods.json").write_text(_list_with_huge_integer("pods.json"))
    result = subprocess.run(["llmdiag", "analyze", str(bundle), "--output", "json"], capture_output=True, text=True)
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
    assert json.loads(result.stdout)["sources"]["k8s/pods.json"]["status"] == "failed"


def test_load_json_refuses_a_huge_integer_in_one_line() -> None:
    with pytest.raises(ParseError, match="more than 4,300 digits"):
        load_json(f'{{"a": [1, -{HUGE}]}}')
    assert load_json(f'{{"a": {"9" * 4300}}}')["a"] > 0
