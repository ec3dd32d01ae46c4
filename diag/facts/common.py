"""Helpers shared by the per-layer fact builders."""

from __future__ import annotations

import dataclasses
from typing import Any

from diag.model import Event


def plain(obj: Any, drop: tuple[str, ...] = ()) -> dict:
    """A dataclass as a dict of plain values (what CEL can read), without the named fields."""
    data = dataclasses.asdict(obj)
    for name in drop:
        data.pop(name, None)
    return data


def event_facts(events: list[Event]) -> list[dict]:
    return [
        {"reason": e.reason, "message": e.message, "type": e.type, "count": e.count, "last_seen": e.last_seen, "source": e.source}
        for e in events
    ]


def link(kind: str, name: str | None) -> list[str]:
    return [f"{kind}:{name}"] if name else []
