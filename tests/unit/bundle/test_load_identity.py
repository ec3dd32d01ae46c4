"""Loading and joining by identity: files join the pod their name gives (`<namespace>.<pod>`, or a bare
pod name only one namespace has), and a list cut off part-way still gives its complete items."""

from __future__ import annotations

import json

from diag.bundle.files import Bundle
from diag.bundle.load import load_bundle
from diag.link.join import join
from diag.snapshot.model import Snapshot

CUDA_OOM = (
    "(EngineCore pid=245) ERROR 12-01 14:03:09 [core.py:937] torch.OutOfMemoryError: CUDA out of memory. "
    "Tried to allocate 2.14 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.07 GiB is free.\n"
)
METRICS = (
    "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
    "# TYPE vllm:num_requests_running gauge\n"
    'vllm:num_requests_running{engine="0",model_name="llama-8b"} 3.0\n'
)
GPU_CSV = (
    "index, uuid, name, memory.used [MiB], memory.total [MiB], utilization.gpu [%], temperature.gpu\n"
    "0, {uuid}, NVIDIA H100 80GB HBM3, 74210 MiB, 81559 MiB, 38 %, 46\n"
)


def vllm_pod(namespace: str, node: str, uid: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "vllm-0", "namespace": namespace, "uid": uid, "labels": {"app": "vllm"}},
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "vllm",
                    "image": "vllm/vllm-openai:v0.11.0",
                    "command": ["vllm", "serve"],
                    "args": ["meta-llama/Llama-3.1-8B-Instruct", "--port", "8000"],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
        "status": {"phase": "Running", "podIP": "10.0.0.1" if namespace == "llm-serving" else "10.0.0.2"},
    }


def pods_json(*pods: dict) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(pods)}, indent=4)


TWO_NAMESPACES = pods_json(
    vllm_pod("llm-serving", "gpu-1", "5f0c2a6e-3f1e-4b8e-9a57-0d8f2c1b7e11"),
    vllm_pod("other-team", "gpu-2", "9d41b7c0-2e6a-4f15-8c3d-7a0e5b9f1c22"),
)


def snapshot(files: dict[str, str]) -> Snapshot:
    return join(load_bundle(Bundle({rel: text.encode() for rel, text in files.items()})))


def pod(snap: Snapshot, key: str):
    found = snap.pod(key)
    assert found is not None
    return found


def test_namespaced_files_go_to_their_own_pod_only():
    snap = snapshot(
        {
            "k8s/pods.json": TWO_NAMESPACES,
            "k8s/logs/other-team.vllm-0.log": CUDA_OOM,
            "k8s/logs/llm-serving.vllm-0.vllm.log": "INFO 12-01 14:00:00 [api_server.py:1] "
            "vLLM API server version 0.11.0\n",
            "vllm/llm-serving.vllm-0.metrics.txt": METRICS,
            "vllm/other-team.vllm-0.health.txt": "503",
            "gpu/other-team.vllm-0.csv": GPU_CSV.format(uuid="GPU-170d82e3-8af2-c5db-84bc-c44f13158028"),
        }
    )
    broken, fine = pod(snap, "other-team/vllm-0"), pod(snap, "llm-serving/vllm-0")
    assert broken.containers[0].log_signals.get("cuda_oom")
    assert set(fine.containers[0].log_signals) == {"vllm_process"} and "vLLM API server" in (
        fine.containers[0].logs or ""
    )
    servers = {s.pod: s for s in snap.vllm_servers}
    assert len(snap.vllm_servers) == 2
    assert servers["llm-serving/vllm-0"].scrapes and not servers["other-team/vllm-0"].scrapes
    assert (servers["other-team/vllm-0"].health, servers["llm-serving/vllm-0"].health) == ("503", None)
    assert (
        "cuda_oom" in servers["other-team/vllm-0"].log_signals
        and "cuda_oom" not in servers["llm-serving/vllm-0"].log_signals
    )
    # two pods named vllm-0: each server carries its namespace in its name, so the names stay apart
    assert {s.name for s in snap.vllm_servers} == {"llm-serving.vllm-0", "other-team.vllm-0"}
    assert [(g.serving_pods, g.node) for g in snap.gpus] == [(["other-team/vllm-0"], "gpu-2")]
    assert servers["other-team/vllm-0"].gpus == ["GPU-170d82e3-8af2-c5db-84bc-c44f13158028"]
    assert servers["llm-serving/vllm-0"].gpus == []
    assert all(s.status == "ok" for s in snap.sources.values() if s.status != "missing")


