"""Log scanning. The lines follow the shapes of vLLM, PyTorch, CUDA, nvidia-container-cli, Hugging Face,
Ray and NVRM messages (shared/reference/vllm/log-lines.txt, gpu/XID.md, ray/STATE-API.md), with our
own values."""

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diag.parsers.logs import (
    _READY,
    MAX_LINES_PER_SIGNAL,
    _startup_span,
    _timestamp,
    gpu_memory_shortfall,
    model_load_seconds,
    scan_log,
    xid_in_message,
    xid_line,
    xids_in,
)
from diag.parsers.signals import builtin_signals
from diag.snapshot.model import XidLine

# A V1 vLLM server that starts cleanly: API server and engine core processes, uvicorn at the end.
CLEAN_START = """\
INFO 03-14 09:00:02 [__init__.py:241] Automatically detected platform cuda.
(APIServer pid=1) INFO 03-14 09:00:05 [api_server.py:1805] vLLM API server version 0.10.1
(APIServer pid=1) INFO 03-14 09:00:05 [utils.py:326] non-default args: {'model': 'Qwen/Qwen2.5-7B-Instruct', 'max_model_len': 16384}
(EngineCore_0 pid=212) INFO 03-14 09:00:20 [gpu_model_runner.py:1953] Starting to load model Qwen/Qwen2.5-7B-Instruct...
(EngineCore_0 pid=212) INFO 03-14 09:01:10 [default_loader.py:262] Loading weights took 48.21 seconds
(EngineCore_0 pid=212) INFO 03-14 09:01:11 [gpu_model_runner.py:2007] Model loading took 14.2481 GiB and 49.735102 seconds
(EngineCore_0 pid=212) INFO 03-14 09:01:40 [gpu_worker.py:276] Available KV cache memory: 52.11 GiB
(EngineCore_0 pid=212) INFO 03-14 09:01:40 [kv_cache_utils.py:849] GPU KV cache size: 975,712 tokens
(EngineCore_0 pid=212) INFO 03-14 09:02:05 [core.py:214] init engine (profile, create kv cache, warmup model) took 54.02 seconds
(APIServer pid=1) INFO 03-14 09:02:07 [api_server.py:1880] Starting vLLM API server 0 on http://0.0.0.0:8000
(APIServer pid=1) INFO 03-14 09:02:07 [launcher.py:29] Available routes are:
(APIServer pid=1) INFO:     Started server process [1]
(APIServer pid=1) INFO:     Waiting for application startup.
(APIServer pid=1) INFO:     Application startup complete.
(APIServer pid=1) INFO:     10.244.0.1:52344 - "GET /health HTTP/1.1" 200 OK
(APIServer pid=1) INFO 03-14 09:02:17 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%
"""  # noqa: E501 - vLLM lines as printed

