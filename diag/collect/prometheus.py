"""Prometheus: the range queries of `diag.bundle.prometheus_queries` over the --since window, one file each.

Each file is the /api/v1/query_range answer as Prometheus sent it, with two top-level fields added:
"query" (the PromQL sent) and "window" ({"start", "end", "step"}, unix seconds). Plain requests,
not prometheus-api-client (see docs/decisions.md).

vLLM queries are scoped to the namespaces being triaged (`{namespace="a"}`, `{namespace=~"a|b"}`,
nothing with --all-namespaces) plus --prometheus-selector's matchers; GPU queries are not scoped
(see `diag.bundle.prometheus_queries`).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from diag.bundle.budget import AnswerWatch, OverBudget, check_prometheus_answer
from diag.bundle.prometheus_queries import RANGE_QUERIES, RATE_HISTORY, RENAMED_PAIRS, RangeQuery
from diag.collect.base import Sink, SourceResult
from diag.collect.http import REFUSED, TIMEOUT, HttpGet, Unreachable, body_excerpt

if TYPE_CHECKING:
    from diag.collect.base import Target
    from diag.collect.kube import KubeAccess
    from diag.collect.prometheus_access import PromAccess

DEFAULT_WINDOW_S = 30 * 60
MIN_STEP_S = 15  # the common scrape interval: a finer step repeats samples
MAX_POINTS = 11_000  # Prometheus refuses a range query that would return more points per series
MAX_PARALLEL_QUERIES = 8
_REGEX_SPECIAL = frozenset("\\.+*?()|[]{}^$")


@dataclass(frozen=True)
class Window:
    start: float  # unix seconds
    end: float
    step: int  # seconds

    def as_json(self) -> dict[str, float | int]:
        return {"start": self.start, "end": self.end, "step": self.step}


def step_for(window_s: float) -> int:
    """The finest step (15 s at least) that keeps a series under Prometheus' 11,000 points."""
    return max(MIN_STEP_S, math.ceil(window_s / (MAX_POINTS - 1)))


def window_ending(end: float, window_s: float) -> Window:
    end = round(end, 3)
    return Window(round(end - window_s, 3), end, step_for(window_s))


def namespace_matcher(namespaces: list[str] | None) -> str | None:
    """`namespace="a"` for one, `namespace=~"a|b"` for several, None for all (or unknown)."""
    if not namespaces:
        return None
    names = sorted(set(namespaces))
    if len(names) == 1:
        return f"namespace={_promql_string(names[0])}"
    return f"namespace=~{_promql_string('|'.join(_regex_escape(n) for n in names))}"


def vllm_selector(namespaces: list[str] | None, extra: tuple[str, ...] = ()) -> str:
    """The `{...}` that goes where a vLLM query has `{selector}`; "" when nothing scopes it."""
    matchers = [m for m in (namespace_matcher(namespaces), *extra) if m]
    return "{" + ",".join(matchers) + "}" if matchers else ""


def promql(query: RangeQuery, selector_of_vllm: str) -> str:
    """The PromQL sent for `query`: GPU queries are never scoped by namespace."""
    return query.promql.replace("{selector}", selector_of_vllm if query.subject == "vllm" else "")


def collect_target(target: Target, kube: KubeAccess | None, sink: Sink) -> list[SourceResult]:
    """What the runner calls: the target's Prometheus, scope and window -> prometheus/<stem>.json."""
    from diag.collect.prometheus_access import prometheus_access
    from diag.core.errors import UserError

    window = window_ending(time.time(), target.since_s or DEFAULT_WINDOW_S)
    try:
        access = prometheus_access(target)
        if access is None:
            return [SourceResult("prometheus", "skipped", "no --prometheus-url or --prometheus-service")]
        get = access.getter(kube, target.max_answer_bytes, watch=AnswerWatch)
    except UserError as e:
        return [SourceResult("prometheus", "failed", str(e))]
    namespaces, scope_note = _namespaces(target, kube)
    pod = (f"pod={_promql_string(target.pod)}",) if target.pod else ()  # --pod: that server's series only
    selector = vllm_selector(namespaces, (*pod, *access.matchers))
    sink.record_prometheus(
        {
            **access.describe(),
            "window": {**window.as_json(), "since_s": target.since_s or DEFAULT_WINDOW_S},
            "vllm_selector": selector,
        }
    )
    results = collect_prometheus(get, access, sink, target.source_timeout_s, selector, window)
    return results + ([SourceResult("prometheus", "ok", scope_note)] if scope_note else [])


