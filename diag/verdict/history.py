"""Faults that are past the history window: not today's incident, but worth a line in the report.

A rule that fires when every event, termination and Ray death counts as current, and stays silent
when only those within the window count, found something that is history: a pod OOMKilled ten days
ago and Running since. Each such finding becomes one history item, dated by the newest aged item on
its subject (the subject facts' `_aged` entries).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from diag.engine.rules import Finding, Rule, evaluate
from diag.facts import Facts
from diag.facts.common import pod_window_times
from diag.facts.history_pass import without_window
from diag.snapshot.clock import Clock, age_text, iso
from diag.snapshot.model import Snapshot


@dataclass
class HistoryItem:
    rule: str
    subject: str
    what: str  # the rule's title
    when: str | None  # the newest aged item on the subject
    age_seconds: float | None
    items: list[str] = field(default_factory=list)  # the aged events, terminations, deaths themselves

    def as_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "subject": self.subject,
            "what": self.what,
            "when": self.when,
            "age": age_text(self.age_seconds),
            "age_seconds": self.age_seconds,
            "items": self.items,
        }


@dataclass
class History:
    clock: Clock
    items: list[HistoryItem] = field(default_factory=list)

    @property
    def ages_known(self) -> bool:
        return self.clock.now is not None

    def clock_dict(self) -> dict[str, Any]:
        return {
            "collected_at": iso(self.clock.now) if self.clock.now else None,
            "source": self.clock.source,
            "window_s": self.clock.window_s,
            "ages_known": self.ages_known,
        }

    def note(self) -> str | None:
        """One line for the reports when ages could not be computed; None when they could."""
        if self.ages_known:
            return None
        return (
            "ages could not be computed (no manifest.json collected_at, no timestamp in the bundle): "
            "every event, termination and Ray death was counted as current"
        )

    def heading(self) -> str:
        window = age_text(self.clock.window_s) if self.clock.window_s is not None else "no window"
        return (
            f"History: older than {window} at collection "
            f"({iso(self.clock.now) if self.clock.now else '?'}), not counted as current faults"
        )


_WINDOW_FACT = "history_window_s"  # the one cluster fact that always differs between the two passes


def find_history(
    snap: Snapshot,
    clock: Clock,
    facts: Facts,
    current: list[Finding],
    rules: list[Rule],
    settings: dict[str, Any],
    keep: Callable[[list[Finding]], list[Finding]],
) -> History:
    """`facts` and `current` are the windowed facts and the findings kept from them; `keep` applies
    the user's suppressions and severity floor, so history shows what the report would have shown."""
    history = History(clock)
    if clock.now is None or clock.window_s is None or all(clock.current(t) for t in _windowed_times(snap)):
        return history  # nothing is old enough to be history: the second pass would find the same
    unwindowed = keep(
        evaluate(rules, _changed(facts, without_window(snap, facts, clock.without_window())), settings).findings
    )
    fired = {(f.rule, f.subject) for f in current}
    aged = {s["_subject"]: s.get("_aged", []) for subjects in facts.scopes.values() for s in subjects}
    for f in unwindowed:
        if (f.rule, f.subject) in fired:
            continue
        items = aged.get(f.subject, [])
        newest = min(items, key=lambda i: i["age_seconds"], default=None)
        history.items.append(
            HistoryItem(
                rule=f.rule,
                subject=f.subject,
                what=f.title,
                when=newest["when"] if newest else None,
                age_seconds=newest["age_seconds"] if newest else None,
                items=[i["what"] for i in items],
            )
        )
    return history


def _changed(windowed: Facts, unwindowed: Facts) -> Facts:
    """The subjects whose facts the window changed (and the cluster): the others give the findings
    the report already has, so evaluating them again would only cost time."""
    cluster_alike = {k: v for k, v in windowed.cluster.items() if k != _WINDOW_FACT} == {
        k: v for k, v in unwindowed.cluster.items() if k != _WINDOW_FACT
    }
    if not cluster_alike:  # rules of any scope may read what changed there
        return unwindowed
    scopes: dict[str, list[dict]] = {}
    for scope, subjects in unwindowed.scopes.items():
        before = windowed.scopes.get(scope, [])
        if scope == "cluster" or len(before) != len(subjects):
            scopes[scope] = subjects
        else:
            scopes[scope] = [new for new, old in zip(subjects, before, strict=True) if new != old]
    return Facts(scopes=scopes, cluster=unwindowed.cluster)


def _windowed_times(snap: Snapshot) -> Iterator[str]:
    """The times the facts judge by the window: events, container terminations, Ray deaths."""
    yield from (e.last_seen for e in snap.events if e.last_seen)
    for pod in snap.pods:
        yield from pod_window_times(pod)
    yield from (n.end_time for n in snap.ray_nodes if n.end_time)
    yield from (a.end_time for a in snap.ray_actors if a.end_time)
