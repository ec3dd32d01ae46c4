"""The triages `llmdiag serve` runs: on a schedule, and for alerts; each kept with what it answers.

A triage is `llmdiag triage`'s own: `collect_live` then `analyze_bundle`; the Kubernetes lists come
from copies that watches keep current between cycles (diag/collect/watch.py), unless `watch` is off.
Every triage is bounded by the cycle deadline (the collection's whole timeout, and each source's, are
held under it): a source that hangs is that source's failed line at the deadline, and the next cycle
starts on time. Cycles start on a fixed grid (`every`); a tick that finds the previous scheduled cycle
still running is counted skipped, never queued behind it. Collections may run side by side (a
scheduled one and an alert's); the analyses take turns, so at most one analysis' memory is held at a
time. Each analysis runs in a child process forked for it (diag/serve/child.py), which answers
with the report rendered: its memory goes with the child. The process runs with Python's cyclic
collector off, as every command does (diag/cli.py): after each triage one collection frees what it
left in cycles. Left on, the collector walked the watched copies and the analysis' objects again and
again during each triage (bench/serve.md). That collection looks only at the objects made since the
one before (young generations); every FULL_COLLECTION_EVERY-th looks at all of them, for a cycle of
long-lived objects that has become garbage: walking the copies and what was made of their items took
a fifth of a fleet's cycle.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diag.analyze import Report, analyze_bundle, compile_rules
from diag.collect.base import Target
from diag.collect.redact import redact_text
from diag.collect.runner import collect_live
from diag.collect.watch import WarmLists
from diag.engine.config import Config
from diag.report.json_report import render_json
from diag.report.markdown import render_markdown
from diag.serve import child, memory, metrics, notify
from diag.serve.alerts import Alert, Gate, scope_of, scoped_target, service_selector
from diag.serve.store import ReportStore, new_id

log = logging.getLogger("llmdiag.serve")
ALERT_QUEUE = 16  # alert triages waiting; past it an alert is counted queue_full and may ask again
# Each source's timeout is at most this share of the deadline. A server that accepts and never answers
# costs its collector three reads one after another (vLLM's /metrics, /health, /v1/models): they must
# time out inside the deadline, so that the gap names that server. A collector the deadline cuts says
# only that it was cut, and the results of its other sources go with it.
SOURCE_SHARE = 4
FULL_COLLECTION_EVERY = 10  # triages


@dataclass
class Settings:
    every_s: float
    deadline_s: float
    target: Target
    config: Config
    rule_dirs: list[Path] = field(default_factory=list)
    alert_limit: tuple[int, float] = (6, 600.0)
    watch: bool = True  # keep the Kubernetes lists current with watches between cycles
    notify_url: str | None = None
    external_url: str = ""  # where /reports/<id> is reachable, for the webhook's message
    html: bool = False  # keep each report's HTML page too (needs matplotlib)


Triage = Callable[[Target], Report]


@dataclass(frozen=True)
class Rendered:
    """A report as the server keeps it: what /metrics and the listing read, and its bodies."""

    summary: dict[str, Any]
    json: str
    markdown: str
    html: str | None


class Service:
    def __init__(self, settings: Settings, store: ReportStore, triage: Triage | None = None) -> None:
        self.settings = settings
        self.store = store
        self.counters = metrics.Counters()
        self._triage: Callable[[Target], Rendered] = (
            (lambda target: self._rendered(triage(target))) if triage else self._collect_and_analyze
        )
        self.warm = WarmLists() if settings.watch else None
        self._analysis = threading.Lock()
        self._scheduled_running = threading.Event()
        self._alerts: queue.Queue[tuple[dict[str, str], list[Alert]]] = queue.Queue(ALERT_QUEUE)
        self._stop = threading.Event()
        self.last_tick: float | None = None  # monotonic time the schedule loop last ran
        self._triages = 0
        self.ready = threading.Event()
        # a restart triages no alert again that a kept report answers, nor one firing again after a fault
        answered = [(meta, a) for meta in reversed(store.listing()) for a in meta.get("alerts", [])]
        self.gate = Gate(
            *settings.alert_limit,
            seen={(a["fingerprint"], a["startsAt"]) for _, a in answered},
            faulted_ago={
                a["fingerprint"]: time.time() - meta["started_at"]
                for meta, a in answered
                if meta["verdict"]["status"] == "fault"
            },
        )

    # ------------------------------------------------------------------ the one triage

    def _bounded(self, target: Target) -> Target:
        deadline = self.settings.deadline_s
        return dataclasses.replace(
            target,
            total_timeout_s=min(target.total_timeout_s, deadline),
            source_timeout_s=min(target.source_timeout_s, deadline / SOURCE_SHARE),
        )

    def _collect_and_analyze(self, target: Target) -> Rendered:
        bundle = collect_live(target, warm=self.warm)
        if not child.FORKS:  # joining the pods changes them: those the copies made stay as they are
            bundle.parsed.clear()
        config, rule_dirs = self.settings.config, self.settings.rule_dirs
        with self._analysis:
            return child.run(lambda: self._rendered(analyze_bundle(bundle, config, rule_dirs)))

    def _rendered(self, report: Report) -> Rendered:
        return Rendered(metrics.summarize(report), render_json(report), render_markdown(report), self._html(report))

    def run_triage(
        self,
        trigger: str,
        target: Target,
        extra: dict[str, Any] | None = None,
        before_kept: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any] | None:
        """Triage `target`, keep the report; its meta, or None when the triage failed (counted, logged).
        `before_kept` sees the meta before the report is served: what it records holds for anyone who
        has seen the report."""
        try:
            return self._triage_and_keep(trigger, target, extra, before_kept)
        finally:
            self._triages += 1
            gc.collect(2 if self._triages % FULL_COLLECTION_EVERY == 1 else 1)
            memory.release()

    def _triage_and_keep(
        self,
        trigger: str,
        target: Target,
        extra: dict[str, Any] | None,
        before_kept: Callable[[dict[str, Any]], None] | None,
    ) -> dict[str, Any] | None:
        started, clock = time.time(), time.monotonic()
        try:
            rendered = self._triage(self._bounded(target))
            meta = {
                "id": new_id(trigger, started),
                "trigger": trigger,
                "started_at": started,
                "finished_at": time.time(),
                "duration_seconds": round(time.monotonic() - clock, 3),
                **rendered.summary,
                **(extra or {}),
            }
            if before_kept is not None:
                before_kept(meta)
            kept = self.store.add(meta, rendered.json, rendered.markdown, rendered.html)
        except Exception as e:  # one failed cycle (or a full disk) is a counted error; the loops go on
            self.counters.inc("llmdiag_cycles_total", trigger=trigger, outcome="error")
            log.error("%s triage failed: %s", trigger, redact_text(f"{type(e).__name__}: {e}"))
            return None
        self.counters.inc("llmdiag_cycles_total", trigger=trigger, outcome="ok")
        log.info("%s triage %s: %s", trigger, kept.id, meta["verdict"]["status"])
        return kept.meta

    def _html(self, report: Report) -> str | None:
        if not self.settings.html:
            return None
        from diag.report.html_report import render_html  # matplotlib, only where asked for

        return render_html(report)

    # ------------------------------------------------------------------ schedule

    def start(self) -> None:
        memory.keep_large_blocks_apart()
        compile_rules(self.settings.rule_dirs)  # once, here: each analysis' child has them as they are
        if self.settings.html:
            import diag.report.html_report  # noqa: F401  (matplotlib, loaded once, not in every child)
        self.ready.set()
        for name, loop in (("schedule", self._schedule_loop), ("alerts", self._alert_loop)):
            threading.Thread(target=loop, name=f"llmdiag-serve-{name}", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        if self.warm is not None:
            self.warm.stop()

    def _schedule_loop(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            self.last_tick = time.monotonic()
            if self._scheduled_running.is_set():
                self.counters.inc("llmdiag_cycles_total", trigger="schedule", outcome="skipped")
            else:
                self._scheduled_running.set()
                threading.Thread(target=self._scheduled_cycle, name="llmdiag-serve-cycle", daemon=True).start()
            next_at += self.settings.every_s
            now = time.monotonic()
            while next_at <= now:  # ticks the process slept through (a suspended VM) are not made up
                next_at += self.settings.every_s
            self._stop.wait(next_at - now)

    def _scheduled_cycle(self) -> None:
        try:
            previous = self.store.latest("schedule")
            meta = self.run_triage("schedule", self.settings.target)
            if meta is not None and previous is not None and previous["verdict"]["status"] != meta["verdict"]["status"]:
                self._notify(meta)
        finally:
            self._scheduled_running.clear()

    def healthy(self) -> bool:
        """The schedule loop ticked within two periods (it does not wait for cycles, so only a stuck
        process misses that)."""
        return self.last_tick is not None and time.monotonic() - self.last_tick < 2 * self.settings.every_s + 5

    # ------------------------------------------------------------------ alerts

    def receive(self, alerts: list[Alert]) -> dict[str, list[str]]:
        """Sort a webhook's alerts into triages (one per scope); answer what became of each fingerprint."""
        answer: dict[str, list[str]] = {}
        by_scope: dict[tuple[tuple[str, str], ...], list[Alert]] = {}
        for alert in alerts:
            self.counters.inc("llmdiag_alerts_received_total", status=alert.status)
            if alert.status == "firing":
                by_scope.setdefault(tuple(sorted(scope_of(alert).items())), []).append(alert)
        for scope, group in by_scope.items():
            outcome, new = self.gate.admit(group)
            if outcome == "triaged":
                try:
                    self._alerts.put_nowait((dict(scope), new))
                except queue.Full:
                    self.gate.forget(new)
                    outcome = "queue_full"
            self.counters.inc("llmdiag_alert_triages_total", outcome=outcome)
            answer.setdefault(outcome, []).extend(a.fingerprint for a in group)
        return answer

    def _alert_loop(self) -> None:
        while not self._stop.is_set():
            try:
                scope, alerts = self._alerts.get(timeout=1.0)
            except queue.Empty:
                continue
            selector = None
            if "service" in scope and "namespace" in scope:
                selector = service_selector(self._bounded(self.settings.target), scope["namespace"], scope["service"])
            extra = {"scope": scope, "alerts": [a.record() for a in alerts]}
            if selector is not None:
                extra["selector"] = selector

            def mark_faulted(meta: dict[str, Any], alerts: list[Alert] = alerts) -> None:
                if meta["verdict"]["status"] == "fault":  # before its report is seen: a re-firing is the same storm
                    self.gate.faulted(alerts)

            meta = self.run_triage("alert", scoped_target(self.settings.target, scope, selector), extra, mark_faulted)
            if meta is not None:
                self._notify(meta)

    def _notify(self, meta: dict[str, Any]) -> None:
        url = self.settings.notify_url
        if url is None:
            return
        link = (
            f"{self.settings.external_url.rstrip('/')}/reports/{meta['id']}"
            if self.settings.external_url
            else meta["id"]
        )
        problem = notify.post(url, notify.message(meta, link))
        self.counters.inc("llmdiag_notifications_total", outcome="failed" if problem else "sent")
        if problem:
            log.warning("outgoing webhook: %s", problem)

    # ------------------------------------------------------------------ metrics

    def exposition(self) -> str:
        latest = {t: self.store.latest(t) for t in metrics.TRIGGERS}
        return metrics.render(latest, self.counters, self.store.totals())
