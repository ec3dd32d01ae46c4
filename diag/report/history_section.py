"""The history section every report format shows: faults past the window, or why ages are unknown."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from diag.analyze import Report
from diag.report.safe import code, md, plain
from diag.verdict.history import HistoryItem

if TYPE_CHECKING:
    from rich.console import Console

MAX_ITEMS_SHOWN = 3  # aged events / terminations / deaths listed under one history line


def json_fields(report: Report) -> dict[str, Any]:
    """Top-level additions to the JSON report: `history` (a list) and `clock`."""
    if report.history is None:
        return {}
    return {"history": [item.as_dict() for item in report.history.items], "clock": report.history.clock_dict()}


def markdown_lines(report: Report) -> list[str]:
    history = report.history
    if history is None:
        return []
    if (note := history.note()) is not None:
        return [f"_Ages: {md(note)}._", ""]
    if not history.items:
        return []
    lines = [f"## {md(history.heading())}", ""]
    for item in history.items:
        lines.append(f"- {code(item.rule)} {md(item.what)} — {code(item.subject)}, {md(_when(item))}")
        lines += [f"  - {md(text)}" for text in item.items[:MAX_ITEMS_SHOWN]]
    return lines + [""]


def print_section(report: Report, console: Console) -> None:

    from rich.text import Text  # the terminal's only: a JSON report never loads rich

    history = report.history
    if history is None:
        return
    if (note := history.note()) is not None:
        console.print(Text.assemble(("Ages", "yellow"), f": {plain(note)}"))
        return
    if not history.items:
        return
    console.print(Text.assemble("\n", (plain(history.heading()), "bold")))
    for item in history.items:
        console.print(
            Text(f"  {plain(item.rule)} {plain(item.what)} — {plain(item.subject)}, {plain(_when(item))}", style="dim")
        )
        for text in item.items[:MAX_ITEMS_SHOWN]:
            console.print(Text(f"    {plain(text)}", style="dim"))


def _when(item: HistoryItem) -> str:
    return f"{item.as_dict()['age']} before collection ({item.when})" if item.when else "time of the aged item unknown"
