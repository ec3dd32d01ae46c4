"""Record fixture bundles of issue 11's history scenarios from a REAL Prometheus.

For each scenario of tests/live/history_scenarios.py: backfill a fresh Prometheus with promtool, run
llmdiag's Prometheus collector against it (scoped to the cluster's namespace, as `llmdiag collect -n llm`
does), and write fixtures/history-<scenario>/ = the cluster's own files (fixtures/busy-but-healthy)
+ prometheus/ as Prometheus answered + expected.json. The answers are real; the histories are built.

    python ci/prometheus/record.py [SCENARIO ...]
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "live"))
sys.path.insert(0, str(REPO))

from history_scenarios import (  # noqa: E402
    CLUSTER_FIXTURE,
    EXPECTED,
    SCENARIOS,
    add_events,
    collect_history_into,
    openmetrics,
)
from live_services import running_prometheus  # noqa: E402

DESCRIPTIONS = {
    "healthy-busy-hour": "busy-but-healthy with 30 minutes of Prometheus history of a busy, "
    "healthy hour (queues come and go, KV 0.6-0.75); another tenant's "
    "KV storm in namespace research is outside the collected namespace.",
    "kv-storm-ended": "busy-but-healthy (calm at collection) whose Prometheus history shows "
    "pod pfnp5's KV cache full with a climbing queue and preemptions for the "
    "first 20 of the last 30 minutes: the storm the on-call arrived after.",
    "queue-building": "busy-but-healthy whose Prometheus history shows pod pfnp5's queue climbing 0 "
    "-> 30 over the last 20 minutes with 32 running and KV near 0.6; --max-num-seqs "
    "is not set, so the cap is unknown (VLLM-114). The /metrics scrapes at collection "
    "show the queue draining: the finding says the scrapes were trusted for now.",
    "xid-on-one-gpu": "busy-but-healthy whose dcgm-exporter series show Xid 79 on GPU 1 of "
    "gpu-h100-2 for the last 6 minutes; nvidia-smi's CSV cannot show Xids.",
    "requests-aborted": "busy-but-healthy whose Prometheus history shows pod pfnp5 finishing 12 of every 42 "
    "requests with finished_reason=abort for the last 15 minutes (a gateway timing out).",
    "thermal-slowdown": "busy-but-healthy whose dcgm-exporter default counters show pod pfnp5's four GPUs held at "
    "1005-1020 MHz (of 1980) at 91-92 C, 415 W, 100 % busy, for 15 minutes, while the server's generation "
    "rate fell from 2,900 to 950 tokens/s and its queue climbed to 38 with KV at 0.61-0.66; the fine-tuning "
    "job of namespace research on the node's other four GPUs stays busy and cool. The GPUs explain the server.",
    "power-slowdown": "as thermal-slowdown, with the GPUs cool (63 C) and held at 705 MHz, 310 W, by the power "
    "brake (clock-event reasons 0x84, exported); every other GPU is busy at its power cap (0x4 alone), "
    "which is no fault.",
    "xid-restart": "busy-but-healthy whose dcgm-exporter series show Xid 48 (double-bit ECC) on GPU 1 of "
    "gpu-h100-1, after which pod pfnp5's vLLM server stops answering (`up` 0) for 5 minutes and comes back as a "
    "new process (process_start_time_seconds, kube-state-metrics' restart counter 0 -> 1); its GPUs' memory is "
    "freed and taken again at start-up. The pod's events of those minutes (readiness probe refused, container "
    "started again) are in k8s/events.json. The Xid is the cause.",
    "oom-restart": "as xid-restart without an Xid: node-problem-detector reports the kernel's OOM killer taking a "
    "python3 process on gpu-h100-1 (OOMKilling) in the minute pfnp5's vLLM server goes away; it is down 5 minutes "
    "and comes back as a new process. The node's event is the cause.",
    "neighbour-memory": "pod pfnp5's GPU 0 holds 5,670 MiB more than vLLM's preallocated 74,210 MiB from minute 14 "
    "on, while its clocks stay at the top; the server's generation rate falls from 2,900 to 950 tokens/s and its "
    "queue climbs: another process on the GPU. The research job's memory grows on its own GPUs (no vLLM there).",
    "mig-second-replica": "pfnp5's GPU 0 is split into two MIG instances (3g.40gb); a second replica takes 37,000 "
    "MiB of instance 2 from minute 14 while pfnp5's generation rate falls with no queue: memory on another MIG "
    "instance is no other tenant's (GPU-121 silent), the drop is vLLM's (VLLM-119).",
    "rollout-restart": "a planned rollout: the previous pod llama-70b-6c4d5b8f7-kq2zt serves until minute 15, then "
    "pfnp5 (the pod the cluster's files hold) starts and answers from minute 17.5; its GPUs are freed and taken "
    "again at start-up. No Xid, no restarted process: nothing to report.",
    "throughput-drop-healthy-gpus": "pod pfnp5's generation rate falls from 2,900 to 950 tokens/s for the "
    "last 15 minutes with 48 requests running and no queue, while every GPU stays at full clocks, cool: "
    "the cause is vLLM's (or its load's), not the GPUs'.",
}


LAYERS = {"VLLM-131": "kubernetes"}  # a rule whose layer its prefix does not say


def record(name: str) -> Path:
    fixture = REPO / "fixtures" / f"history-{name}"
    shutil.rmtree(fixture, ignore_errors=True)
    shutil.copytree(REPO / "fixtures" / CLUSTER_FIXTURE, fixture, ignore=shutil.ignore_patterns("expected.json"))
    with (
        tempfile.TemporaryDirectory() as work,
        running_prometheus(Path(work), lambda end: openmetrics(SCENARIOS[name], end)) as prometheus,
    ):
        add_events(fixture, SCENARIOS[name], prometheus.history_end)
        problems = collect_history_into(fixture, prometheus.url)
    if problems:
        raise SystemExit(f"{name}: {problems}")
    expected = EXPECTED[name]
    layer = (
        None
        if expected.rule is None
        else LAYERS.get(expected.rule, "gpu" if expected.rule.startswith("GPU") else "vllm")
    )
    (fixture / "expected.json").write_text(json.dumps({
        "description": DESCRIPTIONS[name],
        "verdict": {"layer": layer, "rule": expected.rule},
        "fires": list(expected.fires),
    }, indent=2) + "\n")  # fmt: skip
    return fixture


if __name__ == "__main__":
    for scenario in sys.argv[1:] or sorted(SCENARIOS):
        print(record(scenario))
