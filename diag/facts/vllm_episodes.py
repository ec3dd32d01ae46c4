"""The vLLM rules' facts that either the /metrics scrapes or Prometheus' history can show.

Each fact is null when neither source can tell, `{"found": false}` when one read and did not see it,
and otherwise says what was seen, by which source, and when: "over 2 scrapes 10 s apart", or "from
14:02 to 14:20 UTC (18 min), ended 10m before collection". Where both sources exist and disagree on
whether it is still going on, the scrapes win (they read the server itself, at collection) and `note`
says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median
from typing import Any

from diag.facts.episodes import Span, Timeline
from diag.parsers.vllm_metrics import REQUESTS_RUNNING, REQUESTS_WAITING, VllmMetrics
from diag.snapshot.clock import Clock
from diag.snapshot.model import PromWindow, Scrape, VllmServer

SIGNALS: dict[str, tuple[str, ...]] = {
    "kv": ("vllm_kv_cache_usage_perc", "vllm_gpu_cache_usage_perc"),
    "waiting": ("vllm_num_requests_waiting",),
    "running": ("vllm_num_requests_running",),
    "preemptions_per_s": ("vllm_preemptions_rate_5m",),
    "prompt_per_s": ("vllm_prompt_tokens_rate_5m",),
    "generation_per_s": ("vllm_generation_tokens_rate_5m",),
    "ttft_mean": ("vllm_ttft_mean_5m",),
    "queue_mean": ("vllm_queue_time_mean_5m",),
    "itl_mean": ("vllm_itl_mean_5m", "vllm_tpot_mean_5m"),
    "ttft_p99": ("vllm_ttft_p99_5m",),
    "itl_p99": ("vllm_itl_p99_5m", "vllm_tpot_p99_5m"),
}
_FINISHED = "vllm_request_success_rate_5m/"

Fact = dict[str, Any] | None


@dataclass(frozen=True)
class Drop:
    """Generation throughput that fell against the same server's own recent past, with requests still in."""

    span: Span
    baseline: float  # tokens/s, the median of the baseline minutes before it began
    baseline_minutes: float  # how much of them the window held

    def text(self) -> str:
        worst = min(self.span.values("generation_per_s"))
        fell = f"by {1 - worst / self.baseline:.0%}"
        return (f"vllm:generation_tokens_total rate fell from {self.baseline:,.0f} to {worst:,.0f} tokens/s "
                f"({fell}) against the {self.baseline_minutes:g} minutes before")  # fmt: skip


def symptoms(server: VllmServer, settings: dict, clock: Clock, window: PromWindow | None) -> list[tuple[str, Span]]:
    """Every stretch of the server's history where it served worse, each with one line on how: throughput
    down against its own baseline, inter-token latency or time to first token high, a queue growing,
    requests preempted (the KV cache short of blocks)."""
    timeline = Timeline.of(server.history, SIGNALS, window.step if window else 15.0, window.end if window else None)
    history = _History(timeline, settings, clock)
    found = [(f"{drop.text()}, {drop.span.exact(clock)}", drop.span) for drop in history.drops()]
    for name, metric, threshold in (("itl_mean", "inter-token latency", settings["itl_high_s"]),
                                    ("ttft_mean", "time to first token", settings["ttft_high_s"])):  # fmt: skip

        def high(v: dict[str, float], name: str = name, threshold: float = threshold) -> bool | None:
            return _at_least(v.get(name), threshold)

        for span in timeline.spans(high, history.min_minutes):
            found.append((f"mean {metric} up to {max(span.values(name)):.3g} s (slow from {threshold:g} s), "
                          f"{span.exact(clock)}", span))  # fmt: skip
    for span in history.queue_spans():
        waiting = span.values("waiting")
        found.append((f"vllm:num_requests_waiting grew {waiting[0]:g} -> {waiting[-1]:g} (peak {max(waiting):g}), "
                      f"{span.exact(clock)}", span))  # fmt: skip
    for span in timeline.spans(lambda v: _above(v.get("preemptions_per_s"), 0.0), history.min_minutes):
        found.append((f"vLLM preempted requests (rate of vllm:num_preemptions_total up to "
                      f"{max(span.values('preemptions_per_s')):.2g}/s), {span.exact(clock)}", span))  # fmt: skip
    return found


