"""JSON as the collectors write it. A Kubernetes list goes one item a line: `indent=` takes Python's
pure-Python encoder (several times slower than the C one on a fleet's pod list), and a
list written one item a line still reads item by item in `less` or `grep`. Any other document is
indented, as kubectl prints it."""

from __future__ import annotations

import json
from typing import Any


def dumps(document: Any, ensure_ascii: bool = True) -> str:
    items = document.get("items") if isinstance(document, dict) else None
    if not isinstance(items, list):
        return json.dumps(document, indent=4, ensure_ascii=ensure_ascii)
    return with_item_lines(document, [json.dumps(item, ensure_ascii=ensure_ascii) for item in items], ensure_ascii)


def with_item_lines(document: dict, lines: list[str], ensure_ascii: bool = True) -> str:
    """A list `document` laid out as `dumps` lays it out, its items given as their lines of JSON."""
    fields = []
    for key, value in document.items():  # in the document's own order: kubectl puts items second
        if key == "items":
            joined = ",\n".join(lines)
            text = f"[\n{joined}\n]" if lines else "[]"
        else:
            text = json.dumps(value, ensure_ascii=ensure_ascii)
        fields.append(f"{json.dumps(key, ensure_ascii=ensure_ascii)}: {text}")
    return "{" + ", ".join(fields) + "}"


def item_object(item: dict | bytes) -> dict:
    """A list's item as an object: a watched copy hands out some as their JSON text (diag/collect/watch.py)."""
    return json.loads(item) if isinstance(item, bytes) else item
