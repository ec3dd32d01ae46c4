"""When the cluster is not there: one line naming the server and context, within seconds, and the
sources given by URL still read; a missing permission names the verb and resource and deploy/;
--as / --as-group reach the API server as impersonation headers. Over real HTTP (tests/replay)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from diag.collect.kube import KubeAccess
from diag.collect.runner import collect, default_collectors
from tests.replay.harness import NAMESPACE, collect_from, live_target, recorded_cluster
from tests.replay.server import ReplayServer
from tests.replay.upstream import RecordedHttp, vllm_routes

ROOT = Path(__file__).resolve().parents[3]


def _closed_port() -> int:
    """A port on 127.0.0.1 with no listener (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kubeconfig_to(folder: Path, server: str, context: str = "prod-east") -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": context, "context": {"cluster": "c", "user": "u", "namespace": "llm"}}],
        "current-context": context,
    }
    path = folder / "kubeconfig"
    path.write_text(json.dumps(config))
    return path


def test_an_unreachable_api_server_is_one_line_and_the_url_sources_still_run(tmp_path: Path) -> None:
    server = f"http://127.0.0.1:{_closed_port()}"
    with RecordedHttp(vllm_routes()) as vllm:
        target = live_target(_kubeconfig_to(tmp_path, server), vllm_urls=[vllm.url], source_timeout_s=5.0)
        started = time.monotonic()
        bundle, results = collect(target, default_collectors(target))
        took = time.monotonic() - started
    kubernetes = [r for r in results if r.name.startswith(("kubernetes", "k8s", "gpu/exec"))]
    assert len(kubernetes) == 1, kubernetes
    line = kubernetes[0]
    assert line.status == "failed" and server in line.detail and "context prod-east" in line.detail
    assert "unreachable" in line.detail and "\n" not in line.detail
    assert any(r.name.startswith("vllm/") and r.status == "ok" for r in results), results
    assert not any(name.startswith("k8s/") for name in bundle.files)
    assert took < 15, took  # the vLLM scrapes' interval, not a timeout per Kubernetes source


def test_a_reachable_server_passes_the_preflight(tmp_path: Path) -> None:
    with ReplayServer(recorded_cluster()) as server:
        kube = KubeAccess(str(server.write_kubeconfig(tmp_path, namespace=NAMESPACE)))
        assert kube.preflight(2.0) is None


def test_the_preflight_honours_a_short_request_timeout(tmp_path: Path) -> None:
    """A listener that never answers: the pre-flight gives up after --request-timeout, not 30s."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        target = live_target(
            _kubeconfig_to(tmp_path, f"http://127.0.0.1:{silent.getsockname()[1]}"), request_timeout_s=0.5
        )
        started = time.monotonic()
        _, results = collect(target, default_collectors(target))
        took = time.monotonic() - started
    (line,) = [r for r in results if r.name == "kubernetes"]
    assert "no answer within 0.5s" in line.detail and took < 5, (line, took)


def test_a_forbidden_list_names_verb_resource_and_the_clusterrole(tmp_path: Path) -> None:
    with ReplayServer(recorded_cluster(), forbidden=frozenset({"nodes"})) as server:
        _, results = collect_from(server, tmp_path)
    (nodes,) = [r for r in results if r.name == "k8s/nodes.json"]
    assert nodes.status == "failed"
    assert 'cannot list resource "nodes"' in nodes.detail and "deploy/clusterrole.yaml" in nodes.detail, nodes.detail


def test_impersonation_headers_reach_the_api_server(tmp_path: Path) -> None:
    seen: list[dict] = []
    import tests.replay.server as replay_module

    original = replay_module._Handler._answer

    def recording(handler) -> None:  # type: ignore[no-untyped-def]
        seen.append({k: handler.headers.get_all(k) for k in ("Impersonate-User", "Impersonate-Group")})
        original(handler)

    replay_module._Handler._answer = recording  # type: ignore[method-assign]
    try:
        with ReplayServer(recorded_cluster()) as server:
            kube = KubeAccess(
                str(server.write_kubeconfig(tmp_path, namespace=NAMESPACE)),
                impersonate_user="jane",
                impersonate_groups=("oncall",),
            )
            kube.list_json("pods", NAMESPACE)
    finally:
        replay_module._Handler._answer = original  # type: ignore[method-assign]
    assert seen and all(s == {"Impersonate-User": ["jane"], "Impersonate-Group": ["oncall"]} for s in seen)


def test_triage_json_against_an_unreachable_cluster_prints_only_json(tmp_path: Path) -> None:
    kubeconfig = _kubeconfig_to(tmp_path, f"http://127.0.0.1:{_closed_port()}")
    env = {**os.environ, "PYTHONWARNINGS": "always"}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "diag.cli",
            "triage",
            "-o",
            "json",
            "--kubeconfig",
            str(kubeconfig),
            "--no-local-gpu",
            "--timeout",
            "20",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env=env,
    )
    report = json.loads(run.stdout)  # stdout is the report and nothing else
    assert run.returncode == 3, run.stderr
    assert report["verdict"]["status"] == "inconclusive"
    assert report["context"]["kubernetes"]["context"] == "prod-east"
    assert report["sources"]["kubernetes"]["status"] == "failed"
    assert run.stderr == ""  # off a terminal: no progress
