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


# Issue 31: the default dcgm-exporter counters of every GPU of both nodes, labelled by its pod mapping with
# the pod each GPU is given to. gpu-h100-1 holds the vLLM server pfnp5 (GPUs 0-3) and another tenant's
# busy, cool fine-tuning job (research/finetune-qwen-0-xrcn6, GPUs 4-7), as fixtures/busy-but-healthy has it.
NODE_GPUS = {  # node -> UUIDs of GPUs 0..7, as fixtures/busy-but-healthy/gpu has them
    "gpu-h100-1": ("GPU-adce3cc3-ccdf-8c24-e800-56d6f5f29ee0", "GPU-170d82e3-8af2-c5db-84bc-c44f13158028",
                   "GPU-f1ee49e7-8524-7d2c-b0f1-7d7d12fa3be3", "GPU-835c96bc-36e0-02db-6d51-61bece794d56",
                   "GPU-08b10cbe-f8b5-0473-45db-338c68d4140f", "GPU-3d987dfe-a89e-c807-4f89-d2ddce32988e",
                   "GPU-4d9243f6-e1e5-8553-ba4f-6cdb7ee1fb17", "GPU-6cd0b46d-5efc-067c-a22a-c5a357e01148"),
    "gpu-h100-2": ("GPU-a89da385-16f3-dfcd-1495-f2ea8d907ff9", "GPU-d9402e98-621c-8cb7-c816-1bfe6236d654"),
}  # fmt: skip
BATCH = ("research", "finetune-qwen-0-xrcn6", "trainer")
SLOW_FROM, SLOW_UNTIL = 60, 120  # samples 60..119: the 15 minutes after the first 15, ended one sample before the end


@dataclass(frozen=True)
class GpuState:
    util: float
    sm_clock: float
    temp: float
    power: float
    reasons: int | None = None  # DCGM_FI_DEV_CLOCKS_EVENT_REASONS, where a custom counter set exports it
    mem_clock: float = 2619.0


def gpu_busy(i: int) -> GpuState:
    return GpuState(util=100, sm_clock=1980, temp=68 + i % 3, power=688 + 4 * (i % 2))


def gpu_busy_capped(i: int) -> GpuState:
    return GpuState(**{**gpu_busy(i).__dict__, "reasons": 0x4})


def batch_busy_cool(i: int) -> GpuState:
    """Another tenant's training job: busy at its power cap (the clocks trimmed a little), cool."""
    return GpuState(util=98, sm_clock=1755 + 15 * (i % 2), temp=61 + i % 2, power=699)


def batch_busy_cool_capped(i: int) -> GpuState:
    """The same, where the clock-event reasons are exported: SW_POWER_CAP alone, which is no fault."""
    return GpuState(**{**batch_busy_cool(i).__dict__, "reasons": 0x4})


def thermal(i: int) -> GpuState:
    if SLOW_FROM <= i < SLOW_UNTIL:
        return GpuState(util=100, sm_clock=1005 + 15 * (i % 2), temp=91 + i % 2, power=415)
    return gpu_busy(i)


def power_brake(i: int) -> GpuState:
    if SLOW_FROM <= i < SLOW_UNTIL:  # the power brake (0x80) beside the power cap (0x4), at normal temperatures
        return GpuState(util=100, sm_clock=705, temp=63, power=310, reasons=0x84)
    return GpuState(util=100, sm_clock=1980, temp=68 + i % 3, power=690, reasons=0x4)


def slowed(i: int) -> ServerState:
    """2,900 tokens/s, then a third of it for SLOW_FROM..SLOW_UNTIL while 48 run and the queue climbs to 38."""
    if SLOW_FROM <= i < SLOW_UNTIL:
        return ServerState(running=48, waiting=round(38 * (i - SLOW_FROM + 1) / (SLOW_UNTIL - SLOW_FROM)),
                           kv=round(0.61 + 0.05 * (i % 2), 3), tokens_per_step=950 * STEP_S)  # fmt: skip
    return ServerState(running=48, waiting=i % 2, kv=round(0.61 + 0.05 * (i % 2), 3), tokens_per_step=2900 * STEP_S)


def slowed_without_queue(i: int) -> ServerState:
    """The same drop with the batch as full as before and no queue: vLLM itself got slower per token."""
    state = slowed(i)
    return ServerState(**{**state.__dict__, "waiting": float(i % 2)})


@dataclass(frozen=True)
class Scenario:
    name: str
    servers: dict[str, Callable[[int], ServerState]]  # pod of NAMESPACE -> its shape
    xid_from: int | None = None  # sample from which XID_GPU reports Xid 79
    # issue 31: the default counters of NODE_GPUS, the shape of the GPUs of STORM_POD (0-3 of gpu-h100-1)
    gpus: Callable[[int], GpuState] | None = None
    others: Callable[[int], GpuState] = gpu_busy  # the other vLLM server's GPUs
    batch: Callable[[int], GpuState] = batch_busy_cool  # the fine-tuning job's


