"""Live collection from Kubernetes, run against the replay server over real HTTP with the real
`kubernetes` client (no Kubernetes API server runs in CI): what is written, how it is scoped, and
how the runner keeps a partial bundle when a source fails, hangs or is interrupted."""

from __future__ import annotations

import io
import json
import os
import signal
import stat
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import diag.collect.kube as kube_module
from diag.bundle.files import Bundle
from diag.bundle.load import load_bundle
from diag.collect.base import SourceResult, Target
from diag.collect.gpu import NVIDIA_SMI_CSV, NVIDIA_SMI_XML
from diag.collect.kube import KubeAccess, KubeError, KubeTimeout
from diag.collect.runner import (
    INTERRUPTED,
    CollectContext,
    Collector,
    collect,
    default_collectors,
)
from tests.replay.harness import (
    CLUSTER,
    GPU_PODS,
    REPO,
    VLLM_POD,
    collect_from,
    live_target,
    recorded_cluster,
)
from tests.replay.server import RecordedRequest, ReplayCluster, ReplayServer
from tests.replay.upstream import Answer, RecordedHttp, vllm_routes

LLM_PODS = {
    "llama-3-8b-7c9d6b5f4-abcde",
    "llama-3-8b-7c9d6b5f4-fghij",
    "qwen-ray-head-x7k2p",
    "qwen-ray-gpu-group-worker-9zt4q",
    "redis-0",
    "embedder-5f6d7c8b9-k2m4n",
    "tokenizer-6c7d8e9f0-p5q6r",
}


@pytest.fixture
def cluster() -> ReplayCluster:
    return recorded_cluster()


@pytest.fixture
def replay(cluster: ReplayCluster) -> Iterator[ReplayServer]:
    with ReplayServer(cluster) as server:
        yield server


@pytest.fixture
def small_pages(monkeypatch: pytest.MonkeyPatch) -> int:
    """Two items per list request, so that the 7 pods of the namespace take four."""
    monkeypatch.setattr(kube_module, "PAGE_SIZE", 2)
    return 2


def _items(bundle: Bundle, kind: str) -> list[dict]:
    return json.loads(bundle.files[f"k8s/{kind}.json"])["items"]


def _names(bundle: Bundle, kind: str) -> set[str]:
    return {i["metadata"]["name"] for i in _items(bundle, kind)}


def _lists_of(requests: list[RecordedRequest], resource: str) -> list[RecordedRequest]:
    return [r for r in requests if r.info and r.info.resource == resource and r.info.verb == "list"]


def _node_pod_lists(requests: list[RecordedRequest]) -> list[RecordedRequest]:
    """The lists of every namespace's pods on one node (k8s/node-pods/<node>.json)."""
    return [
        r for r in _lists_of(requests, "pods") if r.query.get("fieldSelector", [""])[0].startswith("spec.nodeName=")
    ]


def _own_pod_lists(requests: list[RecordedRequest]) -> list[RecordedRequest]:
    """The lists of the target's pods (k8s/pods.json)."""
    return [r for r in _lists_of(requests, "pods") if r not in _node_pod_lists(requests)]


# ----------------------------------------------------------------------------- a full collection


def test_full_collection_writes_a_bundle_that_the_analyzer_loads(
    cluster: ReplayCluster, replay: ReplayServer, tmp_path: Path, small_pages: int
) -> None:
    with RecordedHttp(vllm_routes()) as vllm:
        cluster.upstreams[("pods", *VLLM_POD)] = vllm.url
        bundle, results = collect_from(replay, tmp_path)

    for kind in ("pods", "events", "nodes", "services", "endpoints", "deployments", "statefulsets", "hpa",
                 "rayclusters", "rayservices", "daemonsets"):  # fmt: skip
        listed = json.loads(bundle.files[f"k8s/{kind}.json"])
        assert listed["kind"] == "List" and listed["apiVersion"] == "v1"
        assert all(item["kind"] and item["apiVersion"] for item in listed["items"])  # as kubectl fills them in
    snapshot = load_bundle(bundle)
    failed = {name: s.detail for name, s in snapshot.sources.items() if s.status == "failed"}
    loaded = {name for name, s in snapshot.sources.items() if s.status == "ok"}
    written = set(bundle.files) - {"manifest.json"}
    assert written <= loaded, f"written but not loaded: {written - loaded}; failures: {failed}"
    assert {p.name for p in snapshot.pods} == LLM_PODS
    assert {g.host for g in snapshot.gpus} == {"gpu-node-a", "gpu-node-b"}
    assert snapshot.ray_status is not None and snapshot.ray_actors
    (server,) = snapshot.vllm_servers
    assert server.name == f"{VLLM_POD[0]}.{VLLM_POD[1]}" and len(server.scrapes) == 2 and server.health == "200"
    assert all(scrape.taken_at is not None for scrape in server.scrapes)  # times from the manifest
    assert not [r for r in results if r.status == "failed" and r.name.startswith(("k8s/", "gpu/", "vllm/"))]


