"""An archive is read whole or refused by name: a tar stream in several compressed members (gzip),
streams (bzip2, xz), and any way it ends short or goes on past its end is a line, never a silent cut."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from diag.analyze import analyze_bundle
from diag.bundle.files import BUNDLE_SOURCE, Bundle, BundleError
from diag.report.json_report import to_dict
from tests.archives import multi_member, tar_bytes

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
SCENARIOS = sorted(p.parent for p in FIXTURES.rglob("expected.json"))
ONE = FIXTURES / "k8s-gpu-cluster-full"


def _report(bundle: Bundle) -> dict:
    report = to_dict(analyze_bundle(bundle))
    report.pop("bundle")
    report.pop("timings", None)
    return report


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: p.name)
def test_a_multi_member_gzip_of_every_fixture_reports_as_the_folder(scenario: Path, tmp_path: Path) -> None:
    archive = multi_member(scenario, tmp_path / "case.tar.gz", "gz", pieces=4, top="case")
    assert subprocess.run(["gzip", "-t", str(archive)]).returncode == 0
    opened = Bundle.open(archive)
    folder = Bundle.open(scenario)
    assert opened.files == folder.files and opened.refused == folder.refused
    assert _report(opened) == _report(folder)


@pytest.mark.parametrize("codec", ["gz", "bz2", "xz"])
def test_every_stream_of_every_codec_is_read(codec: str, tmp_path: Path) -> None:
    archive = multi_member(ONE, tmp_path / "case.tar", codec, pieces=5)
    opened = Bundle.open(archive)
    assert opened.files == Bundle.open(ONE).files
    assert BUNDLE_SOURCE not in opened.refused


def test_gnu_tar_lists_what_we_read(tmp_path: Path) -> None:
    archive = multi_member(ONE, tmp_path / "case.tar.gz", "gz", pieces=6)
    listed = subprocess.run(["tar", "tzf", str(archive)], capture_output=True, text=True, check=True).stdout.split()
    assert sorted(listed) == sorted(Bundle.open(archive).files)


def test_an_archive_cut_between_two_entries_says_so(tmp_path: Path) -> None:
    """No end-of-archive blocks: tarfile alone ends such a stream as if it were whole."""
    data = tar_bytes(ONE)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        third = tar.getmembers()[3].offset  # a header's start: everything before it is whole entries
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(gzip.compress(data[:third]))
    opened = Bundle.open(cut)
    assert len(opened.files) == 3
    assert "ends without the end-of-archive blocks" in opened.refused[BUNDLE_SOURCE]
    assert analyze_bundle(opened).verdict.status != "healthy"


def test_a_damaged_header_between_entries_says_so(tmp_path: Path) -> None:
    data = bytearray(tar_bytes(ONE))
    with tarfile.open(fileobj=io.BytesIO(bytes(data))) as tar:
        third = tar.getmembers()[3].offset
    data[third : third + 100] = b"\x01" * 100
    damaged = tmp_path / "damaged.tar.gz"
    damaged.write_bytes(gzip.compress(bytes(data)))
    opened = Bundle.open(damaged)
    assert "damaged header" in opened.refused[BUNDLE_SOURCE]


def test_archives_appended_to_one_another_are_named(tmp_path: Path) -> None:
    data = tar_bytes(ONE)
    twice = tmp_path / "twice.tar.gz"
    twice.write_bytes(gzip.compress(data) + gzip.compress(tar_bytes(ONE, top="other")))
    opened = Bundle.open(twice)
    assert "goes on after its end-of-archive blocks" in opened.refused[BUNDLE_SOURCE]
    assert analyze_bundle(opened).verdict.status != "healthy"


@pytest.mark.parametrize(
    ("magic", "name"), [(b"\x28\xb5\x2f\xfd", "zstd"), (b"\x1f\x9d", "compress"), (b"LZIP", "lzip")]
)
def test_a_compression_we_do_not_read_is_refused_by_name(tmp_path: Path, magic: bytes, name: str) -> None:
    archive = tmp_path / "case.tar.gz"
    archive.write_bytes(magic + bytes(600))
    with pytest.raises(BundleError, match=name):
        Bundle.open(archive)


def test_the_cli_reads_a_multi_member_archive_whole(tmp_path: Path) -> None:
    archive = multi_member(ONE, tmp_path / "case.tar.gz", "gz", pieces=8)
    out = subprocess.run(["llmdiag", "analyze", str(archive), "--output", "json"], capture_output=True, text=True)
    report = json.loads(out.stdout)
    assert report["sources"]["k8s/pods.json"]["status"] == "ok"
    assert BUNDLE_SOURCE not in report["sources"]
