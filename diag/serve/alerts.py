"""Alertmanager's webhook (its `webhook_config` payload, version "4"): the firing alerts, the scope each
one's labels give a triage, and the gate that deduplicates and rate-limits the triages they ask for.

An alert's `namespace` and `pod` labels narrow the triage as `-n` and `--pod` do; `service` (with
`namespace`) narrows it to the pods that Service selects, as `-l` with its selector does; `instance` picks
the `--vllm-url` server it names (host:port), when it names one (an alert that names a pod reads no
other `--vllm-url` server); `job` is kept with the report as what the alert was about. Alerts with the
same scope share one triage.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from diag.collect.base import Target
from diag.snapshot.clock import parse_duration

WEBHOOK_VERSION = "4"
SCOPE_LABELS = ("namespace", "pod", "service", "job", "instance")
SEEN_KEPT = 10_000  # alerts remembered as triaged; a long-lived process forgets the oldest


class PayloadError(ValueError):
    """The body is not an Alertmanager webhook payload; the message says why, in one line."""


@dataclass(frozen=True)
class Alert:
    fingerprint: str
    status: str  # firing | resolved
    name: str  # the alertname label
    starts_at: str
    labels: dict[str, str]

    def record(self) -> dict[str, Any]:
        return {"fingerprint": self.fingerprint, "alertname": self.name, "startsAt": self.starts_at,
                "labels": self.labels}  # fmt: skip


def parse_webhook(body: bytes) -> list[Alert]:
    try:
        payload = json.loads(body)
    except ValueError as e:
        raise PayloadError(f"not JSON: {e}") from None
    if not isinstance(payload, dict):
        raise PayloadError("not a JSON object")
    if payload.get("version") != WEBHOOK_VERSION:
        raise PayloadError(f"webhook version {payload.get('version')!r}; this receiver reads version 4")
    alerts = payload.get("alerts")
    if not isinstance(alerts, list):
        raise PayloadError("no alerts list")
    return [_alert(n, raw) for n, raw in enumerate(alerts)]


def _alert(n: int, raw: Any) -> Alert:
    if not isinstance(raw, dict):
        raise PayloadError(f"alerts[{n}] is not an object")
    labels = raw.get("labels")
    if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise PayloadError(f"alerts[{n}].labels is not a map of strings")
    status, starts_at, fingerprint = raw.get("status"), raw.get("startsAt", ""), raw.get("fingerprint")
    if status not in ("firing", "resolved"):
        raise PayloadError(f"alerts[{n}].status is {status!r}, not firing or resolved")
    if not isinstance(starts_at, str):
        raise PayloadError(f"alerts[{n}].startsAt is not a string")
    if not isinstance(fingerprint, str) or not fingerprint:
        # Alertmanager has sent one since 0.19; before that, the labels are what identifies an alert
        fingerprint = hashlib.sha256(json.dumps(labels, sort_keys=True).encode()).hexdigest()[:16]
    return Alert(fingerprint, status, labels.get("alertname", ""), starts_at, dict(labels))


def scope_of(alert: Alert) -> dict[str, str]:
    """The labels of `alert` that scope a triage, as the report keeps them."""
    return {k: alert.labels[k] for k in SCOPE_LABELS if alert.labels.get(k)}


def service_selector(target: Target, namespace: str, name: str) -> str | None:
    """The label selector of Service `namespace/name` (one read-only list, by name), as `-l` takes it;
    None where there is none to read (no such Service, none set, or no API server)."""
    from diag.collect.kube import KubeError
    from diag.collect.runner import kube_access

    try:
        services = kube_access(target).list_json("services", namespace, field_selector=f"metadata.name={name}")
    except KubeError:
        return None
    for item in services["items"]:
        selector = (item.get("spec") or {}).get("selector")
        if isinstance(selector, dict) and selector:
            return ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
    return None


def scoped_target(base: Target, scope: dict[str, str], selector: str | None = None) -> Target:
    """`base` (serve's own flags) narrowed to what the alert is about; `selector`: that of the alert's
    Service (`service_selector`), which narrows the pods as `-l` does."""
    # the alert says what is happening now: a storm that began minutes ago is shorter than Prometheus'
    # history must show, so the triage reads the servers' present (--scrapes reads) whatever it holds
    changes: dict[str, Any] = {"scrape_beside_history": True}
    if selector is not None:
        changes["selector"] = ",".join(s for s in (base.selector, selector) if s)
    if "namespace" in scope:
        changes.update(namespace=scope["namespace"], all_namespaces=False)
    if "pod" in scope:
        changes["pod"] = scope["pod"]
    named = [u for u in base.vllm_urls if urlsplit(u).netloc == scope.get("instance")]
    if named or "pod" in scope:
        # an alert about a pod is about the server in it, which Kubernetes finds: of the servers given
        # by URL, only the one its instance names (Prometheus' address of the pod) is read
        changes["vllm_urls"] = named
    return dataclasses.replace(base, **changes)


class Gate:
    """Which firing alerts start a triage: one per (fingerprint, startsAt) while it is kept (Alertmanager
    sends a firing alert again every repeat_interval and with each change to its group), none for an
    alert that fires again within `window_s` of a triage that found a fault (`faulted`), and at most
    `limit` triages per `window_s` in all. An alert that fires again is a new startsAt of the same
    fingerprint: a flapping one (a KV cache that fills and frees as a storm drains) would otherwise be
    triaged at each firing, and the last of them, at the storm's end, would find nothing and stand as
    the alerts' verdict. One whose triage found nothing (it came before the storm showed) is triaged
    again when it fires again."""

    def __init__(
        self,
        limit: int,
        window_s: float,
        seen: set[tuple[str, str]] | None = None,
        faulted_ago: dict[str, float] | None = None,
    ) -> None:
        """`seen`, `faulted_ago` (seconds since a triage of each fingerprint found a fault): what the kept
        reports answer."""
        self.limit = limit
        self.window_s = window_s
        # insertion-ordered, so that past SEEN_KEPT the oldest are forgotten first
        self._seen: dict[tuple[str, str], None] = dict.fromkeys(sorted(seen or ()))
        now = time.monotonic()
        self._last: dict[str, float] = {
            fingerprint: now - ago for fingerprint, ago in sorted((faulted_ago or {}).items(), key=lambda i: -i[1])
        }
        self._started: deque[float] = deque()
        self._lock = threading.Lock()

    def admit(self, alerts: list[Alert], now: float | None = None) -> tuple[str, list[Alert]]:
        """`(outcome, new alerts)` for alerts of one scope: `triaged`, `deduplicated` (all seen, or fired
        again too soon) or `rate_limited`; `triaged` marks them seen."""
        now = time.monotonic() if now is None else now
        with self._lock:
            new = [
                a
                for a in alerts
                if (a.fingerprint, a.starts_at) not in self._seen
                and now - self._last.get(a.fingerprint, now - self.window_s) >= self.window_s
            ]
            if not new:
                return "deduplicated", []
            while self._started and now - self._started[0] >= self.window_s:
                self._started.popleft()
            if len(self._started) >= self.limit:
                return "rate_limited", new
            self._started.append(now)
            self._seen.update(dict.fromkeys((a.fingerprint, a.starts_at) for a in new))
            _trim(self._seen)
            return "triaged", new

    def faulted(self, alerts: list[Alert], now: float | None = None) -> None:
        """Their triage found a fault: firing again within the window, they are the same storm."""
        now = time.monotonic() if now is None else now
        with self._lock:
            for a in alerts:
                self._last.pop(a.fingerprint, None)
                self._last[a.fingerprint] = now
            _trim(self._last)

    def forget(self, alerts: list[Alert]) -> None:
        """A triage that could not be queued: the alert may ask again."""
        with self._lock:
            for a in alerts:
                self._seen.pop((a.fingerprint, a.starts_at), None)


def _trim(remembered: dict[Any, Any]) -> None:
    """Past SEEN_KEPT, forget the oldest (a dict keeps its insertion order)."""
    for oldest in list(remembered)[: max(0, len(remembered) - SEEN_KEPT)]:
        del remembered[oldest]


def parse_rate(text: str) -> tuple[int, float]:
    """`N/DURATION` (e.g. `6/10m`) as (N, seconds)."""
    count, _, window = text.partition("/")
    try:
        limit, seconds = int(count), parse_duration(window, "the window")
    except ValueError as e:
        raise ValueError(f"{text!r} is not N/DURATION, e.g. 6/10m ({e})") from None
    if limit < 1 or seconds <= 0:
        raise ValueError(f"{text!r}: at least one triage over a window longer than zero")
    return limit, seconds