FAILURES = """\
(EngineCore_0 pid=263) ERROR 03-14 10:00:01 [core.py:700] EngineCore failed to start.
(EngineCore_0 pid=263) ValueError: To serve at least one request with the models's max seq len (32768), (2.00 GiB KV cache is needed, which is larger than the available KV cache memory (0.41 GiB). Based on the available memory, the estimated maximum model length is 6560. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.
(EngineCore_0 pid=263) ValueError: Free memory on device (20.1/139.8 GiB) on startup is less than desired GPU memory utilization (0.9, 125.8 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.
ValueError: The model's max seq len (131072) is larger than the maximum number of tokens that can be stored in KV cache (48544). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.
(EngineCore_0 pid=263) INFO 03-14 10:00:00 [gpu_worker.py:276] Available KV cache memory: -1.25 GiB
(EngineCore_0 pid=263) ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.16 GiB memory in use. Of the allocated memory 76.90 GiB is allocated by PyTorch, and 512.00 MiB is reserved by PyTorch but unallocated.
torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB.
RuntimeError: Unexpected error from cudaGetDeviceCount(). Error 35: CUDA driver version is insufficient for CUDA runtime version
nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.8, please update your driver to a newer version, or use an earlier cuda container: unknown
/usr/local/lib/python3.12/dist-packages/torch/cuda/__init__.py:174: UserWarning: CUDA initialization: The NVIDIA driver on your system is too old (found version 12020).
OSError: /models/llama-3-8b does not appear to have a file named config.json. Checkout 'https://huggingface.co//models/llama-3-8b/tree/None' for available files.
huggingface_hub.errors.RepositoryNotFoundError: 401 Client Error. (Request ID: Root=1-67d3f0aa-1b2c3d4e5f) Repository Not Found for url: https://huggingface.co/api/models/acme/private-llm/revision/main.
OSError: acme/typo-llm is not a local folder and is not a valid model identifier listed on 'https://huggingface.co/models'
ValueError: Invalid repository ID or local directory specified: '/mnt/models/qwen'.
huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': '/data/models/missing'. Use `repo_type` argument if needed.
FileNotFoundError: [Errno 2] No such file or directory: '/models/llama-3-8b/model-00001-of-00004.safetensors'
[ 5123.456789] NVRM: Xid (PCI:0000:65:00): 79, pid=1234, name=python3, GPU has fallen off the bus.
2025-03-14 10:05:00,123\tWARNING worker.py:1034 -- The actor or task with ID ffffffffffffffff4c25a1a9c6d57d3c01000000 cannot be scheduled right now. It requires {GPU: 1.000000}, {CPU: 1.000000} for placement, however the cluster currently cannot provide the requested resources.
WARNING 03-14 10:06:00 scheduler.py:1089] Sequence group cmpl-9a1b2c3d-0 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption=51
(APIServer pid=1) ERROR 03-14 10:07:00 [core_client.py:564] Engine core proc EngineCore_0 died unexpectedly, shutting down client.
vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.
[2025-03-14 10:08:00,001 E 1 43] gcs_rpc_client.h:196: Failed to connect to GCS within 60 seconds. GCS may have been killed.
WARNING 2025-03-14 10:09:00,000 controller 306 -- Deployment 'LLMServer' in application 'llm' has 2 replicas that have taken more than 30s to be scheduled.
2025-03-14 10:09:01,000\tWARNING resource_demand_scheduler.py:782 -- The autoscaler could not find a node type to satisfy the request: [{'GPU': 8.0}].
ray.exceptions.OutOfDiskError: Local disk is full
(raylet) Spilled 4096 MiB, 8 objects, write throughput 900 MiB/s.
2025-03-14 10:20:00,000 - INFO - Update instance REQUESTED->QUEUED (id=1f2e, type=gpu-group, cloud_instance_id=, ray_id=): queue again to launch after timeout=600s
[2025-03-14 10:21:00,000 E 61 61] (gcs_server) redis_context.cc:368: Failed to connect to Redis due to: RedisError: Could not establish connection to Redis redis:6379 (context.err = 1).. Will retry in 100ms.
[2024-05-25 21:38:39,655 E 1262748 1262748] core_worker.cc:215: Failed to register worker 01000000ffffffffffffffffffffffffffffffffffffffffffffffff to Raylet. IOError: [RayletClient] Unable to register worker with raylet. No such file or directory
ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla V100-SXM2-32GB GPU has compute capability 7.0.
The quantization method awq is not supported for the current GPU. Minimum capability: 75. Current capability: 70.
ValueError: The quantization method fp8 is not supported for the current GPU. Minimum capability: 90. Current capability: 86.
Cannot access gated repo for url https://huggingface.co/meta-llama/Meta-Llama-3-8B-Instruct/resolve/main/config.json.
ValueError: Loading microsoft/Phi-3-small-8k-instruct requires you to execute the configuration file in that repo on your local machine.
(VllmWorker rank=0 pid=36105) ERROR 08-21 08:26:21 [multiproc_executor.py:546]   self.model_runner.capture_model()
NCCL WARN Error while creating shared memory segment /dev/shm/nccl-xxxxx (size 7340384)
ValueError: Total number of attention heads (40) must be divisible by tensor parallel size (6).
ValueError: Head size 40 is not supported by MLACommon. Supported head sizes are: [576]. Set VLLM_ATTENTION_BACKEND=FLEX_ATTENTION to use FlexAttention backend which supports all head sizes.
ValueError: LoRA rank 64 is greater than max_lora_rank 16.
AssertionError: Prefix caching is currently not supported with sliding window attention
ValueError: User-specified max_model_len (131072) is greater than the derived max_model_len (None=8192 in model's config.json). This may lead to incorrect model
ValueError: Model architectures ['MllamaForConditionalGeneration'] are not supported for now. Supported architectures: ['AquilaModel', 'AquilaForCausalLM']
ValueError: speculative_draft_tensor_parallel_size=4 cannot be other value than 1
(EngineCore pid=36704) ERROR 04-07 15:58:28 [gpu_model_runner.py:4818] Failed to load model - not enough GPU memory. Try lowering --gpu-memory-utilization to free memory for weights, increasing --tensor-parallel-size, or using --quantization.
(RayWorkerWrapper pid=2202490) ERROR 04-24 16:06:40 worker_base.py:157]     self.model_runner.load_model()
invalid usage ... Last NCCL warning(error): 'Bootstrap : no socket interface found'
misc/ibvwrap.cc:278 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory
(EngineCore_DP0 pid=1511501) ERROR 12-15 18:57:10 [core.py:918] ValueError: Loading lora ["table_qc failed: No adapter found for /data/home/zhizhehui/dev/train/table_ocr/Reward_model_train/output/qwen_lora_output/checkpoint-57"]
ValueError: torch.bfloat16 is not supported for quantization method awq. Supported dtypes: [torch.float16]
ERROR 02-20 16:43:12 engine.py:389] Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling NumCudaDevices() that might have already set an error? Error 802: system not yet initialized
RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling NumCudaDevices() that might have already set an error? Error 804: forward compatibility was attempted on non supported HW
nvidia-container-cli: initialization error: nvml error: driver/library version mismatch: unknown
2020/08/10 19:09:42 'nvidia.com/gpu' device marked unhealthy: GPU-7540a9b3-eeb9-1214-1526-f93c9ea826a8
  File "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/openai/api_server.py", line 1920, in run_server
RuntimeError: Version mismatch: The cluster was started with:
AssertionError: local_world_size (8) must be less than or equal to the number of visible devices (4).
"""  # noqa: E501 - log lines as printed


