"""Thirty minutes of Prometheus history for the serving cluster of fixtures/busy-but-healthy, as
OpenMetrics text for `promtool tsdb create-blocks-from openmetrics`.

The labels are those a ServiceMonitor gives vLLM's /metrics (namespace, pod, container, service,
endpoint, instance, job, besides vLLM's model_name and engine) and those dcgm-exporter gives its GPUs
(UUID, gpu, Hostname, modelName, pci_bus_id, device, with the exporter pod's own namespace and pod
as target labels). Every scenario also holds a second vLLM app in namespace `research` in a KV storm
that lasts the whole window: a shared Prometheus, whose other tenant must never be blamed.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
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
    started: int | None = None  # the sample its process started at; None: days before the window


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
    fb_used: float = 74210.0


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


# Issue 31, second round. An Xid 48 (double-bit ECC) on GPU 1 of gpu-h100-1 at XID_AT kills pfnp5's CUDA
# context: the server stops answering at the next sample (`up` 0), kubelet restarts its container, the new
# process starts at RESTARTED (kube-state-metrics' restart counter goes up), loads the model and answers
# again at BACK. Its GPUs' memory is freed and taken again at start-up, which is no other tenant's.
XID_AT, RESTARTED, BACK = 70, 78, 91
XID_RESTART_GPU = ("gpu-h100-1", 1)
# The neighbour: from NEIGHBOUR_AT to NEIGHBOUR_UNTIL (15 minutes) a process outside vLLM holds 5,670 MiB
# of pfnp5's GPU 0; the server slows from SLOW_FROM on (the GPU's compute is shared), its clocks stay at the top.
NEIGHBOUR_AT, NEIGHBOUR_UNTIL, NEIGHBOUR_MIB = 56, 116, 5670.0
# A planned rollout: the previous pod serves until ROLLED, the new one (pfnp5, the pod the cluster's
# files hold) starts at ROLLED + 2 and answers from ROLLED + 10.
ROLLED, OLD_POD = 60, ("llama-70b-6c4d5b8f7-kq2zt", "10.244.4.98")


def crashed_and_back(i: int) -> ServerState | None:
    """Busy; down (not answering) from the sample after the Xid until BACK; a new process after."""
    if XID_AT < i < BACK:
        return None
    state = busy(i)
    return ServerState(**{**state.__dict__, "started": RESTARTED if i >= BACK else None})


def rolled_out_old(i: int) -> ServerState | None:
    return busy(i) if i < ROLLED else None


def rolled_out_new(i: int) -> ServerState | None:
    if i < ROLLED + 10:
        return None
    return ServerState(**{**busy(i).__dict__, "started": ROLLED + 2})


def down_and_back(i: int) -> GpuState:
    """The server's GPUs: idle and empty while it is down, its memory taken again as the new process loads."""
    if XID_AT < i < RESTARTED:
        return GpuState(util=0, sm_clock=345, temp=45, power=120, fb_used=0.0)
    if RESTARTED <= i < BACK:
        return GpuState(util=0, sm_clock=1980, temp=50, power=160, fb_used=round(74210.0 * (i - RESTARTED) / 12))
    return gpu_busy(i)


def rollout_gpus(i: int) -> GpuState:
    if ROLLED <= i < ROLLED + 2:
        return GpuState(util=0, sm_clock=345, temp=45, power=120, fb_used=0.0)
    if ROLLED + 2 <= i < ROLLED + 10:
        return GpuState(util=0, sm_clock=1980, temp=50, power=160, fb_used=round(74210.0 * (i - ROLLED - 2) / 8))
    return gpu_busy(i)


def neighbour(i: int) -> GpuState:
    state = gpu_busy(i)
    taken = NEIGHBOUR_MIB if NEIGHBOUR_AT <= i < NEIGHBOUR_UNTIL else 0.0
    return GpuState(**{**state.__dict__, "fb_used": 74210.0 + taken})