@dataclass(frozen=True)
class ScrapeView:
    """What the scrapes say beyond the metrics summary: the running gauge at each one, and the cap."""

    running_every_scrape: bool | None
    queue_per_scrape: list[dict] | None  # {running, waiting} at each scrape that reported both
    seq_cap: int | None  # --max-num-seqs times the engine cores, when known
    ttft_queue_share: float | None


def episode_facts(server: VllmServer, summary: VllmMetrics | None, view: ScrapeView, settings: dict, clock: Clock,
                  window: PromWindow | None) -> dict[str, Fact | bool]:  # fmt: skip
    timeline = Timeline.of(server.history, SIGNALS, window.step if window else 15.0, window.end if window else None)
    history = _History(timeline, settings, clock)
    scrapes = _Scrapes(summary, view, settings)
    return {
        "kv_saturation": _merge(scrapes.kv_saturation(), history.kv_saturation()),
        "queue_growth": _merge(scrapes.queue_growth(), history.queue_growth()),
        "seq_cap_reached": _merge(scrapes.seq_cap_reached(view), history.seq_cap_reached(view.seq_cap)),
        "first_token_slow": _merge(scrapes.first_token_slow(view), history.first_token_slow()),
        "decode_slow": _merge(scrapes.decode_slow(), history.decode_slow()),
        "stall": _merge(scrapes.stall(view.running_every_scrape), history.stall()),
        "aborted_requests": history.aborted(server),
        "throughput_drop": history.throughput_drop(),
        "queue": scrapes.queue(),
        "history_read": bool(timeline.rows),
    }


def per_scrape_total(scrapes: list[Scrape], name: str) -> list[float | None]:
    totals: list[float | None] = []
    for scrape in scrapes:
        values = [s.value for s in scrape.samples if s.name == name and s.value == s.value]  # NaN is unknown
        totals.append(sum(values) if values else None)
    return totals


def queue_per_scrape(scrapes: list[Scrape]) -> list[dict] | None:
    """{running, waiting} at each scrape where both were reported: a gauge read at one instant can miss
    a state that held at the others (seen on a starved CPU server), so rules may look at every scrape.
    None (unknown) when no scrape reported both: an empty list would read as "never queued"."""
    running = per_scrape_total(scrapes, REQUESTS_RUNNING[0])
    waiting = per_scrape_total(scrapes, REQUESTS_WAITING[0])
    both = [
        {"running": r, "waiting": w} for r, w in zip(running, waiting, strict=True) if r is not None and w is not None
    ]
    return both or None


def _merge(scrapes: Fact, history: Fact) -> Fact:
    if scrapes is not None and scrapes["found"]:
        if history is not None and history["found"]:
            return (
                scrapes
                | {k: history[k] for k in ("when", "from", "until", "minutes")}
                | {"source": "the /metrics scrapes and Prometheus"}
            )
        if history is not None:
            note = ("Prometheus' samples do not show it for history_min_minutes (they are coarser, and may end before "
                    "collection); the scrapes read the server itself at collection, so they count")  # fmt: skip
            return scrapes | {"note": "; ".join(filter(None, (scrapes.get("note"), note)))}
        return scrapes
    if history is not None and history["found"]:
        if scrapes is not None and history["ongoing"]:
            note = (
                "the /metrics scrapes at collection no longer show it; "
                "they read the server itself, later, so it counts as ended"
            )
            return history | {"ongoing": False, "note": note}
        return history
    if scrapes is not None or history is not None:
        return {"found": False}
    return None