def test_every_signal_is_found():
    found = scan_log(FAILURES)
    assert set(found) == set(builtin_signals().names())
    v1, v0 = found["kv_cache_too_small"]
    assert v1.startswith("(EngineCore_0 pid=263) ValueError: To serve at least one request")
    assert v0.startswith("ValueError: The model's max seq len (131072) is larger than")
    assert found["no_cache_blocks"] == [
        "(EngineCore_0 pid=263) ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine."
    ]
    assert [line.split(":")[0] for line in found["cuda_oom"]] == [
        "torch.OutOfMemoryError",
        "torch.cuda.OutOfMemoryError",
    ]
    assert len(found["cuda_driver_too_old"]) == 3
    # six lines say so; only the last five are kept
    assert len(found["model_not_found"]) == MAX_LINES_PER_SIGNAL
    assert found["model_not_found"][0].startswith("huggingface_hub.errors.RepositoryNotFoundError")
    missing_model = [line for line in FAILURES.splitlines() if "model_not_found" in scan_log(line)]
    assert len(missing_model) == 6 and "config.json" in missing_model[0]
    assert found["xid"] == [
        "[ 5123.456789] NVRM: Xid (PCI:0000:65:00): 79, pid=1234, name=python3, GPU has fallen off the bus."
    ]
    assert found["ray_cannot_schedule"][0].endswith("cannot provide the requested resources.")
    assert "PreemptionMode.RECOMPUTE" in found["preemption"][0]
    assert len(found["engine_dead"]) == 3
    assert found["gpu_memory_taken"][0].endswith("reduce GPU memory used by other processes.")


def test_a_clean_start_has_no_signals():
    # only the lines that show vLLM runs (diag/parsers/workloads.py), none naming a failure
    assert set(scan_log(CLEAN_START)) == {"vllm_process"}
    assert scan_log("") == {}


@pytest.mark.parametrize(
    "benign",
    [
        "FileNotFoundError: [Errno 2] No such file or directory: '/tmp/ray/session_latest/logs/raylet.out'",
        "(APIServer pid=1) INFO 03-14 10:00:10 [loggers.py:123] Engine 000: Avg prompt throughput: 812.3 tokens/s, "
        "Avg generation throughput: 95.1 tokens/s, Running: 64 reqs, Waiting: 12 reqs, Preemptions: 3, "
        "GPU KV cache usage: 99.1%, Prefix cache hit rate: 41.0%",
        "(EngineCore_0 pid=212) INFO 03-14 09:01:40 [gpu_worker.py:276] Available KV cache memory: 52.11 GiB",
        "INFO 03-14 09:00:02 [__init__.py:241] Automatically detected platform cuda.",
    ],
)
def test_benign_lines_are_not_signals(benign):
    assert scan_log(benign) == {}