def test_manifest_records_the_run(replay: ReplayServer, tmp_path: Path) -> None:
    bundle, results = collect_from(replay, tmp_path, selector="app=llama-3-8b")
    manifest = json.loads(bundle.files["manifest.json"])
    assert manifest["kubernetes"]["context"] == "replay"
    assert manifest["kubernetes"]["server"] == replay.url
    assert manifest["kubernetes"]["namespaces"] == ["llm"]
    assert manifest["selectors"]["label"] == "app=llama-3-8b"
    assert manifest["sources"]["k8s/pods.json"] == {"status": "ok", "detail": "2 items"}
    # the vLLM pod's proxy has no server behind it here: a failed source, recorded, not raised
    assert manifest["sources"][f"vllm/{VLLM_POD[0]}.{VLLM_POD[1]}.metrics"]["status"] == "failed"
    assert set(manifest["sources"]) == {r.name for r in results}
    assert manifest["redaction"]["applied"]["env-secret-value"] >= 2  # HF_TOKEN of both llama pods
    assert "secret-cli-flag" in manifest["redaction"]["rules"]
    assert manifest["duration_s"] >= 0 and manifest["collected_at"].endswith("Z")


# ----------------------------------------------------------------------------- scope


def test_the_context_namespace_scopes_objects_and_events(replay: ReplayServer, tmp_path: Path) -> None:
    bundle, _ = collect_from(replay, tmp_path)
    assert _names(bundle, "pods") == LLM_PODS  # other/redis-0 is not in llm
    assert {p["metadata"]["namespace"] for p in _items(bundle, "pods")} == {"llm"}
    involved = {(e["involvedObject"]["kind"], e["involvedObject"]["name"]) for e in _items(bundle, "events")}
    assert ("Pod", "redis-0") not in involved  # the event of other/redis-0
    # node events are kept for the nodes the pods run on, not for every node of the cluster
    assert {n for k, n in involved if k == "Node"} == {"gpu-node-a", "gpu-node-b"}
    assert _names(bundle, "nodes") == {"cpu-node-1", "gpu-node-a", "gpu-node-b"}
    # the GPU stack of every namespace, and nothing else
    assert _names(bundle, "daemonsets") == {
        "nvidia-device-plugin-daemonset",
        "nvidia-dcgm-exporter",
        "gpu-feature-discovery",
    }
    pod_lists = _own_pod_lists(replay.seen())
    assert {r.info.namespace for r in pod_lists if r.info} == {"llm"}


def test_a_namespaced_triage_reads_every_namespaces_pods_on_the_gpu_nodes_apart(
    replay: ReplayServer, tmp_path: Path
) -> None:
    bundle, results = collect_from(replay, tmp_path)
    node_lists = _node_pod_lists(replay.seen())
    # a pod of llm waits for a node, so every GPU node is on its path; the CPU node is not
    assert sorted(r.query["fieldSelector"][0] for r in node_lists) == [
        "spec.nodeName=gpu-node-a",
        "spec.nodeName=gpu-node-b",
    ]
    assert all(r.info and r.info.namespace is None for r in node_lists)
    on_a = json.loads(bundle.files["k8s/node-pods/gpu-node-a.json"])["items"]
    assert on_a and all(p["spec"]["nodeName"] == "gpu-node-a" for p in on_a)
    assert {r.name: r.status for r in results if r.name.startswith("k8s/node-pods/")} == {
        "k8s/node-pods/gpu-node-a.json": "ok",
        "k8s/node-pods/gpu-node-b.json": "ok",
    }
    # they are never the namespace's own pods
    assert {p["metadata"]["namespace"] for p in _items(bundle, "pods")} == {"llm"}
    snap = load_bundle(bundle)
    assert {p.namespace for p in snap.pods} == {"llm"}
    assert set(snap.node_pods) == {"gpu-node-a", "gpu-node-b"}


