"""What the GPU sweep (`--gpu-sweep`, diag/collect/ray_sweep.py) costs against the number of Ray nodes,
and against one node's own collection (`python -m diag.collect.gpu`).

Each sweep is timed from the job's submission to its files in a bundle in memory (`ray_sweep.sweep`,
as `llmdiag collect` calls it); the local collection as a whole process, start included.

    python bench/bench_gpu_sweep.py --address http://127.0.0.1:8265 [--runs 5]
        a running cluster, as it is (the real GPU host: fixtures/real/h100-sweep/capture.sh)
    python bench/bench_gpu_sweep.py [--nodes 1 2 4 6] [--runs 3]
        REAL Ray clusters on loopback in a network namespace of their own, as
        tests/live/test_ray_gpu_sweep.py builds them: a head and worker nodes started with
        `ray start --address`, every node with the nvidia-smi stand-in (tests/standin) serving our H200
        capture; the cluster grows node by node and is swept at each size in --nodes.

Prints one Markdown table; `--json` writes every run. bench/README.md holds the figures.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from contextlib import ExitStack
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "live"))

from diag.bundle.files import Bundle  # noqa: E402
from diag.collect.base import Sink  # noqa: E402
from diag.collect.ray_sweep import Sweep, sweep  # noqa: E402

CAPTURE = REPO / "fixtures" / "real" / "h200" / "load" / "gpu" / "h200-load"
STANDIN = REPO / "tests" / "standin" / "nvidia_smi_standin.py"
HEAD_IP = "127.0.0.3"


def time_sweeps(address: str, runs: int) -> list[dict]:
    """One record per sweep: seconds from submission to files, nodes answering, bytes brought back."""
    records = []
    for _ in range(runs):
        sink = Sink(Bundle())
        started = time.monotonic()
        results = sweep(Sweep(address, node_timeout_s=60.0, deadline_s=180.0), sink)
        took = time.monotonic() - started
        head = results[0]
        if head.status != "ok":
            raise SystemExit(f"the sweep failed: {head.detail}")
        failed = [r for r in results[1:] if r.status == "failed"]
        records.append(
            {
                "s": took,
                "nodes": int(head.detail.split()[0]),
                "failed_sources": [f"{r.name}: {r.detail}" for r in failed],
                "bytes": sum(len(v) for v in sink.bundle.files.values()),
                "log_bytes": _log_bytes(sink.bundle.files),
            }
        )
    return records


def _log_bytes(files: dict[str, bytes]) -> int:
    """The answer line's size in the job's log, encoded as the sweep's driver encodes it, each node's
    answer apart (on loopback every node serves the same capture, which would compress away)."""
    by_node: dict[str, dict[str, str]] = {}
    for rel, data in files.items():
        node = rel.removeprefix("gpu/").removesuffix(".nvml.json").removesuffix(".xid.txt").rsplit(".", 1)[0]
        by_node.setdefault(node, {})[rel] = base64.b64encode(zlib.compress(data, 6)).decode()
    return sum(len(base64.b64encode(zlib.compress(json.dumps([{"files": f}]).encode()))) for f in by_node.values())


def time_local(runs: int, env: dict[str, str] | None = None) -> list[float]:
    """Wall seconds of `python -m diag.collect.gpu OUTDIR`, process start included."""
    took = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as out:
            started = time.monotonic()
            done = subprocess.run(
                [sys.executable, "-m", "diag.collect.gpu", out],
                cwd=REPO,
                env=_with_repo(env or dict(os.environ)),
                capture_output=True,
                text=True,
                check=False,
            )
            took.append(time.monotonic() - started)
            if done.returncode != 0:
                raise SystemExit(f"python -m diag.collect.gpu failed: {done.stderr[-500:]}")
    return took


def _with_repo(env: dict[str, str]) -> dict[str, str]:
    return env | {"PYTHONPATH": os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)}


def _standin_env(tools: Path) -> dict[str, str]:
    """This process's environment with the nvidia-smi stand-in first on PATH."""
    tools.mkdir(parents=True, exist_ok=True)
    smi = tools / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" "$@"\n')
    smi.chmod(0o755)
    return os.environ | {"PATH": f"{tools}{os.pathsep}{os.environ['PATH']}", "LLMDIAG_NVIDIA_SMI_CAPTURE": str(CAPTURE)}


