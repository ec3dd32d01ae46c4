"""Reading a bundle: a folder or a .tar.gz, with or without one top-level folder; a file over the
per-file limit is named as a failed source, never dropped as if it were absent."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from diag import bundle as bundle_module
from diag.analyze import analyze_bundle
from diag.bundle import Bundle

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "k8s-gpu-cluster-full"


def as_tar(folder: Path, dest: Path, top: str | None) -> Path:
    with tarfile.open(dest, "w:gz") as tar:
        for f in sorted(folder.rglob("*")):
            if f.is_file():
                rel = f.relative_to(folder).as_posix()
                tar.add(f, arcname=f"{top}/{rel}" if top else rel)
    return dest


@pytest.mark.parametrize("form", ["folder", "tar", "tar with a top folder"])
def test_a_file_over_the_limit_is_a_failed_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str) -> None:
    pods = (FIXTURE / "k8s" / "pods.json").stat().st_size  # the largest file of the fixture
    monkeypatch.setattr(bundle_module, "MAX_FILE_BYTES", pods - 1)
    path = {"folder": FIXTURE, "tar": as_tar(FIXTURE, tmp_path / "b.tar.gz", None),
            "tar with a top folder": as_tar(FIXTURE, tmp_path / "case.tar.gz", "case")}[form]  # fmt: skip
    opened = Bundle.open(path)
    assert "k8s/pods.json" not in opened.files
    assert "k8s/events.json" in opened.files
    report = analyze_bundle(opened)
    status = report.sources["k8s/pods.json"]
    assert status.status == "failed"
    assert f"{pods:,} bytes, over the limit" in status.detail
    assert "k8s/pods.json" in [g.source for g in report.verdict.gaps]
