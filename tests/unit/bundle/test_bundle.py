"""Reading a bundle: a folder or a .tar.gz, with or without one top-level folder or `./`; a file over
the per-file limit, a link, a device, a path out of the bundle, and a bundle past its total limits
are each named as a failed source, never dropped as if absent, never followed."""

from __future__ import annotations

import io
import os
import tarfile
import tracemalloc
from pathlib import Path

import pytest

from diag.analyze import analyze_bundle
from diag.bundle.files import BUNDLE_SOURCE, Bundle, BundleLimits

FIXTURE = Path(__file__).resolve().parents[3] / "fixtures" / "k8s-gpu-cluster-full"


def as_tar(folder: Path, dest: Path, top: str | None) -> Path:
    with tarfile.open(dest, "w:gz") as tar:
        for f in sorted(folder.rglob("*")):
            if f.is_file():
                rel = f.relative_to(folder).as_posix()
                tar.add(f, arcname=f"{top}/{rel}" if top else rel)
    return dest


def tar_of(dest: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    with tarfile.open(dest, "w:gz") as tar:
        for info, data in members:
            info.size = len(data) if info.isfile() else 0
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return dest


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


@pytest.mark.parametrize("form", ["folder", "tar", "tar with a top folder", "tar of ./"])
def test_a_file_over_the_limit_is_a_failed_source(tmp_path: Path, form: str) -> None:
    pods = (FIXTURE / "k8s" / "pods.json").stat().st_size  # the largest file of the fixture
    path = {"folder": FIXTURE, "tar": as_tar(FIXTURE, tmp_path / "b.tar.gz", None),
            "tar with a top folder": as_tar(FIXTURE, tmp_path / "case.tar.gz", "case"),
            "tar of ./": as_tar(FIXTURE, tmp_path / "dot.tar.gz", ".")}[form]  # fmt: skip
    opened = Bundle.open(path, BundleLimits(file_bytes=pods - 1))
    assert "k8s/pods.json" not in opened.files
    assert "k8s/events.json" in opened.files
    report = analyze_bundle(opened)
    status = report.sources["k8s/pods.json"]
    assert status.status == "failed"
    assert f"{pods:,} bytes, over the limit" in status.detail
    assert "k8s/pods.json" in [g.source for g in report.verdict.gaps]


def test_tar_of_dot_folder_reads_the_layout(tmp_path: Path) -> None:
    """`tar czf case.tar.gz ./case` and `cd case && tar czf ../case.tar.gz .` both read as the folder."""
    folder = Bundle.open(FIXTURE)
    for top in ("./case", "."):
        opened = Bundle.open(as_tar(FIXTURE, tmp_path / "case.tar.gz", top))
        assert opened.files == folder.files and not opened.refused


def test_a_symlink_in_a_folder_is_refused_not_followed(tmp_path: Path) -> None:
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "x.metrics.txt").symlink_to("/proc/self/environ")
    (tmp_path / "k8s").symlink_to(FIXTURE / "k8s")
    opened = Bundle.open(tmp_path)
    assert opened.files == {}
    assert "symbolic link" in opened.refused["vllm/x.metrics.txt"]
    assert "symbolic link" in opened.refused["k8s"]
    report = analyze_bundle(opened)
    assert report.sources["vllm/x.metrics.txt"].status == "failed"
    assert report.verdict.status != "healthy"


def test_a_fifo_and_a_hard_link_in_a_folder_are_refused(tmp_path: Path) -> None:
    (tmp_path / "k8s").mkdir()
    os.mkfifo(tmp_path / "k8s" / "pods.json")  # reading it would block for ever
    (tmp_path / "secret").write_text("x")
    os.link(tmp_path / "secret", tmp_path / "k8s" / "nodes.json")
    opened = Bundle.open(tmp_path)
    assert "not a regular file" in opened.refused["k8s/pods.json"]
    assert "hard link" in opened.refused["k8s/nodes.json"]
    assert "k8s/pods.json" not in opened.files and "k8s/nodes.json" not in opened.files


