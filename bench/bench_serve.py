"""What `llmdiag serve` costs when left running: CPU, memory and API-server requests per cycle, on a
REAL API server with kwok nodes and pods (tests/live/k8s_cluster.py; ci/k8s/build.sh builds it), beside
`kubectl get` of the same objects each cycle. Root is needed (the test network namespace).

    python bench/bench_serve.py                                      # L: 500 nodes, 5,000 pods, 50,000 events
    python bench/bench_serve.py --nodes 50 --pods 500 --events 5000  # S
    python bench/bench_serve.py --minutes 3 --scope namespace        # a shorter run, one scope

The fleet, spread as a shared cluster is: bench_k8s_scale.py's nodes (8 GPUs each); one serving
namespace (kwok's pod I/O namespace, `pod-io`, where kwok answers logs and exec as a kubelet would)
with --deployments vLLM Deployments of 2 replicas and their Services, placed by the real scheduler;
every other pod a busybox app pod (bench_triage.py's) in one of --tenants tenant namespaces, bound
to its node; the events: 1 % in the serving namespace, the rest spread over the tenants' pods. One
stdlib HTTP server in the test's network namespace answers port 8000 of every pod IP with our
fixture's vLLM answers (bench_triage.py's), so each cycle really scrapes the servers; their log is
our fixture's vLLM log; nvidia-smi in them prints our H200 capture (kwok's exec).

`llmdiag serve --every 1m` runs from a wheel installed with its bytecode (bench_startup.py's), as
its own user (a client certificate, CN=llmdiag-serve), for --minutes, once per --scope: `namespace`
(`-n pod-io`: serve deployed for one serving namespace) and `all` (`-A`: the chart's default). Every
20 s the fleet churns: a tenant pod deleted and another created, 5 events in a tenant namespace and
5 in the serving one, so the watches carry changes. Halfway through each cycle, kubectl (as user
llmdiag-kubectl) gets the same objects serve lists.

Measured: serve's CPU seconds (utime + stime of /proc/PID/stat, every thread, and cutime + cstime:
the children it forks for its analyses) and resident memory (VmRSS every second, its children's
added; VmHWM, its own), per cycle and on average; the API server's requests of each user, by
verb and resource, from the API server's own audit log (a policy that logs these two users' requests
at Metadata level and nothing else); kubectl's wall and CPU seconds. A cycle's window runs from its
start to the next one's (serve's /reports say when each started); the first cycle (the lists) is
shown apart from the steady ones. Prints Markdown tables; run from the repository root.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "live"))
sys.path.insert(0, str(REPO / "bench"))

from bench_k8s_scale import _create_all, _event, _node  # noqa: E402
from bench_startup import ENV, installed  # noqa: E402
from bench_triage import FIXTURE, MAX_PODS, METRICS_SERVER, POD_CIDR, Api, _app_pod, _wait_running  # noqa: E402
from k8s_cluster import CLIENT_EXT, POD_IO_NAMESPACE, ControlPlane, _issue, running_control_plane, write_kubeconfig  # noqa: E402
from k8s_scenarios import apply, namespace, service, vllm_deployment  # noqa: E402
from live_services import free_port, stop_process_group  # noqa: E402

from diag.collect.kube import KINDS  # noqa: E402
from diag.collect.kubernetes import CRD_KINDS, NAMESPACED_KINDS, RAY_KINDS  # noqa: E402

SERVING = POD_IO_NAMESPACE
VLLM_PORT = 8000  # k8s_scenarios.vllm_deployment's --port
SERVE_USER, KUBECTL_USER = "llmdiag-serve", "llmdiag-kubectl"
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata", "users": [SERVE_USER, KUBECTL_USER]}, {"level": "None"}],
}
VLLM_LOG = REPO / "fixtures" / "healthy-k8s-vllm" / "k8s" / "logs" / "llama-70b-7f8d9c6b5d-8q7hc.log"
CHURN_EVERY_S = 20.0


# --------------------------------------------------------------------------- the fleet


def tenant(i: int, tenants: int) -> str:
    return f"tenant-{i % tenants:02d}"


def build_fleet(cluster: ControlPlane, args: argparse.Namespace) -> dict[str, float]:
    from kubernetes import client, config

    config.load_kube_config(str(cluster.kubeconfig))
    core = client.CoreV1Api()
    apply(cluster, *(namespace(tenant(t, args.tenants)) for t in range(args.tenants)))
    apply(cluster, namespace(SERVING))
    deployments = [f"llama-{d}" for d in range(args.deployments)]
    for name in deployments:
        apply(cluster, vllm_deployment(name, SERVING, gpus=1, tolerate=True, replicas=2), service(name, SERVING))
    app_pods = args.pods - 2 * args.deployments
    serving_events = args.events // 100
    return {
        "nodes": _create_all(core.create_node, [_node(i) for i in range(args.nodes)]),
        "pods": _create_all(
            lambda b: core.create_namespaced_pod(b["metadata"]["namespace"], b),
            [_app_pod(i, args.nodes, tenant(i, args.tenants), "app") for i in range(app_pods)],
        ),
        "events": _create_all(
            lambda b: core.create_namespaced_event(b["metadata"]["namespace"], b),
            [
                _event(i, app_pods, tenant(i % app_pods, args.tenants), "app")
                for i in range(args.events - serving_events)
            ]
            + [_deployment_event(i, deployments) for i in range(serving_events)],
        ),
    }


def _deployment_event(i: int, deployments: list[str]) -> dict:
    name = deployments[i % len(deployments)]
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": f"{name}.{i:06d}", "namespace": SERVING},
            "involvedObject": {"kind": "Deployment", "name": name, "namespace": SERVING, "apiVersion": "apps/v1"},
            "reason": "ScalingReplicaSet", "type": "Normal", "count": 1,
            "message": f"Scaled up replica set {name}-0 to 2",
            "source": {"component": "deployment-controller"}}  # fmt: skip


class Churn:
    """Every CHURN_EVERY_S: one tenant pod deleted and another created, 5 events in a tenant namespace
    and 5 in the serving one (as the admin, whose requests the audit policy does not log)."""

    def __init__(self, cluster: ControlPlane, args: argparse.Namespace) -> None:
        from kubernetes import client, config

        config.load_kube_config(str(cluster.kubeconfig))
        self.core = client.CoreV1Api()
        self.args = args
        self.app_pods = args.pods - 2 * args.deployments
        self.round = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="churn", daemon=True)

    def _loop(self) -> None:
        while not self.stop.wait(CHURN_EVERY_S):
            self.round += 1
            i, nodes, tenants = self.round, self.args.nodes, self.args.tenants
            gone = _app_pod(i, nodes, tenant(i, tenants), "app")["metadata"]
            self.core.delete_namespaced_pod(gone["name"], gone["namespace"], grace_period_seconds=0)
            new = _app_pod(self.app_pods + i, nodes, tenant(i, tenants), "app")
            self.core.create_namespaced_pod(new["metadata"]["namespace"], new)
            for k in range(5):
                n = 10_000_000 + 10 * i + k
                self.core.create_namespaced_event(
                    tenant(i, tenants), _event(n, self.app_pods, tenant(i, tenants), "app")
                )
                self.core.create_namespaced_event(
                    SERVING, _deployment_event(n, [f"llama-{d}" for d in range(self.args.deployments)])
                )


# --------------------------------------------------------------------------- measuring


def _status(pid: int) -> dict[str, str]:
    return dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())


def _rss_mb(pid: int) -> float:
    try:
        return int(_status(pid)["VmRSS"].split()[0]) / 1024
    except (OSError, KeyError):  # a child that ended meanwhile
        return 0.0


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return found


@dataclass
class Samples:
    """serve's CPU seconds and VmRSS (MB), once a second, with their wall time."""

    times: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    rss: list[float] = field(default_factory=list)
    hwm: float = 0.0

    def take(self, pid: int) -> None:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        status = _status(pid)
        self.times.append(time.time())
        # utime, stime, and the children's it has waited for (fields 14-17): each analysis' child
        self.cpu.append(sum(int(stat[i]) for i in (11, 12, 13, 14)) / ticks)
        # the process' VmRSS and its children's (pages they share counted twice: an upper bound)
        self.rss.append(sum(_rss_mb(p) for p in (pid, *_children(pid))))
        self.hwm = int(status["VmHWM"].split()[0]) / 1024

    def at(self, when: float) -> float:
        """CPU seconds at the last sample before `when`."""
        return next(
            (c for t, c in zip(reversed(self.times), reversed(self.cpu), strict=True) if t <= when), self.cpu[0]
        )

    def rss_between(self, start: float, end: float) -> list[float]:
        return [r for t, r in zip(self.times, self.rss, strict=True) if start <= t < end]