def test_all_namespaces_reads_every_namespace_and_names_clashing_pods_apart(
    replay: ReplayServer, tmp_path: Path
) -> None:
    bundle, _ = collect_from(replay, tmp_path, all_namespaces=True)
    pods = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in _items(bundle, "pods")}
    assert ("other", "redis-0") in pods and ("llm", "redis-0") in pods
    # other/redis-0 restarted: its logs, under <namespace>.<pod> like every log (llm has a redis-0 too)
    assert bundle.files["k8s/logs/other.redis-0.previous.log"].startswith(b"1:C 29 Nov 2026")
    assert "k8s/logs/redis-0.log" not in bundle.files
    assert all(r.info.namespace is None for r in _lists_of(replay.seen(), "pods") if r.info)
    assert _node_pod_lists(replay.seen()) == []  # every pod is in pods.json already


def test_a_label_selector_scopes_the_pods_on_the_server_side(replay: ReplayServer, tmp_path: Path) -> None:
    bundle, _ = collect_from(replay, tmp_path, selector="app=llama-3-8b")
    assert _names(bundle, "pods") == {"llama-3-8b-7c9d6b5f4-abcde", "llama-3-8b-7c9d6b5f4-fghij"}
    sent = {r.query.get("labelSelector", [""])[0] for r in _own_pod_lists(replay.seen())}
    assert sent == {"app=llama-3-8b"}
    reasons = {e["reason"] for e in _items(bundle, "events")}
    # the events of the selected pods and of their nodes; not the embedder's BackOff
    assert {"FailedScheduling", "Pulled", "NodeNotReady"} <= reasons and "BackOff" not in reasons
    logs = {n for n in bundle.files if n.startswith("k8s/logs/")}
    assert logs == {
        "k8s/logs/llm.llama-3-8b-7c9d6b5f4-abcde.log",
        "k8s/logs/llm.llama-3-8b-7c9d6b5f4-abcde.previous.log",
    }


def test_a_rayservice_scopes_to_the_raycluster_kuberay_made_for_it(replay: ReplayServer, tmp_path: Path) -> None:
    bundle, results = collect_from(replay, tmp_path, ray_cluster="qwen-svc")
    assert _names(bundle, "pods") == {"qwen-ray-head-x7k2p", "qwen-ray-gpu-group-worker-9zt4q"}
    sent = {r.query.get("labelSelector", [""])[0] for r in _own_pod_lists(replay.seen())}
    assert sent == {"ray.io/cluster in (qwen-ray)"}
    assert "RayCluster qwen-ray" in next(r.detail for r in results if r.name == "k8s/pods.json")
    involved = {e["involvedObject"]["name"] for e in _items(bundle, "events")}
    assert "qwen-ray" in involved and "embedder-5f6d7c8b9-k2m4n" not in involved


def test_one_pod_by_name_uses_a_field_selector(replay: ReplayServer, tmp_path: Path) -> None:
    bundle, _ = collect_from(replay, tmp_path, pod="embedder-5f6d7c8b9-k2m4n")
    assert _names(bundle, "pods") == {"embedder-5f6d7c8b9-k2m4n"}
    sent = {r.query.get("fieldSelector", [""])[0] for r in _own_pod_lists(replay.seen())}
    assert sent == {"metadata.name=embedder-5f6d7c8b9-k2m4n"}
    assert {e["reason"] for e in _items(bundle, "events") if e["involvedObject"]["kind"] == "Pod"} == {"BackOff"}