def test_archive_links_devices_and_paths_out_of_the_bundle_are_refused(tmp_path: Path) -> None:
    path = tar_of(tmp_path / "evil.tar.gz", [
        (member("k8s/pods.json", tarfile.SYMTYPE, "/proc/self/environ"), b""),
        (member("k8s/nodes.json", tarfile.LNKTYPE, "/etc/passwd"), b""),
        (member("k8s/events.json", tarfile.CHRTYPE), b""),
        (member("/etc/cron.d/x"), b"* * * * * root true\n"),
        (member("../../x.sh"), b"echo\n"),
        (member("ray/status.txt"), b"======== Autoscaler status: 2026-12-01 ========\n"),
    ])  # fmt: skip
    opened = Bundle.open(path)
    assert list(opened.files) == ["ray/status.txt"]
    assert "symbolic link (to /proc/self/environ)" in opened.refused["k8s/pods.json"]
    assert "hard link" in opened.refused["k8s/nodes.json"]
    assert "not a regular file" in opened.refused["k8s/events.json"]
    assert "absolute path or one with '..'" in opened.refused["/etc/cron.d/x"]
    assert "absolute path or one with '..'" in opened.refused["../../x.sh"]
    sources = analyze_bundle(opened).sources
    assert all(sources[name].status == "failed" for name in opened.refused)


def test_too_many_members_stops_reading_with_a_source_line(tmp_path: Path) -> None:
    path = tar_of(tmp_path / "many.tar.gz", [(member(f"k8s/logs/p{i}.log"), b"x\n") for i in range(500)])
    opened = Bundle.open(path, BundleLimits(files=100))
    assert len(opened.files) == 100
    assert "more than 100 files" in opened.refused[BUNDLE_SOURCE]
    report = analyze_bundle(opened)
    assert report.sources[BUNDLE_SOURCE].status == "failed"
    assert report.verdict.status != "healthy"


def test_too_many_files_in_a_folder_stops_reading(tmp_path: Path) -> None:
    (tmp_path / "k8s" / "logs").mkdir(parents=True)
    for i in range(50):
        (tmp_path / "k8s" / "logs" / f"p{i}.log").write_text("x\n")
    opened = Bundle.open(tmp_path, BundleLimits(files=20))
    assert len(opened.files) < 20
    assert "more than 20 files" in opened.refused[BUNDLE_SOURCE]


def test_a_compression_bomb_is_not_decompressed_past_the_total_limit(tmp_path: Path) -> None:
    """64 MiB of zeros in a ~64 KiB archive, read with a 1 MiB total: stops at once, memory stays small."""
    path = tmp_path / "bomb.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for i in range(4):
            info = member(f"k8s/logs/p{i}.log")
            info.size = 16 * 1024 * 1024
            tar.addfile(info, io.BytesIO(bytes(info.size)))
    assert path.stat().st_size < 1024 * 1024
    tracemalloc.start()
    opened = Bundle.open(path, BundleLimits(file_bytes=1024 * 1024, total_bytes=1024 * 1024))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 8 * 1024 * 1024
    assert "bundle_max_file_bytes" in opened.refused["k8s/logs/p0.log"]
    assert "bundle_max_total_bytes" in opened.refused[BUNDLE_SOURCE]
    assert "k8s/logs/p1.log" not in opened.files and "k8s/logs/p1.log" not in opened.refused


def test_a_damaged_archive_keeps_what_was_read_and_says_so(tmp_path: Path) -> None:
    whole = as_tar(FIXTURE, tmp_path / "b.tar.gz", None).read_bytes()
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    opened = Bundle.open(cut)
    assert opened.files
    assert "damaged" in opened.refused[BUNDLE_SOURCE]
    assert analyze_bundle(opened).verdict.status != "healthy"


def test_limits_come_from_the_settings() -> None:
    limits = BundleLimits.from_settings(
        {"bundle_max_file_bytes": 10, "bundle_max_total_bytes": 20, "bundle_max_files": 3}
    )
    assert limits == BundleLimits(file_bytes=10, total_bytes=20, files=3)


@pytest.mark.parametrize("value", ["1GB", -1, 0, 1.5, True])
def test_a_limit_that_is_not_a_positive_whole_number_is_one_line(value: object) -> None:
    from diag.core.errors import UserError

    with pytest.raises(UserError, match="setting bundle_max_files: .* is not a positive whole number"):
        BundleLimits.from_settings({"bundle_max_files": value})


def test_the_documented_defaults_are_the_defaults() -> None:
    from diag.core.rules_dir import builtin_rules_dir, load_settings

    documented = {name: spec["default"] for name, spec in load_settings(builtin_rules_dir()).items()}
    assert BundleLimits.from_settings(documented) == BundleLimits()
