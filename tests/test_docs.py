"""docs/rules.md is generated from rules/*.yaml; this keeps the committed page equal to the rules."""

from __future__ import annotations

from pathlib import Path

from diag.engine.catalogue import catalogue_markdown

ROOT = Path(__file__).resolve().parent.parent


def test_rule_catalogue_page_matches_the_rule_files() -> None:
    page = (ROOT / "docs" / "rules.md").read_text()
    assert page == catalogue_markdown([]), "regenerate it: llmdiag rules docs > docs/rules.md"
