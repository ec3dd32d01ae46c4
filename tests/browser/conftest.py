"""Debian's Chromium (and axe-core, which .ci/run installs under /opt/llmdiag-axe) for the HTML report's
tests. Without them the tests skip with the reason, or fail under LLMDIAG_REQUIRE_LIVE=1 (CI)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

import pytest
from cdp import BrowserMissing, Chromium

from diag.analyze import Report, analyze_bundle
from diag.bundle.files import Bundle
from diag.report.html_report import render_html

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _absent(why: Exception) -> NoReturn:
    if os.environ.get("LLMDIAG_REQUIRE_LIVE") == "1":
        pytest.fail(f"{why} (LLMDIAG_REQUIRE_LIVE=1)", pytrace=False)
    pytest.skip(str(why))


@pytest.fixture(scope="session")
def browser() -> Iterator[Chromium]:
    try:
        chromium = Chromium()
    except BrowserMissing as e:
        _absent(e)
    try:
        yield chromium
    finally:
        chromium.close()


@pytest.fixture
def axe(browser: Chromium) -> Callable[[], list[dict]]:
    def run() -> list[dict]:
        try:
            return browser.axe()
        except BrowserMissing as e:
            _absent(e)

    return run


@pytest.fixture(scope="session")
def report_page(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., tuple[Report, Path]]:
    """A fixture's (or a given bundle's) report, and its HTML written to a file."""
    folder = tmp_path_factory.mktemp("html")

    def write(name: str, bundle: Bundle | None = None) -> tuple[Report, Path]:
        report = analyze_bundle(bundle or Bundle.open(FIXTURES / name))
        path = folder / f"{name}.html"
        path.write_text(render_html(report), encoding="utf-8")
        return report, path

    return write
