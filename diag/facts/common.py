"""Helpers shared by the per-layer fact builders."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Iterator
from typing import Any

from diag.snapshot.clock import Clock
from diag.snapshot.model import JSON_ONLY, Event, Pod


def plain(obj: Any, drop: tuple[str, ...] = ()) -> dict:
    """A dataclass as a dict of plain values (what CEL can read), without the named fields. The same as
    dataclasses.asdict (tests/unit/facts/test_facts_common.py), many times faster: a fleet makes
    hundreds of thousands."""
    copy = _COPIES.get((type(obj), drop))
    if copy is None:
        copy = _COPIES[(type(obj), drop)] = _copy_of(type(obj), drop)
    return copy(obj)


_COPIES: dict[tuple[type, tuple[str, ...]], Callable[[Any], dict]] = {}


def _copy_of(cls: type, drop: tuple[str, ...]) -> Callable[[Any], dict]:
    """A function that copies the fields of `cls` outside `drop` into a dict, written for the class as
    dataclasses writes its __init__ (a loop over the fields, a getattr each, took twice as long). A
    value of the field's declared scalar type is kept as it is, any other goes through its copier."""
    namespace: dict[str, Any] = {"SCALARS": _SCALARS}
    items = []
    for name, copier in _copiers_of(cls):
        if name in drop:
            continue
        if copier is _shared:
            items.append(f"{name!r}: obj.{name}")
        else:
            namespace[f"copy_{name}"] = copier
            items.append(f"{name!r}: (v if type(v := obj.{name}) in SCALARS else copy_{name}(v))")
    # field names are identifiers (dataclasses checks them), so the source is made of them alone
    exec(f"def copy(obj):\n    return {{{', '.join(items)}}}", namespace)
    return namespace["copy"]


def _copiers_of(cls: type) -> tuple[tuple[str, Callable[[Any], Any]], ...]:
    """Each field with what copies it: by its declared type, a value of JSON types only (the model's
    `JsonOnly`: affinity, volumes ...) is shared as it is; a map or list of scalars (labels, a command
    line) is copied in one call; anything else goes value by value."""
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception:  # a type not resolvable here: copied value by value
        hints = {}
    return tuple((f.name, _copier(hints.get(f.name))) for f in dataclasses.fields(cls))


_SCALAR_TYPES = (str, int, float, bool, type(None))


def _shared(value: Any) -> Any:
    return value


def _copier(hint: Any) -> Callable[[Any], Any]:
    if typing.get_origin(hint) is typing.Annotated:
        if JSON_ONLY in hint.__metadata__:
            return _shared
        hint = typing.get_args(hint)[0]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (dict, list) and args and all(a in _SCALAR_TYPES for a in args):
        flat = dict if origin is dict else list
        return lambda v: flat(v) if type(v) is flat else _plain_value(v)
    if (
        origin is dict
        and len(args) == 2
        and args[0] is str
        and typing.get_origin(args[1]) is list
        and all(a in _SCALAR_TYPES for a in typing.get_args(args[1]))
    ):  # log signals: name -> lines
        return lambda v: (
            {k: list(x) if type(x) is list else _plain_value(x) for k, x in v.items()}
            if type(v) is dict
            else _plain_value(v)
        )
    return _plain_value


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
            "reason": e.reason,
            "message": e.message,
            "type": e.type,
            "count": e.count,
            "last_seen": e.last_seen,
            "source": e.source,
            "age_seconds": clock.age(e.last_seen),
            "recent": clock.recent(e.last_seen),
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
