"""The whole `llmdiag triage` against its critical path, on a REAL API server with kwok nodes and pods
(tests/live/k8s_cluster.py; ci/k8s/build.sh builds it). Root is needed (the test network namespace).

    python bench/bench_triage.py                                       # L: 500 nodes, 5,000 pods, 50,000 events
    python bench/bench_triage.py --nodes 50 --pods 500 --events 5000   # S: a quick run
    python bench/bench_triage.py --vllm-every 1 --phases                # every pod a vLLM server; then
                                                                       # one triage timed step by step

The objects are bench_k8s_scale.py's (namespace `scale`, pods bound with spec.nodeName, kwok marks
them Running). The issue's L has 500 vLLM servers among 5,000 pods: every --vllm-every-th pod (10)
runs the vllm-openai image, which triage takes for a vLLM server on port 8000, where nothing listens:
the pod proxy's /metrics, /health and /v1/models of those are refused at once, as are their logs
(kwok serves logs and exec for its pod I/O namespace only). The other pods run `busybox` with
`sleep infinity`: no vLLM launch (diag/parsers/engine_args.py), so triage reads nothing of theirs.
The first --served vLLM pods run `vllm serve ... --port 8001` instead, and one small HTTP server in
the test's network namespace answers on port 8001 of every pod IP with our own fixture's answers
(fixtures/healthy-k8s-vllm/vllm/: .metrics.txt on a pod IP's first /metrics read, .metrics.1.txt
after), so their second scrape really waits the interval. The pods ask for no GPU: no nvidia-smi
exec. `--vllm-every 1` is the earlier shape: every pod a vLLM server.

Then, against the same server: the critical path timed request by request (each one alone, one
after another, over one TLS connection with the kubeconfig's certificates), before and after the
triage; kubectl making the same reads (`kubectl_reads`); and the analysis of a bundle `llmdiag
collect` wrote with the same options. Prints one line per timing and the ratios. Run from the
repository root. Network rule: every address dialled is 127.0.0.1 (the API server) or a pod IP
inside the test's network namespace.
"""

from __future__ import annotations

import argparse
import http.client
import ipaddress
import json
import re
import ssl
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlencode, urlsplit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "live"))
sys.path.insert(0, str(REPO / "bench"))

import k8s_cluster  # noqa: E402
from bench_k8s_scale import NS, _create_all, _event, _node, _pod  # noqa: E402
from k8s_cluster import ControlPlane, running_control_plane  # noqa: E402
from live_services import stop_process_group  # noqa: E402

# kwok hands out pod IPs past the end of its --cidr, and a slot's /24 holds 254 pods: the pods get
# k8s_cluster's fleet range, routed into the namespace; no pod is dialled before all are seen inside it.
POD_CIDR = ipaddress.ip_network(k8s_cluster.FLEET_POD_CIDR)
MAX_PODS = POD_CIDR.num_addresses - 256

SERVED_PORT = 8001
FIXTURE = REPO / "fixtures" / "healthy-k8s-vllm" / "vllm" / "llama-70b-7f8d9c6b5d-8q7hc"
FIXTURE_ARGS = ["meta-llama/Llama-3.3-70B-Instruct", "--served-model-name", "llama-70b", "--max-model-len", "32768",
                "--gpu-memory-utilization", "0.92", "--enable-prefix-caching", "--port", str(SERVED_PORT)]  # fmt: skip
# what triage imports before its first request and for its report: start-up, in no chain of requests
STARTUP_IMPORTS = (
    "import diag.cli, diag.collect.runner, diag.collect.kube, diag.collect.kubernetes, diag.collect.vllm, "
    "kubernetes.client, kubernetes.stream, diag.analyze, diag.report.json_report"
)
PAGE = 500  # diag/collect/kube.py PAGE_SIZE
MAX_ITEMS = 5000  # diag/collect/kube.py MAX_ITEMS
NAMESPACED_KINDS = {  # diag/collect/kubernetes.py NAMESPACED_KINDS, as API paths
    "services": "/api/v1/namespaces/{ns}/services", "endpoints": "/api/v1/namespaces/{ns}/endpoints",
    "deployments": "/apis/apps/v1/namespaces/{ns}/deployments",
    "statefulsets": "/apis/apps/v1/namespaces/{ns}/statefulsets",
    "hpa": "/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers",
    "rayclusters": "/apis/ray.io/v1/namespaces/{ns}/rayclusters",
    "rayservices": "/apis/ray.io/v1/namespaces/{ns}/rayservices",
}  # fmt: skip