def _all_known(*values: bool | None) -> bool | None:
    """Three-valued and."""
    if any(v is False for v in values):
        return False
    return None if any(v is None for v in values) else True


def _any_known(*values: bool | None) -> bool | None:
    """Three-valued or."""
    if any(v is True for v in values):
        return True
    return None if any(v is None for v in values) else False


def _at_least(value: float | None, threshold: float) -> bool | None:
    return None if value is None else value >= threshold


def _above(value: float | None, threshold: float) -> bool | None:
    return None if value is None else value > threshold


def kv_full(kv_peak: float | None, preemptions: float | None, high: float) -> bool | None:
    """The KV cache was full at some moment between the reads: the gauge at or above `high` when read, or
    preemptions in between (vLLM preempts a sequence only when no KV block is free for it; a gauge read
    a few times misses the moments a small cache is full)."""
    if preemptions is not None and preemptions > 0:
        return True
    return _at_least(kv_peak, high)


def queued(waiting: float | None, running: float | None, settings: dict) -> bool | None:
    """Enough requests wait to count as a queue: at least queue_waiting_min, and at least
    queue_waiting_share of the running batch (one request waiting behind 24 running is admitted at the next step)."""
    if waiting is None:
        return None
    floor = settings["queue_waiting_min"]
    if running is not None:
        floor = max(floor, settings["queue_waiting_share"] * running)
    return waiting >= floor


def held(flags: list[bool], settings: dict) -> bool | None:
    """A state seen in at least queue_min_scrapes consecutive scrapes; unknown when fewer scrapes
    were taken and one of them shows it (it may or may not have lasted)."""
    need = settings["queue_min_scrapes"]
    run = longest = 0
    for flag in flags:
        run = run + 1 if flag else 0
        longest = max(longest, run)
    if longest >= need:
        return True
    return None if len(flags) < need and any(flags) else False