def audit_requests(log: Path, user: str) -> list[tuple[float, str]]:
    """(time received, "verb resource[/subresource]") of each request of `user` (each audit ID once)."""
    seen: set[str] = set()
    found = []
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        if entry["user"]["username"] != user or entry["auditID"] in seen:
            continue
        seen.add(entry["auditID"])
        ref = entry.get("objectRef") or {}
        what = ref.get("resource", entry["requestURI"].split("?")[0])
        if ref.get("subresource"):
            what += "/" + ref["subresource"]
        when = datetime.fromisoformat(entry["requestReceivedTimestamp"]).timestamp()
        found.append((when, f"{entry['verb']} {what}"))
    return found


def kubectl_commands(kubeconfig: Path, scope: str, nodes_on_path: list[str]) -> list[list[str]]:
    """kubectl getting what serve lists (diag/collect/kubernetes.py): the namespaced kinds (no CRD kind:
    none is installed), the events of the nodes, the nodes, the GPU daemonsets of every namespace, and
    in one namespace every namespace's pods on the GPU nodes the namespace's pods run on."""
    names = [
        KINDS[k].plural + ("." + KINDS[k].group_version.split("/")[0] if "/" in KINDS[k].group_version else "")
        for k in ("pods", "events", *NAMESPACED_KINDS)
        if k not in CRD_KINDS and k not in RAY_KINDS
    ]
    kubectl = ["kubectl", f"--kubeconfig={kubeconfig}", "get", "-o", "json"]
    where = ["-A"] if scope == "all" else ["-n", SERVING]
    commands = [[*kubectl, *where, ",".join(names)], [*kubectl, "nodes"], [*kubectl, "-A", "daemonsets.apps"]]
    if scope == "namespace":
        commands.append([*kubectl, "-A", "events", "--field-selector=involvedObject.kind=Node"])
        commands += [[*kubectl, "-A", "pods", f"--field-selector=spec.nodeName={n}"] for n in nodes_on_path]
    return commands