def test_engine_dead_after_a_requested_shutdown_is_not_a_failure():
    stopped = (
        CLEAN_START
        + """\
(EngineCore pid=212) INFO 03-14 09:30:00 [core.py:1454] [shutdown] EngineCore: trigger received signal=SIGTERM
(APIServer pid=1) INFO 03-14 09:30:00 [launcher.py:254] [shutdown] API server: shutdown triggered
(APIServer pid=1) ERROR 03-14 09:30:00 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.
(APIServer pid=1) INFO 03-14 09:30:00 [launcher.py:279] [shutdown] API server: engine client stopped
INFO:     Shutting down
"""  # noqa: E501 - vLLM lines as printed
    )
    assert set(scan_log(stopped)) == {"vllm_process"}
    # a death before any shutdown request still counts, and so do other failures during shutdown
    crashed = (
        CLEAN_START + "(APIServer pid=1) ERROR 03-14 09:20:00 [core_client.py:564] Engine core proc EngineCore_0 "
        "died unexpectedly, shutting down client.\n"
        + stopped.split(CLEAN_START)[1]
        + "torch.OutOfMemoryError: CUDA out of memory.\n"
    )
    found = scan_log(crashed)
    assert [line.split("] ")[1][:16] for line in found["engine_dead"]] == ["Engine core proc"]
    assert found["cuda_oom"] == ["torch.OutOfMemoryError: CUDA out of memory."]


def test_only_the_last_lines_are_kept_stripped_and_without_colour():
    text = "\n".join(
        f"\x1b[33mWARNING\x1b[0m 03-14 10:{i:02d}:00 scheduler.py:1089] Sequence group {i} is preempted by "
        f"PreemptionMode.RECOMPUTE mode because there is not enough KV cache space.   "
        for i in range(8)
    )
    lines = scan_log(text)["preemption"]
    assert len(lines) == MAX_LINES_PER_SIGNAL == 5
    assert [line.split()[6] for line in lines] == ["3", "4", "5", "6", "7"]
    assert all(line == line.strip() and "\x1b" not in line for line in lines)


def test_one_line_counts_once_per_signal_but_may_carry_several():
    line = "ERROR torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. EngineDeadError"
    assert scan_log(line) == {"cuda_oom": [line], "engine_dead": [line]}


def test_gpu_memory_shortfall_reads_both_wordings():
    [line] = scan_log(FAILURES)["gpu_memory_taken"]
    assert gpu_memory_shortfall(line) == {
        "device": None,
        "free_gib": 20.1,
        "total_gib": 139.8,
        "utilization": 0.9,
        "requested_gib": 125.8,
        "in_use_gib": 119.7,
        "utilization_that_fits": 0.14,
    }
    newer = (
        "ValueError: Free memory on device cuda:0 (6.2/79.19 GiB) on startup is less than desired GPU memory "
        "utilization (0.5, 39.6 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."
    )
    shortfall = gpu_memory_shortfall(newer)
    assert shortfall is not None and shortfall["device"] == "cuda:0" and shortfall["utilization_that_fits"] == 0.07
    assert gpu_memory_shortfall("ValueError: No available memory for the cache blocks.") is None


def test_xids_in():
    lines = [
        "[ 5123.456789] NVRM: Xid (PCI:0000:65:00): 79, pid=1234, name=python3, GPU has fallen off the bus.",
        "NVRM: Xid (PCI:0000:3b:00): 48, pid=2211, name=python3, Double Bit ECC Error",
        "kernel: NVRM: Xid (PCI:0000:3b:00): 63, pid='<unknown>', name=<unknown>, Row Remapper",
        "Node gpu-node-1 is healthy",
    ]
    assert xids_in(lines) == [79, 48, 63]
    assert xids_in([]) == []


def test_an_xid_line_is_read_into_its_codes_and_the_pci_address_it_names() -> None:
    line = "kernel: NVRM: Xid (PCI:0000:3B:00.0): 63, pid='<unknown>', name=<unknown>, Row Remapper"
    assert xid_line(line) == XidLine(line, (63,), "0000:3b:00")
    two = "NVRM: Xid (PCI:0000:65:00): 79, then NVRM: Xid (PCI:0000:3b:00): 48"
    assert xid_line(two) == XidLine(two, (79, 48), "0000:65:00")  # the address of its first report
    # a line the xid signal took without a report in it is kept, with nothing read from it
    assert xid_line("NVRM: Xid (PCI:0000:65:00) GPU reset") == XidLine("NVRM: Xid (PCI:0000:65:00) GPU reset", (), None)


def test_an_event_message_is_an_xid_line_only_where_it_reports_one() -> None:
    message = "NVRM: Xid (PCI:0000:65:00): 79, pid=1234, name=python3, GPU has fallen off the bus."
    assert xid_in_message(message) == XidLine(message, (79,), "0000:65:00")
    assert xid_in_message("NVRM: Xid (PCI:0000:65:00) GPU reset") is None
    assert xid_in_message("Node gpu-node-1 status is now: NodeReady") is None


# --------------------------------------------------------------------------- startup time