def test_lists_are_paginated_with_limit_and_continue(replay: ReplayServer, tmp_path: Path, small_pages: int) -> None:
    bundle, _ = collect_from(replay, tmp_path)
    pages = _own_pod_lists(replay.seen())
    assert len(pages) == 4  # 7 pods, 2 a page
    assert all(r.query["limit"] == [str(small_pages)] for r in pages)
    assert "continue" not in pages[0].query and all("continue" in r.query for r in pages[1:])
    assert len(_items(bundle, "pods")) == 7
    assert "continue" not in json.loads(bundle.files["k8s/pods.json"])["metadata"]


def test_a_capped_list_says_more_exist(replay: ReplayServer, tmp_path: Path, small_pages: int) -> None:
    kube = KubeAccess(str(replay.write_kubeconfig(tmp_path, namespace="llm")))
    capped = kube.list_json("pods", "llm", max_items=3)
    assert len(capped["items"]) == 3 and capped["metadata"]["continue"]


# ----------------------------------------------------------------------------- logs and exec


def test_logs_of_the_pods_that_matter(cluster: ReplayCluster, replay: ReplayServer, tmp_path: Path) -> None:
    bundle, results = collect_from(replay, tmp_path, log_tail_lines=2)
    logs = {n for n in bundle.files if n.startswith("k8s/logs/")}
    assert logs == {
        "k8s/logs/llm.llama-3-8b-7c9d6b5f4-abcde.log",  # a vLLM server
        "k8s/logs/llm.llama-3-8b-7c9d6b5f4-abcde.previous.log",  # ... that restarted
        "k8s/logs/llm.embedder-5f6d7c8b9-k2m4n.log",  # crash-looping
        "k8s/logs/llm.embedder-5f6d7c8b9-k2m4n.previous.log",
        "k8s/logs/llm.qwen-ray-head-x7k2p.log",  # Ray head
        "k8s/logs/llm.qwen-ray-gpu-group-worker-9zt4q.ray-worker.log",  # Ray worker, two containers
        "k8s/logs/llm.qwen-ray-gpu-group-worker-9zt4q.fluentbit.log",
    }  # not the healthy redis-0; not the pods whose containers never ran
    skipped = {r.name: r.detail for r in results if r.status == "skipped" and r.name.startswith("k8s/logs/")}
    assert skipped["k8s/logs/llm.tokenizer-6c7d8e9f0-p5q6r.log"].endswith("(ImagePullBackOff)")
    assert skipped["k8s/logs/llm.llama-3-8b-7c9d6b5f4-fghij.log"].endswith("(not scheduled)")
    recorded = (CLUSTER / "k8s" / "logs" / "qwen-ray-head-x7k2p.log").read_bytes()
    assert bundle.files["k8s/logs/llm.qwen-ray-head-x7k2p.log"] == b"".join(recorded.splitlines(keepends=True)[-2:])
    log_reads = [r for r in replay.seen() if r.info and r.info.subresource == "log"]
    assert {r.query["tailLines"][0] for r in log_reads} == {"2"}
    assert all("limitBytes" in r.query for r in log_reads)
    previous = {r.info.name for r in log_reads if r.query.get("previous") == ["true"] and r.info}
    assert previous == {"llama-3-8b-7c9d6b5f4-abcde", "embedder-5f6d7c8b9-k2m4n"}


def test_nvidia_smi_and_ray_run_by_exec_with_fixed_argv(replay: ReplayServer, tmp_path: Path) -> None:
    bundle, _ = collect_from(replay, tmp_path)
    execs = [r for r in replay.seen() if r.info and r.info.subresource == "exec"]
    assert execs and all(r.upgrade for r in execs)
    by_pod: dict[str, list[list[str]]] = {}
    for r in execs:
        assert r.query["stdin"] == ["false"] and r.query["tty"] == ["false"]  # a fixed command, nothing typed
        by_pod.setdefault(r.info.name or "", []).append(r.query["command"])  # type: ignore[union-attr]
    for node, (_, pod, capture) in GPU_PODS.items():  # one GPU pod per node
        assert sorted(by_pod[pod]) == sorted([NVIDIA_SMI_XML, NVIDIA_SMI_CSV])
        assert bundle.files[f"gpu/{node}.xml"] == capture.with_suffix(".xml").read_bytes()
    gpu_exec = [r for r in execs if r.query["command"][0] == "nvidia-smi"]
    assert {r.query["container"][0] for r in gpu_exec} == {"vllm", "ray-worker"}  # the containers given GPUs
    # the dashboard is not reachable through the service proxy here, so `ray` ran in the head pod
    assert all(cmd[0] == "ray" for cmd in by_pod["qwen-ray-head-x7k2p"])
    assert bundle.files["ray/status.txt"].startswith(b"======== Autoscaler status")


