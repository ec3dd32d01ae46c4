"""How to read a Ray cluster's state: the `ray.util.state` client, the `ray` CLI, or plain HTTP?

Measured against a REAL Ray head: --address URL of a running dashboard, or, without it, a head
started here on loopback with the live tests' workload (tests/live/live_services.py). The Ray side
runs in the Ray virtualenv (LLMDIAG_RAY_PYTHON, default /opt/llmdiag-ray/bin/python); plain HTTP runs
in this interpreter with requests, as diag.collect.ray does.

    python bench/bench_ray_client.py [--address http://127.0.0.1:8265] [--runs 5] [--json out.json]

Prints one Markdown table (median and range per operation, milliseconds); docs/decisions.md quotes it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "live"))

from live_services import http_get, ray_env, ray_python, running_ray_head  # noqa: E402

PATHS = {
    "actors": "/api/v0/actors?detail=1&limit=10000",
    "placement_groups": "/api/v0/placement_groups?detail=1&limit=10000",
    "nodes": "/api/v0/nodes?detail=1&limit=10000",
}

# Runs in the Ray virtualenv: import time, each list call (seconds) and peak RSS, as one JSON line.
STATE_CLIENT = """
import json, resource, sys, time
t0 = time.perf_counter()
from ray.util.state import list_actors, list_nodes, list_placement_groups
imported = time.perf_counter() - t0
calls = {}
for name, fn in (("actors", list_actors), ("placement_groups", list_placement_groups), ("nodes", list_nodes)):
    t = time.perf_counter()
    fn(address=sys.argv[1], detail=True, limit=10000, raise_on_missing_output=False)
    calls[name] = time.perf_counter() - t
print(json.dumps({"import_s": imported, "calls_s": calls,
                  "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""

# Runs in this interpreter's environment: the same for requests.
PLAIN_HTTP = """
import json, resource, sys, time
t0 = time.perf_counter()
import requests
imported = time.perf_counter() - t0
paths = json.loads(sys.argv[2])
calls = {}
with requests.Session() as session:
    for name, path in paths.items():
        t = time.perf_counter()
        answer = session.get(sys.argv[1] + path, timeout=30)
        answer.raise_for_status()
        calls[name] = time.perf_counter() - t
print(json.dumps({"import_s": imported, "calls_s": calls,
                  "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def timed_process(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{argv[:3]}... failed ({done.returncode}): {done.stderr[-2000:]}")
    return elapsed, done.stdout


def measure(address: str, runs: int) -> dict[str, list[float]]:
    """Every operation `runs` times, in milliseconds."""
    ray_py = str(ray_python())
    ray_cli = str(ray_python().parent / "ray")
    samples: dict[str, list[float]] = {}

    def add(name: str, seconds: float) -> None:
        samples.setdefault(name, []).append(seconds * 1000)

    for _ in range(runs):
        wall, out = timed_process([ray_py, "-c", STATE_CLIENT, address], ray_env())
        state = json.loads(out.strip().splitlines()[-1])
        add("ray.util.state: whole process (import + 3 lists)", wall)
        add("ray.util.state: import", state["import_s"])
        samples.setdefault("ray.util.state: peak RSS of the process (MiB, not ms)", []).append(
            state["peak_rss_kib"] / 1024
        )
        for name, seconds in state["calls_s"].items():
            add(f"ray.util.state: list_{name}", seconds)

        wall, out = timed_process([sys.executable, "-c", PLAIN_HTTP, address, json.dumps(PATHS)])
        plain = json.loads(out.strip().splitlines()[-1])
        add("plain HTTP: whole process (import + 3 GETs)", wall)
        add("plain HTTP: import requests", plain["import_s"])
        samples.setdefault("plain HTTP: peak RSS of the process (MiB, not ms)", []).append(plain["peak_rss_kib"] / 1024)
        for name, seconds in plain["calls_s"].items():
            add(f"plain HTTP: GET {name}", seconds)

        wall, _ = timed_process(
            [ray_cli, "list", "actors", "--detail", "--format", "json", "--address", address], ray_env()
        )
        add("ray CLI: `ray list actors --detail --format json`", wall)
    return samples


def table(samples: dict[str, list[float]]) -> str:
    lines = ["| operation | median ms | min–max ms | runs |", "| --- | ---: | ---: | ---: |"]
    for name, values in samples.items():
        lines.append(
            f"| {name} | {statistics.median(values):.1f} | {min(values):.1f}–{max(values):.1f} | {len(values)} |"
        )
    return "\n".join(lines)


@contextmanager
def dashboard(address: str | None) -> Iterator[str]:
    if address:
        yield address.rstrip("/")
        return
    with running_ray_head() as head:
        yield head.dashboard_url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", help="dashboard URL of a running Ray head (default: start one here)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the raw samples here")
    args = parser.parse_args()
    with dashboard(args.address) as address:
        version = json.loads(http_get(f"{address}/api/version")[1] or b"{}")
        samples = measure(address, args.runs)
    print(f"Ray {version.get('ray_version', '?')} at {address}; Python {sys.version.split()[0]}; {args.runs} runs\n")
    print(table(samples))
    if args.json:
        args.json.write_text(json.dumps({"ray_version": version.get("ray_version"), "samples_ms": samples}, indent=2))


if __name__ == "__main__":
    main()