def pods_with_rates(files: Mapping[str, bytes]) -> frozenset[str]:
    """ "namespace/pod" of each vLLM server for which every RATE_HISTORY answer holds a series of two
    points or more: its rates need no second /metrics read."""
    found: list[set[str]] = []
    for stem in RATE_HISTORY:
        try:
            answer = json.loads(files.get(f"prometheus/{stem}.json", b"{}"))
            series = (answer.get("data") or {}).get("result") or []
        except (ValueError, AttributeError):
            return frozenset()
        found.append({
            f"{s['metric'].get('namespace')}/{s['metric'].get('pod')}"
            for s in series
            if isinstance(s, dict) and isinstance(s.get("metric"), dict) and len(s.get("values") or []) >= 2
        })  # fmt: skip
    return frozenset(set.intersection(*found)) if found else frozenset()


def collect_prometheus(
    get: HttpGet,
    access: PromAccess,
    sink: Sink,
    timeout_s: float,
    selector_of_vllm: str,
    window: Window,
    queries: tuple[RangeQuery, ...] = RANGE_QUERIES,
) -> list[SourceResult]:
    """Run every query over `window` -> prometheus/<stem>.json; one SourceResult per query."""
    asked = [(q, promql(q, selector_of_vllm)) for q in queries]
    gave_up = _GiveUp()

    def ask(item: tuple[RangeQuery, str]) -> tuple[str, SourceResult, int | None]:
        query, sent = item
        return _query_range(get, access, query, sent, window, sink, timeout_s, gave_up)

    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_QUERIES, max(1, len(asked)))) as pool:
        answers = list(pool.map(ask, asked))
    return _merge_renamed(answers, window)


