"""Every known log line reaches a rule, and a crash loop whose log (current or --previous) holds a
known cause is explained by that cause's finding, which is the verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diag.analyze import Report, analyze_bundle
from diag.bundle.files import Bundle
from diag.facts import build_facts
from diag.link.join import join
from diag.parsers.logs import scan_log
from diag.parsers.signals import builtin_signals
from diag.snapshot.model import GPU, Container, GPUProcess, Node, Pod, Snapshot, SourceStatus

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"

# signal -> (fixture whose pod logs hold it, the rule that reads it and fires there)
SIGNAL_RULES = {
    "kv_cache_too_small": ("vllm-max-model-len-too-large", "VLLM-103"),
    "no_cache_blocks": ("vllm-no-cache-blocks", "VLLM-104"),
    "cuda_oom": ("vllm-cuda-oom-under-load", "VLLM-105"),
    "cuda_driver_too_old": ("gpu-driver-too-old", "GPU-107"),
    "model_not_found": ("k8s-model-path-missing", "K8S-212"),
    "gpu_memory_taken": ("vllm-gpu-memory-taken", "VLLM-115"),
    "preemption": ("vllm-v0-preemption-log", "VLLM-116"),
    "engine_dead": ("vllm-tp-exceeds-gpus", "VLLM-117"),
    "ray_memory_monitor_kill": ("incident-ray-memory-monitor-kill", "RAY-201"),
    "ray_gcs_unreachable": ("incident-ray-gcs-unreachable", "RAY-202"),
    "ray_worker_register_failed": ("incident-ray-worker-register-timeout", "RAY-214"),
    "serve_replicas_unscheduled": ("incident-ray-serve-replica-no-node-type", "RAY-203"),
    "autoscaler_no_node_type": ("incident-ray-serve-replica-no-node-type", "RAY-204"),
    "ray_out_of_disk": ("incident-ray-spill-disk-full", "RAY-208"),
    "ray_object_spilling": ("incident-ray-spill-disk-full", "RAY-209"),
    "autoscaler_launch_timeout": ("incident-ray-autoscaler-launch-timeout", "RAY-211"),
    "gcs_redis_unreachable": ("incident-ray-gcs-redis-unreachable", "RAY-212"),
    # rules/signals/vllm-incidents.yaml (issue 12)
    "bf16_unsupported_gpu": ("incident-vllm-bf16-on-v100", "VLLM-201"),
    "quantization_unsupported_gpu": ("incident-vllm-awq-on-v100", "VLLM-202"),
    "fp8_unsupported_gpu": ("incident-vllm-fp8-on-a800", "VLLM-203"),
    "hf_access_denied": ("incident-vllm-hf-gated-403", "VLLM-204"),
    "trust_remote_code_required": ("incident-vllm-trust-remote-code", "VLLM-205"),
    "cuda_graph_capture_frame": ("incident-vllm-cudagraph-capture-oom", "VLLM-206"),
    "nccl_shm_failed": ("incident-vllm-nccl-dev-shm", "VLLM-207"),
    "tp_heads_not_divisible": ("incident-vllm-tp-heads-not-divisible", "VLLM-208"),
    "attention_backend_unsupported": ("incident-vllm-attention-head-size", "VLLM-209"),
    "lora_rank_too_large": ("incident-vllm-lora-rank", "VLLM-210"),
    "prefix_caching_unsupported": ("incident-vllm-prefix-caching-sliding-window", "VLLM-211"),
    "max_model_len_exceeds_model": ("incident-vllm-max-model-len-above-config", "VLLM-212"),
    "model_arch_unsupported": ("incident-vllm-arch-unsupported", "VLLM-213"),
    "spec_decode_config_invalid": ("incident-vllm-spec-decode-draft-tp", "VLLM-214"),
    "model_load_frame": ("incident-vllm-weights-exceed-gpu", "VLLM-215"),
    "nccl_no_socket_interface": ("incident-vllm-nccl-socket-ifname", "VLLM-216"),
    "nccl_ib_memlock": ("incident-vllm-nccl-ib-memlock", "VLLM-217"),
    "lora_adapter_not_found": ("incident-vllm-lora-adapter-missing", "VLLM-218"),
    "quant_dtype_unsupported": ("incident-vllm-awq-bfloat16", "VLLM-219"),
    "fabric_manager_not_ready": ("incident-gpu-fabric-manager", "GPU-201"),
    "cuda_compat_unsupported": ("incident-gpu-cuda-compat-804", "GPU-202"),
    "gpu_marked_unhealthy": ("incident-gpu-device-plugin-unhealthy", "GPU-204"),
    # rules/signals/crash-causes.yaml: wordings rules name without a signal, known so that the decisive-line
    # rules stay silent
    "ray_version_refused": ("ray-version-mismatch", "RAY-107"),
    "parallel_exceeds_visible_gpus": ("vllm-tp-exceeds-gpus", "VLLM-110"),
}
# signals whose fixture would need a second copy of an incident: a test below adds their line
SIGNALS_TESTED_APART = {"weights_oom"}


def _bundle(fixture: str) -> Bundle:
    return Bundle.open(FIXTURES / fixture)


def _fired(report: Report) -> set[str]:
    return {f.rule for f in report.findings}


def _signals_in_logs(bundle: Bundle) -> set[str]:
    return {name for rel in bundle.names("k8s/logs") for name in scan_log(bundle.text(rel))}


@pytest.mark.parametrize("signal", sorted(SIGNAL_RULES))
def test_each_log_signal_has_a_fixture_where_its_rule_fires(signal: str) -> None:
    fixture, rule = SIGNAL_RULES[signal]
    bundle = _bundle(fixture)
    assert signal in _signals_in_logs(bundle)
    assert rule in _fired(analyze_bundle(bundle))


def test_every_signal_is_covered() -> None:
    # nvml: the test below; vllm_process: tests/unit/parsers/test_workload_recognition.py (it names what a pod runs, no
    # rule reads it)
    tested_elsewhere = {"xid", "ray_cannot_schedule", "nvml_driver_mismatch", "vllm_process"}
    assert set(SIGNAL_RULES) | tested_elsewhere | SIGNALS_TESTED_APART == set(builtin_signals().names())


def test_an_nvml_mismatch_line_in_a_gpu_operator_log_reaches_the_gpu_rule() -> None:
    bundle = _bundle("incident-gpu-nvml-mismatch")
    events = json.loads(bundle.text("k8s/events.json"))
    events["items"] = [e for e in events["items"] if "version mismatch" not in e.get("message", "")]
    bundle.add("k8s/events.json", json.dumps(events))
    pods = json.loads(bundle.text("k8s/pods.json"))
    for pod in pods["items"]:
        for status in pod["status"].get("containerStatuses", []):
            status.get("lastState", {}).get("terminated", {}).pop("message", None)
    bundle.add("k8s/pods.json", json.dumps(pods))
    assert "GPU-203" not in _fired(analyze_bundle(bundle))
    # nvidia-smi's own words, as the GPU operator's driver pod on that node prints them
    bundle.add(
        "k8s/logs/gpu-operator.nvidia-driver-daemonset-chc6m.log",
        "Failed to initialize NVML: Driver/library version mismatch\n",
    )
    assert "GPU-203" in _fired(analyze_bundle(bundle))


def test_an_xid_line_in_a_pod_log_reaches_the_gpu_rule() -> None:
    bundle = _bundle("gpu-xid-fell-off-bus")
    events = json.loads(bundle.text("k8s/events.json"))
    xid_lines = [e["message"] for e in events["items"] if "NVRM: Xid" in e.get("message", "")]
    events["items"] = [e for e in events["items"] if "NVRM: Xid" not in e.get("message", "")]
    bundle.add("k8s/events.json", json.dumps(events))
    # the Xid names the address of the GPU NVML could not open: a node-level finding (GPU-108)
    assert "GPU-108" not in _fired(analyze_bundle(bundle))
    # the same kernel line, seen by a pod on that node (dcgm-exporter tails the kernel log)
    bundle.add("k8s/logs/nvidia-dcgm-exporter-zjkq5.log", "\n".join(xid_lines) + "\n")
    assert "GPU-108" in _fired(analyze_bundle(bundle))


def test_a_ray_cannot_be_scheduled_line_reaches_the_ray_rule() -> None:
    bundle = _bundle("healthy-k8s-vllm")
    assert "RAY-102" not in _fired(analyze_bundle(bundle))
    pod = json.loads(bundle.text("k8s/pods.json"))["items"][0]["metadata"]["name"]
    bundle.add(
        f"k8s/logs/{pod}.log",
        (
            "2025-03-14 10:05:00,123\tWARNING worker.py:1034 -- The actor "
            "or task with ID ffffffffffffffff4c25a1a9c6d57d3c01000000 "
            "cannot be scheduled right now. It requires {GPU: 1.000000}, "
            "{CPU: 1.000000} for placement, however the cluster "
            "currently cannot provide the requested resources.\n"
        ),
    )
    assert "RAY-102" in _fired(analyze_bundle(bundle))


# the crash-looping pod of each fixture, and the rule that names its cause
CRASH_CAUSES = {
    "vllm-no-cache-blocks": ("llama-70b-5c7f9d8b64-w2xkd", "VLLM-104", "vllm"),
    "vllm-max-model-len-too-large": ("llama-70b-5c7f9d8b64-w2xkd", "VLLM-103", "vllm"),
    "gpu-driver-too-old": ("mistral-7b-7b9d4c6f8-tqbxd", "GPU-107", "gpu"),
    "k8s-model-path-missing": ("llama-70b-7f8d9c6b5d-fxbfs", "K8S-212", "kubernetes"),
    "vllm-gpu-memory-taken": ("llama-70b-7f8d9c6b5d-fxbfs", "VLLM-115", "vllm"),
}


@pytest.mark.parametrize("fixture", sorted(CRASH_CAUSES))
def test_a_crash_loop_whose_previous_log_holds_the_cause_is_explained_by_it(fixture: str) -> None:
    pod, cause, layer = CRASH_CAUSES[fixture]
    bundle = _bundle(fixture)
    current, previous = f"k8s/logs/{pod}.log", f"k8s/logs/{pod}.previous.log"
    if current in bundle.files:  # only `kubectl logs --previous` keeps the crashed start
        bundle.files[previous] = bundle.files.pop(current)
    report = analyze_bundle(bundle)
    crash = next(f for f in report.findings if f.rule == "K8S-213" and f.subject == f"pod/llm/{pod}")
    assert crash.explained_by == cause
    assert (report.verdict.rule, report.verdict.layer) == (cause, layer)
    assert "CrashLoopBackOff" not in report.verdict.summary


def test_a_crash_loop_with_no_known_cause_is_explained_by_its_decisive_line() -> None:
    report = analyze_bundle(_bundle("k8s-crashloop-bad-flag"))
    assert report.verdict.rule == "VLLM-129"
    [crash] = [f for f in report.findings if f.rule == "K8S-213"]
    assert crash.explained_by == "VLLM-129"
    assert (
        "no known failure line; the decisive line of its log: vllm serve: "
        "error: unrecognized arguments: --max-num-batch-tokens 16384 (vllm layer)" in crash.evidence
    )


def test_a_crash_loop_whose_log_has_neither_a_known_cause_nor_an_error_is_the_verdict() -> None:
    bundle = _bundle("k8s-crashloop-bad-flag")
    bundle.add(
        "k8s/logs/llama-70b-7f8d9c6b5d-zhgh9.previous.log",
        "INFO 12-01 14:15:36 [__init__.py:241] Automatically detected platform cuda.\n",
    )
    report = analyze_bundle(bundle)
    assert report.verdict.rule == "K8S-213"
    assert any(
        "no known failure line in its logs" in line
        for f in report.findings
        if f.rule == "K8S-213"
        for line in f.evidence
    )


def test_gpu_memory_taken_names_the_other_processes_on_the_servers_gpus() -> None:
    line = (
        "(VllmWorker TP0 pid=389) ERROR 12-01 14:13:41 [multiproc_executor.py:559] ValueError: Free memory on device "
        "(38.07/79.19 GiB) on startup is less than desired GPU memory utilization (0.92, 72.85 GiB). Decrease GPU "
        "memory utilization or reduce GPU memory used by other processes."
    )
    vllm = Container(
        name="vllm",
        command=["vllm"],
        args=["serve", "meta-llama/Llama-3.3-70B-Instruct", "--gpu-memory-utilization", "0.92"],
        limits={"nvidia.com/gpu": "1"},
        previous_logs=line + "\n",
        log_signals=scan_log(line),
    )
    pod = Pod(namespace="llm", name="llama-70b-0", phase="Running", node_name="gpu-1", containers=[vllm])
    leftover = GPUProcess(pid=4242, name="python3", used_memory_mib=41100)
    gpu = GPU(
        host="gpu-1", index=0, uuid="GPU-6a1c", memory_used_mib=41600, memory_total_mib=81559, processes=[leftover]
    )
    snap = Snapshot(nodes=[Node(name="gpu-1")], pods=[pod], gpus=[gpu])
    snap.sources = {"k8s/pods.json": SourceStatus("ok"), "k8s/logs/llama-70b-0.previous.log": SourceStatus("ok")}
    [server] = build_facts(join(snap)).scopes["vllm_server"]
    assert server["other_gpu_processes"] == ["GPU 0 of gpu-1: pid 4242 (python3, 41100 MiB)"]
    assert server["gpu_memory_shortfall"]["utilization_that_fits"] == 0.48


def test_an_oom_outside_cuda_graph_capture_is_not_a_capture_oom() -> None:
    bundle = _bundle("incident-vllm-cudagraph-capture-oom")
    log = "k8s/logs/llama-70b-7f8d9c6b5d-fxbfs.previous.log"
    assert "VLLM-206" in _fired(analyze_bundle(bundle))
    bundle.add(log, "".join(line for line in bundle.text(log).splitlines(keepends=True) if "capture_model" not in line))
    fired = _fired(analyze_bundle(bundle))
    assert "VLLM-206" not in fired and "VLLM-105" in fired


def test_an_nccl_shm_failure_with_a_memory_backed_dev_shm_is_not_blamed_on_the_pod_spec() -> None:
    bundle = _bundle("incident-vllm-nccl-dev-shm")
    assert "VLLM-207" in _fired(analyze_bundle(bundle))
    pods = json.loads(bundle.text("k8s/pods.json"))
    pod = next(p for p in pods["items"] if p["metadata"]["name"] == "llama-70b-7f8d9c6b5d-fxbfs")
    pod["spec"]["volumes"].append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}})
    bundle.add("k8s/pods.json", json.dumps(pods))
    assert "VLLM-207" in _fired(analyze_bundle(bundle)), "declared but mounted nowhere: /dev/shm is still 64 MiB"
    pod["spec"]["containers"][0].setdefault("volumeMounts", []).append({"name": "dshm", "mountPath": "/dev/shm"})
    bundle.add("k8s/pods.json", json.dumps(pods))
    assert "VLLM-207" not in _fired(analyze_bundle(bundle))


def test_an_oom_outside_model_loading_is_not_a_weights_oom() -> None:
    bundle = _bundle("incident-vllm-weights-exceed-gpu")
    log = "k8s/logs/llama-70b-7f8d9c6b5d-fxbfs.previous.log"
    assert "VLLM-215" in _fired(analyze_bundle(bundle))
    bundle.add(log, "".join(line for line in bundle.text(log).splitlines(keepends=True) if "load_model" not in line))
    fired = _fired(analyze_bundle(bundle))
    assert "VLLM-215" not in fired and "VLLM-105" in fired


def test_vllms_own_weights_oom_message_names_the_weights() -> None:
    bundle = _bundle("incident-vllm-weights-exceed-gpu")
    log = "k8s/logs/llama-70b-7f8d9c6b5d-fxbfs.previous.log"
    # vLLM V1's wording of the same failure (gpu_model_runner.py), with no "Starting to load model" line kept
    bundle.add(
        log,
        (
            "(EngineCore pid=36704) ERROR 04-07 15:58:28 "
            "[gpu_model_runner.py:4818] Failed to load model - not enough GPU "
            "memory. Try lowering --gpu-memory-utilization to free "
            "memory for weights, increasing --tensor-parallel-size, "
            "or using --quantization.\n"
        ),
    )
    report = analyze_bundle(bundle)
    assert "VLLM-215" in _fired(report)
    assert report.verdict.rule == "VLLM-215"