# MIG: pfnp5's GPU 0 is split into two 3g.40gb instances; pfnp5 holds 18,000 MiB of instance 1 and a second
# replica, started at MIG_SECOND, takes 37,000 MiB of instance 2 (dcgm-exporter: one series per instance).
MIG_SECOND, MIG_SECOND_POD = 56, "llama-8b-5b7d9c4f8-m2x9q"


def mig_instance(i: int, instance: int) -> GpuState:
    used = 18000.0 if instance == 1 else (37000.0 if i >= MIG_SECOND else 0.0)
    return GpuState(**{**gpu_busy(i).__dict__, "fb_used": used})


def batch_growing(i: int) -> GpuState:
    """The other tenant's training job takes more memory as it goes: its own, on its own GPUs."""
    return GpuState(**{**batch_busy_cool(i).__dict__, "fb_used": 40000.0 + 300 * (i // 8)})


def _event(end: int, i: int, kind: str, name: str, reason: str, message: str, kind_of: str = "Normal",
           by: str = "kubelet") -> dict:  # fmt: skip
    """A Kubernetes event as `kubectl get events -o json` lists it, five seconds after sample i; a node's
    events are in namespace default, and name no namespace of their object."""
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(end - WINDOW_S + i * STEP_S + 5))
    involved = {"apiVersion": "v1", "kind": kind, "name": name}
    involved |= {"uid": name} if kind == "Node" else {"namespace": NAMESPACE}
    return {"apiVersion": "v1", "kind": "Event", "count": 1, "type": kind_of, "reason": reason, "message": message,
            "firstTimestamp": when, "lastTimestamp": when, "eventTime": None, "involvedObject": involved,
            "metadata": {"name": f"{name}.{i:04x}{reason.lower()}", "creationTimestamp": when,
                         "namespace": "default" if kind == "Node" else NAMESPACE},
            "source": {"component": by, "host": PODS[STORM_POD][1]}}  # fmt: skip


def xid_restart_events(end: int) -> list[dict]:
    ip = PODS[STORM_POD][0]
    return [
        _event(end, XID_AT + 1, "Pod", STORM_POD, "Unhealthy",
               f'Readiness probe failed: Get "http://{ip}:8000/health": '
               f"dial tcp {ip}:8000: connect: connection refused",
               "Warning"),
        _event(end, RESTARTED, "Pod", STORM_POD, "Pulled",
               'Container image "vllm/vllm-openai:v0.10.1.1" already present on machine'),
        _event(end, RESTARTED, "Pod", STORM_POD, "Created", "Created container vllm"),
        _event(end, RESTARTED, "Pod", STORM_POD, "Started", "Started container vllm"),
    ]  # fmt: skip


def oom_restart_events(end: int) -> list[dict]:
    """The node's kernel OOM killer took the server's process (node-problem-detector's kernel monitor)."""
    oom = ("Memory cgroup out of memory: Killed process 48213 (python3) total-vm:187352344kB, anon-rss:62914560kB, "
           "file-rss:104856kB, shmem-rss:0kB, UID:0 pgtables:132616kB oom_score_adj:999")  # fmt: skip
    return [_event(end, XID_AT, "Node", PODS[STORM_POD][1], "OOMKilling", oom, "Warning", "kernel-monitor"),
            *xid_restart_events(end)[1:]]  # fmt: skip


def rollout_events(end: int) -> list[dict]:
    return [
        _event(end, ROLLED, "Deployment", "llama-70b", "ScalingReplicaSet",
               "Scaled down replica set llama-70b-6c4d5b8f7 from 1 to 0"),
        _event(end, ROLLED, "Pod", OLD_POD[0], "Killing", "Stopping container vllm"),
        _event(end, ROLLED + 2, "Pod", STORM_POD, "Started", "Started container vllm"),
    ]  # fmt: skip


@dataclass(frozen=True)
class Scenario:
    name: str
    servers: dict[str, Callable[[int], ServerState | None]]  # pod of NAMESPACE -> its shape; None: not answering
    xid_from: int | None = None  # sample from which XID_GPU reports Xid 79
    # issue 31: the default counters of NODE_GPUS, the shape of the GPUs of STORM_POD (0-3 of gpu-h100-1)
    gpus: Callable[[int], GpuState] | None = None
    others: Callable[[int], GpuState] = gpu_busy  # the other vLLM server's GPUs
    batch: Callable[[int], GpuState] = batch_busy_cool  # the fine-tuning job's
    first_gpu: Callable[[int], GpuState] | None = None  # STORM_POD's GPU 0, where it differs from `gpus`
    mig: bool = False  # STORM_POD's GPU 0 split in two MIG instances (mig_instance)
    xid: tuple[tuple[str, int], int, int] | None = None  # ((node, GPU index), from which sample, code)
    old_pods: dict[str, Callable[[int], ServerState | None]] = field(default_factory=dict)  # gone before the end
    events: Callable[[int], list[dict]] | None = None  # Kubernetes events of the window, by the history's end


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
            "xid-restart",
            {STORM_POD: crashed_and_back} | {p: busy for p in PODS if p != STORM_POD},
            gpus=down_and_back,
            xid=(XID_RESTART_GPU, XID_AT, 48),
            events=xid_restart_events,
        ),
        Scenario(
            "oom-restart",
            {STORM_POD: crashed_and_back} | {p: busy for p in PODS if p != STORM_POD},
            gpus=down_and_back,
            events=oom_restart_events,
        ),
        Scenario(
            "neighbour-memory",
            {STORM_POD: slowed} | {p: busy for p in PODS if p != STORM_POD},
            gpus=gpu_busy,
            first_gpu=neighbour,
            batch=batch_growing,
        ),
        Scenario(
            "mig-second-replica",
            {STORM_POD: slowed_without_queue} | {p: busy for p in PODS if p != STORM_POD},
            gpus=gpu_busy,
            mig=True,
        ),
        Scenario(
            "rollout-restart",
            {STORM_POD: rolled_out_new} | {p: busy for p in PODS if p != STORM_POD},
            gpus=rollout_gpus,
            old_pods={OLD_POD[0]: rolled_out_old},
            events=rollout_events,
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
    servers += [(NAMESPACE, pod, OLD_POD[1], shape) for pod, shape in scenario.old_pods.items()]
    servers.append((FOREIGN[0], FOREIGN[1], FOREIGN[2], storm))
    replaced = set(scenario.old_pods)  # their targets go with their pods
    long_ago = end - WINDOW_S - 6 * 86400  # when a process that started before the window did
    for namespace, pod, ip, shape in servers:
        app = pod.rsplit("-", 2)[0]
        target = (f'container="vllm",endpoint="http",instance="{ip}:8000",job="{app}",namespace="{namespace}",'
                  f'pod="{pod}",service="{app}"')  # fmt: skip
        labels = f'{target},engine="0",model_name="{app}"'
        # kube-state-metrics' own series, with the pod's labels (honorLabels) beside its target's
        restart_labels = (f'container="vllm",instance="10.244.0.15:8080",job="kube-state-metrics",'
                          f'namespace="{namespace}",pod="{pod}",uid="{pod}-uid"')  # fmt: skip
        totals = {"preemptions": 0.0, "tokens": 0.0, "stop": 0.0, "abort": 0.0}
        process: int | None = None
        restarts = 0
        seen = False
        for i in range(SAMPLES + 1):
            t = end - WINDOW_S + i * STEP_S
            state = shape(i)
            if state is None:
                if seen and pod not in replaced:  # the target is still there (the same pod), its scrapes fail
                    sample("up", "gauge", "up", target, 0, t)
                    sample("kube_pod_container_status_restarts", "counter",
                           "kube_pod_container_status_restarts_total", restart_labels, restarts, t)  # fmt: skip
                continue
            if seen and state.started != process:  # a new process: its counters start again
                totals = dict.fromkeys(totals, 0.0)
                restarts += 1
            seen, process = True, state.started
            totals["preemptions"] += state.preemptions_per_step
            totals["tokens"] += state.tokens_per_step
            totals["stop"] += state.stop_per_step
            totals["abort"] += state.abort_per_step
            started = long_ago if state.started is None else end - WINDOW_S + state.started * STEP_S
            sample("up", "gauge", "up", target, 1, t)
            sample("process_start_time_seconds", "gauge", "process_start_time_seconds", target, started, t)
            sample("kube_pod_container_status_restarts", "counter", "kube_pod_container_status_restarts_total",
                   restart_labels, restarts, t)  # fmt: skip
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
            handed = scenario.old_pods and index < 4 and node == PODS[STORM_POD][1]
            gpu_shape = (
                scenario.batch if index >= 4 else scenario.others if node != PODS[STORM_POD][1] else scenario.gpus
            )
            if index == 0 and node == PODS[STORM_POD][1] and scenario.first_gpu is not None:
                gpu_shape = scenario.first_gpu
            assert gpu_shape is not None

            def labels_of(
                pod: str,
                namespace: str = namespace,
                container: str = container,
                uuid: str = uuid,
                index: int = index,
                node: str = node,
            ) -> str:
                return (f'DCGM_FI_DRIVER_VERSION="550.90.07",Hostname="{node}",UUID="{uuid}",container="{container}",'
                        f'device="nvidia{index}",gpu="{index}",instance="{node}:9400",job="nvidia-dcgm-exporter",'
                        f'modelName="NVIDIA H100 80GB HBM3",namespace="{namespace}",'
                        f'pci_bus_id="00000000:{0x18 + index:02X}:00.0",pod="{pod}"')  # fmt: skip

            replays = 0.0
            if scenario.mig and index == 0 and node == PODS[STORM_POD][1]:
                _mig_instances(sample, labels_of(pod), end)
                continue
            for i in range(SAMPLES + 1):
                t = end - WINDOW_S + i * STEP_S
                g = gpu_shape(i)
                # after a rollout, dcgm-exporter labels the GPUs with the new pod once it is given them
                labels = labels_of(next(iter(scenario.old_pods)) if handed and i < ROLLED + 2 else pod)
                xid = (
                    scenario.xid[2] if scenario.xid and scenario.xid[0] == (node, index) and i >= scenario.xid[1] else 0
                )
                for name, value in (("DCGM_FI_DEV_SM_CLOCK", g.sm_clock), ("DCGM_FI_DEV_MEM_CLOCK", g.mem_clock),
                                    ("DCGM_FI_DEV_GPU_TEMP", g.temp), ("DCGM_FI_DEV_MEMORY_TEMP", g.temp + 4),
                                    ("DCGM_FI_DEV_POWER_USAGE", g.power), ("DCGM_FI_DEV_GPU_UTIL", g.util),
                                    ("DCGM_FI_DEV_FB_USED", g.fb_used), ("DCGM_FI_DEV_XID_ERRORS", xid),
                                    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", 0.0),
                                    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", 0.0),
                                    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", replays)):  # fmt: skip
                    sample(name, "gauge", name, labels, value, t)
                if g.reasons is not None:
                    sample("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", labels,
                           g.reasons, t)  # fmt: skip


def _mig_instances(sample: Callable[..., None], labels: str, end: int) -> None:
    """A MIG-split GPU as dcgm-exporter exports it: each series labelled with its GPU instance and profile;
    instance 2 belongs to the second replica."""
    for instance in (1, 2):
        own = labels if instance == 1 else labels.replace(f'pod="{STORM_POD}"', f'pod="{MIG_SECOND_POD}"')
        own += f',GPU_I_ID="{instance}",GPU_I_PROFILE="3g.40gb"'
        for i in range(SAMPLES + 1):
            t = end - WINDOW_S + i * STEP_S
            g = mig_instance(i, instance)
            for name, value in (("DCGM_FI_DEV_SM_CLOCK", g.sm_clock), ("DCGM_FI_DEV_GPU_TEMP", g.temp),
                                ("DCGM_FI_DEV_POWER_USAGE", g.power), ("DCGM_FI_DEV_GPU_UTIL", g.util),
                                ("DCGM_FI_DEV_FB_USED", g.fb_used), ("DCGM_FI_DEV_XID_ERRORS", 0.0)):  # fmt: skip
                sample(name, "gauge", name, own, value, t)


# --------------------------------------------------------------------------- the bundles

CLUSTER_FIXTURE = "busy-but-healthy"  # the cluster these histories belong to


@dataclass(frozen=True)
class Expected:
    rule: str | None  # the verdict's rule; None: healthy
    subject: str | None
    fires: tuple[str, ...]
    evidence: str = ""  # a pattern the verdict's first evidence line matches
    second: str = ""  # a pattern its second evidence line matches
    # (verdict rule, fires) read from Prometheus alone, where they differ: a cause only events tell
    alone: tuple[str, tuple[str, ...]] | None = None


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
    # the Xid's first sample is XID_AT; the server's `up` is 0 from the next one until BACK: 20 samples, 5 min
    "xid-restart": Expected(
        "GPU-120",
        "gpu/gpu-h100-1/1",
        ("GPU-102", "GPU-120", "VLLM-130"),
        r"^Xid 48 at \S+: .*DCGM_FI_DEV_XID_ERRORS = 48",
        r"went away at (\d\d:\d\d:\d\d) UTC and answered again at (\d\d:\d\d:\d\d) UTC: down 5 min "
        r"\(`up` 0 for 20 samples; process_start_time_seconds says the new process started at \d\d:\d\d:\d\d UTC; "
        r"kube_pod_container_status_restarts_total 0 -> 1\); it went away 15 s after the Xid",
    ),
    # 5,670 MiB above the 74,210 MiB pfnp5's process held, for the 60 samples NEIGHBOUR_AT..NEIGHBOUR_UNTIL
    "neighbour-memory": Expected(
        "GPU-121",
        "gpu/gpu-h100-1/0",
        ("GPU-121", "VLLM-114", "VLLM-119"),
        r"^DCGM_FI_DEV_FB_USED rose from 74,210 MiB, .* to 79,880 MiB: another process took up to 5,670 MiB .*"
        r"from \S+ (\d\d:\d\d:\d\d) to \S+ (\d\d:\d\d:\d\d) UTC \(60 samples 15 s apart, 15 min\), ended",
    ),
    # the same restart without an Xid: the node's OOM killer, reported in the same minute, is its cause
    "oom-restart": Expected(
        "VLLM-131",
        "vllm/llm/llama-70b-7f8d9c6b5d-pfnp5",
        ("VLLM-130", "VLLM-131"),
        r"^\d\d:\d\d:\d\d Warning OOMKilling node/gpu-h100-1: Memory cgroup out of memory: Killed process 48213",
        r"went away at \d\d:\d\d:\d\d UTC and answered again at \d\d:\d\d:\d\d UTC: down 5 min \(`up` 0 for 20 samples",
        alone=("VLLM-130", ("VLLM-130",)),
    ),
    "rollout-restart": Expected(None, None, ()),
    # the second replica's memory on its own MIG instance is no other tenant's: the drop is vLLM's
    "mig-second-replica": Expected(
        "VLLM-119",
        "vllm/llm/llama-70b-7f8d9c6b5d-pfnp5",
        ("VLLM-119",),
        r"fell from 2,900 to (8[5-9]\d|9[0-4]\d) tokens/s \(by (6[5-9]|70)%\) against the 15 minutes before",
    ),
    "throughput-drop-healthy-gpus": Expected(
        "VLLM-119",
        "vllm/llm/llama-70b-7f8d9c6b5d-pfnp5",
        ("VLLM-119",),
        r"fell from 2,900 to (8[5-9]\d|9[0-4]\d) tokens/s \(by (6[5-9]|70)%\) against the 15 minutes before",
    ),
}


def add_events(folder: Path, scenario: Scenario, end: float) -> None:
    """The scenario's Kubernetes events of the window into folder/k8s/events.json, beside the cluster's."""
    if scenario.events is None:
        return
    path = folder / "k8s" / "events.json"
    listed = json.loads(path.read_text())
    listed["items"].extend(scenario.events(int(end)))
    path.write_text(json.dumps(listed, indent=1) + "\n")


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
