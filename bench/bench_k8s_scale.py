"""`llmdiag collect` against `kubectl get` of the same objects, on a REAL API server with kwok nodes
(tests/live/k8s_cluster.py; ci/k8s/build.sh builds it).

    python bench/bench_k8s_scale.py --nodes 500 --pods 5000 --events 50000

Pods are created bound to their node (spec.nodeName): the bench times reading, not scheduling.
kwok marks them Running. Prints one line per timing; run from the repository root.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "live"))

from k8s_cluster import FLEET_POD_CIDR, running_control_plane  # noqa: E402

NS = "scale"


def _create_all(api_call, bodies: list[dict], threads: int = 8) -> float:
    started = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(api_call, bodies):
            pass
    return time.monotonic() - started


def _node(i: int) -> dict:
    resources = {"cpu": "64", "memory": "1056000000Ki", "pods": "110", "nvidia.com/gpu": "8"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": f"gpu-{i:04d}", "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "type": "kwok"}},
            "status": {"capacity": resources, "allocatable": resources}}  # fmt: skip


def _pod(i: int, nodes: int, namespace: str = NS, prefix: str = "vllm") -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{prefix}-{i:05d}", "namespace": namespace,
                         "labels": {"app": f"{prefix}-{i % 50}"}},
            "spec": {"nodeName": f"gpu-{i % nodes:04d}",
                     "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
                                     "resources": {"requests": {"cpu": "100m"}}}]}}  # fmt: skip


def _event(i: int, pods: int, namespace: str = NS, prefix: str = "vllm") -> dict:
    """An event of pod `i % pods` (named as `_pod` names it)."""
    name = f"{prefix}-{i % pods:05d}"
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{name}.{i:06d}", "namespace": namespace},
            "involvedObject": {"kind": "Pod", "name": name, "namespace": namespace},
            "reason": "Pulled", "type": "Normal", "count": 1,
            "message": "Container image \"vllm/vllm-openai:v0.11.0\" already present on machine",
            "source": {"component": "kubelet"}}  # fmt: skip


def _timed(argv: list[str]) -> float:
    started = time.monotonic()
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        raise RuntimeError(f"{argv[:4]}: {result.stderr[-1000:]}")
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--events", type=int, default=50000)
    args = parser.parse_args()

    from kubernetes import client, config

    with running_control_plane(FLEET_POD_CIDR) as cluster:  # more than a /24 of pods
        config.load_kube_config(str(cluster.kubeconfig))
        core = client.CoreV1Api()
        core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        made = {
            "nodes": _create_all(core.create_node, [_node(i) for i in range(args.nodes)]),
            "pods": _create_all(lambda b: core.create_namespaced_pod(NS, b),
                                [_pod(i, args.nodes) for i in range(args.pods)]),
            "events": _create_all(lambda b: core.create_namespaced_event(NS, b),
                                  [_event(i, args.pods) for i in range(args.events)]),
        }  # fmt: skip
        for kind, seconds in made.items():
            print(f"create {kind}: {seconds:.1f} s")
        kubectl = ["kubectl", f"--kubeconfig={cluster.kubeconfig}", "get", "-o", "json"]
        with tempfile.TemporaryDirectory() as out:
            timings = {
                "kubectl get nodes,pods,events -n scale": _timed([*kubectl, "-n", NS, "nodes,pods,events"]),
                "llmdiag collect -n scale (no vLLM, no GPU)": _timed(
                    [sys.executable, "-m", "diag.cli", "collect", f"--kubeconfig={cluster.kubeconfig}", "-n", NS,
                     "--no-local-gpu", "--scrapes=1", "--timeout=900", "--source-timeout=600",
                     f"--out={out}/bundle"]),
            }  # fmt: skip
            sizes = {p.name: p.stat().st_size for p in (Path(out) / "bundle" / "k8s").glob("*.json")}
            manifest = json.loads((Path(out) / "bundle" / "manifest.json").read_text())
        for what, seconds in timings.items():
            print(f"{what}: {seconds:.1f} s")
        failed = {k: v.get("detail") for k, v in manifest["sources"].items() if v.get("status") == "failed"}
        print(f"bundle k8s files: {json.dumps(sizes)}; failed sources: {len(failed)}")


if __name__ == "__main__":
    main()