@pytest.mark.parametrize("protocol", ["v4.channel.k8s.io", "v5.channel.k8s.io"])
def test_exec_speaks_the_api_servers_websocket_protocols(cluster: ReplayCluster, tmp_path: Path, protocol: str) -> None:
    namespace, pod, capture = GPU_PODS["gpu-node-a"]
    with ReplayServer(cluster, exec_protocols=(protocol,)) as server:
        kube = KubeAccess(str(server.write_kubeconfig(tmp_path, namespace="llm")))
        xml = kube.exec_fixed(namespace, pod, "vllm", NVIDIA_SMI_XML, 10)  # several websocket frames long
    assert xml == capture.with_suffix(".xml").read_text()
    assert len(xml) > 16 * 1024


def test_exec_failures_are_one_line(replay: ReplayServer, tmp_path: Path) -> None:
    kube = KubeAccess(str(replay.write_kubeconfig(tmp_path, namespace="llm")))
    with pytest.raises(KubeError, match=r"^exec nvidia-smi in llm/redis-0: replay: no recorded output"):
        kube.exec_fixed("llm", "redis-0", "redis", NVIDIA_SMI_XML, 10)
    with pytest.raises(KubeError, match="not found") as missing:
        kube.exec_fixed("llm", "no-such-pod", None, NVIDIA_SMI_XML, 10)
    assert "\n" not in str(missing.value)


def test_proxy_answers_come_back_whatever_their_status(
    cluster: ReplayCluster, replay: ReplayServer, tmp_path: Path
) -> None:
    kube = KubeAccess(str(replay.write_kubeconfig(tmp_path, namespace="llm")))
    namespace, pod, port = VLLM_POD
    with RecordedHttp(vllm_routes(health=503)) as vllm:
        cluster.upstreams[("pods", *VLLM_POD)] = vllm.url
        assert kube.pod_proxy_get(namespace, pod, port, "/health", 5)[0] == 503  # the pod's own answer
        status, body = kube.pod_proxy_get(namespace, pod, port, "/v1/models?x=1", 5)
    assert status == 200 and json.loads(body)["object"] == "list"
    forwarded = [r.path for r in replay.seen() if r.info and r.info.subresource == "proxy"]
    assert forwarded[-1] == f"/api/v1/namespaces/llm/pods/{pod}:8000/proxy/v1/models"  # "/" not escaped
    with pytest.raises(KubeError, match="connection refused") as refused:  # the API server's own answer
        kube.pod_proxy_get("llm", "redis-0", 6379, "/", 5)
    assert refused.value.status == 503


def test_a_slow_pod_behind_the_proxy_is_a_timeout_after_one_try(
    cluster: ReplayCluster, replay: ReplayServer, tmp_path: Path
) -> None:
    kube = KubeAccess(str(replay.write_kubeconfig(tmp_path, namespace="llm")))
    namespace, pod, port = VLLM_POD
    with RecordedHttp({"/metrics": [Answer(200, b"", delay_s=3)]}) as slow:
        cluster.upstreams[("pods", *VLLM_POD)] = slow.url
        started = time.monotonic()
        with pytest.raises(KubeTimeout, match=r"timed out after \d+\.\ds$"):
            kube.pod_proxy_get(namespace, pod, port, "/metrics", 0.5)
        assert time.monotonic() - started < 1.5
        assert slow.served("/metrics") == 1  # not retried: a caller's timeout is the time it waits


# ----------------------------------------------------------------------------- secrets and files


