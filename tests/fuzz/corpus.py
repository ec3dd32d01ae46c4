"""The fixture bundles as a fuzzing corpus: every bundle's files, and every file by the parser it feeds."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from diag.bundle.files import Bundle

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
BUNDLES = sorted(p.parent for p in FIXTURES.rglob("expected.json"))
_NOT_BUNDLE_FILES = ("expected.json", "SOURCE.md", "README.md")


@cache
def bundle_files(bundle: Path) -> dict[str, bytes]:
    return {name: data for name, data in Bundle.open(bundle).files.items() if not name.endswith(_NOT_BUNDLE_FILES)}


@cache
def files_named(suffix: str, limit: int = 40) -> tuple[bytes, ...]:
    """Distinct fixture files whose bundle path ends with `suffix` (at most `limit`, smallest first)."""
    found = {data for bundle in BUNDLES for name, data in bundle_files(bundle).items() if name.endswith(suffix)}
    return tuple(sorted(found, key=len)[:limit])