def test_startup_span_from_first_stamp_to_startup_complete():
    assert model_load_seconds(CLEAN_START) == 125.0  # 09:00:02 -> 09:02:07, the last stamp before uvicorn's line


_LINES = [
    "INFO 03-14 09:00:02 [a.py:1] start",
    "(APIServer pid=1) INFO:     Application startup complete.",
    "no stamp here",
    "INFO 03-14 09:01:30 [b.py:2] loading",
    "INFO:     Uvicorn running on http://0.0.0.0:8000",
    "INFO 12-31 23:59:59 [c.py:3] late",
    "2025-03-14T09:05:00.000000000Z INFO 03-14 09:05:00 [d.py:4] stamped",
]


@settings(max_examples=300, derandomize=True, database=None)
@given(st.lists(st.sampled_from(_LINES), max_size=12))
def test_the_startup_span_reads_only_two_stamps_and_means_what_every_line_would(lines: list[str]) -> None:
    """From the first stamp to the last stamp at or before the first ready line after it, as a walk
    over every line has it."""
    first = last = None
    expected = None
    for line in lines:
        stamp = _timestamp(line)
        if stamp is not None:
            first, last = first or stamp, stamp
        if _READY.search(line) and first is not None:
            elapsed = last - first
            expected = (elapsed + timedelta(days=366) if elapsed < timedelta(0) else elapsed).total_seconds()
            break
    assert _startup_span(lines) == expected


def test_kubectl_timestamps_are_preferred():
    stamped = "\n".join(
        f"2025-03-14T09:{minute:02d}:{second:02d}.500000000Z {line}"
        for (minute, second), line in zip(
            [(0, 0), (0, 30), (3, 0), (3, 1)],
            [
                "INFO 03-14 09:00:02 [api_server.py:1805] vLLM API server version 0.10.1",
                "INFO 03-14 09:00:31 [default_loader.py:262] Loading weights took 20.00 seconds",
                "INFO 03-14 09:03:00 [api_server.py:1880] Starting vLLM API server 0 on http://0.0.0.0:8000",
                "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)",
            ],
            strict=True,
        )
    )
    assert model_load_seconds(stamped) == 181.0


def test_a_ready_line_before_any_stamp_leaves_the_span_to_a_later_one():
    """Only the lines up to the first ready line are split; a ready line with no stamp before it (a
    restart's tail) does not end the search, and the serving lines after the start-up are not read."""
    text = (
        "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)\r\n"
        + CLEAN_START
        + "".join(f'INFO:     10.0.0.1:5{n:03d} - "POST /v1/completions HTTP/1.1" 200 OK\n' for n in range(300))
    )
    assert model_load_seconds(text) == model_load_seconds(CLEAN_START) == 125.0


def test_durations_when_the_server_never_came_up():
    killed = "\n".join(CLEAN_START.splitlines()[:9])  # killed (e.g. by its liveness probe) before uvicorn started
    assert model_load_seconds(killed) == pytest.approx(49.735102 + 54.02)
    only_weights = "Loading weights took 300.50 seconds\n"
    assert model_load_seconds(only_weights) == 300.5


def test_durations_take_the_slowest_worker_and_newer_wording():
    text = """\
(VllmWorker rank=0 pid=300) INFO 03-14 09:01:11 [gpu_model_runner.py:2007] Model loading took 7.1000 GiB and 30.500000 seconds
(VllmWorker rank=1 pid=301) INFO 03-14 09:01:13 [gpu_model_runner.py:2007] Model loading took 7.1000 GiB and 33.000000 seconds
(EngineCore_DP0 pid=250) INFO 03-14 09:04:00 [core.py:283] init engine (profile, create kv cache, warmup model) took 200.69 s (compilation: 1.48 s)
"""  # noqa: E501 - vLLM lines as printed
    assert model_load_seconds(text) == pytest.approx(233.69)
    assert model_load_seconds("Model loading took 14.46 GiB memory and 61.25 seconds") == 61.25


def test_startup_across_a_year_boundary():
    text = (
        "INFO 12-31 23:59:30 [api_server.py:1805] vLLM API server version 0.10.1\n"
        "INFO 01-01 00:00:45 [api_server.py:1880] Starting vLLM API server 0 on http://0.0.0.0:8000\n"
        "INFO:     Application startup complete.\n"
    )
    assert model_load_seconds(text) == 75.0


def test_no_startup_information():
    assert model_load_seconds("") is None
    assert model_load_seconds("INFO:     Application startup complete.\n") is None  # no stamps, no durations
    assert model_load_seconds("hello\nworld 13-45 99:99:99\n") is None