# One stdlib HTTP server in the test's network namespace, on SERVED_PORT of every address it owns.
METRICS_SERVER = textwrap.dedent("""
    import sys, threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    stem, port = sys.argv[1], int(sys.argv[2])
    first, later = open(stem + ".metrics.txt", "rb").read(), open(stem + ".metrics.1.txt", "rb").read()
    models = open(stem + ".models.json", "rb").read()
    reads, lock = {}, threading.Lock()
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            pod_ip = self.connection.getsockname()[0]
            if self.path == "/metrics":
                with lock:
                    reads[pod_ip] = reads.get(pod_ip, 0) + 1
                    body = first if reads[pod_ip] == 1 else later
                kind = "text/plain; version=0.0.4; charset=utf-8"
            elif self.path == "/health":
                body, kind = b"", "text/plain"
            elif self.path == "/v1/models":
                body, kind = models, "application/json"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, *args):
            pass
    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer(("0.0.0.0", port), Handler).serve_forever()
""")


# --phases: one more `llmdiag triage`, after every timing, with a timestamp around each collector and
# each step of collect_objects (wrapped in the process), and around the analysis; printed on stderr.
PHASES = textwrap.dedent("""
    import gc, sys, threading, time
    import diag.analyze, diag.collect.kubernetes as k8s, diag.collect.runner as runner
    from diag.cli import app
    gc.disable()  # as diag.cli.main does: with the cyclic collector on, a list of the pods took twice as long
    t0, marks, lock = time.monotonic(), [], threading.Lock()
    def timed(module, name):
        inner = getattr(module, name)
        def wrapper(*args, **kwargs):
            began = time.monotonic()
            try:
                return inner(*args, **kwargs)
            finally:
                what = name + (" " + args[1] if name == "_list" else "")
                with lock:
                    marks.append((began - t0, time.monotonic() - t0, what))
        setattr(module, name, wrapper)
    for name in ("_preflight", "_kubernetes_objects", "_kubernetes_logs", "_gpu_exec", "_vllm_in_pods", "_ray"):
        timed(runner, name)
    for name in ("_list", "_parsed_pods", "_events"):
        timed(k8s, name)
    timed(runner, "write_manifest")
    timed(diag.analyze, "analyze_bundle")
    try:
        app(sys.argv[1:], prog_name="llmdiag")
    except SystemExit:
        pass
    print(f"whole run: {time.monotonic() - t0:.2f} s", file=sys.stderr)
    for began, ended, what in sorted(marks):
        print(f"phase {began:7.2f} .. {ended:7.2f} s  ({ended - began:6.2f} s)  {what}", file=sys.stderr)
""")


def _served_pod(i: int, nodes: int) -> dict:
    pod = _pod(i, nodes)
    container = pod["spec"]["containers"][0]
    container.update(
        command=["vllm", "serve"], args=FIXTURE_ARGS, ports=[{"name": "http", "containerPort": SERVED_PORT}]
    )
    return pod


def _app_pod(i: int, nodes: int, namespace: str = NS, prefix: str = "vllm") -> dict:
    """A pod that is no vLLM server: not the vllm-openai image, and a command that launches no vLLM."""
    pod = _pod(i, nodes, namespace, prefix)
    pod["spec"]["containers"] = [{"name": "app", "image": "busybox:1.36", "command": ["sleep", "infinity"],
                                  "resources": {"requests": {"cpu": "100m"}}}]  # fmt: skip
    return pod


