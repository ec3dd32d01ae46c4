"""bench/live: `llmdiag triage` on every scenario of the live catalogue (tests/live/k8s_scenarios.py,
CATALOGUE), on the project's REAL control plane (tests/live/k8s_cluster.py: kube-apiserver, scheduler,
controllers and kwok GPU nodes; ci/k8s/build.sh builds it). Root is needed (the test network namespace).

    python bench/bench_live.py                       # every scenario, 3 timed runs each
    python bench/bench_live.py --only svc-selector --only healthy --runs 1
    python bench/bench_live.py --tree /tmp/main      # also time another source tree's llmdiag, alternately

All scenarios are built at once, one namespace each, on one cluster (as teams share one); a scenario
registered in the catalogue with @scenario appears here with no change to this file. llmdiag runs as
users run it: a wheel of the tree installed into a fresh virtual environment with its bytecode compiled
(bench/bench_startup.py `installed`). kwok runs no container: the catalogue's vLLM stand-in
(k8s_scenarios.vllm_stand_in) answers each vLLM pod's IP as its server would, idle or busy.

Per scenario it prints: the expected rule; the rule of llmdiag's verdict (its root finding) and whether
it is the expected one ("cause named"); llmdiag's exit code; the median wall seconds of llmdiag triage and
of kubectl making the same reads, and their ratio. kubectl's reads: `kubectl get -n NS -o json` of the
namespaced kinds triage lists (diag/bundle/layout.py KUBE_LISTS, those the server serves), the nodes and
every namespace's daemonsets, and each Ready pod's /metrics through the API server's pod proxy, one
command after another. Where `k8sgpt` and `popeye` are on PATH (bench/build_peers.sh builds them) they
run too, on the same namespace: cause named (one of their findings holds every one of the scenario's
cause_words, case aside), exit code, seconds. Network rule: every address dialled is 127.0.0.1 (the API
server) or a pod IP inside the test's network namespace. Run from the repository root.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "live"))
sys.path.insert(0, str(REPO / "bench"))

from bench_startup import ENV, installed  # noqa: E402
from k8s_cluster import ControlPlane, running_control_plane  # noqa: E402
from k8s_scenarios import CATALOGUE, ClusterScenario, build_all, get, vllm_stand_in  # noqa: E402

from diag.bundle.layout import KUBE_LISTS  # noqa: E402

# k8sgpt's analyzers for what a GPU serving path holds (pkg/analyzer/analyzer.go: the core ones and the
# optional HPA, PDB and NetworkPolicy ones; Log reads containers kwok does not run). Its Gateway and
# HTTPRoute analyzers only where the API server serves Gateway API: without its CRDs v0.4.36 dies of
# "fatal error: concurrent map writes" and prints nothing.
K8SGPT_FILTERS = ("Pod", "Deployment", "ReplicaSet", "StatefulSet", "PersistentVolumeClaim", "Service", "Ingress",
                  "Node", "ConfigMap", "HorizontalPodAutoscaler", "PodDisruptionBudget", "NetworkPolicy")  # fmt: skip
K8SGPT_GATEWAY_FILTERS = ("Gateway", "HTTPRoute")


@dataclass
class Run:
    """One tool on one scenario: exit code, whether it named the cause, and the wall seconds of each run."""

    exit: int | None = None
    named: bool | None = None
    said: str = ""  # llmdiag: the verdict's rule; a peer: its first finding
    others: str = ""  # llmdiag: the rules of its other findings
    seconds: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds) if self.seconds else float("nan")


def timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, subprocess.CompletedProcess]:
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env or ENV, check=False)
    return time.monotonic() - started, done


def namespaced_kinds(cluster: ControlPlane) -> list[str]:
    """The namespaced kinds triage lists, as kubectl names them, that this API server serves."""
    kinds = [row.kubectl_kind or row.kind for row in KUBE_LISTS if row.scope == "namespace" and row.instead_of is None]
    return [k for k in kinds if cluster.kubectl("get", k, "-n", "default", "-o", "name", check=False).returncode == 0]


def ready_vllm_ports(cluster: ControlPlane, ns: str) -> list[tuple[str, int]]:
    """(pod, port) of each Ready pod of `ns` with a container port: what kubectl reads /metrics of."""
    found = []
    for pod in get(cluster, "pods", "-n", ns)["items"]:
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])
        ports = [p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports") or []]
        if ready and ports:
            found.append((pod["metadata"]["name"], ports[0]))
    return found


def kubectl_reads(cluster: ControlPlane, ns: str, kinds: list[str], servers: list[tuple[str, int]]) -> float:
    kubectl = ["kubectl", f"--kubeconfig={cluster.kubeconfig}"]
    commands = [
        [*kubectl, "get", "-n", ns, "-o", "json", ",".join(kinds)],
        [*kubectl, "get", "-o", "json", "nodes"],
        [*kubectl, "get", "-A", "-o", "json", "daemonsets"],
        *([*kubectl, "get", "--raw", f"/api/v1/namespaces/{ns}/pods/{pod}:{port}/proxy/metrics"]
          for pod, port in servers),
    ]  # fmt: skip
    started = time.monotonic()
    for argv in commands:
        subprocess.run(argv, capture_output=True, timeout=120, check=False)
    return time.monotonic() - started


def llmdiag_run(llmdiag: Path, cluster: ControlPlane, s: ClusterScenario, run: Run) -> None:
    seconds, done = timed([str(llmdiag), "triage", f"--kubeconfig={cluster.kubeconfig}", "-n", s.namespace,
                           "--no-local-gpu", "--output=json"])  # fmt: skip
    run.seconds.append(seconds)
    run.exit = done.returncode
    try:
        verdict = json.loads(done.stdout)["verdict"]
    except (ValueError, KeyError):
        run.said, run.named = f"no report: {done.stderr.strip()[-200:]}", False
        return
    run.said = verdict.get("rule") or verdict.get("status") or "?"
    run.others = " ".join(sorted({f["rule"] for f in json.loads(done.stdout).get("findings") or []} - {run.said}))
    run.named = verdict.get("rule") == s.rule if s.rule else verdict.get("status") == "healthy" and done.returncode == 0


def findings_of(tool: str, text: str) -> list[str]:
    """One line per finding of a peer's JSON output: the object and what is said of it."""
    try:
        data = json.loads(text)
    except ValueError:
        return []
    lines = []
    if tool == "k8sgpt":
        for result in data.get("results") or []:
            for error in result.get("error") or []:
                name = str(result.get("name")).rsplit("/", 1)[-1]  # not its namespace: a scenario's name
                lines.append(f"{result.get('kind')} {name}: {error.get('Text') or error}")
    else:  # popeye: sections, one per linter, with issues by object; levels 2 (warning) and 3 (error)
        for section in (data.get("popeye") or {}).get("sections") or []:
            for fqn, issues in (section.get("issues") or {}).items():
                for issue in issues or []:
                    if issue.get("level", 0) >= 2:
                        lines.append(f"{section.get('linter')} {fqn.rsplit('/', 1)[-1]}: {issue.get('message')}")
    return lines


