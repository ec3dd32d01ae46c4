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