class _Scrapes:
    def __init__(self, summary: VllmMetrics | None, view: ScrapeView, settings: dict) -> None:
        self.m = summary
        self.view = view
        self.settings = settings

    def _queued_each(self) -> list[bool] | None:
        if self.view.queue_per_scrape is None:
            return None
        return [bool(queued(q["waiting"], q["running"], self.settings)) for q in self.view.queue_per_scrape]

    def _queue_held(self) -> bool | None:
        flags = self._queued_each()
        return None if flags is None else held(flags, self.settings)

    def queue(self) -> Fact:
        """Whether a queue held (queued in consecutive scrapes), and the fewest requests waiting among the
        scrapes that showed one."""
        queues = self.view.queue_per_scrape
        flags = self._queued_each()
        if queues is None or flags is None:
            return None
        lasting = held(flags, self.settings)
        waiting = [q["waiting"] for q, flag in zip(queues, flags, strict=True) if flag]
        return {"held": lasting, "waiting_least": min(waiting) if lasting else None,
                "queued_scrapes": f"{sum(flags)} of {len(flags)} scrapes"}  # fmt: skip

    def _when(self) -> str:
        m = self.m
        assert m is not None
        apart = f" {m.interval_seconds:g} s apart" if m.interval_seconds is not None else ""
        return f"over {m.scrapes} /metrics scrape{'s' if m.scrapes != 1 else ''}{apart}, at collection"

    def _base(self) -> dict:
        return {"source": "the /metrics scrapes", "when": self._when(), "ongoing": True, "from": None, "until": None,
                "minutes": None, "note": ""}  # fmt: skip

    def kv_saturation(self) -> Fact:
        m, s = self.m, self.settings
        if m is None:
            return None
        # preemptions counted over the interval are evidence enough; a growing queue must be a held one
        full = kv_full(m.kv_cache_usage_max, m.preemptions_delta, s["kv_cache_high"])
        found = _all_known(
            full,
            _any_known(
                _all_known(_above(m.preemptions_delta, 0.0), _at_least(m.requests_waiting, s["queue_waiting_min"])),
                _all_known(self._queue_held(), _above(m.waiting_growth, 0.0)),
            ),
        )
        if found is None:
            return None
        return self._base() | {
            "found": found,
            "peak": m.kv_cache_usage_max,
            "now": m.kv_cache_usage,
            "waiting_first": m.waiting_first,
            "waiting_last": m.requests_waiting,
            "waiting_peak": m.waiting_max,
            "running": m.requests_running,
            "preemptions": m.preemptions_delta,
            "between_reads": self._between_reads() if found else "",
        }

    def _between_reads(self) -> str:
        """What shows the cache full when every read of its gauge fell below kv_cache_high."""
        m, high = self.m, self.settings["kv_cache_high"]
        assert m is not None
        if m.kv_cache_usage_max is None or m.kv_cache_usage_max >= high or not m.preemptions_delta:
            return ""
        apart = f" {m.interval_seconds:.1f} s apart" if m.interval_seconds is not None else ""
        return (f"vllm:num_preemptions_total rose by {m.preemptions_delta:g} between {m.scrapes} reads of /metrics"
                f"{apart}, each of which showed the KV cache below {high:g} full (at most {m.kv_cache_usage_max:.3g}): "
                "vLLM preempts only when no KV block is free, so the cache filled between the reads")  # fmt: skip

    def _kv_room(self) -> bool | None:
        m = self.m
        assert m is not None
        full = kv_full(m.kv_cache_usage_max, m.preemptions_delta, self.settings["kv_cache_high"])
        return None if full is None else not full

    def queue_growth(self) -> Fact:
        m = self.m
        if m is None:
            return None
        found = _all_known(self._queue_held(), _above(m.waiting_growth, 0.0), _above(m.generation_tokens_delta, 0.0))
        if found is None:
            return None
        return self._base() | {
            "found": found,
            "waiting_first": m.waiting_first,
            "waiting_last": m.requests_waiting,
            "waiting_peak": m.waiting_max,
            "running": m.requests_running,
            "kv_peak": m.kv_cache_usage_max,
            "kv_room": self._kv_room(),
        }

    def seq_cap_reached(self, view: ScrapeView) -> Fact:
        m, s = self.m, self.settings
        if m is None:
            return None
        at_cap: list[bool] | None = None
        if view.queue_per_scrape is not None and view.seq_cap is not None:
            at_cap = [
                q["running"] >= view.seq_cap and bool(queued(q["waiting"], q["running"], s))
                for q in view.queue_per_scrape
            ]
        found = _all_known(
            self._kv_room(),
            _above(m.generation_tokens_delta, 0.0),
            None if at_cap is None else held(at_cap, s),
        )
        if found is None:
            return None
        return self._base() | {
            "found": found,
            "cap": view.seq_cap,
            "running": m.requests_running,
            "waiting_peak": m.waiting_max,
            "kv_peak": m.kv_cache_usage_max,
            "at_cap": f"in {sum(at_cap or [])} of {m.scrapes} scrapes",
        }

    def first_token_slow(self, view: ScrapeView) -> Fact:
        m, s = self.m, self.settings
        if m is None:
            return None
        found = _all_known(
            _at_least(m.ttft_mean_s, s["ttft_high_s"]),
            None if m.itl_mean_s is None else m.itl_mean_s < s["itl_high_s"],
            None if view.ttft_queue_share is None else view.ttft_queue_share < s["ttft_queue_share_max"],
            _at_least(m.ttft_requests, s["latency_min_requests"]),
        )
        if found is None:
            return None
        return self._base() | {"found": found, "ttft_mean": m.ttft_mean_s, "ttft_tail": m.ttft_p90_s, "tail": "p90",
                               "itl_mean": m.itl_mean_s, "queue_share": view.ttft_queue_share,
                               "requests": m.ttft_requests}  # fmt: skip

    def decode_slow(self) -> Fact:
        m, s = self.m, self.settings
        if m is None:
            return None
        found = _all_known(_at_least(m.itl_mean_s, s["itl_high_s"]),
                           None if m.ttft_mean_s is None else m.ttft_mean_s < s["ttft_high_s"],
                           _at_least(m.ttft_requests, s["latency_min_requests"]))  # fmt: skip
        if found is None:
            return None
        return self._base() | {"found": found, "itl_mean": m.itl_mean_s, "itl_tail": m.itl_p90_s, "tail": "p90",
                               "ttft_mean": m.ttft_mean_s, "requests": m.ttft_requests}  # fmt: skip

    def stall(self, running_every_scrape: bool | None) -> Fact:
        m, s = self.m, self.settings
        if m is None:
            return None
        found = _all_known(
            running_every_scrape,
            None if m.generation_tokens_delta is None else m.generation_tokens_delta <= 0.0,
            None if m.prompt_tokens_delta is None else m.prompt_tokens_delta <= 0.0,
            _at_least(m.interval_seconds, s["hang_min_interval_s"]),
        )
        if found is None:
            return None
        return self._base() | {"found": found, "running": m.requests_running, "waiting": m.requests_waiting,
                               "seconds": m.interval_seconds}  # fmt: skip