def pod_bodies(pods: int, nodes: int, vllm_every: int, served: int) -> list[dict]:
    """Every `vllm_every`-th pod a vLLM server (the first `served` of them answering on SERVED_PORT),
    the others app pods; the names stay vllm-NNNNN, which the events name."""
    bodies = []
    for i in range(pods):
        if i % vllm_every:
            bodies.append(_app_pod(i, nodes))
        else:
            bodies.append(_served_pod(i, nodes) if i // vllm_every < served else _pod(i, nodes))
    return bodies


class Api:
    """Plain GETs to the API server over one kept-alive TLS connection, as the kubeconfig's admin."""

    def __init__(self, cluster: ControlPlane) -> None:
        pki = cluster.workdir / "pki"
        context = ssl.create_default_context(cafile=str(cluster.ca))
        context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        parts = urlsplit(cluster.server)
        assert parts.hostname == "127.0.0.1", parts
        self._connect = lambda: http.client.HTTPSConnection(parts.hostname, parts.port, context=context, timeout=600)
        self.reconnect()

    def reconnect(self) -> None:
        """A new connection, its TLS handshake outside every timing (llmdiag keeps its connections too);
        the API server closes one left idle while triage runs."""
        self._conn = self._connect()
        self.get("/version")

    def get(self, path: str, query: dict | None = None) -> tuple[float, int, bytes]:
        """(seconds, status, body): from sending the request to the last byte of the answer."""
        url = path + ("?" + urlencode(query) if query else "")
        started = time.monotonic()
        self._conn.request("GET", url, headers={"Accept": "application/json, */*"})
        answer = self._conn.getresponse()
        body = answer.read()
        return time.monotonic() - started, answer.status, body

    def list_all(self, path: str, **query: str) -> tuple[float, int, int, bool]:
        """A list as llmdiag reads it: pages of 500, one after another, until the end or 5,000 items.
        (seconds of the requests alone, pages, items, capped); the pages are parsed outside the timing."""
        seconds, pages, items, cont = 0.0, 0, 0, None
        while True:
            took, status, body = self.get(path, {"limit": str(PAGE), **query, **({"continue": cont} if cont else {})})
            seconds, pages = seconds + took, pages + 1
            if status != 200:
                return seconds, pages, -status, False  # e.g. the Ray CRDs, not installed: 404, as in llmdiag
            page = json.loads(body)
            items += len(page.get("items") or [])
            cont = (page.get("metadata") or {}).get("continue")
            if not cont or items >= MAX_ITEMS:
                return seconds, pages, items, bool(cont)


@dataclass
class Chain:
    """The requests of triage's chains, each timed alone. Every chain starts with the pre-flight, the Ray
    lists and the pods; then two branches run beside each other: the Kubernetes collector's events
    (once every other list is in), and phase 2, whose longest part is the vLLM reads with the scrape
    interval (diag/collect/runner.py starts phase 2 as soon as the pods are parsed)."""

    trunk: dict[str, float]
    events: dict[str, float]
    phase_two: dict[str, float]

    @property
    def seconds(self) -> float:
        return sum(self.trunk.values()) + max(sum(self.events.values()), sum(self.phase_two.values()))

    def steps(self) -> dict[str, float]:
        return {**self.trunk, **{f"[events] {k}": v for k, v in self.events.items()},
                **{f"[phase 2] {k}": v for k, v in self.phase_two.items()}}  # fmt: skip


def critical_path(api: Api, served_pod: str | None, interval_s: float) -> Chain:
    """Each request of triage's chains, alone, in the order triage must make them (diag/collect/runner.py,
    k8s.py, vllm.py); also the lists that run beside them."""
    ns = NS
    api.reconnect()
    t: dict[str, float] = {}
    events_branch: dict[str, float] = {}
    vllm_branch: dict[str, float] = {}
    t["GET /version (pre-flight)"] = api.get("/version")[0]
    beside = {kind: api.list_all(path.format(ns=ns))[0] for kind, path in NAMESPACED_KINDS.items()}
    beside["nodes"] = api.list_all("/api/v1/nodes")[0]
    beside["daemonsets (all namespaces)"] = api.list_all("/apis/apps/v1/daemonsets")[0]
    ray = max(beside.pop("rayclusters"), beside.pop("rayservices"))
    pods, pod_pages, _, _ = api.list_all(f"/api/v1/namespaces/{ns}/pods")
    # collect_objects: the pods are listed once the Ray lists are in, the events once every list is in
    t["list rayclusters | rayservices (the longer)"] = ray
    t[f"list pods ({pod_pages} pages)"] = pods
    events_branch["the other lists beyond ray+pods (max(others) - ray - pods, if > 0)"] = max(
        0.0, max(beside.values()) - ray - pods
    )
    events, event_pages, items, capped = api.list_all(f"/api/v1/namespaces/{ns}/events")
    events_branch[f"list events ({event_pages} pages, {items} items)"] = events
    if capped:  # more exist: the Warnings again, on their own
        events_branch["list events type=Warning"] = api.list_all(
            f"/api/v1/namespaces/{ns}/events", fieldSelector="type=Warning"
        )[0]
    events_branch["list events of nodes (all namespaces)"] = api.list_all(
        "/api/v1/events", fieldSelector="involvedObject.kind=Node"
    )[0]
    # phase 2: the vLLM reads of one served pod (logs: one request each, 8 at a time, no chain)
    log_s = api.get(f"/api/v1/namespaces/{ns}/pods/vllm-00000/log", {"container": "vllm", "tailLines": "500"})[0]
    if served_pod is None:  # every /metrics refused: the reads stop there, no second scrape
        proxy = f"/api/v1/namespaces/{ns}/pods/vllm-00000:8000/proxy"
        reads = [api.get(f"{proxy}/{p}")[0] for p in ("metrics", "health", "v1/models")]
        vllm_branch["vLLM: /metrics, /health, /v1/models (refused)"] = max(sum(reads), log_s)
        return Chain(t, events_branch, vllm_branch)
    proxy = f"/api/v1/namespaces/{ns}/pods/{quote(served_pod)}:{SERVED_PORT}/proxy"
    started = time.monotonic()
    first = [api.get(f"{proxy}/{p}") for p in ("metrics", "health", "v1/models")]
    assert all(status == 200 for _, status, _ in first), [(s, b[:200]) for _, s, b in first]
    time.sleep(max(0.0, started + interval_s - time.monotonic()))
    second = api.get(f"{proxy}/metrics")[0]
    reads = sum(s for s, _, _ in first)
    vllm_branch[f"vLLM: max(scrape interval {interval_s:g} s, /metrics + /health + /v1/models = {reads:.3f} s)"] = max(
        interval_s, reads, log_s
    )
    vllm_branch["vLLM: the second /metrics"] = second
    return Chain(t, events_branch, vllm_branch)


def kubectl_reads(kubeconfig: Path, served: int, vllm_every: int) -> float:
    """Seconds for kubectl to make the reads triage makes, one command after another: the namespace's
    lists, the nodes and every namespace's daemonsets, and each answering vLLM pod's /metrics twice
    through the API server's proxy (the scrape interval not counted)."""
    kubectl = ["kubectl", f"--kubeconfig={kubeconfig}"]
    commands = [
        [*kubectl, "get", "-n", NS, "-o", "json", "pods,events,services,endpoints,deployments,statefulsets,hpa"],
        [*kubectl, "get", "-o", "json", "nodes"],
        [*kubectl, "get", "-A", "-o", "json", "daemonsets"],
    ]
    for k in range(served):
        proxied = f"/api/v1/namespaces/{NS}/pods/vllm-{k * vllm_every:05d}:{SERVED_PORT}/proxy"
        commands += [[*kubectl, "get", "--raw", f"{proxied}/metrics"]] * 2
    started = time.monotonic()
    for argv in commands:
        subprocess.run(argv, capture_output=True, check=True, timeout=600)
    return time.monotonic() - started


def _run(argv: list[str], ok: tuple[int, ...] = (0,)) -> tuple[float, subprocess.CompletedProcess]:
    started = time.monotonic()
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=1800)
    seconds = time.monotonic() - started
    if result.returncode not in ok:
        raise RuntimeError(f"{argv[3:5]} exit {result.returncode}: {result.stderr[-2000:]}")
    return seconds, result


