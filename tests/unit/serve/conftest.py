"""Reports of real fixture bundles, made by the one analysis path, for the serve tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from diag.analyze import Report, analyze_bundle
from diag.bundle.files import Bundle

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"


@pytest.fixture(scope="session")
def fault_report() -> Report:
    return analyze_bundle(Bundle.open(FIXTURES / "demo"))


@pytest.fixture(scope="session")
def healthy_report() -> Report:
    return analyze_bundle(Bundle.open(FIXTURES / "busy-but-healthy"))