class _GiveUp:
    """The first answer that says Prometheus cannot be used (unreachable, credentials refused): the
    queries not yet sent are not sent, so that a dead Prometheus costs one timeout, not three rounds."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reason: str | None = None

    def because(self, reason: str) -> str:
        with self._lock:
            self.reason = self.reason or reason
        return reason


def _query_range(
    get: HttpGet,
    access: PromAccess,
    query: RangeQuery,
    sent: str,
    window: Window,
    sink: Sink,
    timeout_s: float,
    gave_up: _GiveUp,
) -> tuple[str, SourceResult, int | None]:
    """(stem, result, series count or None when it failed)."""
    source = f"prometheus/{query.stem}.json"
    if gave_up.reason is not None:
        return query.stem, SourceResult(source, "failed", f"not asked: {gave_up.reason}"), None
    params = {"query": sent, "start": f"{window.start:.3f}", "end": f"{window.end:.3f}", "step": str(window.step)}
    started = time.monotonic()
    try:
        status, body = get("/api/v1/query_range?" + urlencode(params), timeout_s)
        check_prometheus_answer(body)  # before json.loads: a huge answer must not hold the GIL from the other sources
    except Unreachable as e:
        reason = _unreachable(access, e.reason, time.monotonic() - started, timeout_s)
        return query.stem, SourceResult(source, "failed", gave_up.because(reason)), None
    except OverBudget as e:
        return query.stem, SourceResult(source, "failed", f"Prometheus at {access.where}: {e}"), None
    try:
        answer = json.loads(body)
    except ValueError:
        answer = None
    if status in (401, 403):
        return query.stem, SourceResult(source, "failed", gave_up.because(_refused(access, status, body))), None
    if not isinstance(answer, dict):
        detail = (
            f"Prometheus at {access.where} answered HTTP {status}, not a Prometheus API answer: {body_excerpt(body)}"
        )
        return query.stem, SourceResult(source, "failed", detail), None
    if status != 200 or answer.get("status") != "success":
        return query.stem, SourceResult(source, "failed", _error(access, status, answer, sent)), None
    sink.write(source, json.dumps({"query": sent, "window": window.as_json(), **answer}))
    count = _series_count(answer)
    return query.stem, SourceResult(source, "ok", f"{count} series"), count


def _merge_renamed(answers: list[tuple[str, SourceResult, int | None]], window: Window) -> list[SourceResult]:
    """Both names of a renamed vLLM metric without a series: one line, "ok" (the answers are real and
    saved: "nothing there" is known, not unknown), instead of two lines of "0 series"."""
    counts = {stem: count for stem, _, count in answers}
    minutes = (window.end - window.start) / 60
    replaced: dict[str, SourceResult] = {}
    folded: set[str] = set()
    for new, old in RENAMED_PAIRS:
        if counts.get(new) == 0 and counts.get(old) == 0:
            detail = (
                f"neither name has a series in the last {minutes:g} min: prometheus/{new}.json and "
                f"prometheus/{old}.json are both empty (is vLLM scraped by this Prometheus, under these labels?)"
            )
            replaced[new] = SourceResult(f"prometheus/{new}.json", "ok", detail)
            folded.add(old)
    return [replaced.get(stem, result) for stem, result, _ in answers if stem not in folded]


def _unreachable(access: PromAccess, reason: str, elapsed_s: float, timeout_s: float) -> str:
    if reason == TIMEOUT:
        return f"Prometheus at {access.where} did not answer: timed out after {elapsed_s:.1f}s (limit {timeout_s:g}s)"
    if reason == REFUSED:
        return f"Prometheus at {access.where} refused the connection"
    return f"Prometheus at {access.where} could not be reached: {reason}"


def _refused(access: PromAccess, status: int, body: bytes) -> str:
    said = body_excerpt(body)
    if access.login:
        return f"Prometheus refused the credentials (HTTP {status}, {access.login}): {said}"
    return (
        f"Prometheus at {access.where} asks for credentials (HTTP {status}: {said}); give --prometheus-token, "
        "or --prometheus-user and --prometheus-password"
    )


def _error(access: PromAccess, status: int, answer: dict, sent: str) -> str:
    error = " ".join(str(answer.get("error") or answer.get("status") or "no error given").split())
    if status in (400, 422):
        kind = answer.get("errorType") or "bad_data"
        return f"Prometheus rejected the query (HTTP {status}, {kind}): {error} - query: {sent}"
    return f"Prometheus at {access.where} answered HTTP {status}: {error}"


def _namespaces(target: Target, kube: KubeAccess | None) -> tuple[list[str] | None, str]:
    """The namespaces the vLLM queries are scoped to (None: all), and a note when that is not by choice."""
    if target.all_namespaces:
        return None, ""
    if target.namespace:
        return [target.namespace], ""
    if kube is not None:
        return [kube.current_namespace()], ""
    return None, "vLLM queries not scoped by namespace: no --namespace and no Kubernetes context to take it from"


def _series_count(answer: dict) -> int:
    data = answer.get("data")
    result = data.get("result") if isinstance(data, dict) else None
    return len(result) if isinstance(result, list) else 0


def _promql_string(text: str) -> str:
    """A PromQL double-quoted string literal (Go escapes)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _regex_escape(text: str) -> str:
    """`text` matched literally by RE2 (what Prometheus' =~ uses)."""
    return "".join(f"\\{c}" if c in _REGEX_SPECIAL else c for c in text)
