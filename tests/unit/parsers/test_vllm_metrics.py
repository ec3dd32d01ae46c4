import math
from dataclasses import dataclass, field

import pytest

from diag.parsers.prom_text import parse_exposition
from diag.parsers.vllm_metrics import bucket_quantile, metric_families, summarize
from diag.snapshot.model import Scrape

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
# Bucket bounds as vLLM declares them (vllm/v1/metrics/loggers.py), printed as prometheus_client prints floats.
TTFT_BOUNDS = (
    "0.001 0.005 0.01 0.02 0.04 0.06 0.08 0.1 0.25 0.5 0.75 1.0 2.5 5.0 7.5 10.0 20.0 40.0 80.0 160.0 640.0 2560.0"
)
ITL_BOUNDS = "0.01 0.025 0.05 0.075 0.1 0.15 0.2 0.3 0.4 0.5 0.75 1.0 2.5 5.0 7.5 10.0 20.0 40.0 80.0"
REQUEST_BOUNDS = (
    "0.3 0.5 0.8 1.0 1.5 2.0 2.5 5.0 10.0 15.0 20.0 30.0 40.0 50.0 60.0 120.0 240.0 480.0 960.0 1920.0 7680.0"
)
CREATED = "1.7649e+09"
ITL_HELP = {
    "vllm:inter_token_latency_seconds": "Histogram of inter-token latency in seconds.",
    "vllm:time_per_output_token_seconds": "Histogram of time per output token in seconds.",
}


@dataclass
class Engine:
    """What one engine has counted since it started; histograms from their raw observations."""

    running: float = 0.0
    waiting: float = 0.0
    kv_usage: float = 0.0
    preemptions: float = 0.0
    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    ttft: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)
    queue: list[float] = field(default_factory=list)
    prefill: list[float] = field(default_factory=list)
    decode: list[float] = field(default_factory=list)


def _histogram(name: str, help_text: str, bounds: str, observations: list[float], labels: str, le_first: bool) -> str:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
    for bound in bounds.split() + ["+Inf"]:
        count = sum(1 for o in observations if o <= float(bound))
        label_set = f'le="{bound}",{labels}' if le_first else f'{labels},le="{bound}"'
        lines.append(f"{name}_bucket{{{label_set}}} {float(count)!r}")
    lines.append(f"{name}_count{{{labels}}} {float(len(observations))!r}")
    lines.append(f"{name}_sum{{{labels}}} {float(sum(observations))!r}")
    return "\n".join(lines) + "\n"


def _gauge(name: str, help_text: str, values: list[tuple[str, float]]) -> str:
    return f"# HELP {name} {help_text}\n# TYPE {name} gauge\n" + "".join(
        f"{name}{{{labels}}} {v!r}\n" for labels, v in values
    )


def _counter(name: str, help_text: str, values: list[tuple[str, float]]) -> str:
    """prometheus_client's single-process output: <name>_total, then <name>_created as a gauge."""
    return (
        f"# HELP {name}_total {help_text}\n# TYPE {name}_total counter\n"
        + "".join(f"{name}_total{{{labels}}} {v!r}\n" for labels, v in values)
        + f"# HELP {name}_created {help_text}\n# TYPE {name}_created gauge\n"
        + "".join(f"{name}_created{{{labels}}} {CREATED}\n" for labels, _ in values)
    )