SECRETS = (
    b"sk-live-9f8e7d6c5b4a3f2e1d0c9b8a",  # --api-key in args, in the vLLM log, in a Bearer header
    b"hf_QxTbWvYzAbCdEfGhIjKlMnOpQrStUvWx12",  # HF_TOKEN env and last-applied-configuration
    b"hf_ZyXwVuTsRqPoNmLkJiHgFeDcBa98765432",  # in the RayService serveConfigV2 YAML
    b"pg-s3cret!",  # DB_PASSWORD env, and in a postgresql:// URL in a log
    b"5241590000000000",  # RAY_REDIS_PASSWORD
    b"nvapi-QWxhZGRpbjpPcGVuU2VzYW1lMTIzNDU2",  # NGC_API_KEY of the device plugin
)


def test_secrets_are_redacted_in_what_is_written(replay: ReplayServer, tmp_path: Path) -> None:
    bundle, _ = collect_from(replay, tmp_path, all_namespaces=True)
    saved = bundle.save(tmp_path / "bundle")
    on_disk = {p.relative_to(saved).as_posix(): p.read_bytes() for p in saved.rglob("*") if p.is_file()}
    recorded = b"".join(p.read_bytes() for p in CLUSTER.rglob("*") if p.is_file())
    for secret in SECRETS:
        assert secret in recorded  # the cluster does hold it ...
        assert not [name for name, data in on_disk.items() if secret in data], secret  # ... the bundle does not
    for name, data in on_disk.items():
        if name.endswith(".json"):
            json.loads(data)  # still valid JSON
    assert b"managedFields" not in on_disk["k8s/pods.json"]
    (vllm_pod,) = [p for p in json.loads(on_disk["k8s/pods.json"])["items"] if p["metadata"]["name"] == VLLM_POD[1]]
    args = vllm_pod["spec"]["containers"][0]["args"]
    assert args[args.index("--api-key") + 1] == "<redacted>"
    assert args[args.index("--max-num-seqs") + 1] == "64"  # engine flags stay readable
    env = {e["name"]: e for e in vllm_pod["spec"]["containers"][0]["env"]}
    assert env["HF_TOKEN"]["value"] == "<redacted>" and env["VLLM_LOGGING_LEVEL"]["value"] == "INFO"
    assert env["HUGGING_FACE_HUB_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "hf-token"


def test_written_files_are_private(replay: ReplayServer, tmp_path: Path) -> None:
    bundle, _ = collect_from(replay, tmp_path)
    folder = bundle.save(tmp_path / "case")
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert len(files) == len(bundle.files)
    assert {stat.S_IMODE(p.stat().st_mode) for p in files} == {0o600}
    archive = bundle.save(tmp_path / "case.tar.gz")
    assert stat.S_IMODE(os.stat(archive).st_mode) == 0o600
    with tarfile.open(archive) as tar:
        assert {m.mode for m in tar.getmembers() if m.isfile()} == {0o600}


# ----------------------------------------------------------------------------- the runner


def _target(replay: ReplayServer, tmp_path: Path, **overrides: object) -> Target:
    return live_target(replay.write_kubeconfig(tmp_path, namespace="llm"), **overrides)


def _write_then(action: Callable[[], None]) -> Callable[[CollectContext], list[SourceResult]]:
    def run(ctx: CollectContext) -> list[SourceResult]:
        ctx.sink.write("ray/status.txt", "written before\n")
        action()
        return [SourceResult("ray/status.txt", "ok")]

    return run


def _kubernetes_objects(target: Target) -> Collector:
    """The phase-1 collector `llmdiag collect` runs."""
    (objects,) = [c for c in default_collectors(target) if c.phase == 1]
    return objects


def test_a_collector_that_raises_is_one_failed_line(replay: ReplayServer, tmp_path: Path) -> None:
    def broken(ctx: CollectContext) -> list[SourceResult]:
        raise ValueError("head\nwith a second line")

    target = _target(replay, tmp_path)
    bundle, results = collect(target, [_kubernetes_objects(target), Collector("ray", broken)])
    (failure,) = [r for r in results if r.name == "ray"]
    assert failure.status == "failed" and failure.detail == "ValueError: head"
    assert "k8s/pods.json" in bundle.files  # the rest went on
    assert json.loads(bundle.files["manifest.json"])["sources"]["ray"]["status"] == "failed"


def test_a_collector_past_its_timeout_is_failed_and_cannot_write_later(replay: ReplayServer, tmp_path: Path) -> None:
    def late_write() -> None:
        time.sleep(1.5)

    def slow(ctx: CollectContext) -> list[SourceResult]:
        late_write()
        ctx.sink.write("ray/actors.json", "[]")  # after the run gave up on it
        return [SourceResult("ray/actors.json", "ok")]

    collectors = [Collector("ray", slow, timeout_s=0.3), Collector("vllm", _write_then(lambda: None))]
    started = time.monotonic()
    bundle, results = collect(_target(replay, tmp_path), collectors)
    assert time.monotonic() - started < 1.4
    assert {r.name: r.status for r in results} == {"ray": "failed", "ray/status.txt": "ok"}
    assert next(r.detail for r in results if r.name == "ray").startswith("ray: timed out after ")
    time.sleep(1.5)
    assert "ray/actors.json" not in bundle.files


def test_the_whole_run_has_a_deadline(replay: ReplayServer, tmp_path: Path) -> None:
    collectors = [Collector("ray", _write_then(lambda: time.sleep(3)), timeout_s=30)]
    started = time.monotonic()
    bundle, results = collect(_target(replay, tmp_path, total_timeout_s=0.5), collectors)
    assert time.monotonic() - started < 2.5
    assert [(r.name, r.status) for r in results] == [("ray", "failed")]
    assert bundle.files["ray/status.txt"] == b"written before\n"  # what came back is kept


@pytest.mark.usefixtures("ctrl_c_interrupts")
def test_ctrl_c_keeps_what_came_back_and_marks_the_rest_interrupted(replay: ReplayServer, tmp_path: Path) -> None:
    def ctrl_c_once_the_pods_are_written(ctx: CollectContext) -> list[SourceResult]:
        ctx.sink.write("ray/status.txt", "written before\n")
        give_up = time.monotonic() + 3
        # the pods reach this collector before the objects collector has written them
        while "k8s/pods.json" not in ctx.sink.bundle.files and time.monotonic() < give_up:
            time.sleep(0.01)
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)  # as the terminal sends it
        time.sleep(6)
        return [SourceResult("ray/status.txt", "ok")]

    target = _target(replay, tmp_path)
    started = time.monotonic()
    bundle, results = collect(
        target, [_kubernetes_objects(target), Collector("vllm", ctrl_c_once_the_pods_are_written)]
    )
    assert time.monotonic() - started < 6  # it stopped waiting for the collector
    assert ("vllm", "failed", INTERRUPTED) in [(r.name, r.status, r.detail) for r in results]
    assert "k8s/pods.json" in bundle.files and bundle.files["ray/status.txt"] == b"written before\n"
    assert json.loads(bundle.files["manifest.json"])["sources"]["vllm"] == {"status": "failed", "detail": INTERRUPTED}


