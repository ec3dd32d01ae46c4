"""A server read by its URL (`--vllm-url`) is one server with the Prometheus history of its instance."""

from __future__ import annotations

import json

from diag.bundle import load
from diag.bundle.files import Bundle
from diag.bundle.layout import server_stem
from diag.link.join import join

METRICS = b"""# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
"""


def _history(instance: str) -> bytes:
    metric = {"__name__": "vllm:num_requests_waiting", "instance": instance, "job": "vllm", "model_name": "m"}
    return json.dumps({
        "query": "vllm:num_requests_waiting",
        "window": {"start": 1796315593.0, "end": 1796315653.0, "step": 15},
        "status": "success",
        "data": {"resultType": "matrix", "result": [{"metric": metric, "values": [[1796315593.0, "3"]]}]},
    }).encode()  # fmt: skip


def test_the_file_stem_of_a_url_is_its_host_and_port() -> None:
    assert server_stem("http://127.0.0.1:8001/") == "127.0.0.1_8001"
    assert server_stem("127.0.0.1:8001") == "127.0.0.1_8001"
    assert server_stem("https://vllm.example") == "vllm.example_443"


def test_a_url_server_takes_the_history_of_its_instance_and_is_not_counted_twice() -> None:
    manifest = {"outside": {"vllm_urls": ["http://127.0.0.1:8001"]}}
    files = {
        "manifest.json": json.dumps(manifest).encode(),
        "vllm/127.0.0.1_8001.metrics.txt": METRICS,
        "prometheus/vllm_num_requests_waiting.json": _history("127.0.0.1:8001"),
    }
    snap = join(load._Loader(Bundle(files)).load())
    (server,) = snap.vllm_servers
    assert server.name == "127.0.0.1_8001" and server.url == "http://127.0.0.1:8001"
    assert server.scrapes and server.history


def _pods(ip: str, port: int) -> bytes:
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "qwen-0", "namespace": "serving", "uid": "u1"},
        "spec": {"nodeName": "gpu-1", "containers": [{
            "name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
            "args": ["--model", "Qwen/Qwen2.5-7B-Instruct", "--port", str(port)],
            "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}},
        }]},
        "status": {"phase": "Running", "podIP": ip,
                   "containerStatuses": [{"name": "vllm", "ready": True, "restartCount": 0}]},
    }  # fmt: skip
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": [pod]}).encode()


def test_a_url_that_is_a_pods_address_is_that_pods_one_server() -> None:
    files = {
        "manifest.json": json.dumps({"outside": {"vllm_urls": ["http://10.0.0.5:8080"]}}).encode(),
        "k8s/pods.json": _pods("10.0.0.5", 8080),
        "vllm/10.0.0.5_8080.metrics.txt": METRICS,
    }
    snap = join(load._Loader(Bundle(files)).load())
    (server,) = snap.vllm_servers
    assert server.pod == "serving/qwen-0" and server.scrapes
    assert snap.pod("serving/qwen-0").vllm_server == server.name


def test_a_url_on_another_port_of_the_pod_is_a_server_of_its_own() -> None:
    files = {
        "manifest.json": json.dumps({"outside": {"vllm_urls": ["http://10.0.0.5:9000"]}}).encode(),
        "k8s/pods.json": _pods("10.0.0.5", 8080),
        "vllm/10.0.0.5_9000.metrics.txt": METRICS,
    }
    snap = join(load._Loader(Bundle(files)).load())
    by_name = {s.name: s for s in snap.vllm_servers}
    assert by_name["10.0.0.5_9000"].pod is None and by_name["qwen-0"].pod == "serving/qwen-0"
