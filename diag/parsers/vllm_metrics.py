"""What a vLLM server's /metrics scrapes say, under the old (V0, early V1) and new (V1) names alike.

Counters are read the way Prometheus' rate()/increase() read them: a value that went down between
two scrapes is a restart, and the counter is taken to have counted up from 0 since; unless
process_start_time_seconds says the server did not restart, when the increase is unknown. Latencies come
from histogram _sum/_count (means) and _bucket (p90, interpolated as histogram_quantile does), over
the window between the scrapes when requests finished in it, else over the server's whole life.
A metric the server did not expose is None, never 0.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from diag.snapshot.model import MetricSample, Scrape, VllmMetrics

# Alternative names of one quantity, the current (V1) name first; the first one exposed is used.
KV_CACHE_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
REQUESTS_RUNNING = ("vllm:num_requests_running",)
REQUESTS_WAITING = ("vllm:num_requests_waiting",)
PREEMPTIONS = ("vllm:num_preemptions_total",)
PROMPT_TOKENS = ("vllm:prompt_tokens_total",)
GENERATION_TOKENS = ("vllm:generation_tokens_total",)
TTFT = ("vllm:time_to_first_token_seconds",)
ITL = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")  # renamed in 0.11
E2E_LATENCY = ("vllm:e2e_request_latency_seconds",)
QUEUE_TIME = ("vllm:request_queue_time_seconds",)
PREFILL_TIME = ("vllm:request_prefill_time_seconds",)
DECODE_TIME = ("vllm:request_decode_time_seconds",)
CACHE_CONFIG = "vllm:cache_config_info"

# The quantities rules rely on; `missing` names those absent under every name, by their V1 name.
RELIED_ON = (KV_CACHE_USAGE, REQUESTS_RUNNING, REQUESTS_WAITING, PREEMPTIONS, GENERATION_TOKENS, TTFT, ITL)

# Families only a V1 engine exposes (early V1 still had gpu_cache_usage_perc, but with `engine`).
_V1_ONLY = frozenset(
    {
        "vllm:kv_cache_usage_perc",
        "vllm:inter_token_latency_seconds",
        "vllm:prefix_cache_queries_total",
        "vllm:gpu_prefix_cache_queries_total",
        "vllm:engine_sleep_state",
    }
)
# Families of the V0 engine (vllm/engine/metrics.py), gone from V1.
_V0_NAMES = frozenset(
    {
        "vllm:gpu_cache_usage_perc",
        "vllm:cpu_cache_usage_perc",
        "vllm:num_requests_swapped",
        "vllm:gpu_prefix_cache_hit_rate",
        "vllm:cpu_prefix_cache_hit_rate",
        "vllm:time_in_queue_requests",
        "vllm:model_forward_time_milliseconds",
        "vllm:model_execute_time_milliseconds",
    }
)
_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
_FRACTIONS = frozenset({*KV_CACHE_USAGE, "vllm:cpu_cache_usage_perc"})  # 0..1 by definition
_REQUEST_GAUGES = frozenset({*REQUESTS_RUNNING, *REQUESTS_WAITING, "vllm:num_requests_swapped"})
START_TIME = "process_start_time_seconds"  # prometheus_client's process collector: changes when the server restarts
_P90 = 0.9

LabelKey = tuple[tuple[str, str], ...]
Series = dict[LabelKey, float]  # one metric name in one scrape: label set -> value


def summarize(scrapes: list[Scrape]) -> VllmMetrics:
    """`scrapes` in the order they were taken."""
    view = _Scrapes(scrapes)
    families = metric_families(view.names)
    kv_usage = _known(view.per_scrape(view.first_exposed(KV_CACHE_USAGE), max))
    waiting = _known(view.per_scrape(REQUESTS_WAITING[0], sum))
    generation_delta = view.increase(GENERATION_TOKENS[0])
    interval = _interval(scrapes)
    ttft = _Latency(view, TTFT)
    itl = _Latency(view, ITL)
    cache_config = view.cache_config()
    return VllmMetrics(
        scrapes=len(scrapes),
        api_generation=_api_generation(families, view.label_names),
        kv_cache_usage=kv_usage[-1] if kv_usage else None,
        kv_cache_usage_max=max(kv_usage, default=None),
        requests_running=view.latest(REQUESTS_RUNNING[0]),
        requests_waiting=waiting[-1] if waiting else None,
        waiting_first=waiting[0] if waiting else None,
        waiting_max=max(waiting, default=None),
        waiting_growth=waiting[-1] - waiting[0] if len(waiting) > 1 else None,
        preemptions_total=view.latest(PREEMPTIONS[0]),
        preemptions_delta=view.increase(PREEMPTIONS[0]),
        prompt_tokens_delta=view.increase(PROMPT_TOKENS[0]),
        generation_tokens_delta=generation_delta,
        interval_seconds=interval,
        generation_tokens_per_s=generation_delta / interval
        if generation_delta is not None and interval is not None and interval > 0
        else None,
        ttft_mean_s=ttft.mean(),
        ttft_p90_s=ttft.quantile(_P90),
        ttft_requests=ttft.count(),
        itl_mean_s=itl.mean(),
        itl_p90_s=itl.quantile(_P90),
        e2e_mean_s=_Latency(view, E2E_LATENCY).mean(),
        queue_time_mean_s=_Latency(view, QUEUE_TIME).mean(),
        prefill_time_mean_s=_Latency(view, PREFILL_TIME).mean(),
        decode_time_mean_s=_Latency(view, DECODE_TIME).mean(),
        num_gpu_blocks=_whole_number(cache_config.get("num_gpu_blocks")),
        block_size=_whole_number(cache_config.get("block_size")),
        gpu_memory_utilization=_fraction(cache_config.get("gpu_memory_utilization")),
        present=families,
        missing=[names[0] for names in RELIED_ON if not any(name in families for name in names)],
    )


def impossible(sample: MetricSample) -> str | None:
    """Why a vLLM gauge's value cannot be true (a usage fraction outside 0..1, a negative or
    non-finite request count); None when it can."""
    if sample.name in _FRACTIONS and not (math.isfinite(sample.value) and 0 <= sample.value <= 1):
        return f"{sample.name} = {sample.value:g}, a usage fraction outside 0..1"
    if sample.name in _REQUEST_GAUGES and not (math.isfinite(sample.value) and sample.value >= 0):
        return f"{sample.name} = {sample.value:g}, a count of requests that cannot be"
    return None


def counters_gone_back(earlier: Scrape, later: Scrape) -> list[str]:
    """vLLM counters lower in `later` although the process did not restart between the two scrapes
    (the same process_start_time_seconds): impossible, so neither value can be trusted."""
    before, after = _Scrapes([earlier, later]).by_name
    starts = [_start_time(index) for index in (before, after)]
    if starts[0] is None or starts[0] != starts[1]:
        return []
    return [
        f"{name} went down from {before[name][key]:g} to {value:g} with no restart"
        for name, series in sorted(after.items())
        if name.startswith("vllm:") and name.endswith(("_total", "_count", "_bucket"))
        for key, value in series.items()
        if key in before.get(name, {}) and value < before[name][key]
    ]


def _start_time(index: dict[str, Series]) -> float | None:
    values = list(index.get(START_TIME, {}).values())
    return values[0] if len(values) == 1 else None


def metric_families(names: set[str]) -> list[str]:
    """Sample names as metric families, sorted: a histogram's _bucket/_sum/_count read as its base
    name, and the `_created` series prometheus_client adds beside a counter or histogram dropped.
    Counters keep their exposed `_total` name (what the TYPE line and vLLM's docs call them)."""
    families: set[str] = set()
    for name in names:
        base = _histogram_base(name, names)
        if base is not None:
            families.add(base)
        elif not _is_created_series(name, names):
            families.add(name)
    return sorted(families)


def _histogram_base(name: str, names: set[str]) -> str | None:
    for suffix in _HISTOGRAM_SUFFIXES:
        if name.endswith(suffix):
            base = name[: -len(suffix)]
            if f"{base}_bucket" in names or {f"{base}_sum", f"{base}_count"} <= names:
                return base
    return None


def _is_created_series(name: str, names: set[str]) -> bool:
    if not name.endswith("_created"):
        return False
    base = name[: -len("_created")]
    return any(f"{base}{suffix}" in names for suffix in ("_total", "_count", "_bucket"))


def _api_generation(families: list[str], label_names: set[str]) -> Literal["v1", "v0"] | None:
    if "engine" in label_names or _V1_ONLY.intersection(families):
        return "v1"
    if _V0_NAMES.intersection(families):
        return "v0"
    return None


def _interval(scrapes: list[Scrape]) -> float | None:
    if len(scrapes) < 2 or scrapes[0].taken_at is None or scrapes[-1].taken_at is None:
        return None
    return scrapes[-1].taken_at - scrapes[0].taken_at


def _known(values: list[float | None]) -> list[float]:
    return [v for v in values if v is not None]


def _whole_number(text: str | None) -> int | None:
    """A cache_config_info label (str() of the config field: "16", or "None" before profiling)."""
    try:
        value = float(text) if text is not None else math.nan
    except ValueError:
        return None
    return int(value) if value.is_integer() else None


def _fraction(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None else math.nan
    except ValueError:
        return None
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class _Indexed:
    """One scrape by metric name; NaN samples are left out as unknown."""

    by_name: dict[str, Series]
    names: frozenset[str]
    label_names: frozenset[str]  # of vllm: series


def _indexed(scrape: Scrape) -> _Indexed:
    """Worked out once per scrape (checking the counters at load time and the summary both read it),
    kept on the scrape as VllmServer.metrics keeps its summary."""
    cached = scrape.__dict__.get("_indexed")
    if cached is None or cached[0] is not scrape.samples or cached[1] != len(scrape.samples):
        by_name: dict[str, Series] = {}
        label_names: set[str] = set()
        for sample in scrape.samples:
            series = by_name.setdefault(sample.name, {})
            if sample.name.startswith("vllm:"):
                label_names.update(sample.labels)
            if not math.isnan(sample.value):
                key = sample.series_key
                series[key if key is not None else tuple(sorted(sample.labels.items()))] = sample.value
        names = frozenset(by_name)
        indexed = _Indexed({name: series for name, series in by_name.items() if series}, names, frozenset(label_names))
        cached = scrape.__dict__["_indexed"] = (scrape.samples, len(scrape.samples), indexed)
    return cached[2]


class _Scrapes:
    """The scrapes indexed by metric name; NaN samples are left out as unknown."""

    def __init__(self, scrapes: list[Scrape]) -> None:
        indexed = [_indexed(scrape) for scrape in scrapes]
        self.by_name: list[dict[str, Series]] = [i.by_name for i in indexed]
        self.names: set[str] = set().union(*(i.names for i in indexed))
        self.label_names: set[str] = set().union(*(i.label_names for i in indexed))  # of vllm: series
        self.start_times: list[float | None] = [
            _start_time(index) for index in self.by_name
        ]  # the process's, per scrape

    def first_exposed(self, names: tuple[str, ...]) -> str:
        return next((name for name in names if name in self.names), names[0])

    def series(self, name: str) -> list[Series]:
        """The metric in each scrape that has it, in order."""
        return [index[name] for index in self.by_name if index.get(name)]

    def per_scrape(self, name: str, combine: Callable[[list[float]], float]) -> list[float | None]:
        """One value per scrape (its series combined, e.g. summed over engines); None where absent."""
        return [combine(list(index[name].values())) if index.get(name) else None for index in self.by_name]

    def latest(self, name: str) -> float | None:
        seen = self.series(name)
        return sum(seen[-1].values()) if seen else None

    def increase(self, name: str) -> float | None:
        """The counter's increase over the scrapes, summed over series; None unless two scrapes have it."""
        grouped = self.increases(name)
        return sum(grouped.values()) if grouped is not None else None

    def increases(self, name: str, group_by: str | None = None) -> dict[str, float] | None:
        """Per value of label `group_by` (all series together under "" when None), the counter's
        increase, with resets read as Prometheus does: a drop means the counter restarted from 0."""
        seen = [
            (index[name], start) for index, start in zip(self.by_name, self.start_times, strict=True) if index.get(name)
        ]
        if len(seen) < 2:
            return None
        totals: dict[str, float] = {}
        previous: dict[LabelKey, float] = {}
        previous_start: float | None = None
        for series, start in seen:
            for key, value in series.items():
                group = dict(key).get(group_by, "") if group_by else ""
                before = previous.get(key)
                if before is not None and value < before and start is not None and start == previous_start:
                    return None  # down with no restart: not a counter that can be read
                step = 0.0 if before is None else value - before if value >= before else value
                totals[group] = totals.get(group, 0.0) + step
                previous[key] = value
            previous_start = start
        return totals

    def latest_by(self, name: str, label: str) -> dict[str, float]:
        seen = self.series(name)
        totals: dict[str, float] = defaultdict(float)
        for key, value in (seen[-1] if seen else {}).items():
            totals[dict(key).get(label, "")] += value
        return dict(totals)

    def cache_config(self) -> dict[str, str]:
        """vllm:cache_config_info's labels in the latest scrape that has it; engine 0's under data parallelism."""
        seen = self.series(CACHE_CONFIG)
        if not seen:
            return {}
        return dict(min(seen[-1], key=lambda key: _engine_order(dict(key).get("engine"))))


def _engine_order(engine: str | None) -> tuple[bool, int, str]:
    """Engines by number ("0" < "1" < "10"), any other label value after them."""
    if engine is not None and engine.isdigit():
        return (False, int(engine), "")
    return (True, 0, engine or "")


class _Latency:
    """One latency histogram, under the first of its names the server exposes.

    The window is the span between the scrapes when the count rose in it; otherwise (one scrape, or
    no request finished between them) it is the server's whole life as the latest scrape tells it.
    """

    def __init__(self, view: _Scrapes, names: tuple[str, ...]) -> None:
        base = next((n for n in names if f"{n}_count" in view.names), names[0])
        self.view = view
        self.sum_name, self.count_name, self.bucket_name = (f"{base}{s}" for s in ("_sum", "_count", "_bucket"))
        count_increase = view.increase(self.count_name)
        self.windowed = count_increase is not None and count_increase > 0

    def mean(self) -> float | None:
        if self.windowed:
            total, count = self.view.increase(self.sum_name), self.view.increase(self.count_name)
        else:
            total, count = self.view.latest(self.sum_name), self.view.latest(self.count_name)
        if total is None or count is None or count <= 0:
            return None
        return total / count

    def count(self) -> float | None:
        """Observations the mean is taken over."""
        return self.view.increase(self.count_name) if self.windowed else self.view.latest(self.count_name)

    def quantile(self, q: float) -> float | None:
        if self.windowed:
            by_bound = self.view.increases(self.bucket_name, group_by="le")
        else:
            by_bound = self.view.latest_by(self.bucket_name, "le")
        return bucket_quantile(q, by_bound or {})


def bucket_quantile(q: float, buckets: dict[str, float]) -> float | None:
    """PromQL's histogram_quantile over cumulative bucket counts keyed by their `le` text.

    None where PromQL answers NaN: no +Inf bucket, fewer than two buckets, no observations.
    """
    bounds: dict[float, float] = defaultdict(float)
    for le, count in buckets.items():
        try:
            bound = float(le)
        except ValueError:
            continue  # a bucket without a numeric `le` is ignored, as PromQL ignores it
        bounds[bound] += count
    ordered = sorted(bounds.items())
    if len(ordered) < 2 or ordered[-1][0] != math.inf:
        return None
    counts: list[float] = []
    for _, count in ordered:  # monotonic envelope, as PromQL forces it
        counts.append(max(count, counts[-1]) if counts else count)
    observations = counts[-1]
    if observations <= 0:
        return None
    rank = q * observations
    index = next(i for i, count in enumerate(counts) if count >= rank)
    if index == len(counts) - 1:
        return ordered[-2][0]
    upper = ordered[index][0]
    if index == 0:
        if upper <= 0:
            return upper
        return upper * rank / counts[0] if counts[0] > 0 else None
    lower, below = ordered[index - 1][0], counts[index - 1]
    if counts[index] == below:  # only with q = 0: PromQL's 0/0
        return None
    return lower + (upper - lower) * (rank - below) / (counts[index] - below)
