"""Where the time of one analysis went (`llmdiag analyze --profile`): its phases, the parsers by kind
of bundle file, and the rules, so that a slow rule or parser can be found by whoever runs it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Stopwatch:
    # Each rule is timed on each subject only when asked (--profile): at a fleet's size that is hundreds
    # of thousands of clock reads.
    times_rules: bool = False
    phases: dict[str, float] = field(default_factory=dict)
    parsers: dict[str, float] = field(default_factory=dict)  # file kind (its layout row) -> seconds
    rules: dict[str, float] = field(default_factory=dict)  # rule id -> seconds over all its subjects

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - started

    def add(self, table: dict[str, float], key: str, seconds: float) -> None:
        table[key] = table.get(key, 0.0) + seconds

    def lines(self, most: int = 10) -> list[str]:
        total = sum(self.phases.values()) or 1e-9
        out = [f"analysis: {total:.3f} s"]
        out += [f"  {name:<34} {s:8.3f} s {100 * s / total:5.1f} %" for name, s in self.phases.items()]
        for title, table in (("parsers (by file kind)", self.parsers), ("rules", self.rules)):
            out.append(f"slowest {title}:")
            ranked = sorted(table.items(), key=lambda item: item[1], reverse=True)[:most]
            out += [f"  {key:<34} {s:8.3f} s {100 * s / total:5.1f} %" for key, s in ranked]
        return out
