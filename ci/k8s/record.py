"""Record fixture bundles from a REAL control plane (tests/live/k8s_cluster.py, built by build.sh).

For each scenario: start etcd, kube-apiserver, kube-scheduler, kube-controller-manager and kwok, add
two 8-GPU H100 kwok nodes, let the scenario's objects meet the real controllers, then run
`llmdiag collect` against the API server into fixtures/<fixture>/ and write its expected.json. What
the bundle holds is what the API server answered: names, uids, timestamps and messages are real.

    python ci/k8s/record.py [--out DIR] [SCENARIO ...]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "live"))

from k8s_cluster import ControlPlane, running_control_plane, wait_for  # noqa: E402  (tests/live is not a package)
from k8s_scenarios import apply, build_scaled_to_zero, get, gpu_node, refuse_by_quota  # noqa: E402


@dataclass(frozen=True)
class Recording:
    fixture: str  # folder under fixtures/
    namespace: str
    setup: Callable[[ControlPlane, str], None]
    description: str
    verdict_rule: str
    fires: tuple[str, ...]


RECORDINGS = {
    r.fixture: r
    for r in (
        Recording(
            fixture="k8s-quota-exceeded",
            namespace="quota",
            setup=refuse_by_quota,
            description=(
                "Recorded from a real kube-apiserver, kube-controller-manager and kube-scheduler v1.34.4 with "
                "kwok nodes (ci/k8s/record.py). The quota namespace's ResourceQuota allows 8 nvidia.com/gpu; "
                "a fine-tuning Deployment holds all 8, so the API server refuses every pod of the llama-70b "
                "vLLM Deployment (exceeded quota): no pod exists, and its Service has no endpoints."
            ),
            verdict_rule="K8S-116",
            fires=("K8S-116", "K8S-301"),
        ),
        Recording(
            fixture="k8s-scaled-to-zero",
            namespace="llm",
            setup=build_scaled_to_zero,
            description=(
                "Recorded from a real kube-apiserver, kube-controller-manager and kube-scheduler v1.34.4 with "
                "kwok nodes (ci/k8s/record.py). The qwen vLLM Deployment ran one replica behind its Service, "
                "then was scaled to 0 (kubectl scale --replicas=0): no pod, no endpoint; the Deployment "
                "controller's event says when it scaled the ReplicaSet down."
            ),
            verdict_rule="K8S-304",
            fires=("K8S-304", "K8S-301"),
        ),
    )
}


def record(recording: Recording, out: Path) -> None:
    with running_control_plane() as cluster:
        apply(cluster, gpu_node("gpu-h100-1", 8), gpu_node("gpu-h100-2", 8))
        wait_for("two kwok nodes", lambda: len(get(cluster, "nodes")["items"]) == 2)
        recording.setup(cluster, recording.namespace)
        target = out / recording.fixture
        shutil.rmtree(target, ignore_errors=True)
        done = subprocess.run(
            [sys.executable, "-m", "diag.cli", "collect", f"--kubeconfig={cluster.kubeconfig}",
             "-n", recording.namespace, "--no-local-gpu", "--scrapes=1", "--timeout=60", "--out", str(target)],
            cwd=REPO, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        if done.returncode not in (0, 1):
            raise SystemExit(f"collect exited {done.returncode}: {done.stderr[-2000:]}")
    expected = {
        "description": recording.description,
        "verdict": {"layer": "kubernetes", "rule": recording.verdict_rule},
        "fires": list(recording.fires),
    }
    (target / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")
    print(f"recorded {target}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "fixtures")
    parser.add_argument("fixtures", nargs="*", help=f"some of {', '.join(RECORDINGS)} (default: all)")
    args = parser.parse_args()
    unknown = [name for name in args.fixtures if name not in RECORDINGS]
    if unknown:
        parser.error(f"no recording named {', '.join(unknown)}")
    for name in args.fixtures or RECORDINGS:
        record(RECORDINGS[name], args.out)


if __name__ == "__main__":
    main()