def run_kubectl(commands: list[list[str]]) -> tuple[float, float]:
    """Wall and CPU seconds of the commands one after another."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    for argv in commands:
        subprocess.run(argv, capture_output=True, check=True, timeout=600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.monotonic() - started, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())


@dataclass
class Run:
    scope: str
    cycles: list[dict]  # serve's report metas, oldest first
    starts: list[float]
    end: float
    samples: Samples
    serve_requests: list[tuple[float, str]]
    kubectl_requests: list[tuple[float, str]]
    kubectl: list[tuple[float, float]]  # (wall, CPU) per cycle


def run_serve(
    cluster: ControlPlane, bin_dir: Path, identities: dict[str, Path], scope: str, minutes: float, work: Path
) -> Run:
    port = free_port()
    state = work / f"state-{scope}"
    argv = [str(bin_dir / "llmdiag"), "serve", f"--kubeconfig={identities[SERVE_USER]}",
            *(["-A"] if scope == "all" else ["-n", SERVING]), f"--state-dir={state}", "--every=1m",
            f"--listen=127.0.0.1:{port}", "--no-local-gpu"]  # fmt: skip
    log_path = work / f"serve-{scope}.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=ENV, start_new_session=True)
    samples, kubectl_runs = Samples(), []
    base = f"http://127.0.0.1:{port}"
    stop = threading.Event()

    def kubectl_beside(first_start: float) -> None:
        """kubectl halfway through each cycle, in a thread of its own (at L it takes tens of seconds)."""
        due = first_start + 30
        while not stop.wait(max(0.0, due - time.time())):
            commands = kubectl_commands(identities[KUBECTL_USER], scope, _nodes_on_path(cluster))
            kubectl_runs.append(run_kubectl(commands))
            due += 60

    beside = None
    began = time.time()
    try:
        end = began + minutes * 60
        while time.time() < end:
            if proc.poll() is not None:
                raise RuntimeError(f"serve exited {proc.returncode}: {log_path.read_text()[-2000:]}")
            samples.take(proc.pid)
            if beside is None:
                try:
                    reports = get_json(f"{base}/reports")["reports"]
                except OSError:
                    reports = []
                if reports:
                    beside = threading.Thread(target=kubectl_beside, args=(reports[-1]["started_at"],), daemon=True)
                    beside.start()
            time.sleep(max(0.0, 1.0 - (time.time() % 1.0)))
        samples.take(proc.pid)
        cycles = sorted(get_json(f"{base}/reports")["reports"], key=lambda m: m["started_at"])
    finally:
        stop.set()
        stop_process_group(proc, 10)
        log.close()
        if beside is not None:
            beside.join(600)
    audit = work / "audit.log"
    starts = [m["started_at"] for m in cycles]
    requests = {user: [r for r in audit_requests(audit, user) if r[0] >= began] for user in (SERVE_USER, KUBECTL_USER)}
    return Run(scope, cycles, starts, end, samples, requests[SERVE_USER], requests[KUBECTL_USER], kubectl_runs)


def _nodes_on_path(cluster: ControlPlane) -> list[str]:
    out = cluster.kubectl("get", "pods", "-n", SERVING, "-o", "jsonpath={.items[*].spec.nodeName}").stdout
    return sorted(set(out.split()))


# --------------------------------------------------------------------------- the tables


def report(run: Run, label: str) -> None:
    s, starts = run.samples, run.starts
    windows = list(zip(starts, [*starts[1:], run.end], strict=True))
    print(f"\n### {label}: serve {'-A' if run.scope == 'all' else '-n ' + SERVING}, {len(starts)} cycles\n")
    print("| cycle | duration s | verdict | CPU s | RSS MB avg | RSS MB max | serve requests |")
    print("| ---: | ---: | --- | ---: | ---: | ---: | ---: |")
    for k, ((a, b), meta) in enumerate(zip(windows, run.cycles, strict=True)):
        rss = s.rss_between(a, b) or [0.0]
        ours = sum(1 for t, _ in run.serve_requests if a <= t < b)
        print(f"| {k + 1} | {meta['duration_seconds']:.1f} | {meta['verdict']['status']} | {s.at(b) - s.at(a):.2f} |"
              f" {statistics.mean(rss):.0f} | {max(rss):.0f} | {ours} |")  # fmt: skip
    steady = windows[1:]
    if steady:
        a, b = steady[0][0], steady[-1][1]
        cpu = s.at(b) - s.at(a)
        rss = s.rss_between(a, b)
        print(
            f"\nsteady cycles 2-{len(starts)} ({b - a:.0f} s): CPU {cpu:.1f} s = {100 * cpu / (b - a):.2f} % of a core,"
            f" {cpu / len(steady):.2f} s per cycle; RSS average {statistics.mean(rss):.0f} MB, max {max(rss):.0f} MB"
        )
    a, b = starts[0], run.end
    cpu = s.at(b) - s.at(a)
    print(f"whole run from the first cycle ({b - a:.0f} s): CPU {cpu:.1f} s = {100 * cpu / (b - a):.2f} % of one core;"
          f" RSS average {statistics.mean(s.rss_between(a, b)):.0f} MB; VmHWM {s.hwm:.0f} MB;"
          f" before the first cycle (start-up, rules compiled): CPU {s.at(a):.1f} s")  # fmt: skip
    if run.kubectl:
        walls, cpus = zip(*run.kubectl, strict=True)
        print(f"kubectl get of the same objects, per cycle: wall {statistics.median(walls):.2f} s,"
              f" CPU {statistics.median(cpus):.2f} s (medians of {len(walls)})")  # fmt: skip
    first = Counter(w for t, w in run.serve_requests if windows[0][0] <= t < windows[0][1])
    later = Counter(w for t, w in run.serve_requests if steady and steady[0][0] <= t < run.end)
    before = sum(1 for t, _ in run.serve_requests if t < starts[0])
    print(f"\nserve's requests by verb and resource (audit log): first cycle | steady cycles, per cycle"
          f" (before the first cycle: {before})")  # fmt: skip
    for what in sorted(set(first) | set(later)):
        print(f"  {what}: {first[what]} | {later[what] / max(1, len(steady)):.1f}")
    runs = len(run.kubectl)
    theirs = Counter(w for _, w in run.kubectl_requests)
    print(f"\nkubectl's requests by verb and resource (audit log), per run of the commands ({runs} runs):")
    for what in sorted(theirs):
        print(f"  {what}: {theirs[what] / max(1, runs):.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--events", type=int, default=50000)
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument(
        "--deployments", type=int, default=4, help="vLLM Deployments of 2 replicas in the serving namespace"
    )
    parser.add_argument("--minutes", type=float, default=10.0, help="how long serve runs, per scope")
    parser.add_argument(
        "--scope", choices=("namespace", "all"), action="append", help="serve -n pod-io, or -A (both by default)"
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/llmdiag-bench-serve"))
    args = parser.parse_args()
    if args.pods > MAX_PODS:
        parser.error(f"--pods: at most {MAX_PODS} (the pod range {POD_CIDR})")
    scopes = args.scope or ["namespace", "all"]
    args.work.mkdir(parents=True, exist_ok=True)
    bin_dir = installed(REPO, args.work / "venv")
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        work = Path(tmp)
        policy = work / "audit-policy.json"
        policy.write_text(json.dumps(AUDIT_POLICY))
        flags = (f"--audit-policy-file={policy}", f"--audit-log-path={work / 'audit.log'}")
        with running_control_plane(str(POD_CIDR), apiserver_flags=flags) as cluster:
            _run_all(cluster, args, scopes, bin_dir, work)


def _run_all(cluster: ControlPlane, args: argparse.Namespace, scopes: list[str], bin_dir: Path, work: Path) -> None:
    pki = cluster.workdir / "pki"
    identities = {}
    for user in (SERVE_USER, KUBECTL_USER):
        _issue(pki, user, f"/O=system:masters/CN={user}", CLIENT_EXT)
        identities[user] = write_kubeconfig(work / f"{user}.kubeconfig", cluster.server, cluster.ca,
                                            cert=pki / f"{user}.crt", key=pki / f"{user}.key")  # fmt: skip
    made = build_fleet(cluster, args)
    for kind, seconds in made.items():
        print(f"create {kind}: {seconds:.1f} s", flush=True)
    api = Api(cluster)
    waited = _wait_running(api, cluster, args.pods, namespace=None)
    print(f"every pod Running with its IP in {POD_CIDR}: {waited:.1f} s", flush=True)
    cluster.pod_io.container_log("vllm").write_text(
        "".join(f"{datetime.now(timezone.utc).strftime('%Y-%m-%dT%H:%M:%S.%fZ')} stdout F {line}\n"
                for line in VLLM_LOG.read_text().splitlines())
    )  # fmt: skip
    script = work / "metrics_server.py"
    script.write_text(METRICS_SERVER)
    server = subprocess.Popen(["ip", "netns", "exec", cluster.network.name, sys.executable, str(script),
                               str(FIXTURE), str(VLLM_PORT)], start_new_session=True)  # fmt: skip
    churn = Churn(cluster, args)
    try:
        time.sleep(1.0)
        churn.thread.start()
        print(
            f"fleet: {args.nodes} nodes, {args.pods} pods ({2 * args.deployments} vLLM in {SERVING}, the rest in"
            f" {args.tenants} tenant namespaces), {args.events} events; churn every {CHURN_EVERY_S:g} s",
            flush=True,
        )
        for scope in scopes:
            run = run_serve(cluster, bin_dir, identities, scope, args.minutes, work)
            report(run, f"{args.nodes} nodes, {args.pods} pods, {args.events} events")
    finally:
        churn.stop.set()
        stop_process_group(server, 5)


if __name__ == "__main__":
    main()
