"""When a condition held in a subject's Prometheus history: runs of samples, dated and timed.

A rule about the KV cache or a hang reads one fact whether the scrapes or the history showed it; the
history adds when it started, how long it lasted and whether it was still going on at collection.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from diag.snapshot.clock import Clock, age_text, iso_time
from diag.snapshot.model import History

Values = dict[str, float]  # one time's values, by the name the caller gave each stem


@dataclass(frozen=True)
class Span:
    """Consecutive samples where a condition held."""

    samples: list[tuple[float, Values]]
    step: float
    ongoing: bool  # it held at the newest sample, and that sample is the window's last

    @property
    def start(self) -> float:
        return self.samples[0][0]

    @property
    def end(self) -> float:
        return self.samples[-1][0]

    @property
    def minutes(self) -> float:
        return round((self.end - self.start + self.step) / 60, 1)

    def values(self, name: str) -> list[float]:
        return [v[name] for _, v in self.samples if name in v]

    def facts(self, clock: Clock) -> dict:
        return {
            "from": iso_time(self.start),
            "until": iso_time(self.end),
            "minutes": self.minutes,
            "ongoing": self.ongoing,
            "when": self.when(clock),
        }

    def exact(self, clock: Clock) -> str:
        """The first and last sample where it held, to the second: what a test can hold to the series."""
        count = len(self.samples)
        span = f"{_clock_time(self.start, seconds=True)} to {_clock_time(self.end, seconds=True)} UTC"
        samples = f"{count} samples {self.step:g} s apart" if count > 1 else "one sample"
        if self.ongoing:
            return f"from {span} ({samples}, {self.minutes:g} min), still going on at collection"
        ended = clock.age(self.end + self.step)
        return f"from {span} ({samples}, {self.minutes:g} min), ended {age_text(ended)} before collection"

    def when(self, clock: Clock) -> str:
        start, end = _clock_time(self.start), _clock_time(self.end + self.step)
        if self.ongoing:
            return f"since {start} UTC ({self.minutes:g} min), still going on at collection"
        ended = clock.age(self.end + self.step)
        return f"from {start} to {end} UTC ({self.minutes:g} min), ended {age_text(ended)} before collection"


@dataclass(frozen=True)
class Timeline:
    """A subject's histories side by side, on the sample times Prometheus answered with."""

    rows: list[tuple[float, Values]]
    step: float
    window_end: float | None

    @classmethod
    def of(cls, history: History, stems: dict[str, tuple[str, ...]], step: float, window_end: float | None) -> Timeline:
        """`stems`: a name for each signal -> the stems that can hold it, first with data wins (old and new
        vLLM names)."""
        by_time: dict[float, Values] = {}
        for name, candidates in stems.items():
            points = next((history[s] for s in candidates if history.get(s)), [])
            for t, value in points:
                by_time.setdefault(t, {})[name] = value
        return cls(sorted(by_time.items()), step, window_end)

    def with_rising(self, name: str, lookback_s: float) -> Timeline:
        """A copy with `<name>_rising`: the value is the highest of the last `lookback_s` and above their
        lowest, so a queue that climbs holds it and one that merely stays long or swings does not."""
        rows: list[tuple[float, Values]] = []
        for i, (t, values) in enumerate(self.rows):
            before = [v[name] for u, v in self.rows[:i] if name in v and t - lookback_s <= u < t]
            if name in values and before:
                values = values | {f"{name}_rising": float(values[name] >= max(before) and values[name] > min(before))}
            rows.append((t, values))
        return Timeline(rows, self.step, self.window_end)

    def has(self, name: str) -> bool:
        return any(name in values for _, values in self.rows)

    def spans(self, holds: Callable[[Values], bool | None], min_minutes: float) -> list[Span]:
        """Runs of samples where `holds` is true, at least `min_minutes` long; a sample where it cannot
        be told (a value missing) ends a run."""
        spans: list[Span] = []
        run: list[tuple[float, Values]] = []
        last_time = self.rows[-1][0] if self.rows else None
        for t, values in [*self.rows, (float("inf"), {})]:
            if run and (t - run[-1][0] > 1.5 * self.step or holds(values) is not True):
                ongoing = run[-1][0] == last_time and self.at_window_end(run[-1][0])
                span = Span(run, self.step, ongoing)
                if span.minutes >= min_minutes:
                    spans.append(span)
                run = []
            if t != float("inf") and holds(values) is True:
                run.append((t, values))
        return spans

    def at_window_end(self, t: float) -> bool:
        return self.window_end is None or t >= self.window_end - 2 * self.step


def _clock_time(t: float, seconds: bool = False) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")