def v1_text(
    engines: list[Engine], num_gpu_blocks: int = 27351, itl_name: str = "vllm:inter_token_latency_seconds"
) -> str:
    labels = [f'model_name="{MODEL}",engine="{i}"' for i in range(len(engines))]

    def each(attribute: str) -> list[tuple[str, float]]:
        return [(label_set, getattr(e, attribute)) for label_set, e in zip(labels, engines, strict=True)]

    text = _gauge("vllm:num_requests_running", "Number of requests in model execution batches.", each("running"))
    text += _gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", each("waiting"))
    text += _gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", each("kv_usage"))
    text += _counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", each("preemptions"))
    text += _counter("vllm:prompt_tokens", "Number of prefill tokens processed.", each("prompt_tokens"))
    text += _counter("vllm:generation_tokens", "Number of generation tokens processed.", each("generation_tokens"))
    for label_set, e in zip(labels, engines, strict=True):
        text += _histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_BOUNDS,
            e.ttft,
            label_set,
            le_first=False,
        )
        text += _histogram(itl_name, ITL_HELP[itl_name], ITL_BOUNDS, e.itl, label_set, le_first=False)
        text += _histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            REQUEST_BOUNDS,
            e.e2e,
            label_set,
            le_first=False,
        )
        text += _histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            REQUEST_BOUNDS,
            e.queue,
            label_set,
            le_first=False,
        )
        text += _histogram(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            REQUEST_BOUNDS,
            e.prefill,
            label_set,
            le_first=False,
        )
        text += _histogram(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            REQUEST_BOUNDS,
            e.decode,
            label_set,
            le_first=False,
        )
    cache_config = [
        (
            f'block_size="16",cache_dtype="auto",enable_prefix_caching="True",gpu_memory_utilization="0.9",'
            f'num_cpu_blocks="0",num_gpu_blocks="{num_gpu_blocks}",num_gpu_blocks_override="None",swap_space="4",engine="{i}"',
            1.0,
        )
        for i in range(len(engines))
    ]
    return text + _gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", cache_config)


def v0_text(engine: Engine, swapped: float = 0.0) -> str:
    """A V0 server: only model_name, gpu/cpu cache gauges, swapped requests, time_per_output_token."""
    labels = f'model_name="{MODEL}"'
    text = _gauge(
        "vllm:num_requests_running", "Number of requests currently running on GPU.", [(labels, engine.running)]
    )
    text += _gauge("vllm:num_requests_swapped", "Number of requests swapped to CPU.", [(labels, swapped)])
    text += _gauge(
        "vllm:num_requests_waiting", "Number of requests waiting to be processed.", [(labels, engine.waiting)]
    )
    text += _gauge(
        "vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", [(labels, engine.kv_usage)]
    )
    text += _gauge("vllm:cpu_cache_usage_perc", "CPU KV-cache usage. 1 means 100 percent usage.", [(labels, 0.0)])
    text += _counter(
        "vllm:num_preemptions", "Cumulative number of preemption from the engine.", [(labels, engine.preemptions)]
    )
    text += _counter(
        "vllm:generation_tokens", "Number of generation tokens processed.", [(labels, engine.generation_tokens)]
    )
    text += _histogram(
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        TTFT_BOUNDS,
        engine.ttft,
        labels,
        le_first=True,
    )
    text += _histogram(
        "vllm:time_per_output_token_seconds",
        ITL_HELP["vllm:time_per_output_token_seconds"],
        ITL_BOUNDS,
        engine.itl,
        labels,
        le_first=True,
    )
    return text


def scrape(text: str, taken_at: float | None = None) -> Scrape:
    exposition = parse_exposition(text)
    assert exposition.errors == []
    return Scrape(exposition.samples, taken_at)


# --------------------------------------------------------------------------- V1


