"""Thirty minutes of Prometheus history for the serving cluster of fixtures/busy-but-healthy, as
OpenMetrics text for `promtool tsdb create-blocks-from openmetrics`.

The labels are those a ServiceMonitor gives vLLM's /metrics (namespace, pod, container, service,
endpoint, instance, job, besides vLLM's model_name and engine) and those dcgm-exporter gives its GPUs
(UUID, gpu, Hostname, modelName, pci_bus_id, device, with the exporter pod's own namespace and pod
as target labels). Every scenario also holds a second vLLM app in namespace `research` in a KV storm
that lasts the whole window: a shared Prometheus, whose other tenant must never be blamed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from live_services import OpenMetrics

WINDOW_S = 30 * 60
STEP_S = 15
SAMPLES = WINDOW_S // STEP_S  # sample i is at end - WINDOW_S + i * STEP_S, i = 0 .. SAMPLES

NAMESPACE = "llm"
PODS = {  # pod -> (pod IP, node)
    "llama-70b-7f8d9c6b5d-pfnp5": ("10.244.4.102", "gpu-h100-1"),
    "llama-70b-7f8d9c6b5d-8q7hc": ("10.244.5.105", "gpu-h100-2"),
}
GPUS = {  # node -> UUIDs of its GPUs 0..3 (those the servers use), as fixtures/busy-but-healthy/gpu has them
    "gpu-h100-1": ("GPU-adce3cc3-ccdf-8c24-e800-56d6f5f29ee0", "GPU-170d82e3-8af2-c5db-84bc-c44f13158028"),
    "gpu-h100-2": ("GPU-a89da385-16f3-dfcd-1495-f2ea8d907ff9", "GPU-d9402e98-621c-8cb7-c816-1bfe6236d654"),
}
XID_GPU = ("gpu-h100-2", 1)
STORM_POD = "llama-70b-7f8d9c6b5d-pfnp5"
FOREIGN = ("research", "mistral-7b-5d8f7c9b4-x2x7k", "10.244.6.21")


@dataclass(frozen=True)
class ServerState:
    """One vLLM server at one sample; counters grow by the *_per_step values."""

    running: float
    waiting: float
    kv: float
    preemptions_per_step: float = 0.0
    tokens_per_step: float = 18000.0  # about 1,200 generated tokens a second
    stop_per_step: float = 30.0
    abort_per_step: float = 0.0


def busy(i: int) -> ServerState:
    """Busy and healthy: a queue that comes and goes every two minutes, KV use 0.6-0.75."""
    wave = math.sin(2 * math.pi * i / 8)
    return ServerState(running=44 + 4 * wave, waiting=max(0.0, round(3 * wave)), kv=round(0.675 + 0.075 * wave, 3))


def kv_storm_then_calm(i: int) -> ServerState:
    """The first 20 minutes: KV cache full, a queue climbing 5 -> 25, 3 preemptions a sample; then calm."""
    if i < 80:
        return ServerState(running=48, waiting=5 + round(20 * i / 79), kv=round(0.97 + 0.03 * (i % 4) / 3, 3),
                           preemptions_per_step=3, tokens_per_step=9000)  # fmt: skip
    return busy(i)


def queue_building(i: int) -> ServerState:
    """The last 20 minutes: the queue climbs 0 -> 30 while 32 run and the KV cache stays near 0.6."""
    if i < 40:
        return busy(i)
    return ServerState(running=32, waiting=round(30 * (i - 40) / 80), kv=round(0.58 + 0.04 * ((i // 4) % 2), 3))


def aborting(i: int) -> ServerState:
    """Busy, and for the last 15 minutes a gateway timing out: 12 of every 42 finished requests aborted."""
    state = busy(i)
    return ServerState(**{**state.__dict__, "abort_per_step": 12.0 if i >= 60 else 0.0})


def storm(i: int) -> ServerState:
    return ServerState(
        running=64, waiting=10 + round(30 * i / SAMPLES), kv=1.0, preemptions_per_step=5, tokens_per_step=6000
    )


@dataclass(frozen=True)
class Scenario:
    name: str
    servers: dict[str, Callable[[int], ServerState]]  # pod of NAMESPACE -> its shape
    xid_from: int | None = None  # sample from which XID_GPU reports Xid 79


SCENARIOS = {
    s.name: s
    for s in (
        Scenario("healthy-busy-hour", {pod: busy for pod in PODS}),
        Scenario("kv-storm-ended", {STORM_POD: kv_storm_then_calm} | {p: busy for p in PODS if p != STORM_POD}),
        Scenario("queue-building", {STORM_POD: queue_building} | {p: busy for p in PODS if p != STORM_POD}),
        Scenario("xid-on-one-gpu", {pod: busy for pod in PODS}, xid_from=SAMPLES - 24),
        Scenario("requests-aborted", {STORM_POD: aborting} | {p: busy for p in PODS if p != STORM_POD}),
    )
}


def openmetrics(scenario: Scenario, end: int) -> str:
    """The scenario's history, its newest sample at `end` (unix seconds)."""
    history = OpenMetrics()
    sample = history.sample

    servers = [(NAMESPACE, pod, ip, shape) for pod, shape in scenario.servers.items() for ip in [PODS[pod][0]]]
    servers.append((FOREIGN[0], FOREIGN[1], FOREIGN[2], storm))
    for namespace, pod, ip, shape in servers:
        app = pod.rsplit("-", 2)[0]
        labels = (f'container="vllm",endpoint="http",engine="0",instance="{ip}:8000",job="{app}",model_name="{app}",'
                  f'namespace="{namespace}",pod="{pod}",service="{app}"')  # fmt: skip
        totals = {"preemptions": 0.0, "tokens": 0.0, "stop": 0.0, "abort": 0.0}
        for i in range(SAMPLES + 1):
            t = end - WINDOW_S + i * STEP_S
            state = shape(i)
            totals["preemptions"] += state.preemptions_per_step
            totals["tokens"] += state.tokens_per_step
            totals["stop"] += state.stop_per_step
            totals["abort"] += state.abort_per_step
            sample("vllm:num_requests_running", "gauge", "vllm:num_requests_running", labels, state.running, t)
            sample("vllm:num_requests_waiting", "gauge", "vllm:num_requests_waiting", labels, state.waiting, t)
            sample("vllm:kv_cache_usage_perc", "gauge", "vllm:kv_cache_usage_perc", labels, state.kv, t)
            sample("vllm:num_preemptions", "counter", "vllm:num_preemptions_total", labels, totals["preemptions"], t)
            sample("vllm:generation_tokens", "counter", "vllm:generation_tokens_total", labels, totals["tokens"], t)
            sample("vllm:prompt_tokens", "counter", "vllm:prompt_tokens_total", labels, 4 * totals["tokens"], t)
            for reason in ("stop", "abort"):
                sample("vllm:request_success", "counter", "vllm:request_success_total",
                       f'{labels},finished_reason="{reason}"', totals[reason], t)  # fmt: skip
    for node, uuids in GPUS.items():
        for index, uuid in enumerate(uuids):
            labels = (f'DCGM_FI_DRIVER_VERSION="550.90.07",Hostname="{node}",'
                      f'UUID="{uuid}",container="nvidia-dcgm-exporter",'
                      f'device="nvidia{index}",gpu="{index}",instance="{node}:9400",job="nvidia-dcgm-exporter",'
                      'modelName="NVIDIA H100 80GB '
                      f'HBM3",namespace="gpu-operator",pci_bus_id="00000000:{0x18 + index:02X}:00.0",'
                      f'pod="nvidia-dcgm-exporter-{node[-1]}"')  # fmt: skip
            for i in range(SAMPLES + 1):
                t = end - WINDOW_S + i * STEP_S
                xid = 79 if scenario.xid_from is not None and (node, index) == XID_GPU and i >= scenario.xid_from else 0
                sample("DCGM_FI_DEV_XID_ERRORS", "gauge", "DCGM_FI_DEV_XID_ERRORS", labels, xid, t)
                sample("DCGM_FI_DEV_GPU_UTIL", "gauge", "DCGM_FI_DEV_GPU_UTIL", labels, 95, t)
                sample("DCGM_FI_DEV_FB_USED", "gauge", "DCGM_FI_DEV_FB_USED", labels, 74210, t)
                sample("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "DCGM_FI_DEV_ROW_REMAP_FAILURE", labels, 0, t)
                # a counter that dcgm-exporter exposes without "_total": typed gauge here, as OpenMetrics
                # gives counters that suffix
                sample("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "gauge", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
                       labels, 0, t)  # fmt: skip
    return history.text()


# --------------------------------------------------------------------------- the bundles

CLUSTER_FIXTURE = "busy-but-healthy"  # the cluster these histories belong to


@dataclass(frozen=True)
class Expected:
    rule: str | None  # the verdict's rule; None: healthy
    subject: str | None
    fires: tuple[str, ...]
    evidence: str = ""  # a pattern the verdict's first evidence line matches


EXPECTED = {
    "healthy-busy-hour": Expected(None, None, ()),
    # the storm filled the first 20 of the 30 minutes, whose newest sample is a minute before collection
    "kv-storm-ended": Expected(
        "VLLM-101",
        "vllm/llm/llama-70b-7f8d9c6b5d-pfnp5",
        ("VLLM-101",),
        r"peaked at 1 from .* UTC \((19|20) min\), ended 1[01]m before collection",
    ),
    "queue-building": Expected(
        "VLLM-114", "vllm/llm/llama-70b-7f8d9c6b5d-pfnp5", ("VLLM-114",), r"--max-num-seqs is not on the command line"
    ),
    "xid-on-one-gpu": Expected(
        "GPU-102",
        "gpu/gpu-h100-2/1",
        ("GPU-102",),
        r"Xid 79 \(GPU has fallen off the bus\): DCGM_FI_DEV_XID_ERRORS = 79",
    ),
    "requests-aborted": Expected("VLLM-118", "vllm/llm/llama-70b-7f8d9c6b5d-pfnp5", ("VLLM-118",), r"ended by abort="),
}


def collect_history_into(folder: Path, prometheus_url: str) -> list[str]:
    """`llmdiag collect`'s Prometheus source, scoped to NAMESPACE, into folder/prometheus/; the lines of
    sources that were not ok."""
    from diag.bundle.files import Bundle
    from diag.collect.base import Sink, Target
    from diag.collect.prometheus import collect_target

    bundle = Bundle()
    results = collect_target(Target(prometheus_url=prometheus_url, namespace=NAMESPACE), None, Sink(bundle))
    for rel, data in bundle.files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    return [f"{r.name}: {r.status}: {r.detail}" for r in results if r.status != "ok"]
