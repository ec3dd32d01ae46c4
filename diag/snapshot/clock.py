"""When the bundle was collected, and how old each timestamped thing in it was at that moment.

The collection time is manifest.json's `collected_at` when the bundle has one, else the newest
timestamp found in the bundle (a lower bound: ages read from it can only be too small, so nothing
turns into history by mistake), else unknown. An age is unknown when the collection time or the
item's own time is; an item of unknown age counts as current, as if there were no window at all.

Times without a zone (Ray's humanised `ray list --detail` times, `ray status`'s header) are read as UTC.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

from diag.snapshot.model import Snapshot

MANIFEST_SOURCE = "manifest.json collected_at"
BUNDLE_SOURCE = "the newest timestamp in the bundle"
# Python 3.11 reads at most 6 fractional digits; Kubernetes and Ray may write up to 9.
_LONG_FRACTION = re.compile(r"(\.\d{6})\d+")


def parse_time(value: str | float | int | None) -> datetime | None:
    """An RFC 3339 / ISO 8601 text or unix seconds as an aware UTC datetime; None when unreadable."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        try:
            return datetime.fromtimestamp(value, tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            return None
    return _parsed_text(value) if isinstance(value, str) else None


@functools.lru_cache(maxsize=1 << 16)  # a fleet's events share their seconds: each is aged several times
def _parsed_text(value: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(_LONG_FRACTION.sub(r"\1", value.strip()))
    except ValueError:
        return None
    return parsed.replace(tzinfo=timezone.utc) if parsed.tzinfo is None else parsed.astimezone(timezone.utc)


def iso(value: datetime) -> str:
    return value.isoformat(timespec="seconds").replace("+00:00", "Z")


def iso_time(unix_seconds: float) -> str:
    return iso(datetime.fromtimestamp(unix_seconds, tz=timezone.utc))


@dataclass(frozen=True)
class Clock:
    """The collection time and the window within which a timestamped fault counts as current.

    `window_s` None: no window, everything counts as current (the facts as they were before ages).
    """

    now: datetime | None
    source: str
    window_s: float | None = None
    # age by time text: a fleet's facts age each of its 50,000 events several times
    _ages: dict[str, float | None] = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def of(cls, snap: Snapshot, window_s: float | None = None) -> Clock:
        collected = parse_time(snap.manifest.get("collected_at")) if isinstance(snap.manifest, dict) else None
        if collected is not None:
            return cls(collected, MANIFEST_SOURCE, window_s)
        newest = max((t for t in map(parse_time, bundle_times(snap)) if t is not None), default=None)
        return cls(newest, BUNDLE_SOURCE if newest else "none", window_s)

    def without_window(self) -> Clock:
        return replace(self, window_s=None)

    def age(self, when: str | float | None) -> float | None:
        """Seconds between `when` and the collection; a time after the collection (clock skew) is age 0."""
        if type(when) is str and when in self._ages:
            return self._ages[when]
        moment = parse_time(when)
        age = None if moment is None or self.now is None else max(0.0, (self.now - moment).total_seconds())
        if type(when) is str:
            self._ages[when] = age
        return age

    def recent(self, when: str | float | None) -> bool | None:
        """Within the window; None when the age is unknown."""
        age = self.age(when)
        if age is None:
            return None
        return self.window_s is None or age <= self.window_s

    def current(self, when: str | float | None) -> bool:
        """Counts as today's: recent, or of unknown age."""
        return self.recent(when) is not False


def bundle_times(snap: Snapshot) -> Iterator[str | float]:
    """Every time the bundle's data carries, for a collection time when the manifest gives none."""
    for event in snap.events:
        if event.last_seen:
            yield event.last_seen
    for pod in snap.pods:
        for c in pod.containers + pod.init_containers:
            yield from (t for t in (c.started_at, c.finished_at, c.last_finished_at) if t)
    for node in snap.ray_nodes:
        yield from (t for t in (node.start_time, node.end_time) if t)
    yield from (a.end_time for a in snap.ray_actors if a.end_time)
    if snap.ray_status is not None and snap.ray_status.timestamp:
        yield snap.ray_status.timestamp
    for server in snap.vllm_servers:
        yield from (s.taken_at for s in server.scrapes if s.taken_at is not None)
    for result in snap.prometheus:
        for series in result.series:
            yield from (t for t, _ in series.values)


def age_text(seconds: float | None) -> str:
    """An age the way a person says it: 45s, 12m, 3h 5m, 10d 2h."""
    if seconds is None:
        return "age unknown"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60}m" if s % 3600 // 60 else f"{s // 3600}h"
    return f"{s // 86400}d {s % 86400 // 3600}h" if s % 86400 // 3600 else f"{s // 86400}d"


_DURATION = re.compile(r"^\s*(?:\d+(?:\.\d+)?(?:ms|s|m|h|d|w))+\s*$|^\s*\d+(?:\.\d+)?\s*$")
_DURATION_PART = re.compile(r"(?P<n>\d+(?:\.\d+)?)(?P<unit>ms|s|m|h|d|w)?")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str, what: str = "the window") -> float:
    """`30m`, `1h`, `2d`, `90s`, `1w`, kubectl's compound `1h30m` or `2m30s`, `500ms`, or plain seconds, in
    seconds; ValueError with one line otherwise (`what` names the duration in it)."""
    if _DURATION.match(text) is None:
        raise ValueError(f"{text!r} is not a duration (use e.g. 30m, 1h30m, 2d)")
    seconds = sum(float(m["n"]) * _UNIT_SECONDS[m["unit"] or "s"] for m in _DURATION_PART.finditer(text))
    if seconds <= 0:
        raise ValueError(f"{text!r}: {what} must be longer than 0")
    return seconds