def test_v1_two_engines_two_scrapes():
    first = [
        Engine(
            running=4,
            waiting=0,
            kv_usage=0.31,
            preemptions=2,
            prompt_tokens=5000,
            generation_tokens=12000,
            ttft=[0.03, 0.2],
            itl=[0.02, 0.02],
            e2e=[2.0],
            queue=[0.1],
            prefill=[0.4],
            decode=[1.5],
        ),
        Engine(
            running=5,
            waiting=1,
            kv_usage=0.42,
            preemptions=0,
            prompt_tokens=4000,
            generation_tokens=9000,
            ttft=[0.05],
            itl=[0.03],
            e2e=[1.0],
            queue=[0.2],
            prefill=[0.3],
            decode=[0.5],
        ),
    ]
    later = [
        Engine(
            running=16,
            waiting=7,
            kv_usage=0.97,
            preemptions=9,
            prompt_tokens=9000,
            generation_tokens=15000,
            ttft=first[0].ttft + [0.9, 1.8, 3.0],
            itl=first[0].itl + [0.2, 0.2, 0.2, 0.3],
            e2e=first[0].e2e + [30.0, 50.0],
            queue=first[0].queue + [12.0, 20.0],
            prefill=first[0].prefill + [0.8, 1.2],
            decode=first[0].decode + [17.0, 28.0],
        ),
        Engine(
            running=14,
            waiting=5,
            kv_usage=0.88,
            preemptions=1,
            prompt_tokens=6000,
            generation_tokens=10000,
            ttft=first[1].ttft + [2.1],
            itl=first[1].itl + [0.25],
            e2e=first[1].e2e + [40.0],
            queue=first[1].queue + [16.0],
            prefill=first[1].prefill + [1.0],
            decode=first[1].decode + [23.0],
        ),
    ]
    m = summarize([scrape(v1_text(first), 1000.0), scrape(v1_text(later), 1030.0)])

    assert m.scrapes == 2
    assert m.api_generation == "v1"
    assert m.kv_cache_usage == 0.97  # the fullest engine
    assert m.kv_cache_usage_max == 0.97
    assert m.requests_running == 30.0  # summed over engines
    assert (m.requests_waiting, m.waiting_first, m.waiting_max, m.waiting_growth) == (12.0, 1.0, 12.0, 11.0)
    assert (m.preemptions_total, m.preemptions_delta) == (10.0, 8.0)
    assert m.prompt_tokens_delta == 6000.0
    assert m.generation_tokens_delta == 4000.0
    assert m.interval_seconds == 30.0
    assert m.generation_tokens_per_s == pytest.approx(4000.0 / 30.0)
    # only what finished between the scrapes: 4 first tokens, 5 inter-token gaps, 3 requests
    assert m.ttft_mean_s == pytest.approx((0.9 + 1.8 + 3.0 + 2.1) / 4)
    assert m.itl_mean_s == pytest.approx((0.2 * 3 + 0.3 + 0.25) / 5)
    assert m.e2e_mean_s == pytest.approx(120.0 / 3)
    assert m.queue_time_mean_s == pytest.approx(48.0 / 3)
    assert m.prefill_time_mean_s == pytest.approx(3.0 / 3)
    assert m.decode_time_mean_s == pytest.approx(68.0 / 3)
    # TTFT window buckets (cumulative): le=1.0 -> 1, le=2.5 -> 3, le=5.0 -> 4. rank 0.9*4 = 3.6 lies in
    # (2.5, 5.0] holding 1: 2.5 + 2.5 * (3.6 - 3) / 1
    assert m.ttft_p90_s == pytest.approx(4.0)
    # ITL window: le=0.2 -> 3, le=0.25 isn't a bound, le=0.3 -> 5; rank 4.5 in (0.2, 0.3]: 0.2 + 0.1 * 1.5 / 2
    assert m.itl_p90_s == pytest.approx(0.275)
    assert (m.num_gpu_blocks, m.block_size, m.gpu_memory_utilization) == (27351, 16, 0.9)
    assert m.missing == []
    assert "vllm:time_to_first_token_seconds" in m.present
    assert "vllm:num_preemptions_total" in m.present
    assert m.present == sorted(m.present)


def test_one_scrape_reads_the_whole_life_and_has_no_deltas():
    engine = Engine(
        running=2,
        waiting=3,
        kv_usage=0.5,
        preemptions=4,
        prompt_tokens=100,
        generation_tokens=900,
        ttft=[0.05, 0.15, 0.3, 0.6],
        itl=[0.02, 0.04],
        e2e=[3.0, 5.0],
    )
    m = summarize([scrape(v1_text([engine]), 1000.0)])
    assert m.scrapes == 1
    assert (m.requests_waiting, m.waiting_first, m.waiting_max) == (3.0, 3.0, 3.0)
    assert m.waiting_growth is None
    assert m.preemptions_total == 4.0 and m.preemptions_delta is None
    assert m.prompt_tokens_delta is None and m.generation_tokens_delta is None
    assert m.interval_seconds is None and m.generation_tokens_per_s is None
    assert m.ttft_mean_s == pytest.approx(1.1 / 4)
    assert m.e2e_mean_s == pytest.approx(4.0)
    # buckets le=0.25 -> 2, le=0.5 -> 3; rank 3.6 in (0.5, 0.75] holding 1: 0.5 + 0.25 * 0.6
    assert m.ttft_p90_s == pytest.approx(0.65)
    # no request finished yet: unknown, not 0
    assert m.queue_time_mean_s is None and m.prefill_time_mean_s is None


