"""diag/serve/store.py: reports kept on disk within both bounds, and read back whole by a new store."""

from __future__ import annotations

import json
from pathlib import Path

from diag.serve.store import Limits, ReportStore, new_id


def meta(n: int, trigger: str = "schedule") -> dict:
    return {"id": new_id(trigger, 1_800_000_000 + n), "trigger": trigger, "n": n}


def test_the_oldest_go_once_the_count_is_passed(tmp_path: Path) -> None:
    store = ReportStore(tmp_path, Limits(reports=3))
    for n in range(5):
        store.add(meta(n), "{}", "# md\n")
    assert [m["n"] for m in store.listing()] == [4, 3, 2]
    assert len(list(tmp_path.iterdir())) == 3 * 3


def test_the_oldest_go_once_the_bytes_are_passed_but_the_newest_stays(tmp_path: Path) -> None:
    store = ReportStore(tmp_path, Limits(reports=100, bytes=5000))
    for n in range(4):
        store.add(meta(n), "x" * 2000, "")
    assert [m["n"] for m in store.listing()] == [3, 2]
    kept, size = store.totals()
    assert kept == 2 and size <= 5000
    store.add(meta(9), "y" * 9000, "")
    assert [m["n"] for m in store.listing()] == [9]


def test_a_restart_reads_back_every_kept_report(tmp_path: Path) -> None:
    store = ReportStore(tmp_path, Limits())
    first = store.add(meta(1), '{"a": 1}', "# one\n")
    store.add(meta(2, "alert"), '{"b": 2}', "# two\n")
    again = ReportStore(tmp_path, Limits())
    assert again.listing() == store.listing()
    assert again.body(first.id, "json") == b'{"a": 1}'
    assert again.body(first.id, "md") == b"# one\n"
    assert again.latest("alert")["n"] == 2 and again.latest("schedule")["n"] == 1


def test_a_report_cut_off_before_its_meta_is_dropped_at_start(tmp_path: Path) -> None:
    store = ReportStore(tmp_path, Limits())
    store.add(meta(1), "{}", "")
    orphan = new_id("schedule", 1_800_000_100)
    (tmp_path / f"{orphan}.json").write_text("{}")
    (tmp_path / f".tmp-{orphan}.md").write_text("")
    again = ReportStore(tmp_path, Limits())
    assert [m["n"] for m in again.listing()] == [1]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"{store.listing()[0]['id']}{s}" for s in (".json", ".md", ".meta.json")
    )


def test_the_same_id_twice_is_made_unique(tmp_path: Path) -> None:
    store = ReportStore(tmp_path, Limits())
    a, b = store.add(meta(1), "{}", ""), store.add(meta(1), "{}", "")
    assert a.id != b.id and b.id.startswith(a.id)
    assert json.loads((tmp_path / f"{b.id}.meta.json").read_text())["id"] == b.id


def test_ids_outside_the_pattern_are_never_read(tmp_path: Path) -> None:
    store = ReportStore(tmp_path / "state", Limits())
    (tmp_path / "secret.json").write_text("{}")
    assert store.body("../secret", "json") is None
    assert store.body("20261207T000000000Z-schedule", "json") is None


def test_files_are_private(tmp_path: Path) -> None:
    store = ReportStore(tmp_path, Limits())
    kept = store.add(meta(1), "{}", "")
    assert (tmp_path / f"{kept.id}.json").stat().st_mode & 0o077 == 0
