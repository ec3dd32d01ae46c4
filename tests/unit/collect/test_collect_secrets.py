"""Zero leaks through the real collect path: the planted corpus of tests/secret_corpus.py served by
the replay API server, a vLLM server and a Prometheus on loopback, collected as `llmdiag collect`
collects, then searched for in every bundle file, manifest.json and the progress on stderr."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from diag.collect.runner import collect, default_collectors
from tests.replay.harness import NAMESPACE, VLLM_POD, live_target, recorded_cluster
from tests.replay.server import ReplayServer
from tests.replay.upstream import Answer, RecordedHttp, vllm_routes
from tests.secret_corpus import Corpus, metrics_lines, plant_cluster

PROMETHEUS_ANSWER = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}).encode()


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> tuple[Corpus, dict[str, bytes], str]:
    corpus = Corpus()
    cluster = recorded_cluster()
    plant_cluster(cluster, corpus)
    prom_token = corpus.plant("prometheus-url-token", "plantPromUrlToken0050")
    vllm_password = corpus.plant("vllm-url-password", "plantVllmUrlPass0051")
    routes = vllm_routes()
    routes["/metrics"] = [
        Answer(200, answer.body + metrics_lines(corpus).encode(), answer.content_type) for answer in routes["/metrics"]
    ]
    with (
        RecordedHttp(routes) as vllm,
        RecordedHttp({"/api/v1/query_range": [Answer(200, PROMETHEUS_ANSWER)]}) as prom,
    ):
        cluster.upstreams[("pods", *VLLM_POD)] = vllm.url
        with ReplayServer(cluster) as server:
            folder = tmp_path_factory.mktemp("secrets")
            target = live_target(
                server.write_kubeconfig(folder, namespace=NAMESPACE),
                prometheus_url=prom.url.replace("http://", f"http://{prom_token}@"),
                vllm_urls=[
                    vllm.url.replace("http://", f"http://admin:{vllm_password}@"),
                    f"http://admin:{vllm_password}@127.0.0.1:1",  # refused: the URL goes into a failure line
                ],
            )
            stderr = io.StringIO()
            bundle, _ = collect(target, default_collectors(target), Console(file=stderr, width=400))
    return corpus, dict(bundle.files), stderr.getvalue()


def test_no_planted_secret_reaches_the_bundle_manifest_or_stderr(
    collected: tuple[Corpus, dict[str, bytes], str],
) -> None:
    corpus, files, stderr = collected
    leaks = sorted(
        f"{label} in {where}"
        for label, secret in corpus.secrets.items()
        for where, data in [*files.items(), ("stderr", stderr.encode())]
        if secret.encode() in data
    )
    assert not leaks, f"{len(leaks)} leaks:\n" + "\n".join(leaks)


def test_what_is_no_secret_survives(collected: tuple[Corpus, dict[str, bytes], str]) -> None:
    corpus, files, _ = collected
    everything = b"\n".join(files.values())
    assert [s for s in corpus.survivors if s.encode() not in everything] == []
    assert b"GPU-4b794de7-279f-721d-5fe5-8f6fcbfb3cf4" in files["k8s/pods.json"]  # an env value that is a GPU id


def test_the_collection_read_what_was_planted(collected: tuple[Corpus, dict[str, bytes], str]) -> None:
    """The corpus went through the collectors (a test that read nothing could not leak)."""
    _, files, _ = collected
    assert any(name.startswith("k8s/logs/") and b"non-default args" in data for name, data in files.items())
    assert b"serialized_runtime_env" in files["ray/actors.json"]
    assert any(name.startswith("prometheus/") for name in files)
    assert any(name.startswith("vllm/127.0.0.1_") for name in files)
    assert any(name.startswith("vllm/") and b"vllm:cache_config_info{" in data for name, data in files.items())