def k8sgpt_filters(cluster: ControlPlane) -> str:
    gateway = cluster.kubectl("get", "gateways.gateway.networking.k8s.io", "-A", "-o", "name", check=False)
    return ",".join(K8SGPT_FILTERS + (K8SGPT_GATEWAY_FILTERS if gateway.returncode == 0 else ()))


def peer_run(tool: str, cluster: ControlPlane, s: ClusterScenario, run: Run, home: Path) -> None:
    if tool == "k8sgpt":
        argv = ["k8sgpt", "analyze", f"--kubeconfig={cluster.kubeconfig}", f"--filter={k8sgpt_filters(cluster)}",
                "-n", s.namespace, "--output=json"]  # fmt: skip
    else:
        argv = ["popeye", f"--kubeconfig={cluster.kubeconfig}", "-n", s.namespace, "-o", "json"]
    seconds, done = timed(argv, env=ENV | {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")})
    run.seconds.append(seconds)
    run.exit = done.returncode
    lines = findings_of(tool, done.stdout)
    words = [w.lower() for w in s.cause_words]
    named = [line for line in lines if words and all(w in line.lower() for w in words)]
    run.named = bool(named)
    run.said = (named or lines or [f"no findings (stderr: {done.stderr.strip()[-120:]})"])[0][:100]


def cell(run: Run | None) -> tuple[str, str, str]:
    if run is None:
        return "", "", ""
    return ("yes" if run.named else "no"), str(run.exit), f"{run.median:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", help="a scenario's namespace (default: every one)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each tool on each scenario (medians)")
    parser.add_argument("--tree", type=Path, help="another source tree whose llmdiag is timed too, alternately")
    parser.add_argument("--work", type=Path, default=Path("/tmp/llmdiag-bench-live"))
    parser.add_argument("--no-peers", action="store_true", help="leave k8sgpt and Popeye out")
    args = parser.parse_args()
    chosen = [CATALOGUE[n] for n in args.only] if args.only else list(CATALOGUE.values())
    args.work.mkdir(parents=True, exist_ok=True)
    trees = {"llmdiag": REPO, **({"before": args.tree.resolve()} if args.tree else {})}
    tools = {name: installed(tree, args.work / f"venv-{name}") / "llmdiag" for name, tree in trees.items()}
    peers = [] if args.no_peers else [p for p in ("k8sgpt", "popeye") if shutil.which(p)]
    versions = {p: _version(p) for p in peers}
    print(f"llmdiag from {REPO} (wheel in {args.work}); peers: {versions or 'none on PATH'}", flush=True)

    with running_control_plane() as cluster, tempfile.TemporaryDirectory() as tmp:
        began = time.monotonic()
        failed = build_all(cluster, chosen)
        print(f"built {len(chosen)} scenarios in {time.monotonic() - began:.0f} s; failed: {failed or 'none'}")
        kinds = namespaced_kinds(cluster)
        print(f"kubectl reads: {', '.join(kinds)}; nodes; daemonsets -A; each Ready pod's /metrics", flush=True)
        results: dict[str, dict[str, Run]] = {}
        with vllm_stand_in(cluster, chosen):
            for s in chosen:
                if s.namespace in failed:
                    continue
                servers = ready_vllm_ports(cluster, s.namespace)
                row = results.setdefault(s.namespace, {name: Run() for name in [*tools, "kubectl", *peers]})
                for _ in range(args.runs):  # in turn, so that a change of load falls on all of them
                    for name, llmdiag in tools.items():
                        llmdiag_run(llmdiag, cluster, s, row[name])
                    row["kubectl"].seconds.append(kubectl_reads(cluster, s.namespace, kinds, servers))
                    for peer in peers:
                        peer_run(peer, cluster, s, row[peer], Path(tmp))
                print(_line(s, row, peers, "before" in tools), flush=True)
    print()
    print(_table(chosen, results, peers, "before" in tools, failed))


def _version(tool: str) -> str:
    done = subprocess.run([tool, "version"], capture_output=True, text=True, timeout=60, check=False)
    text = (done.stdout or done.stderr).strip()
    return next((line.strip() for line in text.splitlines() if "ersion" in line), text[:60])


def _line(s: ClusterScenario, row: dict[str, Run], peers: list[str], before: bool) -> str:
    ours, kubectl = row["llmdiag"], row["kubectl"]
    ratio = ours.median / kubectl.median
    parts = [f"{s.namespace}: expected {s.rule or 'healthy'}, verdict {ours.said} (exit {ours.exit}),",
             f"other findings [{ours.others}],",
             f"llmdiag {ours.median:.2f} s, kubectl {kubectl.median:.2f} s ({ratio:.1f}x)"]  # fmt: skip
    if before:
        parts.append(f"before {row['before'].median:.2f} s (verdict {row['before'].said})")
    parts += [f"{p}: {'named' if row[p].named else 'not named'}, exit {row[p].exit}, {row[p].median:.2f} s"
              f" [{row[p].said}]" for p in peers]  # fmt: skip
    return " ".join(parts)


def _table(chosen: list[ClusterScenario], results: dict[str, dict[str, Run]], peers: list[str], before: bool,
           failed: dict[str, str]) -> str:  # fmt: skip
    head = ["scenario", "expected", "llmdiag verdict", "cause named", "exit", "other findings", "llmdiag s",
            "kubectl s", "x kubectl"]  # fmt: skip
    if before:
        head += ["before s", "before x"]
    for p in peers:
        head += [f"{p} named", f"{p} exit", f"{p} s"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    totals = {"llmdiag": 0, **{p: 0 for p in peers}}
    faults = 0
    for s in chosen:
        if s.namespace in failed:
            lines.append(f"| {s.namespace} | {s.rule or 'healthy'} | not built: {failed[s.namespace][:80]} |")
            continue
        row = results[s.namespace]
        ours, kubectl = row["llmdiag"], row["kubectl"]
        cells = [s.namespace, s.rule or "healthy", ours.said, *cell(ours)[:2], ours.others, f"{ours.median:.2f}",
                 f"{kubectl.median:.2f}", f"{ours.median / kubectl.median:.1f}"]  # fmt: skip
        if before:
            cells += [f"{row['before'].median:.2f}", f"{row['before'].median / kubectl.median:.1f}"]
        for p in peers:
            cells += cell(row[p]) if s.rule else ["", *cell(row[p])[1:]]
        lines.append("| " + " | ".join(cells) + " |")
        if s.rule:
            faults += 1
            totals["llmdiag"] += bool(ours.named)
            for p in peers:
                totals[p] += bool(row[p].named)
    lines.append("")
    lines.append("cause named, of " + f"{faults} faults: " + ", ".join(f"{k} {v}" for k, v in totals.items()))
    return "\n".join(lines)


if __name__ == "__main__":
    if os.geteuid() != 0:
        raise SystemExit("bench/bench_live.py needs root (the control plane's test network namespace)")
    main()