def test_a_bare_name_two_namespaces_share_joins_neither():
    snap = snapshot(
        {
            "k8s/pods.json": TWO_NAMESPACES,
            "k8s/logs/vllm-0.log": CUDA_OOM,
            "vllm/vllm-0.metrics.txt": METRICS,
            "vllm/vllm-0.health.txt": "503",
            "gpu/vllm-0.csv": GPU_CSV.format(uuid="GPU-adce3cc3-ccdf-8c24-e800-56d6f5f29ee0"),
        }
    )
    for key in ("llm-serving/vllm-0", "other-team/vllm-0"):
        container = pod(snap, key).containers[0]
        assert (container.logs, container.log_signals) == (None, {})
    joined = [s for s in snap.vllm_servers if s.pod is not None]
    assert sorted(s.pod for s in joined) == ["llm-serving/vllm-0", "other-team/vllm-0"]
    assert all(not s.scrapes and s.health is None and s.gpus == [] for s in joined)
    assert [(g.serving_pods, g.node) for g in snap.gpus] == [([], None)]
    for rel in ("k8s/logs/vllm-0.log", "vllm/vllm-0.metrics.txt", "vllm/vllm-0.health.txt", "gpu/vllm-0.csv"):
        status = snap.sources[rel]
        assert status.status == "failed", rel
        assert status.detail == (
            f"{rel}: pod name vllm-0 is in namespaces llm-serving, other-team: joined to neither "
            "(name the file <namespace>.vllm-0 to say which)"
        )


def test_a_bare_name_one_namespace_has_still_joins():
    snap = snapshot(
        {
            "k8s/pods.json": pods_json(vllm_pod("llm-serving", "gpu-1", "5f0c2a6e-3f1e-4b8e-9a57-0d8f2c1b7e11")),
            "k8s/logs/vllm-0.log": CUDA_OOM,
            "vllm/vllm-0.metrics.txt": METRICS,
        }
    )
    assert pod(snap, "llm-serving/vllm-0").containers[0].log_signals.get("cuda_oom")
    (server,) = snap.vllm_servers
    assert (server.name, server.pod, len(server.scrapes)) == ("vllm-0", "llm-serving/vllm-0", 1)


def test_a_qualified_server_file_is_named_after_its_pod_where_the_pod_name_is_unique():
    snap = snapshot(
        {
            "k8s/pods.json": pods_json(vllm_pod("llm-serving", "gpu-1", "5f0c2a6e-3f1e-4b8e-9a57-0d8f2c1b7e11")),
            "vllm/llm-serving.vllm-0.metrics.txt": METRICS,
        }
    )
    (server,) = snap.vllm_servers
    assert (server.name, server.pod, len(server.scrapes)) == ("vllm-0", "llm-serving/vllm-0", 1)
    assert pod(snap, "llm-serving/vllm-0").vllm_server == "vllm-0"


def test_events_about_an_earlier_pod_of_the_same_name_stay_off_the_current_one():
    def event(uid: str, reason: str) -> dict:
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"vllm-0.{reason.lower()}", "namespace": "llm-serving"},
            "involvedObject": {"kind": "Pod", "name": "vllm-0", "namespace": "llm-serving", "uid": uid},
            "reason": reason,
            "message": "Stopping container vllm",
            "type": "Normal",
            "count": 1,
        }

    current = "5f0c2a6e-3f1e-4b8e-9a57-0d8f2c1b7e11"
    snap = snapshot(
        {
            "k8s/pods.json": TWO_NAMESPACES,
            "k8s/events.json": json.dumps(
                {
                    "kind": "List",
                    "items": [event("0b9e4c1d-7a2f-4e68-b3d5-1c8f6a2e9d70", "Killing"), event(current, "Started")],
                }
            ),
        }
    )
    assert [e.reason for e in pod(snap, "llm-serving/vllm-0").events] == ["Started"]


def test_a_truncated_pod_list_gives_its_complete_items_and_stays_failed():
    text = TWO_NAMESPACES[: TWO_NAMESPACES.index('"other-team"') + 5]
    snap = snapshot({"k8s/pods.json": text})
    assert [p.key for p in snap.pods] == ["llm-serving/vllm-0"]
    status = snap.sources["k8s/pods.json"]
    assert (status.status, status.detail) == (
        "failed",
        "k8s/pods.json: truncated after 1 complete item (those were used)",
    )
    assert status.recovered == 1


def test_damaged_or_empty_lists_give_nothing():
    damaged = TWO_NAMESPACES.replace('"spec"', '"spec" 1', 1)
    snap = snapshot({"k8s/pods.json": damaged, "k8s/nodes.json": ""})
    assert snap.pods == [] and snap.nodes == []
    assert (snap.sources["k8s/pods.json"].status, snap.sources["k8s/pods.json"].recovered) == ("failed", None)
    assert "not valid JSON" in snap.sources["k8s/pods.json"].detail
    assert (
        snap.sources["k8s/nodes.json"].detail
        == "k8s/nodes.json: empty file: expected a Node list (kubectl get -o json)"
    )