SCENARIOS = {
    s.name: s
    for s in (
        Scenario("healthy-busy-hour", {pod: busy for pod in PODS}),
        Scenario("kv-storm-ended", {STORM_POD: kv_storm_then_calm} | {p: busy for p in PODS if p != STORM_POD}),
        Scenario("queue-building", {STORM_POD: queue_building} | {p: busy for p in PODS if p != STORM_POD}),
        Scenario("xid-on-one-gpu", {pod: busy for pod in PODS}, xid_from=SAMPLES - 24),
        Scenario("requests-aborted", {STORM_POD: aborting} | {p: busy for p in PODS if p != STORM_POD}),
        Scenario("thermal-slowdown", {STORM_POD: slowed} | {p: busy for p in PODS if p != STORM_POD}, gpus=thermal),
        Scenario(
            "power-slowdown",
            {STORM_POD: slowed} | {p: busy for p in PODS if p != STORM_POD},
            gpus=power_brake,
            others=gpu_busy_capped,
            batch=batch_busy_cool_capped,
        ),
        Scenario(
            "throughput-drop-healthy-gpus",
            {STORM_POD: slowed_without_queue} | {p: busy for p in PODS if p != STORM_POD},
            gpus=gpu_busy,
        ),
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
    if scenario.gpus is not None:
        _default_counters(sample, scenario, end)
        return history.text()
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


def _default_counters(sample: Callable[..., None], scenario: Scenario, end: int) -> None:
    """dcgm-exporter's default counters (etc/default-counters.csv) for every GPU of NODE_GPUS."""
    for node, uuids in NODE_GPUS.items():
        server_pod = next(pod for pod, (_, n) in PODS.items() if n == node)
        for index, uuid in enumerate(uuids):
            namespace, pod, container = (NAMESPACE, server_pod, "vllm") if index < 4 else BATCH
            gpu_shape = (
                scenario.batch if index >= 4 else scenario.others if node != PODS[STORM_POD][1] else scenario.gpus
            )
            assert gpu_shape is not None
            labels = (f'DCGM_FI_DRIVER_VERSION="550.90.07",Hostname="{node}",UUID="{uuid}",container="{container}",'
                      f'device="nvidia{index}",gpu="{index}",instance="{node}:9400",job="nvidia-dcgm-exporter",'
                      f'modelName="NVIDIA H100 80GB HBM3",namespace="{namespace}",'
                      f'pci_bus_id="00000000:{0x18 + index:02X}:00.0",pod="{pod}"')  # fmt: skip
            replays = 0.0
            for i in range(SAMPLES + 1):
                t = end - WINDOW_S + i * STEP_S
                g = gpu_shape(i)
                for name, value in (("DCGM_FI_DEV_SM_CLOCK", g.sm_clock), ("DCGM_FI_DEV_MEM_CLOCK", g.mem_clock),
                                    ("DCGM_FI_DEV_GPU_TEMP", g.temp), ("DCGM_FI_DEV_MEMORY_TEMP", g.temp + 4),
                                    ("DCGM_FI_DEV_POWER_USAGE", g.power), ("DCGM_FI_DEV_GPU_UTIL", g.util),
                                    ("DCGM_FI_DEV_FB_USED", 74210.0), ("DCGM_FI_DEV_XID_ERRORS", 0.0),
                                    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", 0.0),
                                    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", 0.0),
                                    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", replays)):  # fmt: skip
                    sample(name, "gauge", name, labels, value, t)
                if g.reasons is not None:
                    sample("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", labels,
                           g.reasons, t)  # fmt: skip


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
    # the GPUs of pfnp5 held at 1005-1020 MHz for exactly the 60 samples SLOW_FROM..SLOW_UNTIL (15 min)
    "thermal-slowdown": Expected(
        "GPU-119",
        "gpu/gpu-h100-1/0",
        ("GPU-104", "GPU-119", "VLLM-114", "VLLM-119"),
        r"^thermal slowdown: SM clock 1005-1020 MHz against 1980 MHz .* at up to 92 C, "
        r".*\(60 samples 15 s apart, 15 min\)",
    ),
    "power-slowdown": Expected(
        "GPU-119",
        "gpu/gpu-h100-1/0",
        ("GPU-104", "GPU-119", "VLLM-114", "VLLM-119"),
        r"^power slowdown: SM clock 705 MHz .*clock-event reasons 0x84.*\(60 samples 15 s apart, 15 min\)",
    ),
    "throughput-drop-healthy-gpus": Expected(
        "VLLM-119",
        "vllm/llm/llama-70b-7f8d9c6b5d-pfnp5",
        ("VLLM-119",),
        r"fell from 2,900 to (8[5-9]\d|9[0-4]\d) tokens/s \(by (6[5-9]|70)%\) against the 15 minutes before",
    ),
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
