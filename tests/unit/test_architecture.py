"""docs/architecture.md against the package tree and the import contract: it cannot go stale."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "architecture.md").read_text()


def _modules_in_tree() -> set[str]:
    return {
        str(p.relative_to(ROOT))
        for p in (ROOT / "diag").rglob("*.py")
        if p.name != "__init__.py" and "__pycache__" not in p.parts
    }


def test_every_module_is_named_and_every_named_module_exists() -> None:
    named = set(re.findall(r"`(diag/[\w/]+\.py)`", PAGE))
    assert sorted(_modules_in_tree() - named) == [], "name these in docs/architecture.md"
    assert sorted(n for n in named if not (ROOT / n).is_file()) == [], "docs/architecture.md names these, gone"


def test_the_floors_are_the_import_contracts_layers_in_its_order() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c["layers"] for c in contracts if c["type"] == "layers")
    table = PAGE[PAGE.index("## Floors") : PAGE.index("## Modules")]
    rows = [re.findall(r"`(diag/[\w/.]+)`", line) for line in table.splitlines() if re.match(r"\| \d+ \|", line)]

    def dotted(path: str) -> str:
        return path.removesuffix(".py").rstrip("/").replace("/", ".")

    assert [" | ".join(dotted(p) for p in row) for row in rows] == layers
    packages = {p.name for p in (ROOT / "diag").iterdir() if (p / "__init__.py").is_file()}
    assert packages == {dotted(p).split(".")[1] for row in rows for p in row if p.endswith("/")}


def test_tests_live_in_one_place_by_one_rule() -> None:
    """No test inside the package; tests/unit/<package>/ only for packages that exist."""
    assert sorted(str(p.relative_to(ROOT)) for p in (ROOT / "diag").rglob("test_*.py")) == []
    packages = {p.name for p in (ROOT / "diag").iterdir() if (p / "__init__.py").is_file()}
    folders = {p.name for p in (ROOT / "tests" / "unit").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders <= packages
