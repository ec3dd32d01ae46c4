"""Whole bundles, damaged one to three files at a time: the analysis never raises, every report
renders without raw control characters, a verdict is never "healthy" while a source failed, and a
cut-off JSON or XML file that was read before shows as failed (or degraded) itself."""

from __future__ import annotations

import io
import json
import re
from functools import cache
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from diag.analyze import Report, analyze_bundle
from diag.bundle.files import Bundle
from diag.report.json_report import render_json
from diag.report.markdown import render_markdown
from diag.report.terminal import print_report
from tests.fuzz.corpus import BUNDLES, bundle_files
from tests.fuzz.mutate import MUTATIONS, mutate
from tests.fuzz.profiles import scaled

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # all but \t and \n
_DETECTABLE = (".json", ".xml")  # formats whose every cut (but trailing blanks) breaks them


@cache
def baseline(bundle: Path) -> dict[str, str]:
    return {name: s.status for name, s in analyze_bundle(Bundle(dict(bundle_files(bundle)))).sources.items()}


Damage = tuple[str, str, int]  # (bundle path, mutation, seed): small enough to print and replay


@st.composite
def damage(draw: st.DrawFn) -> tuple[Path, list[Damage]]:
    bundle = draw(st.sampled_from(BUNDLES))
    names = draw(st.lists(st.sampled_from(sorted(bundle_files(bundle))), min_size=1, max_size=3, unique=True))
    return bundle, [(name, draw(st.sampled_from(sorted(MUTATIONS))), draw(st.integers(0, 2**32))) for name in names]


def damaged(bundle: Path, damages: list[Damage]) -> tuple[dict[str, bytes], list[tuple[str, str, bytes]]]:
    files = dict(bundle_files(bundle))
    changes = []
    for name, how, seed in damages:
        changes.append((name, how, files[name]))
        files[name] = mutate(files[name], how, seed)
    return files, changes


def render_all(report: Report) -> list[str]:
    console = Console(file=io.StringIO(), width=120, color_system=None)
    print_report(report, console)
    return [console.file.getvalue(), render_markdown(report), render_json(report)]  # type: ignore[attr-defined]


def check_invariants(bundle: Path, files: dict[str, bytes], changes: list[tuple[str, str, bytes]]) -> None:
    report = analyze_bundle(Bundle(files, origin=str(bundle)))
    for text in render_all(report):
        assert not _CONTROL.search(text), f"a raw control character in a report: {_CONTROL.search(text)!r}"
    json.loads(render_json(report))
    failed = sorted(name for name, s in report.sources.items() if s.status == "failed")
    assert not (report.verdict.status == "healthy" and failed), f"healthy with failed sources {failed}"
    before = baseline(bundle)
    for name, how, original in changes:
        cut = how == "truncate" and files[name].strip() != original.strip()
        if cut and name.endswith(_DETECTABLE) and before.get(name) == "ok":
            assert report.sources[name].status == "failed", (
                f"{name} cut to {len(files[name])} bytes reads as {report.sources[name]}"
            )


@scaled(60)
@given(damage())
def test_a_damaged_bundle_never_breaks_the_analysis(case: tuple[Path, list[Damage]]) -> None:
    bundle, damages = case
    check_invariants(bundle, *damaged(bundle, damages))


SMALL = [
    (b, n) for b in BUNDLES[:: max(1, len(BUNDLES) // 8)] for n, d in sorted(bundle_files(b).items()) if len(d) < 1500
]


@scaled(40)
@given(st.sampled_from(SMALL), st.data())
def test_a_small_file_cut_at_any_byte(pick: tuple[Path, str], data: st.DataObject) -> None:
    """Truncation at every byte of small files: hypothesis picks the byte, the long profile covers them all."""
    bundle, name = pick
    files = dict(bundle_files(bundle))
    original = files[name]
    files[name] = original[: data.draw(st.integers(0, max(0, len(original) - 1)))]
    check_invariants(bundle, files, [(name, "truncate", original)])