def test_without_a_kubeconfig_the_kubernetes_sources_say_why(tmp_path: Path) -> None:
    target = Target(kubeconfig=str(tmp_path / "missing"), local_gpu=False, total_timeout_s=10)
    bundle, results = collect(target, [_kubernetes_objects(target)])
    (connect, objects) = results
    assert connect.name == "kubernetes" and connect.status == "failed"
    assert connect.detail == f"kubeconfig {tmp_path / 'missing'}: no such file"
    assert (objects.status, objects.detail) == ("skipped", "no Kubernetes configuration")
    assert set(bundle.files) == {"manifest.json"}


def test_progress_says_which_source_failed(replay: ReplayServer, tmp_path: Path) -> None:
    from rich.console import Console

    shown = io.StringIO()
    target = _target(replay, tmp_path)
    collect(target, default_collectors(target), Console(file=shown, width=400))
    lines = {line.split(":", 1)[0]: line for line in shown.getvalue().splitlines() if line.strip()}
    # every list of the layout, and every namespace's pods on the two GPU nodes; the Gateway API lists
    # are skipped (no CRDs in the recorded cluster)
    assert lines["✓ kubernetes objects"].endswith("19 ok, 3 skipped")
    assert lines["✓ kubernetes logs"].endswith("7 ok, 2 skipped")
    # no server behind the vLLM pod here: the line names the source and why
    assert "connection refused" in lines["✗ vllm"] and f"vllm/{VLLM_POD[0]}.{VLLM_POD[1]}.metrics" in lines["✗ vllm"]