def _wait_running(
    api: Api, cluster: ControlPlane, pods: int, timeout_s: float = 900, namespace: str | None = NS
) -> float:
    """Until kwok has marked `pods` pods of `namespace` (None: of every namespace) Running with their IP;
    every pod IP must be inside the test's network namespace and every node address loopback, else
    nothing is dialled."""
    started = time.monotonic()
    path = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
    while time.monotonic() - started < timeout_s:
        _, _, body = api.get(path, {"limit": "100000"})
        ips = [p["status"].get("podIP") for p in json.loads(body)["items"] if p["status"].get("phase") == "Running"]
        strangers = {ip for ip in ips if ip and not cluster.network.owns(ip)}
        if strangers:
            raise RuntimeError(f"pod IPs outside the test network: {sorted(strangers)[:5]} ({len(strangers)})")
        if len([ip for ip in ips if ip]) >= pods:
            nodes = json.loads(api.get("/api/v1/nodes", {"limit": "100000"})[2])["items"]
            addresses = {a["address"] for n in nodes for a in n["status"].get("addresses") or []}
            if addresses <= {"127.0.0.1"} and all(n["status"].get("addresses") for n in nodes):
                return time.monotonic() - started
        time.sleep(2)
    raise RuntimeError(f"pods not all Running with an IP (or nodes without their address) after {timeout_s:g} s")


