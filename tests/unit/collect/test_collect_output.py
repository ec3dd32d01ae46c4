"""`llmdiag collect -o`: a link at the output path is refused, never followed; what is written is
0600 (files) and 0700 (folders) whatever was there before; nothing is left half-written."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from diag.bundle.files import Bundle
from diag.collect.output import save_bundle
from diag.core.errors import UserError


def _bundle() -> Bundle:
    return Bundle({"manifest.json": b"{}\n", "k8s/pods.json": b'{"items": []}\n', "vllm/a.metrics.txt": b"x 1\n"})


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.mark.parametrize("name", ["case.tar.gz", "case"])
def test_a_symlink_at_the_output_path_is_refused_and_its_target_untouched(tmp_path: Path, name: str) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    link = tmp_path / name
    link.symlink_to(victim)
    with pytest.raises(UserError, match="symbolic link"):
        save_bundle(_bundle(), link)
    assert victim.read_text() == "keep me\n" and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, "victim.txt"])  # no temporary left


def test_an_existing_archive_is_kept_without_force(tmp_path: Path) -> None:
    """A second collect to the same name (the cluster unreachable by then) must not cost the first bundle."""
    out = tmp_path / "case.tar.gz"
    out.write_bytes(b"the first bundle")
    with pytest.raises(UserError, match="it exists .*--force to replace it"):
        save_bundle(_bundle(), out)
    assert out.read_bytes() == b"the first bundle"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["case.tar.gz"]


def test_force_replaces_an_existing_0644_archive_by_a_0600_one(tmp_path: Path) -> None:
    out = tmp_path / "case.tar.gz"
    out.write_bytes(b"old")
    os.chmod(out, 0o644)
    save_bundle(_bundle(), out, force=True)
    assert _mode(out) == 0o600
    with tarfile.open(out) as tar:
        assert sorted(tar.getnames()) == ["case/k8s/pods.json", "case/manifest.json", "case/vllm/a.metrics.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["case.tar.gz"]


def test_a_folder_bundle_is_0700_folders_and_0600_files_whatever_the_umask(tmp_path: Path) -> None:
    out = tmp_path / "new" / "case"
    old = os.umask(0o022)
    try:
        save_bundle(_bundle(), out)
    finally:
        os.umask(old)
    folders = [out, *(p for p in out.rglob("*") if p.is_dir())]
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(folders) == 3 and {_mode(p) for p in folders} == {0o700}
    assert len(files) == 3 and {_mode(p) for p in files} == {0o600}


def test_an_empty_folder_is_used_and_a_full_one_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o755)
    save_bundle(_bundle(), empty)
    assert (empty / "manifest.json").read_bytes() == b"{}\n" and _mode(empty) == 0o700
    full = tmp_path / "full"
    full.mkdir()
    (full / "notes.txt").write_text("mine\n")
    with pytest.raises(UserError, match="the folder is not empty .*--force"):
        save_bundle(_bundle(), full)
    with pytest.raises(UserError, match="no earlier bundle"):
        save_bundle(_bundle(), full, force=True)  # --force replaces a bundle, never a folder of one's files
    assert [p.name for p in full.iterdir()] == ["notes.txt"]


def test_force_replaces_an_earlier_bundle_whole(tmp_path: Path) -> None:
    earlier = tmp_path / "case"
    earlier.mkdir()
    (earlier / "manifest.json").write_text('{"old": true}\n')
    (earlier / "ray").mkdir()
    (earlier / "ray" / "status.txt").write_text("old\n")  # stale: the new bundle has no ray/
    with pytest.raises(UserError, match="not empty"):
        save_bundle(_bundle(), earlier)
    save_bundle(_bundle(), earlier, force=True)
    assert (earlier / "manifest.json").read_bytes() == b"{}\n"
    assert not (earlier / "ray").exists()  # nothing of the earlier bundle mixes in
    assert [p.name for p in tmp_path.iterdir()] == ["case"]  # no staging left behind


def test_force_never_follows_a_symbolic_link(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "manifest.json").write_text("{}\n")
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(UserError, match="symbolic link"):
        save_bundle(_bundle(), link, force=True)


def test_collect_refuses_a_symlinked_output_with_one_line(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    out = tmp_path / "case.tar.gz"
    out.symlink_to(victim)
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "none"), "HOME": str(tmp_path)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    result = subprocess.run(
        [sys.executable, "-m", "diag.cli", "collect", "--kubeconfig", str(tmp_path / "none"), "--no-local-gpu",
         "--timeout", "10", "--vllm-url", "http://127.0.0.1:1", "--out", str(out)],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert result.returncode == 3
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(f"llmdiag: refusing to write the bundle to {out}: it is a symbolic link")
    )
    assert victim.read_text() == "keep me\n"