# ----------------------------------------------------------------------------- every recorded cluster


def _replayable_bundles() -> list[Path]:
    """tests/replay/cluster, and every scenario bundle under fixtures/ whose k8s/ lists read as lists
    (scenarios about unreadable files are the loader's tests, not a cluster to replay)."""
    found = [CLUSTER]
    for pods in sorted((REPO / "fixtures").rglob("k8s/pods.json")):
        root = pods.parent.parent
        try:
            lists = [json.loads(f.read_text()) for f in root.glob("k8s/*.json")]
        except ValueError:
            continue
        if all(isinstance(d, dict) and isinstance(d.get("items"), list) for d in lists):
            found.append(root)
    return found


def _gpu_stack(daemonset: dict) -> bool:
    from diag.collect.kubernetes import GPU_DAEMONSETS

    meta = daemonset["metadata"]
    return any(p in text for text in (meta["name"], *(meta.get("labels") or {}).values()) for p in GPU_DAEMONSETS)


def test_every_recorded_cluster_comes_back_as_it_was_recorded(tmp_path: Path) -> None:
    for root in _replayable_bundles():
        source = Bundle.open(root)
        work = tmp_path / root.name
        work.mkdir()
        with ReplayServer(ReplayCluster.from_bundle(source)) as server:
            target = live_target(server.write_kubeconfig(work), all_namespaces=True)
            bundle, _ = collect(target, [_kubernetes_objects(target)])
        for kind in ("pods", "events", "nodes", "services", "endpoints", "deployments", "statefulsets", "hpa",
                     "rayclusters", "rayservices", "daemonsets"):  # fmt: skip
            if f"k8s/{kind}.json" not in source.files:
                continue
            wanted = [i for i in _items(source, kind) if kind != "daemonsets" or _gpu_stack(i)]
            recorded = {(i["metadata"].get("namespace"), i["metadata"]["name"]) for i in wanted}
            collected = {(i["metadata"].get("namespace"), i["metadata"]["name"]) for i in _items(bundle, kind)}
            assert collected == recorded, f"{root.name}: k8s/{kind}.json"
        snapshot = load_bundle(bundle)
        lists = {n: s for n, s in snapshot.sources.items() if n.startswith("k8s/") and n.endswith(".json")}
        bad = {n: s.detail for n, s in lists.items() if s.status == "failed"}
        assert not bad, f"{root.name}: {bad}"


def test_llmdiag_collect_writes_the_bundle_through_the_replay_server(replay: ReplayServer, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from diag.cli import app

    kubeconfig = replay.write_kubeconfig(tmp_path, namespace="llm")
    out = tmp_path / "case.tar.gz"
    args = [
        "collect",
        "--kubeconfig",
        str(kubeconfig),
        "-l",
        "app=llama-3-8b",
        "--no-local-gpu",
        "--scrape-interval",
        "0.1",
        "--out",
        str(out),
    ]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    bundle = Bundle.open(out)
    assert _names(bundle, "pods") == {"llama-3-8b-7c9d6b5f4-abcde", "llama-3-8b-7c9d6b5f4-fghij"}
    assert json.loads(bundle.files["manifest.json"])["selectors"]["label"] == "app=llama-3-8b"


def test_triage_with_a_selector_that_matches_nothing_is_inconclusive_and_says_so(
    replay: ReplayServer, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from diag.cli import app

    kubeconfig = replay.write_kubeconfig(tmp_path, namespace="llm")
    args = [
        "triage",
        "--kubeconfig",
        str(kubeconfig),
        "-l",
        "app=no-such-app",
        "--no-local-gpu",
        "--scrape-interval",
        "0.1",
        "-o",
        "json",
    ]
    done = CliRunner().invoke(app, args)
    report = json.loads(done.stdout)
    assert report["verdict"]["status"] == "inconclusive" and report["exit_code"] == 3
    problems = [g["problem"] for g in report["verdict"]["gaps"]]
    assert any("no pod matched namespace llm and selector app=no-such-app" in p for p in problems), problems
