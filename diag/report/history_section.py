"""The history section every report format shows: faults past the window, or why ages are unknown."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from diag.analyze import Report
from diag.history import HistoryItem

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
        return [f"_Ages: {note}._", ""]
    if not history.items:
        return []
    lines = [f"## {history.heading()}", ""]
    for item in history.items:
        lines.append(f"- `{item.rule}` {item.what} — `{item.subject}`, {_when(item)}")
        lines += [f"  - {text}" for text in item.items[:MAX_ITEMS_SHOWN]]
    return lines + [""]


def print_section(report: Report, console: Console) -> None:
    history = report.history
    if history is None:
        return
    if (note := history.note()) is not None:
        console.print(f"[yellow]Ages[/]: {escape(note)}", highlight=False)
        return
    if not history.items:
        return
    console.print(f"\n[bold]{escape(history.heading())}[/]", highlight=False)
    for item in history.items:
        console.print(f"  {item.rule} {escape(item.what)} — {escape(item.subject)}, {escape(_when(item))}", style="dim", highlight=False)
        for text in item.items[:MAX_ITEMS_SHOWN]:
            console.print(f"    {escape(text)}", style="dim", highlight=False)


def _when(item: HistoryItem) -> str:
    return f"{item.as_dict()['age']} before collection ({item.when})" if item.when else "time of the aged item unknown"
