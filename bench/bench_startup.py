"""Start-up as users have it: `llmdiag --help` and `llmdiag analyze fixtures/demo` from an installed
wheel, against `python -c 'import typer, rich'` (the floor issue 29 measures against); and what `triage`
loads before it reads anything: its modules, then its API client built from a kubeconfig (no request is
made), beside the `kubernetes` package's own import (which triage no longer makes).

For each source tree (the repository by default; give `--tree` more than once to compare commits:
`git worktree add /tmp/old REF`), a wheel is built and installed into a fresh virtual environment,
and every installed module is compiled to bytecode, as `pip install` does where
PYTHONDONTWRITEBYTECODE is not set (these machines set it; it is unset for every run here). The
commands are then run in turn, round after round, so that a change of load on the machine falls on
all of them; the medians of wall and CPU milliseconds (user + system, of the child) are printed,
with each over the floor's.

    python bench/bench_startup.py [--runs 21] [--tree PATH ...] [--work /tmp/llmdiag-startup]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "fixtures" / "demo"
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: bench}}]
contexts: [{name: c, context: {cluster: c, user: u, namespace: ml}}]
current-context: c
"""
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def installed(tree: Path, venv: Path) -> Path:
    """A fresh venv at `venv` with the wheel of `tree` installed and compiled; its bin folder."""
    shutil.rmtree(venv, ignore_errors=True)
    wheels = venv.parent / f"{venv.name}-wheel"
    shutil.rmtree(wheels, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(wheels), str(tree)], check=True, env=ENV)
    (wheel,) = wheels.glob("*.whl")
    subprocess.run([*pip, "install", str(wheel)], check=True, env=ENV)
    subprocess.run([str(venv / "bin" / "python"), "-m", "compileall", "-q", str(venv / "lib")], env=ENV, check=False)
    return venv / "bin"


def timed(argv: list[str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU milliseconds of one run of argv, its output thrown away. Run outside any source tree:
    `python -c` puts its working folder first on sys.path, where a checkout's `diag` would be imported
    instead of the installed one."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV, check=False, cwd=cwd)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1, 2, 3):
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()[-1000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall * 1000, cpu * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--tree", type=Path, action="append", help="a source tree to install (default: this one)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/llmdiag-startup"))
    args = parser.parse_args()
    trees = args.tree or [REPO]
    args.work.mkdir(parents=True, exist_ok=True)
    bins = [installed(tree.resolve(), args.work / f"venv{i}") for i, tree in enumerate(trees)]
    commands: list[tuple[str, list[str]]] = [
        ("python -c pass", [str(bins[0] / "python"), "-c", "pass"]),
        ("floor: import typer, rich", [str(bins[0] / "python"), "-c", "import typer, rich"]),
    ]
    # what `triage` loads before it reads anything: its modules, and the API client built from a kubeconfig
    # (no request is made); and the `kubernetes` package's own import, for what keeping it off saves
    kubeconfig = args.work / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    triage_modules = "import diag.cli, diag.analyze, diag.collect.runner, diag.collect.kubernetes, diag.collect.vllm"
    client = f"; from diag.collect.kube import KubeAccess; KubeAccess({str(kubeconfig)!r})"
    commands.append(
        ("import kubernetes (client, config)", [str(bins[0] / "python"), "-c", "from kubernetes import client, config"])
    )
    for tree, bin_dir in zip(trees, bins, strict=True):
        label = "" if len(trees) == 1 else f" [{tree}]"
        commands.append((f"triage's modules{label}", [str(bin_dir / "python"), "-c", triage_modules]))
        commands.append(
            (f"triage's modules and its API client{label}", [str(bin_dir / "python"), "-c", triage_modules + client])
        )
        commands.append((f"llmdiag --help{label}", [str(bin_dir / "llmdiag"), "--help"]))
        commands.append((f"llmdiag analyze fixtures/demo{label}", [str(bin_dir / "llmdiag"), "analyze", str(DEMO)]))
    for _, argv in commands:  # once each unmeasured: the page cache, as a user's second run has it
        timed(argv, args.work)
    walls: dict[str, list[float]] = {name: [] for name, _ in commands}
    cpus: dict[str, list[float]] = {name: [] for name, _ in commands}
    for _ in range(args.runs):
        for name, argv in commands:
            wall, cpu = timed(argv, args.work)
            walls[name].append(wall)
            cpus[name].append(cpu)
    floor_wall, floor_cpu = statistics.median(walls[commands[1][0]]), statistics.median(cpus[commands[1][0]])
    print(f"medians of {args.runs} runs, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    print()
    print("| command | wall ms | x floor | CPU ms | x floor |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, _ in commands:
        wall, cpu = statistics.median(walls[name]), statistics.median(cpus[name])
        print(f"| {name} | {wall:.0f} | {wall / floor_wall:.2f} | {cpu:.0f} | {cpu / floor_cpu:.2f} |")


if __name__ == "__main__":
    main()