class _History:
    def __init__(self, timeline: Timeline, settings: dict, clock: Clock) -> None:
        self.t = timeline
        self.settings = settings
        self.clock = clock
        self.min_minutes = settings["history_min_minutes"]

    def _queued(self, v: dict[str, float]) -> bool | None:
        return queued(v.get("waiting"), v.get("running"), self.settings)

    def _facts(self, span: Span) -> dict:
        return span.facts(self.clock) | {"source": f"Prometheus ({self.t.step:g} s samples)", "note": ""}

    def kv_saturation(self) -> Fact:
        if not (self.t.has("kv") and self.t.has("waiting")):
            return None
        high = self.settings["kv_cache_high"]
        spans = self.t.spans(lambda v: _all_known(_at_least(v.get("kv"), high), self._queued(v)), self.min_minutes)
        rising = [(span, self._pressure_rose(span)) for span in spans]
        found = [span for span, rose in rising if rose]
        if not found:
            return None if any(rose is None for _, rose in rising) else {"found": False}
        span = found[-1]
        waiting = span.values("waiting")
        return self._facts(span) | {
            "found": True,
            "peak": max(span.values("kv")),
            "now": self._last("kv"),
            "waiting_first": waiting[0],
            "waiting_last": waiting[-1],
            "waiting_peak": max(waiting),
            "running": max(span.values("running"), default=None),
            "preemptions": round(sum(span.values("preemptions_per_s")) * self.t.step)
            if self.t.has("preemptions_per_s")
            else None,
            "between_reads": "",  # its samples are at or above kv_cache_high
        }

    def _pressure_rose(self, span: Span) -> bool | None:
        waiting = span.values("waiting")
        preempting = span.values("preemptions_per_s")
        return _any_known(waiting[-1] > waiting[0], any(p > 0 for p in preempting) if preempting else None)

    def queue_growth(self) -> Fact:
        if not (self.t.has("waiting") and self.t.has("generation_per_s")):
            return None
        spans = self.queue_spans()
        if not spans:
            return {"found": False}
        span = spans[-1]
        waiting = span.values("waiting")
        kv = span.values("kv")
        return self._facts(span) | {
            "found": True,
            "waiting_first": waiting[0],
            "waiting_last": waiting[-1],
            "waiting_peak": max(waiting),
            "running": max(span.values("running"), default=None),
            "kv_peak": max(kv) if kv else None,
            "kv_room": max(kv) < self.settings["kv_cache_high"] if kv else None,
        }

    def queue_spans(self) -> list[Span]:
        if not (self.t.has("waiting") and self.t.has("generation_per_s")):
            return []
        timeline = self.t.with_rising("waiting", self.min_minutes * 60)
        return timeline.spans(
            lambda v: _all_known(self._queued(v), None if "waiting_rising" not in v else v["waiting_rising"] > 0,
                                 _above(v.get("generation_per_s"), 0.0)),
            self.min_minutes)  # fmt: skip

    def drops(self) -> list[Drop]:
        """Runs where the generation rate stayed at or below (1 - throughput_drop_share) of its median over
        the throughput_baseline_minutes before the run began (at least history_min_minutes of them), while
        the requests running did not fall as far or a queue waited: less demand is no slowdown. A server
        that is always slow has itself as its baseline, so it has no drop."""
        if not self.t.has("generation_per_s"):
            return []
        s, rows, step = self.settings, self.t.rows, self.t.step
        keep, lookback = 1 - s["throughput_drop_share"], s["throughput_baseline_minutes"] * 60
        drops: list[Drop] = []
        run: list[tuple[float, dict[str, float]]] = []
        baseline: tuple[float, float | None, float] = (0.0, None, 0.0)  # tokens/s, requests running, minutes

        def close() -> None:
            span = Span(list(run), step, run[-1][0] == rows[-1][0] and self.t.at_window_end(run[-1][0]))
            if span.minutes >= self.min_minutes:
                drops.append(Drop(span, baseline[0], baseline[2]))
            run.clear()

        def demand_held(v: dict[str, float], running: float | None) -> bool:
            fewer = running is not None and "running" in v and v["running"] < keep * running
            return bool(self._queued(v)) or not fewer

        for i, (t, v) in enumerate(rows):
            rate = v.get("generation_per_s")
            if run and (rate is None or t - run[-1][0] > 1.5 * step or rate > keep * baseline[0]
                        or not demand_held(v, baseline[1])):  # fmt: skip
                close()
            if rate is None:
                continue
            if run:
                run.append((t, v))
                continue
            before = [w for u, w in rows[:i] if t - lookback <= u < t]
            rates = [w["generation_per_s"] for w in before if "generation_per_s" in w]
            if len(rates) * step < self.min_minutes * 60:
                continue
            running = [w["running"] for w in before if "running" in w]
            baseline = (median(rates), median(running) if running else None, round(len(rates) * step / 60, 1))
            if baseline[0] > 0 and rate <= keep * baseline[0] and demand_held(v, baseline[1]):
                run.append((t, v))
        if run:
            close()
        return drops

    def throughput_drop(self) -> Fact:
        if not self.t.has("generation_per_s"):
            return None
        drops = self.drops()
        if not drops:
            return {"found": False}
        drop = drops[-1]
        rates = drop.span.values("generation_per_s")
        return self._facts(drop.span) | {
            "found": True,
            "text": drop.text(),
            "exact": drop.span.exact(self.clock),
            "start": drop.span.start,
            "end": drop.span.end + drop.span.step,
            "events": [],
            "baseline": round(drop.baseline, 1),
            "lowest": round(min(rates), 1),
            "share": round(1 - min(rates) / drop.baseline, 3),
            "baseline_minutes": drop.baseline_minutes,
            "running": max(drop.span.values("running"), default=None),
            "waiting_peak": max(drop.span.values("waiting"), default=None),
        }

    def seq_cap_reached(self, cap: int | None) -> Fact:
        if cap is None or not all(self.t.has(name) for name in ("running", "waiting", "kv", "generation_per_s")):
            return None
        high = self.settings["kv_cache_high"]
        spans = self.t.spans(lambda v: _all_known(
            _at_least(v.get("running"), cap), self._queued(v),
            None if "kv" not in v else v["kv"] < high, _above(v.get("generation_per_s"), 0.0)
        ), self.min_minutes)  # fmt: skip
        if not spans:
            return {"found": False}
        span = spans[-1]
        return self._facts(span) | {
            "found": True,
            "cap": cap,
            "running": max(span.values("running")),
            "waiting_peak": max(span.values("waiting")),
            "kv_peak": max(span.values("kv")),
            "at_cap": f"for {span.minutes:g} min",
        }

    def first_token_slow(self) -> Fact:
        if not all(self.t.has(name) for name in ("ttft_mean", "itl_mean", "queue_mean")):
            return None
        s = self.settings

        def prefill_bound(v: dict[str, float]) -> bool | None:
            ttft, itl, queue = v.get("ttft_mean"), v.get("itl_mean"), v.get("queue_mean")
            share = None if ttft is None or queue is None or ttft <= 0 else min(1.0, queue / ttft)
            return _all_known(_at_least(ttft, s["ttft_high_s"]), None if itl is None else itl < s["itl_high_s"],
                              None if share is None else share < s["ttft_queue_share_max"])  # fmt: skip

        spans = self.t.spans(prefill_bound, self.min_minutes)
        if not spans:
            return {"found": False}
        span = spans[-1]
        ttft, queue = span.values("ttft_mean"), span.values("queue_mean")
        return self._facts(span) | {
            "found": True,
            "ttft_mean": max(ttft),
            "ttft_tail": max(span.values("ttft_p99"), default=None),
            "tail": "p99",
            "itl_mean": max(span.values("itl_mean")),
            "queue_share": round(max(q / t for q, t in zip(queue, ttft, strict=False)), 3),
        }

    def decode_slow(self) -> Fact:
        if not (self.t.has("ttft_mean") and self.t.has("itl_mean")):
            return None
        s = self.settings
        spans = self.t.spans(lambda v: _all_known(
            _at_least(v.get("itl_mean"), s["itl_high_s"]),
            None if "ttft_mean" not in v else v["ttft_mean"] < s["ttft_high_s"]), self.min_minutes)  # fmt: skip
        if not spans:
            return {"found": False}
        span = spans[-1]
        return self._facts(span) | {
            "found": True,
            "itl_mean": max(span.values("itl_mean")),
            "itl_tail": max(span.values("itl_p99"), default=None),
            "tail": "p99",
            "ttft_mean": max(span.values("ttft_mean")),
        }

    def stall(self) -> Fact:
        if not (self.t.has("running") and self.t.has("generation_per_s")):
            return None
        minimum = max(self.min_minutes, self.settings["hang_min_interval_s"] / 60)
        counters = ["generation_per_s", *(["prompt_per_s"] if self.t.has("prompt_per_s") else [])]

        def stalled(v: dict[str, float]) -> bool | None:
            still = [None if v.get(name) is None else v[name] <= 0.0 for name in counters]
            return _all_known(_above(v.get("running"), 0.0), *still)

        spans = self.t.spans(stalled, minimum)
        if not spans:
            return {"found": False}
        span = spans[-1]
        return self._facts(span) | {
            "found": True,
            "running": max(span.values("running")),
            "waiting": max(span.values("waiting"), default=None),
            "seconds": round(span.minutes * 60),
        }

    def aborted(self, server: VllmServer) -> Fact:
        """Requests that ended other than by stop or length (abort, error) over the window, by reason."""
        reasons = {
            key.removeprefix(_FINISHED): points for key, points in server.history.items() if key.startswith(_FINISHED)
        }
        if not reasons:
            return None
        step = self.t.step
        # the rate times the step, summed over the samples, is about the increase over the window
        total = {reason: sum(v for _, v in points) * step for reason, points in reasons.items()}
        failed = {reason: round(n) for reason, n in total.items() if reason not in ("stop", "length") and round(n) > 0}
        finished = sum(total.values())
        count = sum(failed.values())
        return {
            "found": count > 0,
            "by_reason": failed,
            "count": count,
            "finished": round(finished),
            "share": count / finished if finished else None,
            "source": f"Prometheus ({step:g} s samples)",
        }

    def _last(self, name: str) -> float | None:
        return next((v[name] for _, v in reversed(self.t.rows) if name in v), None)
