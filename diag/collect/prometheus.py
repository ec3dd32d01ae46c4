"""Prometheus: a fixed set of range queries over the last 30 minutes, one file per query.

Each file is the /api/v1/query_range answer as Prometheus sent it, with a top-level "query" field
added so that the file says what it answers. Plain requests, not prometheus-api-client: the client
returns only data.result and drops status, resultType and warnings (see docs/decisions.md).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlencode

from diag.collect.base import SourceResult, Sink
from diag.collect.http import DEFAULT_MAX_ANSWER_BYTES, HttpGet, Unreachable, body_excerpt, direct_get

WINDOW_S = 30 * 60
STEP_S = 15

# file stem -> PromQL. vLLM names from its V1 /metrics (kv_cache_usage_perc replaced
# gpu_cache_usage_perc; both are asked for); DCGM names from dcgm-exporter's default counters.
RANGE_QUERIES: dict[str, str] = {
    "vllm_num_requests_waiting": "vllm:num_requests_waiting",
    "vllm_num_requests_running": "vllm:num_requests_running",
    "vllm_kv_cache_usage_perc": "vllm:kv_cache_usage_perc",
    "vllm_gpu_cache_usage_perc": "vllm:gpu_cache_usage_perc",
    "vllm_preemptions_rate_5m": "rate(vllm:num_preemptions_total[5m])",
    "vllm_generation_tokens_rate_5m": "rate(vllm:generation_tokens_total[5m])",
    "vllm_ttft_p90_5m": "histogram_quantile(0.9, rate(vllm:time_to_first_token_seconds_bucket[5m]))",
    "vllm_e2e_latency_p90_5m": "histogram_quantile(0.9, rate(vllm:e2e_request_latency_seconds_bucket[5m]))",
    "dcgm_xid_errors": "DCGM_FI_DEV_XID_ERRORS",
    "dcgm_gpu_util": "DCGM_FI_DEV_GPU_UTIL",
    "dcgm_fb_used": "DCGM_FI_DEV_FB_USED",
    "dcgm_fb_free": "DCGM_FI_DEV_FB_FREE",
}


def collect_prometheus(
    url: str,
    sink: Sink,
    timeout_s: float,
    queries: dict[str, str] = RANGE_QUERIES,
    max_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
) -> list[SourceResult]:
    """Run every query over the last WINDOW_S seconds, STEP_S apart -> prometheus/<name>.json."""
    get = direct_get(url, max_bytes)
    end = time.time()
    span = {"start": f"{end - WINDOW_S:.3f}", "end": f"{end:.3f}", "step": f"{STEP_S:g}"}
    with ThreadPoolExecutor(max_workers=min(8, max(1, len(queries)))) as pool:
        return list(pool.map(lambda item: _query_range(get, *item, span, sink, timeout_s), queries.items()))


def _query_range(get: HttpGet, name: str, query: str, span: dict[str, str], sink: Sink, timeout_s: float) -> SourceResult:
    source = f"prometheus/{name}.json"
    try:
        status, body = get("/api/v1/query_range?" + urlencode({"query": query, **span}), timeout_s)
    except Unreachable as e:
        return SourceResult(source, "failed", f"{query}: {e.detail}")
    try:
        answer = json.loads(body)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        return SourceResult(source, "failed", f"{query}: HTTP {status}, not a Prometheus API answer: {body_excerpt(body)}")
    if status != 200 or answer.get("status") != "success":
        error = answer.get("error") or answer.get("status") or "no error given"
        return SourceResult(source, "failed", f"{query}: HTTP {status}: {error}")
    sink.write(source, json.dumps({"query": query, **answer}))
    return SourceResult(source, "ok", f"{query}: {_series_count(answer)} series")


def _series_count(answer: dict) -> int:
    data = answer.get("data")
    result = data.get("result") if isinstance(data, dict) else None
    return len(result) if isinstance(result, list) else 0