def test_no_request_finished_between_scrapes_falls_back_to_the_whole_life():
    engine = Engine(running=0, waiting=9, generation_tokens=500, ttft=[0.4, 0.6], itl=[0.05])
    m = summarize([scrape(v1_text([engine]), 10.0), scrape(v1_text([engine]), 40.0)])
    assert m.ttft_mean_s == pytest.approx(0.5)
    assert m.itl_mean_s == pytest.approx(0.05)
    assert m.generation_tokens_delta == 0.0  # the counter is there and did not move
    assert m.generation_tokens_per_s == 0.0
    assert m.waiting_growth == 0.0


def test_scrapes_without_times_still_give_deltas():
    m = summarize([scrape(v1_text([Engine(generation_tokens=100)])), scrape(v1_text([Engine(generation_tokens=350)]))])
    assert m.generation_tokens_delta == 250.0
    assert m.interval_seconds is None and m.generation_tokens_per_s is None


def test_counter_reset_between_scrapes_is_read_like_rate():
    # the server restarted between the first and second scrape: 1000 -> 200 -> 500 is 200 + 300 new tokens
    scrapes = [
        scrape(v1_text([Engine(generation_tokens=1000, preemptions=50, ttft=[0.5] * 10)]), 0.0),
        scrape(v1_text([Engine(generation_tokens=200, preemptions=0, ttft=[0.1, 2.0])]), 60.0),
        scrape(v1_text([Engine(generation_tokens=500, preemptions=3, ttft=[0.1, 2.0, 2.0])]), 120.0),
    ]
    m = summarize(scrapes)
    assert m.generation_tokens_delta == 500.0
    assert m.preemptions_delta == 3.0
    assert m.preemptions_total == 3.0
    assert m.generation_tokens_per_s == pytest.approx(500.0 / 120.0)
    # after the reset the histogram counted 2 (0.1, 2.0), then one more 2.0; _sum and _count both fell
    assert m.ttft_mean_s == pytest.approx(4.1 / 3)


def test_data_parallel_cache_config_is_read_from_engine_0():
    text = v1_text([Engine(), Engine()], num_gpu_blocks=4096)
    text = text.replace(
        'num_gpu_blocks="4096",num_gpu_blocks_override="None",swap_space="4",engine="1"',
        'num_gpu_blocks="3000",num_gpu_blocks_override="None",swap_space="4",engine="1"',
    )
    assert summarize([scrape(text)]).num_gpu_blocks == 4096


def test_cache_config_before_profiling_has_no_block_count():
    text = v1_text([Engine()]).replace('num_gpu_blocks="27351"', 'num_gpu_blocks="None"')
    m = summarize([scrape(text)])
    assert m.num_gpu_blocks is None and m.block_size == 16


# --------------------------------------------------------------------------- old names


def test_v0_server_under_old_names():
    engine = Engine(
        running=6, waiting=2, kv_usage=0.99, preemptions=120, generation_tokens=40000, ttft=[0.2, 0.4], itl=[0.1, 0.3]
    )
    m = summarize([scrape(v0_text(engine, swapped=3))])
    assert m.api_generation == "v0"
    assert m.kv_cache_usage == 0.99
    assert m.requests_running == 6.0 and m.requests_waiting == 2.0
    assert m.preemptions_total == 120.0
    assert m.itl_mean_s == pytest.approx(0.2)  # from time_per_output_token_seconds
    # ITL buckets le=0.1 -> 1, le=0.3 -> 2: rank 1.8 in (0.2, 0.3] (le=0.15, 0.2 hold 1): 0.2 + 0.1 * 0.8
    assert m.itl_p90_s == pytest.approx(0.28)
    assert m.num_gpu_blocks is None and m.block_size is None  # no cache_config_info in this scrape
    assert m.missing == []
    assert "vllm:num_requests_swapped" in m.present


def test_v1_before_0_11_with_hidden_time_per_output_token_only():
    text = v1_text([Engine(itl=[0.04, 0.06])], itl_name="vllm:time_per_output_token_seconds")
    m = summarize([scrape(text)])
    assert m.api_generation == "v1"  # engine label and kv_cache_usage_perc
    assert m.itl_mean_s == pytest.approx(0.05)
    assert m.missing == []


