"""Ray and a GPU outside Kubernetes: a REAL Ray head (--num-gpus=1, fake GPU) on this machine, the
nvidia-smi stand-in (tests/standin) serving our real H200 capture under load, whose two processes
(pids 458 and 459, 42.6 GiB) are not Ray's, and `llmdiag triage --ray-address URL --vllm-url URL
--local-gpu` run as a user runs it on a VM: no kubeconfig anywhere (the vLLM server: tests/standin).

`python tests/live/test_ray_vm_gpu.py SCENARIO OUT` records the same run as a bundle with
`llmdiag collect` (how fixtures/ray-vm-* were made; see their README.md).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_services import (
    REPO,
    RayHead,
    ServiceUnavailable,
    http_get,
    ray_env,
    ray_python,
    running_ray_head,
    wait_until,
)

pytestmark = pytest.mark.live

CAPTURE = REPO / "fixtures" / "real" / "h200" / "load" / "gpu" / "h200-load"
STANDIN = REPO / "tests" / "standin" / "nvidia_smi_standin.py"
DRIVER = Path(__file__).with_name("ray_vm_driver.py")
NAMESPACE = "llmdiag-vm"


def _run_driver(head: RayHead, scenario: str) -> dict[str, int]:
    python = ray_python()
    done = subprocess.run(
        [str(python), str(DRIVER), head.gcs_address, NAMESPACE, scenario],
        env=ray_env(), capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"Ray driver failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])["pids"]


def vm_env(home: Path, pids: dict[str, int] | None = None) -> dict[str, str]:
    """A user's environment on a GPU VM without Kubernetes: no KUBECONFIG, no ~/.kube; nvidia-smi on
    PATH is the stand-in. `pids`: the capture's GPU processes renumbered to these (old -> new)."""
    tools = home / "bin"
    tools.mkdir(parents=True, exist_ok=True)
    smi = tools / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" "$@"\n')
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env |= {
        "HOME": str(home),
        "PATH": f"{tools}{os.pathsep}{env.get('PATH', '')}",
        "PYTHONPATH": str(REPO),
        "LLMDIAG_NVIDIA_SMI_CAPTURE": str(CAPTURE),
        "LLMDIAG_NVIDIA_SMI_PIDS": ",".join(f"{old}={new}" for old, new in (pids or {}).items()),
    }
    return env


def _gpu_accounted(head: RayHead, scenario: str) -> bool:
    """The dashboard shows a node's resources and worker processes only from the raylet's reports on:
    wait for one that counts the scenario's GPU use."""
    status, body = http_get(f"{head.dashboard_url}/nodes?view=summary")
    used = b"1.0/1.0 GPU" if scenario == "busy" else b"0.0/1.0 GPU"
    return status == 200 and used in body and b"coreWorkersStats" in body


@contextmanager
def vm_scenario(scenario: str) -> Iterator[tuple[RayHead, dict[str, int]]]:
    with running_ray_head(with_workload=False, num_gpus=1) as head:
        pids = _run_driver(head, scenario)
        wait_until("Ray's resource report", lambda: _gpu_accounted(head, scenario), 90)
        yield head, pids


def llmdiag(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "diag.cli", *args], env=env, capture_output=True, text=True, timeout=300, cwd=REPO
    )


@pytest.fixture(scope="module")
def oom_head() -> Iterator[tuple[RayHead, dict[str, int]]]:
    try:
        with vm_scenario("oom") as found:
            yield found
    except ServiceUnavailable as e:
        if os.environ.get("LLMDIAG_REQUIRE_LIVE") == "1":
            pytest.fail(str(e), pytrace=False)
        pytest.skip(str(e))


def test_triage_on_a_vm_blames_the_process_outside_ray_not_the_actor_that_died(
    oom_head, vllm_standin, tmp_path: Path
) -> None:
    head, _ = oom_head
    vllm = vllm_standin("healthy")
    done = llmdiag(
        vm_env(tmp_path), "triage", "--ray-address", head.dashboard_url, "--vllm-url", vllm.url, "--local-gpu",
        "--scrapes", "2", "--scrape-interval", "1", "-o", "json", "--timeout", "60",
    )  # fmt: skip
    report = json.loads(done.stdout)
    verdict = report["verdict"]
    assert (verdict["status"], verdict["layer"], verdict["rule"]) == ("fault", "gpu", "GPU-106"), (
        verdict,
        done.stderr[-2000:],
    )
    assert verdict["gaps"] == []
    assert report["sources"]["kubernetes"]["status"] == "skipped"
    assert report["sources"][f"vllm/{vllm.name}.metrics.1.txt"]["status"] == "ok"
    kubernetes = {name: s["status"] for name, s in report["sources"].items() if name.startswith("k8s")}
    assert kubernetes and set(kubernetes.values()) == {"skipped"}, kubernetes  # not asked for: never "missing"
    by_rule = {f["rule"]: f for f in report["findings"]}
    assert set(by_rule) == {"GPU-106", "GPU-111", "RAY-104"}
    assert by_rule["RAY-104"]["explained_by"] in ("GPU-106", "GPU-111")
    assert by_rule["GPU-111"]["explained_by"] == "GPU-106"
    root = by_rule["GPU-106"]
    assert "pid 458 (python3): 41478 MiB" in " ".join(root["evidence"])
    assert "kubectl" not in root["remediation"]
    assert "ps -o pid,ppid,etime,args -p 458,459" in root["remediation"]
    assert done.returncode == 2


if __name__ == "__main__":
    # python tests/live/test_ray_vm_gpu.py {idle|oom|busy} OUT: a bundle of the scenario, by `llmdiag collect`
    scenario, out = sys.argv[1], Path(sys.argv[2]).resolve()
    with vm_scenario(scenario) as (ray_head, actor_pids):
        home = out.parent / f".home-{scenario}"
        gpu_pids = dict(zip(("458", "459"), map(str, actor_pids.values()), strict=False)) if scenario == "busy" else {}
        result = llmdiag(
            vm_env(home, gpu_pids),
            "collect",
            "--ray-address",
            ray_head.dashboard_url,
            "--local-gpu",
            "--out",
            str(out),
            "--force",
        )
        print(result.stdout, result.stderr, actor_pids)
