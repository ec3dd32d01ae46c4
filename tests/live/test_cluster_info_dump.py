"""`kubectl cluster-info dump --output-directory` of a REAL control plane (tests/live/k8s_cluster.py), read
by `llmdiag analyze`: the same verdict as llmdiag's own collection of the same scenario."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from k8s_cluster import ControlPlane, wait_for
from k8s_scenarios import (
    apply,
    expected,
    failed_scheduling,
    fired,
    free_gpus,
    namespace,
    pods,
    service,
    two_gpu_nodes,
    vllm_deployment,
)

from diag.bundle.files import Bundle

pytestmark = pytest.mark.live

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gpu_cluster(control_plane: ControlPlane) -> ControlPlane:
    return two_gpu_nodes(control_plane)


def _llmdiag(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "diag.cli", *argv], cwd=REPO, capture_output=True, text=True, timeout=180
    )


def _analyze(path: Path) -> dict:
    result = _llmdiag("analyze", str(path), "--output=json")
    assert result.stdout, f"analyze wrote nothing (exit {result.returncode}): {result.stderr[-2000:]}"
    return json.loads(result.stdout)


def test_a_cluster_info_dump_gives_the_verdict_of_llmdiag_collect(gpu_cluster: ControlPlane, tmp_path: Path) -> None:
    ns = "dump-too-large"
    apply(gpu_cluster, namespace(ns), vllm_deployment("llama-8b", ns, gpus=1, tolerate=True), service("llama-8b", ns))
    wait_for(
        "the llama-8b replica running",
        lambda: [p["status"].get("phase") for p in pods(gpu_cluster, ns, "llama-8b")] == ["Running"],
    )
    apply(gpu_cluster, vllm_deployment("llama-405b", ns, gpus=16, tolerate=True), service("llama-405b", ns))
    wait_for("the scheduler's FailedScheduling", lambda: failed_scheduling(gpu_cluster, ns))

    dump = tmp_path / "cluster-state"
    gpu_cluster.kubectl("cluster-info", "dump", f"--output-directory={dump}", f"--namespaces={ns}")
    collected = tmp_path / "bundle"
    result = _llmdiag("collect", f"--kubeconfig={gpu_cluster.kubeconfig}", "-n", ns, "--no-local-gpu", "--scrapes=1",
                      "--timeout=60", f"--out={collected}")  # fmt: skip
    assert collected.is_dir(), f"collect wrote no bundle (exit {result.returncode}): {result.stderr[-2000:]}"
    free_gpus(gpu_cluster, ns)

    # kubectl's layout, as diag/bundle/cluster_dump.py reads it
    phases = {
        p["metadata"]["name"]: p["status"]["phase"] for p in json.loads((dump / ns / "pods.json").read_text())["items"]
    }
    assert sorted(phases.values()) == ["Pending", "Running"] and (dump / "nodes.json").is_file()
    bundle = Bundle.open(dump)
    for pod, phase in phases.items():
        rel, written = f"k8s/logs/{ns}.{pod}.vllm.log", (dump / ns / pod / "logs.txt").read_text()
        if phase == "Pending":  # the API server answers an empty log for a pod with no node
            assert bundle.files.get(rel) == b"", written
        else:  # kwok serves no log outside the pod I/O namespace: kubectl's error line instead
            assert "Request log error: " in bundle.skipped.get(rel, ""), written

    own = _analyze(collected)
    want = expected("k8s-gpu-request-too-large")["verdict"]
    assert (own["verdict"]["layer"], own["verdict"]["rule"]) == (want["layer"], want["rule"]), own["verdict"]
    tarred = tmp_path / "cluster-state.tar.gz"
    with tarfile.open(tarred, "w:gz") as tar:
        tar.add(dump, arcname=dump.name)
    for path in (dump, tarred):
        report = _analyze(path)
        assert (report["verdict"]["layer"], report["verdict"]["rule"]) == (
            own["verdict"]["layer"],
            own["verdict"]["rule"],
        ), report["verdict"]
        assert want["rule"] in fired(report)
        assert report["sources"]["k8s/pods.json"] == {
            "status": "ok",
            "detail": f"from kubectl cluster-info dump's {ns}/pods.json",
        }
