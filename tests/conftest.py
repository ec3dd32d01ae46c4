"""Prints the perturbation suite's counts (tests/rules/test_perturbation.py) at the end of a run, and the
fixtures tests of every folder share."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest


@pytest.fixture
def ctrl_c_interrupts() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt in the main thread, as in a terminal. A test run started in the
    background of a script (`cmd &`) inherits SIGINT ignored, and a SIGINT the test sends would do nothing."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    import sys

    for name, title in (("test_perturbation", "perturbations"), ("test_precision", "precision on healthy bundles")):
        module = sys.modules.get(f"tests.{name}") or sys.modules.get(name)
        tally = getattr(module, "TALLY", None)
        if not tally:
            continue
        terminalreporter.section(title)
        for outcome, count in sorted(tally.items()):
            terminalreporter.write_line(f"{count:6d}  {outcome}")