def loopback(sizes: list[int], runs: int, work: Path) -> tuple[list[dict], list[float]]:
    """Sweeps of a loopback cluster grown to each size; runs inside a network namespace (see main)."""
    from live_services import free_port, http_get, ray_env, ray_python, running_ray_head, stop_process_group, wait_until

    os.environ.update(_standin_env(work / "tools"))  # the head's tasks see the stand-in too
    local = time_local(runs)
    rows: list[dict] = []
    with ExitStack() as stack:
        head = stack.enter_context(running_ray_head(with_workload=False, num_gpus=1, node_ip=HEAD_IP))

        def alive() -> int:
            status, body = http_get(f"{head.dashboard_url}/api/v0/nodes?detail=1&limit=1000")
            result = json.loads(body).get("data", {}).get("result", {}).get("result", []) if status == 200 else []
            return sum(1 for n in result if n.get("state") == "ALIVE")

        nodes = 1
        for size in sorted(sizes):
            while nodes < size:  # one at a time: a raylet has 30 s to register, on 2 cores too
                nodes += 1
                python = ray_python()
                argv = [
                    str(python.parent / "ray"), "start", f"--address={head.gcs_address}", "--block",
                    f"--node-ip-address=127.0.0.{10 + nodes}", f"--node-name=gpu-node-{nodes}", "--num-cpus=1",
                    "--num-gpus=1", "--object-store-memory=100000000", f"--dashboard-agent-listen-port={free_port()}",
                    "--disable-usage-stats",
                ]  # fmt: skip
                env = ray_env() | {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1"}  # a worker node joins only with this
                log = stack.enter_context((work / f"node-{nodes}.log").open("wb"))
                proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
                stack.callback(stop_process_group, proc, 20)
                wait_until(f"Ray node {nodes}", lambda n=nodes: alive() >= n, 120, proc)
            records = time_sweeps(
                head.dashboard_url, runs + 1
            )  # the first apart: the cluster's first job since it grew
            rows.append({"nodes": size, "cold": records[0], "warm": records[1:]})
            print(f"{size} nodes: {[round(r['s'], 2) for r in records]}", file=sys.stderr, flush=True)
    return rows, local


def _fit(rows: list[dict]) -> tuple[float, float]:
    """Least squares of the medians after the first run: seconds = fixed + per_node * nodes."""
    xs = [r["nodes"] for r in rows]
    ys = [statistics.median(w["s"] for w in r["warm"]) for r in rows]
    if len(set(xs)) < 2:
        return ys[0], 0.0
    per_node = statistics.covariance(xs, ys) / statistics.variance(xs)
    return statistics.mean(ys) - per_node * statistics.mean(xs), per_node


def table(rows: list[dict], local: list[float], model_nodes: int) -> str:
    out = [
        "| nodes | first s | then s (median) | then range s | KB back per node | job log KB per node |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        warm = [w["s"] for w in r["warm"]]
        per_node = statistics.median(w["bytes"] for w in r["warm"]) / r["nodes"] / 1024
        log_per_node = statistics.median(w.get("log_bytes", 0) for w in r["warm"]) / r["nodes"] / 1024
        out.append(
            f"| {r['nodes']} | {r['cold']['s']:.2f} | {statistics.median(warm):.2f} | "
            f"{min(warm):.2f}-{max(warm):.2f} | {per_node:.0f} | {log_per_node:.0f} |"
        )
    fixed, per_node = _fit(rows)
    out += [
        "",
        f"one node's own collection (`python -m diag.collect.gpu`): {statistics.median(local):.2f} s median "
        f"({min(local):.2f}-{max(local):.2f}, {len(local)} runs)",
        f"fit of the medians after the first run: {fixed:.2f} s + {per_node:.3f} s x nodes; "
        f"at {model_nodes} nodes: {fixed + per_node * model_nodes:.1f} s",
    ]
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", help="a running Ray dashboard; without it, loopback clusters are built")
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4, 6])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--model-nodes", type=int, default=500)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--inside", type=Path, help=argparse.SUPPRESS)  # the namespace's side: write here
    args = parser.parse_args()
    if args.inside:
        rows, local = loopback(args.nodes, args.runs, args.inside)
        (args.inside / "result.json").write_text(json.dumps({"rows": rows, "local": local}))
        return 0
    if args.address:
        records = time_sweeps(args.address, args.runs + 1)
        rows = [{"nodes": records[0]["nodes"], "cold": records[0], "warm": records[1:]}]
        local = time_local(args.runs)
    else:
        with tempfile.TemporaryDirectory(prefix="sweepbench") as work:
            inner = f'ip link set lo up && exec "{sys.executable}" "{__file__}" --inside "{work}" --runs {args.runs}'
            inner += " --nodes " + " ".join(str(n) for n in args.nodes)
            subprocess.run(["unshare", "-n", "sh", "-c", inner], check=True, cwd=REPO)
            result = json.loads((Path(work) / "result.json").read_text())
        rows, local = result["rows"], result["local"]
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "local": local}, indent=1))
    print(table(rows, local, args.model_nodes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
