"""Prints the perturbation suite's counts (tests/test_perturbation.py) at the end of a run."""

from __future__ import annotations


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    import sys

    module = sys.modules.get("tests.test_perturbation") or sys.modules.get("test_perturbation")
    tally = getattr(module, "TALLY", None)
    if not tally:
        return
    terminalreporter.section("perturbations")
    for outcome, count in sorted(tally.items()):
        terminalreporter.write_line(f"{count:6d}  {outcome}")
