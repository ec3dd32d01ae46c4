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
    fields = []
    for key, value in document.items():  # in the document's own order: kubectl puts items second
        if key == "items":
            lines = ",\n".join(json.dumps(item, ensure_ascii=ensure_ascii) for item in items)
            text = f"[\n{lines}\n]" if items else "[]"
        else:
            text = json.dumps(value, ensure_ascii=ensure_ascii)
        fields.append(f"{json.dumps(key, ensure_ascii=ensure_ascii)}: {text}")
    return "{" + ", ".join(fields) + "}"