def _failed_sources(report: dict) -> dict[str, str]:
    return {name: s["detail"] for name, s in report.get("sources", {}).items() if s["status"] == "failed"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--events", type=int, default=50000)
    parser.add_argument(
        "--vllm-every",
        type=int,
        default=10,
        help="every N-th pod is a vLLM server (10: the issue's 500 of 5,000; 1: every pod)",
    )
    parser.add_argument("--served", type=int, default=10, help="vLLM pods whose /metrics really answers (port 8001)")
    parser.add_argument("--phases", action="store_true", help="then one more triage, timed collector by collector")
    parser.add_argument("--scrapes", type=int, default=2)
    parser.add_argument("--scrape-interval", type=float, default=5.0)
    parser.add_argument(
        "--timeout", type=float, default=900, help="triage's --timeout (its default, 120, may cut L short)"
    )
    parser.add_argument("--source-timeout", type=float, default=600, help="triage's --source-timeout (default 20)")
    args = parser.parse_args()
    if args.vllm_every < 1:
        parser.error("--vllm-every: at least 1")
    servers = len(range(0, args.pods, args.vllm_every))
    served = min(args.served, servers)
    if args.pods > MAX_PODS:
        parser.error(f"--pods: at most {MAX_PODS} (the pod range {POD_CIDR})")

    from kubernetes import client, config

    with running_control_plane(str(POD_CIDR)) as cluster, tempfile.TemporaryDirectory() as tmp:
        config.load_kube_config(str(cluster.kubeconfig))
        core = client.CoreV1Api()
        core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        bodies = pod_bodies(args.pods, args.nodes, args.vllm_every, served)
        print(f"pods: {args.pods}, vLLM servers: {servers} (every {args.vllm_every}), answering: {served}", flush=True)
        made = {
            "nodes": _create_all(core.create_node, [_node(i) for i in range(args.nodes)]),
            "pods": _create_all(lambda b: core.create_namespaced_pod(NS, b), bodies),
            "events": _create_all(lambda b: core.create_namespaced_event(NS, b),
                                  [_event(i, args.pods) for i in range(args.events)]),
        }  # fmt: skip
        for kind, seconds in made.items():
            print(f"create {kind}: {seconds:.1f} s", flush=True)
        api = Api(cluster)
        waited = _wait_running(api, cluster, args.pods)
        print(f"wait for every pod Running, with its IP in {POD_CIDR}: {waited:.1f} s", flush=True)

        script = Path(tmp) / "metrics_server.py"
        script.write_text(METRICS_SERVER)
        server = subprocess.Popen(["ip", "netns", "exec", cluster.network.name, sys.executable, str(script),
                                   str(FIXTURE), str(SERVED_PORT)], start_new_session=True)  # fmt: skip
        try:
            time.sleep(1.0)
            served_pod = f"vllm-{0:05d}" if served else None
            if served_pod is not None:  # the server answers through the pod proxy before anything is timed
                _, status, body = api.get(f"/api/v1/namespaces/{NS}/pods/{served_pod}:{SERVED_PORT}/proxy/health")
                assert status == 200, (status, body[:300])
            common = [f"--kubeconfig={cluster.kubeconfig}", "-n", NS, "--no-local-gpu", f"--scrapes={args.scrapes}",
                      f"--scrape-interval={args.scrape_interval:g}", f"--timeout={args.timeout:g}",
                      f"--source-timeout={args.source_timeout:g}"]  # fmt: skip
            cli = [sys.executable, "-m", "diag.cli"]

            before = critical_path(api, served_pod, args.scrape_interval)
            print(f"critical path before triage: {json.dumps(before.steps())}", flush=True)
            triage_s, triage = _run([*cli, "triage", *common, "--output=json", "--fail-on=never"])
            print(f"llmdiag triage -o json: {triage_s:.1f} s", flush=True)
            after = critical_path(api, served_pod, args.scrape_interval)
            print(f"critical path after triage: {json.dumps(after.steps())}", flush=True)
            kubectl_s = kubectl_reads(cluster.kubeconfig, served, args.vllm_every)
            print(f"kubectl, the same reads: {kubectl_s:.2f} s", flush=True)
            bundle = Path(tmp) / "bundle"
            collect_s, collected = _run([*cli, "collect", *common, f"--out={bundle}"])
            print(f"llmdiag collect: {collect_s:.1f} s", flush=True)
            analyze_s, analyzed = _run([*cli, "analyze", str(bundle), "--output=json", "--profile", "--fail-on=never"])
            print(analyzed.stderr, flush=True)
            startup_s, _ = _run([sys.executable, "-c", STARTUP_IMPORTS])
            if args.phases:
                _, phased = _run([sys.executable, "-c", PHASES, "triage", *common, "--output=json", "--fail-on=never"])
                print(
                    "\n".join(line for line in phased.stderr.splitlines() if line.startswith(("phase", "whole"))),
                    flush=True,
                )
        finally:
            stop_process_group(server, 5)

    report = json.loads(triage.stdout)
    failed = _failed_sources(report)
    twice = [n for n, s in report["sources"].items() if n.endswith(".metrics.1.txt") and s["status"] == "ok"]
    read = {
        n.split("/", 1)[1].rsplit(".metrics", 1)[0]
        for n in report["sources"]
        if n.startswith("vllm/") and ".metrics" in n
    }
    if len(read) != servers:  # the app pods must not be taken for vLLM servers, nor a server missed
        print(f"WARNING: triage read {len(read)} vLLM servers, the bench made {servers}")
    analysis = float(re.search(r"^analysis: ([0-9.]+) s", analyzed.stderr, re.M).group(1))
    print(f"triage sources: {len(report['sources'])}, failed {len(failed)}, vLLM servers read {len(read)},"
          f" scraped twice {len(twice)};"
          f" timed out: {[n for n, d in failed.items() if 'timed out' in d]}")  # fmt: skip
    kinds = Counter(re.sub(r"vllm-\d+", "vllm-N", d.split(": ", 1)[-1])[:90] for d in failed.values())
    print(f"triage's failed sources, by detail: {kinds.most_common(4)}")
    print("critical path, request by request (before triage | after triage):")
    for (step, a), b in zip(before.steps().items(), after.steps().values(), strict=False):
        print(f"  {step}: {a:.3f} | {b:.3f} s")
    path = (before.seconds + after.seconds) / 2
    print(
        f"critical path, trunk + the longer of the events and phase-2 branches, scrape interval included"
        f" (mean of the two passes): {path:.1f} s ({before.seconds:.1f} | {after.seconds:.1f})"
    )
    print(
        f"analysis of the collected bundle (analyze --profile's 'analysis'): {analysis:.1f} s"
        f" (llmdiag analyze wall, load and JSON included: {analyze_s:.1f} s)"
    )
    print(f"llmdiag collect, same options (for reference): {collect_s:.1f} s")
    print(f"python start-up, the modules triage imports: {startup_s:.1f} s")
    print(f"llmdiag triage -o json: {triage_s:.1f} s")
    print(f"kubectl, the same reads: {kubectl_s:.2f} s; triage / kubectl: {triage_s / kubectl_s:.1f}x")
    print(f"ratio triage / critical path without the analysis: {triage_s / path:.2f}x")
    print(
        f"ratio triage / critical path with the analysis ({path + analysis:.1f} s): {triage_s / (path + analysis):.2f}x"
    )


if __name__ == "__main__":
    main()
