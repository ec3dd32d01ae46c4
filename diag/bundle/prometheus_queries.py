"""The range queries llmdiag asks Prometheus, by the file stem each answer is saved under.

`llmdiag collect` writes `prometheus/<stem>.json`; the analysis knows what a file holds by its stem
alone, so a stem, once shipped, keeps its meaning. `{selector}` is where the collector puts the label
matchers that scope a query to the namespaces being triaged (empty for every namespace).

vLLM names are asked under both generations where they differ (`vllm:kv_cache_usage_perc` replaced
`vllm:gpu_cache_usage_perc`; `vllm:inter_token_latency_seconds` replaced
`vllm:time_per_output_token_seconds` in 0.11). DCGM names are dcgm-exporter's: its default counter set
(etc/default-counters.csv) has the clocks, temperatures, power draw, utilisation, framebuffer, Xid, PCIe
replays, NVLink bandwidth and remapped rows; the clock-event reasons (DCGM_FI_DEV_CLOCKS_EVENT_REASONS,
DCGM_FI_DEV_CLOCK_THROTTLE_REASONS before DCGM 3.3), the power limit, the ECC and NVLink error counters
and the violation counters are not in it, so their answers are often empty. GPU queries are not
scoped by namespace: dcgm-exporter labels a GPU with the pod that holds it, so a namespace matcher
would drop exactly the GPUs whose memory something else holds; the analysis joins GPU series by UUID.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# Rates and quantiles over 5 minutes: Prometheus' own guidance is four scrape intervals or more,
# and dcgm-exporter and most ServiceMonitors scrape every 15 to 60 seconds.
RATE_WINDOW = "5m"


@dataclass(frozen=True)
class RangeQuery:
    stem: str
    promql: str  # with "{selector}" where the scoping matchers go
    subject: Literal["vllm", "gpu"]  # what its series join to
    # How one subject's series (a server's engines, say) become one value per time: "sum" for
    # counts and rates, "max" for fractions, latencies and states (the worst engine tells).
    combine: Literal["sum", "max"] = "max"
    by: str | None = None  # a label kept apart instead of combined (request_success's finished_reason)
    # Series that only add to a subject another query made known: `up`, a process' start time and
    # kube-state-metrics' restart counter are there for every pod of a namespace, vLLM or not.
    joins_only: bool = False


def _histogram_p99(family: str) -> str:
    return f"histogram_quantile(0.99, rate({family}_bucket{{selector}}[{RATE_WINDOW}]))"


def _histogram_mean(family: str) -> str:
    return f"rate({family}_sum{{selector}}[{RATE_WINDOW}]) / rate({family}_count{{selector}}[{RATE_WINDOW}])"


RANGE_QUERIES: tuple[RangeQuery, ...] = (
    RangeQuery("vllm_kv_cache_usage_perc", "vllm:kv_cache_usage_perc{selector}", "vllm"),
    RangeQuery("vllm_gpu_cache_usage_perc", "vllm:gpu_cache_usage_perc{selector}", "vllm"),
    RangeQuery("vllm_num_requests_waiting", "vllm:num_requests_waiting{selector}", "vllm", "sum"),
    RangeQuery("vllm_num_requests_running", "vllm:num_requests_running{selector}", "vllm", "sum"),
    RangeQuery(
        "vllm_preemptions_rate_5m", f"rate(vllm:num_preemptions_total{{selector}}[{RATE_WINDOW}])", "vllm", "sum"
    ),
    RangeQuery(
        "vllm_prompt_tokens_rate_5m", f"rate(vllm:prompt_tokens_total{{selector}}[{RATE_WINDOW}])", "vllm", "sum"
    ),
    RangeQuery(
        "vllm_generation_tokens_rate_5m",
        f"rate(vllm:generation_tokens_total{{selector}}[{RATE_WINDOW}])",
        "vllm",
        "sum",
    ),
    RangeQuery(
        "vllm_request_success_rate_5m",
        f"rate(vllm:request_success_total{{selector}}[{RATE_WINDOW}])",
        "vllm",
        "sum",
        by="finished_reason",
    ),  # fmt: skip
    RangeQuery("vllm_ttft_mean_5m", _histogram_mean("vllm:time_to_first_token_seconds"), "vllm"),
    RangeQuery("vllm_queue_time_mean_5m", _histogram_mean("vllm:request_queue_time_seconds"), "vllm"),
    RangeQuery("vllm_itl_mean_5m", _histogram_mean("vllm:inter_token_latency_seconds"), "vllm"),
    RangeQuery("vllm_tpot_mean_5m", _histogram_mean("vllm:time_per_output_token_seconds"), "vllm"),
    RangeQuery("vllm_ttft_p99_5m", _histogram_p99("vllm:time_to_first_token_seconds"), "vllm"),
    RangeQuery("vllm_itl_p99_5m", _histogram_p99("vllm:inter_token_latency_seconds"), "vllm"),
    RangeQuery("vllm_tpot_p99_5m", _histogram_p99("vllm:time_per_output_token_seconds"), "vllm"),
    # When a server went away and came back: its target's `up`, its process' start time (vLLM's /metrics
    # serves prometheus_client's process collector) and, where kube-state-metrics is scraped, its
    # containers' restarts.
    RangeQuery("vllm_up", "up{selector}", "vllm", joins_only=True),
    RangeQuery("vllm_process_start_time", "process_start_time_seconds{selector}", "vllm", joins_only=True),
    RangeQuery(
        "kube_container_restarts", "kube_pod_container_status_restarts_total{selector}", "vllm", "sum", joins_only=True
    ),
    RangeQuery("dcgm_xid_errors", "DCGM_FI_DEV_XID_ERRORS{selector}", "gpu"),
    RangeQuery("dcgm_gpu_util", "DCGM_FI_DEV_GPU_UTIL{selector}", "gpu"),
    RangeQuery("dcgm_fb_used", "DCGM_FI_DEV_FB_USED{selector}", "gpu"),
    RangeQuery("dcgm_row_remap_failure", "DCGM_FI_DEV_ROW_REMAP_FAILURE{selector}", "gpu"),
    RangeQuery("dcgm_uncorrectable_remapped_rows", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{selector}", "gpu"),
    RangeQuery("dcgm_sm_clock", "DCGM_FI_DEV_SM_CLOCK{selector}", "gpu"),
    RangeQuery("dcgm_mem_clock", "DCGM_FI_DEV_MEM_CLOCK{selector}", "gpu"),
    RangeQuery("dcgm_gpu_temp", "DCGM_FI_DEV_GPU_TEMP{selector}", "gpu"),
    RangeQuery("dcgm_memory_temp", "DCGM_FI_DEV_MEMORY_TEMP{selector}", "gpu"),
    RangeQuery("dcgm_power_usage", "DCGM_FI_DEV_POWER_USAGE{selector}", "gpu"),
    RangeQuery("dcgm_power_mgmt_limit", "DCGM_FI_DEV_POWER_MGMT_LIMIT{selector}", "gpu"),
    RangeQuery("dcgm_clocks_event_reasons", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS{selector}", "gpu"),
    RangeQuery("dcgm_clock_throttle_reasons", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{selector}", "gpu"),
    RangeQuery("dcgm_pcie_replay_rate_5m", f"rate(DCGM_FI_DEV_PCIE_REPLAY_COUNTER{{selector}}[{RATE_WINDOW}])", "gpu"),
    RangeQuery(
        "dcgm_nvlink_bandwidth_rate_5m", f"rate(DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{{selector}}[{RATE_WINDOW}])", "gpu"
    ),
    RangeQuery("dcgm_ecc_dbe_vol_total", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{selector}", "gpu"),
    RangeQuery("dcgm_power_violation_rate_5m", f"rate(DCGM_FI_DEV_POWER_VIOLATION{{selector}}[{RATE_WINDOW}])", "gpu"),
    RangeQuery(
        "dcgm_thermal_violation_rate_5m", f"rate(DCGM_FI_DEV_THERMAL_VIOLATION{{selector}}[{RATE_WINDOW}])", "gpu"
    ),
)

BY_STEM: dict[str, RangeQuery] = {q.stem: q for q in RANGE_QUERIES}
# The same gauge or histogram under its new and old vLLM name: asked for both, one fact from either.
RENAMED_PAIRS: tuple[tuple[str, str], ...] = (
    ("vllm_kv_cache_usage_perc", "vllm_gpu_cache_usage_perc"),
    ("vllm_itl_p99_5m", "vllm_tpot_p99_5m"),
    ("vllm_itl_mean_5m", "vllm_tpot_mean_5m"),
)

# What a second /metrics read of a busy vLLM server would add (its queue over time, its token rate, a
# hang) where Prometheus holds these series for it: the rules read them from its history instead.
RATE_HISTORY = ("vllm_num_requests_waiting", "vllm_num_requests_running", "vllm_generation_tokens_rate_5m")
