"""The layout table is the one place a source is declared: every part of the house that names a bundle
path must agree with it, and what reads a row must be what the row says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from diag.bundle import layout
from diag.bundle.files import Bundle
from diag.bundle.load import load_bundle
from diag.core.rules_dir import builtin_rules_dir
from diag.engine.rules import load_rules

ROOT = Path(__file__).resolve().parents[3]
FILES = [row for row in layout.SOURCES if row.read is not None]


def _example(path: str, name: str = "x", optional: bool = False) -> str:
    """A path of the row: each <part> filled with `name`, the [...] part kept or dropped."""
    kept = re.sub(r"\[([^]]*)\]", r"\1" if optional else "", path)
    return re.sub(r"<\w+>", name, kept)


@pytest.mark.parametrize("row", layout.SOURCES, ids=lambda r: r.path)
def test_every_row_places_its_own_paths_and_no_other_rows(row: layout.Source) -> None:
    for optional in (False, True):
        path = _example(row.path, "node-a.ec2.internal", optional)
        found = layout.source_of(path)
        assert found is not None and found[0] is row, path


def test_named_parts_come_whole_even_with_dots_in_them() -> None:
    assert layout.part("gpu/ip-10-0-0-1.ec2.internal.nvml.json", "host") == "ip-10-0-0-1.ec2.internal"
    assert layout.part("vllm/llm.vllm-0.metrics.2.txt", "server") == "llm.vllm-0"
    assert layout.part("vllm/llm.vllm-0.metrics.2.txt", "n") == "2"
    assert layout.part("gpu/a.csv", "host", layout.SMI_XML_FILE) is None


@pytest.mark.parametrize("row", FILES, ids=lambda r: r.path)
def test_every_file_is_read_by_its_reader_not_skipped(row: layout.Source) -> None:
    """A file of each row, with text no parser accepts: it must reach its reader, never be skipped
    as a file the layout does not know (a log or the kernel's lines take any text)."""
    rel = _example(row.path)
    snap = load_bundle(Bundle({rel: b"\x00 not what any command prints\n"}))
    status = snap.sources[rel]
    assert status.status == "failed" or rel.startswith("k8s/logs/") or rel.endswith(".xid.txt"), status
    assert "unknown" not in status.detail and "bundle layout" not in status.detail


def test_a_file_the_layout_does_not_know_is_skipped_by_name() -> None:
    snap = load_bundle(Bundle({"ray/jobs.json": b"[]", "notes.txt": b"hi"}))
    assert snap.sources["ray/jobs.json"].detail == "ray/jobs.json: unknown Ray file"
    assert snap.sources["notes.txt"].detail == "notes.txt: not part of the bundle layout"


@pytest.mark.parametrize("row", [r for r in layout.SOURCES if r.collector], ids=lambda r: r.path)
def test_the_collector_a_row_names_writes_that_path(row: layout.Source) -> None:
    text = (ROOT / row.collector).read_text()
    if row.path in layout.BY_PATH:
        assert "KUBE_LISTS" in text
        return
    fixed = [piece for piece in re.split(r"<\w+>|\[[^]]*\]", row.path) if piece]
    missing = [piece for piece in fixed if piece not in text]
    assert not missing, f"{row.collector} never writes {row.path} ({missing})"


def test_every_path_a_collector_writes_has_a_row() -> None:
    """Each path the collectors spell out (a computed suffix cannot be read here: its writer's row
    test above holds it)."""
    written = set()
    for module in (ROOT / "diag" / "collect").glob("*.py"):
        code = "\n".join(line.split("  # ")[0] for line in module.read_text().splitlines())
        for literal in re.findall(r'f?"((?:k8s|ray|gpu|vllm|prometheus)/[^"\s]*)"', code):
            path = re.sub(r"\{[^}]*\}", "x", literal)
            if path.endswith((".json", ".txt", ".xml", ".csv", ".log")) or "{" not in literal:
                written.add(path)
    assert len(written) > 15
    assert not sorted(p for p in written if layout.source_of(p) is None)


def test_every_rule_requires_what_some_row_is() -> None:
    for rule in load_rules([builtin_rules_dir()]):
        for prefix in rule.requires:
            assert any(row.path.startswith(prefix) for row in FILES), (rule.id, prefix)


def test_layers_and_deciding_follow_the_rows() -> None:
    assert layout.layer_of("k8s/logs/llm.vllm-0.log") is None
    assert layout.layer_of("prometheus/dcgm_fb_used.json") == "gpu"
    assert layout.layer_of("prometheus/vllm_num_requests_waiting.json") == "vllm"
    assert layout.layer_of("ray/dashboard") == "ray"
    assert not layout.decides("k8s/rayclusters.json") and layout.decides("k8s/hpa.json")
    assert not layout.decides("manifest.json") and layout.decides("gpu/x.xml")


def test_a_missing_group_is_met_by_any_of_its_files() -> None:
    snap = load_bundle(Bundle({"ray/cluster_status.json": b"{}", "ray/nodes_summary.json": b"{}"}))
    assert "ray/status" not in snap.sources and "ray/nodes.json" not in snap.sources
    assert snap.sources["ray/actors.json"].status == "missing"


def test_docs_show_the_layout_as_the_table_renders_it() -> None:
    doc = (ROOT / "docs" / "bundle-format.md").read_text()
    assert "```\n" + layout.render() + "```\n" in doc, "regenerate the block with `llmdiag layout`"
