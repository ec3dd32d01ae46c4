"""The GPU sweep on a REAL multi-node Ray cluster on loopback: a head and four worker nodes started with
`ray start --address`, each with fake GPUs and its own nvidia-smi stand-in (tests/standin) serving one
of our captures: gpu-node-1 our real H200 under load (two processes that are not Ray's), gpu-node-2 a
GPU with uncorrectable ECC errors and rows waiting for a reset, gpu-node-hung a stand-in that never
answers, gpu-node-dead a node killed before the sweep. `llmdiag collect --ray-address URL --gpu-sweep`
must bring back each answering node's files under its own name, name the hung node as a failed
source, not ask the dead one, leave no job behind; the analysis must put each fault on its node.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from live_services import (
    REPO,
    RayHead,
    ServiceUnavailable,
    free_port,
    http_get,
    ray_env,
    ray_python,
    running_ray_head,
    stop_process_group,
    wait_until,
)

pytestmark = pytest.mark.live

STANDIN = REPO / "tests" / "standin" / "nvidia_smi_standin.py"
CAPTURES = {
    "gpu-node-1": REPO / "fixtures" / "real" / "h200" / "load" / "gpu" / "h200-load",
    "gpu-node-2": REPO / "fixtures" / "gpu-ecc-uncorrectable" / "gpu" / "gpu-node-a",
}
HUNG, DEAD = "gpu-node-hung", "gpu-node-dead"


def _nodes(head: RayHead) -> dict[str, str]:
    """Node name -> ALIVE or DEAD, from the state API."""
    status, body = http_get(f"{head.dashboard_url}/api/v0/nodes?detail=1&limit=100")
    if status != 200:
        return {}
    result = json.loads(body).get("data", {}).get("result", {}).get("result", [])
    return {n.get("node_name"): n.get("state") for n in result}


# Each node on an address of its own in 127.0.0.0/8, as machines have: with multi-node on, `ray start`
# replaces 127.0.0.1 (and only that, localhost and ::1) by the machine's own network address.
HEAD_IP = "127.0.0.3"
NODE_IPS = {"gpu-node-1": "127.0.0.11", "gpu-node-2": "127.0.0.12", HUNG: "127.0.0.13", DEAD: "127.0.0.14"}
GPUS = {"gpu-node-1": 1, "gpu-node-2": 4, HUNG: 2, DEAD: 2}  # as many as the node's capture holds


@contextmanager
def _worker(head: RayHead, name: str, tools: Path, capture: Path | None) -> Iterator[subprocess.Popen]:
    """A Ray worker node on loopback whose tasks see `tools` first on PATH (its nvidia-smi)."""
    smi = tools / "nvidia-smi"
    tools.mkdir(parents=True)
    if capture is None:
        smi.write_text("#!/bin/sh\nexec sleep 600\n")
    else:
        smi.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" "$@"\n')
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    python = ray_python()
    env = ray_env() | {
        # a worker node refuses to join with this 0 (single-node mode); its --node-ip-address keeps loopback
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1",
        "PATH": f"{tools}{os.pathsep}{python.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "LLMDIAG_NVIDIA_SMI_CAPTURE": str(capture or ""),
    }
    argv = [
        str(python.parent / "ray"), "start", f"--address={head.gcs_address}", "--block",
        f"--node-ip-address={NODE_IPS[name]}", f"--node-name={name}", "--num-cpus=1", f"--num-gpus={GPUS[name]}",
        f"--dashboard-agent-listen-port={free_port()}", "--disable-usage-stats",
    ]  # fmt: skip
    log = (tools / "ray-start.log").open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        yield proc
    finally:
        stop_process_group(proc, grace_s=20)
        log.close()


def scenario(out: Path) -> None:
    """The cluster, the sweep and its traces, in the network namespace the test made: Ray's agents and a
    multi-node GCS listen on every interface, and there the only one is loopback."""
    work = out / "nodes"
    with ExitStack() as stack:
        head = stack.enter_context(running_ray_head(with_workload=False, num_gpus=0, node_ip=HEAD_IP))
        procs = {}
        for name in [*CAPTURES, HUNG, DEAD]:  # one at a time: a raylet has 30 s to register, on 2 cores too
            procs[name] = stack.enter_context(_worker(head, name, work / name, CAPTURES.get(name)))
            wait_until(f"Ray node {name}", lambda name=name: _nodes(head).get(name) == "ALIVE", 120, procs[name])
        stop_process_group(procs[DEAD], grace_s=0)
        wait_until("the dead node marked DEAD", lambda: _nodes(head).get(DEAD) == "DEAD", 120)
        started = time.monotonic()
        collect = _llmdiag(
            "collect", "--ray-address", head.dashboard_url, "--gpu-sweep", "--source-timeout", "40",
            "--out", str(out / "bundle"), home=out,
        )  # fmt: skip
        took = time.monotonic() - started
        _, jobs = http_get(f"{head.dashboard_url}/api/jobs/")
        (out / "run.json").write_text(
            json.dumps(
                {"rc": collect.returncode, "stderr": collect.stderr[-3000:], "took_s": took, "jobs": json.loads(jobs)}
            )
        )


def _llmdiag(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"} | {"HOME": str(home), "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "diag.cli", *args], env=env, capture_output=True, text=True, timeout=300, cwd=REPO
    )


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sweep")
    try:
        ray_python()
        if shutil.which("unshare") is None or shutil.which("ip") is None:
            raise ServiceUnavailable("unshare or ip not found: no network namespace for the Ray cluster")
    except ServiceUnavailable as e:
        if os.environ.get("LLMDIAG_REQUIRE_LIVE") == "1":
            pytest.fail(str(e), pytrace=False)
        pytest.skip(str(e))
    done = subprocess.run(
        ["unshare", "-n", "sh", "-c", f'ip link set lo up && exec "{sys.executable}" "{__file__}" "{out}"'],
        capture_output=True, text=True, timeout=580, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def test_the_sweep_reads_every_alive_node_names_the_hung_one_and_leaves_no_job(swept: Path) -> None:
    run = json.loads((swept / "run.json").read_text())
    out = swept / "bundle"
    assert run["rc"] == 0, run["stderr"]
    files = sorted(p.relative_to(out).as_posix() for p in (out / "gpu").iterdir())
    for name in CAPTURES:
        assert f"gpu/{name}.xml" in files and f"gpu/{name}.csv" in files, files
    assert not any(HUNG in f or DEAD in f for f in files), files
    assert run["took_s"] < 40 + 60, run["took_s"]  # the hung node costs its deadline, no more

    manifest = json.loads((out / "manifest.json").read_text())
    hung = manifest["sources"][f"gpu/{HUNG}.xml"]
    assert hung["status"] == "failed" and "did not answer within 40 s" in hung["detail"], hung
    assert manifest["sources"]["ray/gpu-sweep"]["status"] == "ok"
    assert not any(DEAD in name for name in manifest["sources"])
    assert not [j for j in run["jobs"] if str(j.get("submission_id", "")).startswith("llmdiag-gpu-sweep")]


def test_the_analysis_puts_each_fault_on_its_node_and_the_hung_node_in_the_gaps(swept: Path) -> None:
    report = json.loads(_llmdiag("analyze", str(swept / "bundle"), "-o", "json", home=swept).stdout)
    by_rule: dict[str, list[str]] = {}
    for finding in report["findings"]:
        by_rule.setdefault(finding["rule"], []).append(finding["subject"])
    assert any(s.startswith("gpu/gpu-node-2/") for s in by_rule.get("GPU-101", [])), by_rule
    assert any(s.startswith("gpu/gpu-node-1/") for s in by_rule.get("GPU-106", [])), by_rule
    assert report["sources"][f"gpu/{HUNG}.xml"]["status"] == "failed"
    missing = report["verdict"]["gaps"] + report["verdict"].get("caveats", [])
    assert any(g["source"] == f"gpu/{HUNG}.xml" for g in missing), report["verdict"]


if __name__ == "__main__":
    scenario(Path(sys.argv[1]))