def test_early_v1_with_gpu_cache_usage_and_engine_label_is_v1():
    text = (
        "# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.\n"
        "# TYPE vllm:gpu_cache_usage_perc gauge\n"
        f'vllm:gpu_cache_usage_perc{{engine="0",model_name="{MODEL}"}} 0.25\n'
    )
    m = summarize([scrape(text)])
    assert m.api_generation == "v1"
    assert m.kv_cache_usage == 0.25


def test_new_kv_name_wins_when_both_are_exposed():
    text = (
        f'vllm:gpu_cache_usage_perc{{model_name="{MODEL}",engine="0"}} 0.1\n'
        f'vllm:kv_cache_usage_perc{{model_name="{MODEL}",engine="0"}} 0.8\n'
    )
    assert summarize([scrape(text)]).kv_cache_usage == 0.8


def test_missing_families_are_none_and_listed_by_their_v1_name():
    text = (
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f'vllm:num_requests_running{{model_name="{MODEL}",engine="0"}} 1.0\n'
    )
    m = summarize([scrape(text, 1.0), scrape(text, 2.0)])
    assert m.requests_running == 1.0
    assert m.kv_cache_usage is None and m.kv_cache_usage_max is None
    assert m.requests_waiting is None and m.waiting_growth is None
    assert m.preemptions_total is None and m.preemptions_delta is None
    assert m.generation_tokens_delta is None and m.generation_tokens_per_s is None
    assert m.ttft_mean_s is None and m.ttft_p90_s is None and m.itl_mean_s is None
    assert m.interval_seconds == 1.0
    assert m.missing == [
        "vllm:kv_cache_usage_perc",
        "vllm:num_requests_waiting",
        "vllm:num_preemptions_total",
        "vllm:generation_tokens_total",
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
    ]


def test_not_vllm_at_all():
    text = (
        "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
        "# TYPE process_resident_memory_bytes gauge\n"
        "process_resident_memory_bytes 3.2e+08\n"
    )
    m = summarize([scrape(text)])
    assert m.api_generation is None
    assert m.present == ["process_resident_memory_bytes"]
    assert len(m.missing) == 7


def test_nan_gauge_is_unknown():
    m = summarize([scrape(f'vllm:kv_cache_usage_perc{{model_name="{MODEL}",engine="0"}} NaN\n')])
    assert m.kv_cache_usage is None


def test_a_scrape_read_again_after_its_samples_changed_is_indexed_again():
    """Each scrape is indexed once and the index kept on it: a changed sample list must not read the old one."""
    first = scrape(f'vllm:kv_cache_usage_perc{{model_name="{MODEL}",engine="0"}} 0.5\n')
    assert summarize([first]).kv_cache_usage == 0.5
    first.samples = scrape(f'vllm:kv_cache_usage_perc{{model_name="{MODEL}",engine="0"}} 0.9\n').samples
    assert summarize([first]).kv_cache_usage == 0.9
    first.samples.append(scrape(f'vllm:num_requests_waiting{{model_name="{MODEL}",engine="0"}} 7\n').samples[0])
    assert summarize([first]).requests_waiting == 7


def test_no_scrapes():
    m = summarize([])
    assert m.scrapes == 0 and m.api_generation is None and m.kv_cache_usage is None and m.present == []


# --------------------------------------------------------------------------- helpers


def test_metric_families_fold_histograms_and_created_series():
    names = {
        "vllm:e2e_request_latency_seconds_bucket",
        "vllm:e2e_request_latency_seconds_sum",
        "vllm:e2e_request_latency_seconds_count",
        "vllm:e2e_request_latency_seconds_created",
        "vllm:iteration_tokens_total_bucket",
        "vllm:iteration_tokens_total_sum",
        "vllm:iteration_tokens_total_count",
        "vllm:prompt_tokens_total",
        "vllm:prompt_tokens_created",
        "http_request_size_bytes_count",
        "vllm:lora_requests_info",
    }
    assert metric_families(names) == [
        "http_request_size_bytes_count",  # a _count alone is not a histogram
        "vllm:e2e_request_latency_seconds",
        "vllm:iteration_tokens_total",
        "vllm:lora_requests_info",
        "vllm:prompt_tokens_total",
    ]


