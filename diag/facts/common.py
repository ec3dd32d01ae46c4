"""Helpers shared by the per-layer fact builders."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from diag.clock import Clock
from diag.model import Event, Pod


def plain(obj: Any, drop: tuple[str, ...] = ()) -> dict:
    """A dataclass as a dict of plain values (what CEL can read), without the named fields. The same as
    dataclasses.asdict (tests/test_facts_common.py), six times faster: a fleet makes hundreds of thousands."""
    names = _FIELD_NAMES.get(type(obj))
    if names is None:
        names = _FIELD_NAMES[type(obj)] = tuple(f.name for f in dataclasses.fields(obj))
    values = ((name, getattr(obj, name)) for name in names if name not in drop)
    return {name: v if type(v) in _SCALARS else _plain_value(v) for name, v in values}


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _plain_value(value: Any) -> Any:
    # dataclasses.asdict would convert (and copy) a dropped field before dropping it: a server's scrapes
    # are most of an analysis' time that way. Exact types first, and scalars kept without a call: a
    # fleet's facts hold millions of values.
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is list:
        return [v if type(v) in _SCALARS else _plain_value(v) for v in value]
    if kind is dict:
        return {k: v if type(v) in _SCALARS else _plain_value(v) for k, v in value.items()}
    return plain(value) if dataclasses.is_dataclass(value) else _copy(value)


def _copy(value: Any) -> Any:
    if isinstance(value, list):
        return [_plain_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain_value(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_plain_value(v) for v in value)
    return value


def event_facts(events: list[Event], clock: Clock) -> list[dict]:
    """Every event, with its age at collection and whether it falls inside the history window
    (`recent` null when its age is unknown)."""
    return [
        {
            "reason": e.reason, "message": e.message, "type": e.type, "count": e.count, "last_seen": e.last_seen,
            "source": e.source, "age_seconds": clock.age(e.last_seen), "recent": clock.recent(e.last_seen),
        }
        for e in events
    ]


def current_events(events: list[Event], clock: Clock) -> list[Event]:
    """The events that count as today's: seen within the window, or of unknown age."""
    return [e for e in events if clock.current(e.last_seen)]


def pod_window_times(pod: Pod) -> Iterator[str]:
    """The times of a pod that its facts judge by the history window: its events', its containers' ends."""
    yield from (e.last_seen for e in pod.events if e.last_seen)
    for c in pod.containers + pod.init_containers:
        yield from (t for t in (c.finished_at, c.last_finished_at) if t)


def aged(what: str, when: str | None, clock: Clock) -> list[dict]:
    """One `_aged` entry (something that would be a fault but is past the window), or none."""
    return [{"what": what, "when": when, "age_seconds": clock.age(when)}] if not clock.current(when) else []


def aged_events(events: list[Event], clock: Clock) -> list[dict]:
    """The Warning events past the window, for the report's history."""
    return [e for ev in events if ev.type == "Warning" for e in aged(f"{ev.reason}: {ev.message}", ev.last_seen, clock)]


def link(kind: str, name: str | None) -> list[str]:
    return [f"{kind}:{name}"] if name else []
