"""A fixture bundle with the names of its first scheduled pod (its namespace, its name, its containers'
names and its node's name) swapped, everywhere they are a whole value or a whole part of a file's path,
for names an attacker could give: shell substitutions, backticks, `;`, quotes, line breaks."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from diag.bundle.files import Bundle

MARK = "PWNED"
PAYLOADS = (
    f"$(touch {MARK})",
    f"`touch {MARK}`",
    f";touch {MARK};",
    f"'\"{MARK}",
    f"\ntouch {MARK}\n",
    f" && touch {MARK} #",
)


def hostile_bundle(folder: Path, payload: str) -> Bundle | None:
    """None when the fixture has no scheduled pod to rename."""
    bundle = Bundle.open(folder)
    try:
        pods = json.loads(bundle.files["k8s/pods.json"])["items"]
        pod = next(p for p in pods if p.get("spec", {}).get("nodeName"))
    except (KeyError, ValueError, StopIteration):
        return None
    names = {pod["metadata"]["namespace"], pod["metadata"]["name"], pod["spec"]["nodeName"]}
    names |= {c["name"] for c in pod["spec"].get("containers", [])}
    swap = {name: f"{name}{payload}" for name in names}
    files = {}
    for rel, data in bundle.files.items():
        if rel.endswith(".json"):
            try:
                data = json.dumps(_swapped(json.loads(data), swap)).encode()
            except ValueError:
                pass
        files[re.sub(r"[^/_.]+", lambda m: swap.get(m.group(), m.group()), rel)] = data
    return Bundle(files, origin=f"{folder.name} with hostile names", refused=dict(bundle.refused))


def _swapped(value: Any, swap: dict[str, str]) -> Any:
    if isinstance(value, str):
        return swap.get(value, value)
    if isinstance(value, dict):
        return {k: _swapped(v, swap) for k, v in value.items()}
    if isinstance(value, list):
        return [_swapped(v, swap) for v in value]
    return value


def outside_single_quotes(line: str, needle: str) -> list[int]:
    """Where `needle` starts in `line` outside a single-quoted string, as a POSIX shell reads the line
    (backslash escapes outside quotes and in double quotes; a `#` starting a word begins a comment,
    which ends at the line's end like the rest)."""
    found, state, i = [], "plain", 0
    while i < len(line):
        c = line[i]
        if state == "single":
            state = "plain" if c == "'" else state
        elif c == "\\":
            i += 1
        elif state == "double":
            state = "plain" if c == '"' else state
        elif c == "'":
            state = "single"
        elif c == '"':
            state = "double"
        if state != "single" and line.startswith(needle, i):
            found.append(i)
        i += 1
    return found