def test_bucket_quantile_follows_histogram_quantile():
    # in the lowest bucket the lower bound is 0
    assert bucket_quantile(0.5, {"0.1": 10.0, "1.0": 10.0, "+Inf": 10.0}) == pytest.approx(0.05)
    # in the +Inf bucket: the highest finite bound
    assert bucket_quantile(0.9, {"0.1": 1.0, "1.0": 2.0, "+Inf": 10.0}) == 1.0
    # unordered input and "1" / "1.0" spelled differently add up like PromQL's coalescing
    assert bucket_quantile(0.5, {"+Inf": 4.0, "2": 4.0, "1": 1.0, "1.0": 1.0}) == pytest.approx(1.0)
    # a non-monotonic bucket is lifted to the envelope
    assert bucket_quantile(0.5, {"1.0": 4.0, "2.0": 3.0, "+Inf": 8.0}) == 1.0
    # a bound <= 0 in the lowest bucket is returned as is
    assert bucket_quantile(0.1, {"-1": 5.0, "0": 6.0, "+Inf": 6.0}) == -1.0


@pytest.mark.parametrize(
    "buckets",
    [
        {},
        {"+Inf": 5.0},  # fewer than two buckets
        {"0.1": 1.0, "1.0": 2.0},  # no +Inf bucket
        {"0.1": 0.0, "+Inf": 0.0},  # no observations
        {"abc": 1.0, "+Inf": 1.0},  # `le` that is not a number is ignored, leaving one bucket
    ],
)
def test_bucket_quantile_is_none_where_promql_gives_nan(buckets):
    assert bucket_quantile(0.9, buckets) is None


def test_all_fields_are_none_or_a_number_never_a_made_up_zero():
    m = summarize([scrape("vllm:unrelated_metric 1\n")])
    numbers = {k: v for k, v in vars(m).items() if k not in ("scrapes", "present", "missing")}
    assert all(v is None for v in numbers.values())
    assert not any(isinstance(v, float) and math.isnan(v) for v in vars(m).values())


def test_a_family_absent_from_the_last_scrape_is_read_from_the_last_that_has_it():
    full = scrape(f'vllm:kv_cache_usage_perc{{model_name="{MODEL}",engine="0"}} 0.7\n', 0.0)
    partial = scrape(f'vllm:num_requests_running{{model_name="{MODEL}",engine="0"}} 2\n', 5.0)
    m = summarize([full, partial])
    assert m.kv_cache_usage == 0.7 and m.kv_cache_usage_max == 0.7
    assert m.requests_running == 2.0


@pytest.mark.parametrize(
    ("line", "impossible"),
    [
        ("vllm:kv_cache_usage_perc 1.5", True),
        ("vllm:gpu_cache_usage_perc -0.1", True),
        ("vllm:kv_cache_usage_perc NaN", True),
        ("vllm:kv_cache_usage_perc 1", False),
        ("vllm:num_requests_waiting -Inf", True),
        ("vllm:num_requests_running -1", True),
        ("vllm:num_requests_running 0", False),
        ("vllm:some_other_gauge -1", False),
    ],
)
def test_impossible_gauges(line: str, impossible: bool) -> None:
    from diag.parsers.vllm_metrics import impossible as why

    (sample,) = parse_exposition(line + "\n").samples
    assert (why(sample) is not None) == impossible


def _counted(start: float, generated: float) -> Scrape:
    text = f'process_start_time_seconds {start}\nvllm:generation_tokens_total{{engine="0"}} {generated}\n'
    return Scrape(parse_exposition(text).samples)


def test_a_counter_that_goes_down_without_a_restart_is_unknown() -> None:
    from diag.parsers.vllm_metrics import counters_gone_back

    earlier, later = _counted(1000, 500), _counted(1000, 100)
    assert counters_gone_back(earlier, later) == [
        "vllm:generation_tokens_total went down from 500 to 100 with no restart"
    ]
    assert summarize([earlier, later]).generation_tokens_delta is None


def test_a_counter_that_goes_down_after_a_restart_counts_from_zero() -> None:
    from diag.parsers.vllm_metrics import counters_gone_back

    earlier, later = _counted(1000, 500), _counted(2000, 100)
    assert counters_gone_back(earlier, later) == []
    assert summarize([earlier, later]).generation_tokens_delta == 100
