"""Objects and steps of the live Kubernetes scenarios (tests/live/test_k8s_*.py, ci/k8s/record.py): GPU
nodes as the NVIDIA GPU operator leaves them, vLLM Deployments and Services as people write them, and
the kubectl calls that apply them and wait for the real controllers."""

from __future__ import annotations

import ipaddress
import json
import shlex
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from k8s_cluster import ControlPlane, wait_for
from live_services import stop_process_group

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class GpuProduct:
    label: str  # nvidia.com/gpu.product, as GPU feature discovery writes it
    memory_mib: int  # nvidia.com/gpu.memory


H100 = GpuProduct("NVIDIA-H100-80GB-HBM3", 81559)
H200 = GpuProduct("NVIDIA-H200", 143771)  # the GPU of fixtures/real/h200 (nvidia-smi: "NVIDIA H200", 143771 MiB)


def gpu_node(name: str, gpus: int, product: GpuProduct = H100) -> dict:
    """A node as the NVIDIA GPU operator leaves it: GPU product labels, nvidia.com/gpu capacity, the
    operator's NoSchedule taint. kwok keeps it Ready."""
    resources = {"cpu": "64", "memory": "1056000000Ki", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": product.label,
                "nvidia.com/gpu.count": str(gpus),
                "nvidia.com/gpu.memory": str(product.memory_mib),
            },  # fmt: skip
        },
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {"capacity": resources, "allocatable": resources},
    }


GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def vllm_deployment(name: str, namespace: str, *, gpus: int, tolerate: bool, replicas: int = 1,
                    product: GpuProduct = H100, args: list[str] | None = None) -> dict:  # fmt: skip
    container = {
        "name": "vllm",
        "image": "vllm/vllm-openai:v0.11.0",
        "command": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
        "args": args
        or [
            "--model",
            "meta-llama/Llama-3.3-70B-Instruct",
            "--served-model-name",
            name,
            "--tensor-parallel-size",
            str(gpus),
            "--port",
            "8000",
        ],  # fmt: skip
        "ports": [{"name": "http", "containerPort": 8000}],
        "resources": {
            "requests": {"cpu": "4", "memory": "64Gi", "nvidia.com/gpu": str(gpus)},
            "limits": {"nvidia.com/gpu": str(gpus)},
        },  # fmt: skip
    }
    labels = {"app": name, "app.kubernetes.io/name": "vllm"}
    return gpu_deployment(name, namespace, labels, container, tolerate=tolerate, replicas=replicas, product=product)


def training_deployment(name: str, namespace: str, *, gpus: int) -> dict:
    """A fine-tuning job's pods beside the serving ones: they hold GPUs and serve nothing."""
    container = {
        "name": "trainer",
        "image": "nvcr.io/nvidia/pytorch:25.01-py3",
        "command": ["torchrun", f"--nproc-per-node={gpus}", "finetune.py"],
        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
    }
    return gpu_deployment(name, namespace, {"app": name}, container, tolerate=True, replicas=1, product=H100)


def gpu_deployment(name: str, namespace: str, labels: dict[str, str], container: dict, *, tolerate: bool,
                   replicas: int, product: GpuProduct) -> dict:  # fmt: skip
    tolerations = [GPU_TOLERATION] if tolerate else []
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.product": product.label},
                    "tolerations": tolerations,
                    "containers": [container],
                },  # fmt: skip
            },
        },
    }


def service(name: str, namespace: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 8000, "targetPort": "http"}]},
    }


def ingress(name: str, ns: str, backend: str, tls_secret: str | None = None) -> dict:
    """An Ingress for <name>.example.internal/v1 to Service `backend` (port name http), TLS with `tls_secret`."""
    spec: dict = {
        "rules": [
            {
                "host": f"{name}.example.internal",
                "http": {
                    "paths": [
                        {
                            "path": "/v1",
                            "pathType": "Prefix",
                            "backend": {"service": {"name": backend, "port": {"name": "http"}}},
                        }
                    ]
                },
            }
        ]
    }
    if tls_secret:
        spec["tls"] = [{"hosts": [f"{name}.example.internal"], "secretName": tls_secret}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }


def secret(name: str, ns: str, data: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns}, "stringData": data}


GATEWAY_GROUP = "gateway.networking.k8s.io"


def gateway_api_crds(cluster: ControlPlane) -> None:
    """The Gateway API's Gateway, HTTPRoute and GRPCRoute as CRDs of group gateway.networking.k8s.io, v1,
    with a status subresource; their schemas left open (the upstream CRDs' validation is not what is
    tested: the shapes written are the API's). Waits until the API server serves them."""
    crds = []
    for kind, plural in (("Gateway", "gateways"), ("HTTPRoute", "httproutes"), ("GRPCRoute", "grpcroutes")):
        schema = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
        crds.append({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            # a *.k8s.io group needs the approval annotation; the upstream CRDs carry this one
            "metadata": {"name": f"{plural}.{GATEWAY_GROUP}",
                         "annotations": {"api-approved.kubernetes.io": "https://github.com/kubernetes-sigs/gateway-api/pull/2466"}},
            "spec": {
                "group": GATEWAY_GROUP,
                "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
                "scope": "Namespaced",
                "versions": [{"name": "v1", "served": True, "storage": True, "schema": schema,
                              "subresources": {"status": {}}}],
            },
        })  # fmt: skip
    apply(cluster, *crds)
    wait_for(
        "the Gateway API served",
        lambda: (
            cluster.kubectl("get", f"httproutes.{GATEWAY_GROUP}", "-A", check=False).returncode == 0
            and cluster.kubectl("get", f"gateways.{GATEWAY_GROUP}", "-A", check=False).returncode == 0
            and cluster.kubectl("get", f"grpcroutes.{GATEWAY_GROUP}", "-A", check=False).returncode == 0
        ),
    )


def gateway(name: str, ns: str) -> dict:
    listener = {"name": "http", "port": 80, "protocol": "HTTP", "allowedRoutes": {"namespaces": {"from": "All"}}}
    return {"apiVersion": f"{GATEWAY_GROUP}/v1", "kind": "Gateway", "metadata": {"name": name, "namespace": ns},
            "spec": {"gatewayClassName": "eg", "listeners": [listener]}}  # fmt: skip


def http_route(name: str, ns: str, *, gateway: tuple[str, str], backend: str, port: int = 8000) -> dict:
    """An HTTPRoute for <name>.example.internal/v1 on Gateway (namespace, name) to Service `backend`."""
    return {
        "apiVersion": f"{GATEWAY_GROUP}/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "parentRefs": [{"group": GATEWAY_GROUP, "kind": "Gateway", "namespace": gateway[0], "name": gateway[1]}],
            "hostnames": [f"{name}.example.internal"],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}],
                    "backendRefs": [{"group": "", "kind": "Service", "name": backend, "port": port, "weight": 1}],
                }
            ],
        },
    }


def two_gpu_nodes(cluster: ControlPlane) -> ControlPlane:
    """Two 8-GPU H100 nodes with the GPU operator's taint, Ready under kwok."""
    apply(cluster, gpu_node("gpu-h100-1", 8), gpu_node("gpu-h100-2", 8))

    def ready() -> bool:
        nodes = [n for n in get(cluster, "nodes")["items"] if n["metadata"]["name"] in ("gpu-h100-1", "gpu-h100-2")]
        return len(nodes) == 2 and all(
            any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))
            for n in nodes
        )

    wait_for("kwok nodes Ready", ready)
    return cluster


def apply(cluster: ControlPlane, *objects: dict) -> None:
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))


def namespace(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def free_gpus(cluster: ControlPlane, ns: str) -> None:
    """Scale a scenario's Deployments to zero and remove its pods at once (kwok honours the grace
    period, which would hold their GPUs for 30 s)."""
    cluster.kubectl("scale", "deployment", "--all", "-n", ns, "--replicas=0")
    cluster.kubectl("delete", "pods", "--all", "-n", ns, "--grace-period=0", "--force")
    wait_for(f"no pod left in {ns}", lambda: not get(cluster, "pods", "-n", ns)["items"])


def get(cluster: ControlPlane, *argv: str) -> dict:
    return json.loads(cluster.kubectl("get", *argv, "-o", "json").stdout)


@contextmanager
def namespaces_removed_after(cluster: ControlPlane) -> Iterator[None]:
    """The namespaces a test made are deleted after it, and their pods gone, so that the GPUs they held
    are free for the next test, whatever order the files run in."""
    before = {n["metadata"]["name"] for n in get(cluster, "namespaces")["items"]}
    try:
        yield
    finally:
        made = sorted({n["metadata"]["name"] for n in get(cluster, "namespaces")["items"]} - before)
        if made:
            cluster.kubectl("delete", "namespace", *made, "--wait=false", check=False)
            wait_for(
                f"the pods of {', '.join(made)} gone",
                lambda: not [p for p in get(cluster, "pods", "-A")["items"] if p["metadata"]["namespace"] in made],
                timeout_s=90,
            )


def pods(cluster: ControlPlane, ns: str, app: str) -> list[dict]:
    return get(cluster, "pods", "-n", ns, "-l", f"app={app}")["items"]


def failed_scheduling(cluster: ControlPlane, ns: str) -> list[dict]:
    events = get(cluster, "events", "-n", ns, "--field-selector", "reason=FailedScheduling")["items"]
    return [e for e in events if e.get("source", {}).get("component") == "default-scheduler"
            or e.get("reportingComponent") == "default-scheduler"]  # fmt: skip


def triage(cluster: ControlPlane, ns: str, kubeconfig: Path | None = None) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "diag.cli", "triage", f"--kubeconfig={kubeconfig or cluster.kubeconfig}",
         "-n", ns, "--no-local-gpu", "--timeout=60", "--output=json"],
        cwd=REPO, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert result.stdout, f"triage wrote nothing (exit {result.returncode}): {result.stderr[-2000:]}"
    return json.loads(result.stdout)


def expected(fixture: str) -> dict:
    return json.loads((REPO / "fixtures" / fixture / "expected.json").read_text())


def fired(report: dict) -> set[str]:
    return {f["rule"] for f in report["findings"]}


def node_and_pod_addresses(cluster: ControlPlane) -> list[str]:
    found = []
    for node in get(cluster, "nodes")["items"]:
        found += [
            a["address"] for a in node["status"].get("addresses", []) if a["type"] in ("InternalIP", "ExternalIP")
        ]
    for pod in get(cluster, "pods", "-A")["items"]:
        found += [p["ip"] for p in pod["status"].get("podIPs", [])] + [pod["status"].get("hostIP") or ""]
    return [a for a in found if a]


def assert_only_test_addresses(cluster: ControlPlane) -> None:
    """Every node and pod IP is loopback or owned by the test's network namespace."""
    strangers = [
        a
        for a in node_and_pod_addresses(cluster)
        if not ipaddress.ip_address(a).is_loopback and not cluster.network.owns(a)
    ]
    assert not strangers, f"addresses outside 127.0.0.0/8 and the test network: {strangers}"


def refuse_by_quota(cluster: ControlPlane, ns: str, gpus: int = 8) -> None:
    """The namespace's ResourceQuota allows `gpus` GPUs; a fine-tuning job holds them all, then the llama-70b
    vLLM Deployment (half as many GPUs) and its Service arrive: the API server refuses every pod the
    ReplicaSet controller creates for it ('exceeded quota'), so none exists (fixtures/k8s-quota-exceeded)."""
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpus", "namespace": ns},
             "spec": {"hard": {"requests.nvidia.com/gpu": str(gpus)}}}  # fmt: skip
    apply(cluster, namespace(ns), quota)
    wait_for(
        "the quota's status", lambda: get(cluster, "resourcequota", "gpus", "-n", ns).get("status", {}).get("hard")
    )
    apply(cluster, training_deployment("finetune", ns, gpus=gpus))
    wait_for(
        "the fine-tuning pod running",
        lambda: [p["status"].get("phase") for p in pods(cluster, ns, "finetune")] == ["Running"],
    )
    apply(cluster, vllm_deployment("llama-70b", ns, gpus=max(1, gpus // 2), tolerate=True), service("llama-70b", ns))

    def refused() -> bool:
        deployment = get(cluster, "deployment", "llama-70b", "-n", ns)
        return any(
            c["type"] == "ReplicaFailure" and c["status"] == "True" for c in deployment["status"].get("conditions", [])
        )

    wait_for("the llama-70b Deployment's ReplicaFailure (exceeded quota)", refused)


def cordon_under_another_namespaces_pod(cluster: ControlPlane, ns: str, other: str) -> str:
    """A batch job of namespace `other` holds 2 GPUs of gpu-h100-2; the node is then cordoned (not
    drained, so the job stays). The llama-70b vLLM Deployment of `ns` asks for 2 replicas of 6 GPUs: the
    first takes gpu-h100-1, the second waits, gpu-h100-1 having 2 left and gpu-h100-2, with 6 free, being
    cordoned (issue 36). Returns the batch pod's name."""
    batch = training_deployment("embed-batch", other, gpus=2)
    batch["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/hostname"] = "gpu-h100-2"
    apply(cluster, namespace(other), batch)
    wait_for("the batch pod running", lambda: _phases(cluster, other, "embed-batch") == ["Running"])
    cluster.kubectl("cordon", "gpu-h100-2")
    apply(cluster, namespace(ns), vllm_deployment("llama-70b", ns, gpus=6, tolerate=True, replicas=2),
          service("llama-70b", ns))  # fmt: skip
    wait_for("one replica running, one pending", lambda: _phases(cluster, ns, "llama-70b") == ["Pending", "Running"])
    wait_for("the scheduler's FailedScheduling", lambda: failed_scheduling(cluster, ns))
    [pod] = pods(cluster, other, "embed-batch")
    return pod["metadata"]["name"]


def _phases(cluster: ControlPlane, ns: str, app: str) -> list[str]:
    return sorted(p["status"].get("phase", "") for p in pods(cluster, ns, app))


# kubectl verbs that change the cluster: a printed command with one of them runs with --dry-run=server
_WRITES = ("uncordon", "cordon", "drain", "scale", "patch", "delete", "apply", "create", "label", "annotate",
           "taint", "set", "replace", "rollout")  # fmt: skip


_READS = ("get", "describe", "events", "auth", "api-resources", "explain", "top")


_VALUED = ("-n", "--namespace", "--context", "--kubeconfig", "-l", "--selector", "-c", "--container", "-o")


def _verb(argv: list[str]) -> str:
    """kubectl's verb: the first word that is neither a flag nor a flag's value (`-n taint edit ...`)."""
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word in _VALUED:
            skip = True
        elif not word.startswith("-"):
            return word
    return ""


def printed_kubectl_commands(report: dict) -> list[str]:
    """Every kubectl command line the report prints: in the findings' fixes and the verdict's gaps and
    caveats, as a user would copy them (the text before a `#` comment, joined lines not followed)."""
    texts = [f.get("remediation") or "" for f in report["findings"]]
    texts += [
        f"{g.get('remedy') or ''}  # {g['source']}"
        for g in report["verdict"].get("gaps", []) + report["verdict"].get("caveats", [])
    ]
    found = []
    for text in texts:
        for line in text.splitlines():
            line = line.strip().removeprefix("collect it again: ")
            if line.startswith("kubectl "):
                found.append(line)
    return list(dict.fromkeys(found))


def run_printed_commands(cluster: ControlPlane, report: dict) -> list[tuple[str, str]]:
    """Each printed kubectl command run against the cluster as printed (writes with --dry-run=server; what
    a pipe or a `>` hands its output to is not run); the ones that failed, with what kubectl said. A
    placeholder left in a command (`<pod>`) is a failure: every command must run as printed."""
    failed = []
    for command in printed_kubectl_commands(report):
        words = shlex.split(command, comments=True)
        cut = next((i for i, w in enumerate(words) if w in ("|", ">", "&&", ";")), len(words))
        argv = words[1:cut]
        if not argv or any(w.startswith("<") and w.endswith(">") for w in words):
            failed.append((command, "not a complete command"))
            continue
        verb = _verb(argv)
        if verb not in _READS + _WRITES or any("/proxy/" in w for w in argv):
            # logs, exec, debug and a pod's proxied /metrics need a container that runs (kwok's do not);
            # edit needs a person at an editor
            continue
        if verb in _WRITES:
            argv.append("--dry-run=server")
        done = cluster.kubectl(*argv, check=False)
        if done.returncode != 0:
            failed.append((command, (done.stderr or done.stdout).strip()[-300:]))
    return failed


# --------------------------------------------------------------------------- the catalogue
#
# One namespace per scenario, all of them on one cluster at once, as teams share one: what each
# expects of llmdiag and what a peer's finding must say to name the same cause. The live tests build
# them (tests/live/test_k8s_catalogue.py runs every one) and bench/bench_live.py times llmdiag,
# kubectl, k8sgpt and Popeye on each. A scenario registered here with @scenario appears in both.


@dataclass(frozen=True)
class ClusterScenario:
    namespace: str  # the scenario's own namespace; its name too
    about: str  # one line: what is wrong, as a user would say it
    rule: str | None  # the rule of the verdict's root finding; None: a healthy namespace (exit 0)
    build: Callable[[ControlPlane, str], None]  # applies its objects and waits for the controllers' answer
    # words that one of a peer's findings must all hold (case aside) to name the same cause: the reason in
    # the controllers' or the kubelet's words, or the faulty object's name where only it is at fault
    cause_words: tuple[str, ...] = ()
    nodes: tuple[dict, ...] = ()  # GPU nodes of its own (a pool no other scenario selects), made first
    busy: bool = False  # its vLLM pods report requests running (bench/bench_live.py serves their /metrics)


CATALOGUE: dict[str, ClusterScenario] = {}
SHARED_NODES = tuple(gpu_node(f"gpu-h100-{i}", 8) for i in range(1, 6))  # the pool every other scenario uses
BUSY_PORT = 8001  # a busy scenario's vLLM port: the bench's stand-in answers a busy server's /metrics there


Build = Callable[[ControlPlane, str], None]


def scenario(namespace: str, about: str, rule: str | None, cause_words: tuple[str, ...] = (),
             nodes: tuple[dict, ...] = (), busy: bool = False) -> Callable[[Build], Build]:  # fmt: skip
    """Registers the decorated build as a scenario of the catalogue."""

    def register(build: Build) -> Build:
        assert namespace not in CATALOGUE, f"two scenarios in namespace {namespace}"
        # a peer's every finding names its namespace: words all in it would name the cause whatever was said
        assert not cause_words or not all(w.lower() in namespace for w in cause_words), f"{namespace}: cause in name"
        CATALOGUE[namespace] = ClusterScenario(namespace, about, rule, build, cause_words, nodes, busy)
        return build

    return register


def nodes_ready(cluster: ControlPlane, nodes: tuple[dict, ...] | list[dict]) -> None:
    """`nodes` applied and Ready under kwok."""
    if not nodes:
        return
    apply(cluster, *nodes)
    names = {n["metadata"]["name"] for n in nodes}

    def ready() -> bool:
        found = [n for n in get(cluster, "nodes")["items"] if n["metadata"]["name"] in names]
        return len(found) == len(names) and all(
            any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))
            for n in found
        )

    wait_for("kwok nodes Ready", ready)


def build_all(cluster: ControlPlane, chosen: list[ClusterScenario]) -> dict[str, str]:
    """Every scenario of `chosen` on `cluster`, the shared nodes and each one's own first, the builds
    side by side; the namespaces whose build failed, with why (the others are built all the same)."""
    nodes_ready(cluster, [*SHARED_NODES, *(n for s in chosen for n in s.nodes)])

    def build(s: ClusterScenario) -> str | None:
        try:
            s.build(cluster, s.namespace)
            return None
        except Exception as e:  # one scenario the controllers did not answer in time: the others go on
            return f"{type(e).__name__}: {e}"

    with ThreadPoolExecutor(max_workers=8) as pool:
        outcomes = dict(zip([s.namespace for s in chosen], pool.map(build, chosen), strict=True))
    return {ns: why for ns, why in outcomes.items() if why is not None}


# kwok runs no container: one stdlib HTTP server in the test's network namespace answers the vLLM port of
# every pod IP as vLLM would, with our own fixture's answers (fixtures/healthy-k8s-vllm/vllm/): idle on
# port 8000, busy on BUSY_PORT (requests running, token counters moving at every read). /v1/models
# and the metrics' model_name carry the pod's own --served-model-name (MODELS: pod IP -> name).
STAND_IN_FIXTURE = REPO / "fixtures" / "healthy-k8s-vllm" / "vllm" / "llama-70b-7f8d9c6b5d-8q7hc"
STAND_IN = textwrap.dedent("""
    import json, re, sys, threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    stem, models_file, idle_port, busy_port = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    busy = [open(stem + ".metrics.txt").read(), open(stem + ".metrics.1.txt").read()]
    idle = re.sub(r"^(vllm:num_requests_(?:running|waiting)\\{[^}]*\\}) \\S+$", r"\\1 0.0", busy[0], flags=re.M)
    tokens = re.compile(r"^(vllm:(?:generation|prompt)_tokens_total\\{[^}]*\\}) (\\S+)$", re.M)
    listing = json.load(open(stem + ".models.json"))
    models = json.load(open(models_file))
    reads, lock = {}, threading.Lock()
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            pod_ip, port = self.connection.getsockname()[:2]
            model = models.get(pod_ip, "llama-70b")
            if self.path == "/metrics":
                with lock:
                    reads[pod_ip] = n = reads.get(pod_ip, 0) + 1
                if port == idle_port:
                    text = idle
                else:
                    text = tokens.sub(lambda m: f"{m.group(1)} {float(m.group(2)) + 1000 * n}", busy[n > 1])
                body = text.replace('model_name="llama-70b"', f'model_name="{model}"').encode()
                kind = "text/plain; version=0.0.4; charset=utf-8"
            elif self.path == "/health":
                body, kind = b"", "text/plain"
            elif self.path == "/v1/models":
                body = json.dumps(dict(listing, data=[dict(listing["data"][0], id=model)])).encode()
                kind = "application/json"
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
    servers = [ThreadingHTTPServer(("0.0.0.0", p), Handler) for p in (idle_port, busy_port)]
    threading.Thread(target=servers[1].serve_forever, daemon=True).start()
    servers[0].serve_forever()
""")


@contextmanager
def vllm_stand_in(cluster: ControlPlane, chosen: list[ClusterScenario]) -> Iterator[None]:
    """The stand-in above, for the pods of `chosen` as they are now; answering through the pod proxy."""
    with tempfile.TemporaryDirectory() as tmp:
        models = {}
        for s in chosen:
            for pod in get(cluster, "pods", "-n", s.namespace)["items"]:
                args = [a for c in pod["spec"]["containers"] for a in c.get("args") or []]
                if pod["status"].get("podIP") and "--served-model-name" in args:
                    models[pod["status"]["podIP"]] = args[args.index("--served-model-name") + 1]
        (Path(tmp) / "models.json").write_text(json.dumps(models))
        (Path(tmp) / "stand_in.py").write_text(STAND_IN)
        server = subprocess.Popen(["ip", "netns", "exec", cluster.network.name, sys.executable, f"{tmp}/stand_in.py",
                                   str(STAND_IN_FIXTURE), f"{tmp}/models.json", "8000", str(BUSY_PORT)],
                                  start_new_session=True)  # fmt: skip
        try:
            wait_for("the vLLM stand-in listening", lambda: _answers(cluster, server), timeout_s=30)
            yield
        finally:
            stop_process_group(server, 5)


def _answers(cluster: ControlPlane, server: subprocess.Popen) -> bool:
    if server.poll() is not None:
        raise RuntimeError(f"the vLLM stand-in exited {server.returncode}")
    probe = ["ip", "netns", "exec", cluster.network.name, sys.executable, "-c",
             "import socket; socket.create_connection(('127.0.0.1', 8000), 2).close()"]  # fmt: skip
    return subprocess.run(probe, capture_output=True, timeout=30, check=False).returncode == 0


def running(cluster: ControlPlane, ns: str, app: str, count: int = 1) -> None:
    wait_for(f"{count} {app} pod(s) running in {ns}",
             lambda: sum(p["status"].get("phase") == "Running" and bool(p["status"].get("podIP"))
                         for p in pods(cluster, ns, app)) >= count)  # fmt: skip


def scheduling_refused(cluster: ControlPlane, ns: str, words: str) -> None:
    wait_for(f"the scheduler's FailedScheduling in {ns} ({words})",
             lambda: any(words in e["message"] for e in failed_scheduling(cluster, ns)))  # fmt: skip


def set_container_status(cluster: ControlPlane, ns: str, app: str, status: dict, *, ready: bool = False) -> None:
    """What a kubelet would write of a container that cannot run (kwok runs none): each running pod of
    `app` gets `status` (state, lastState, restartCount) for its container, and Ready as given. kwok's
    stages leave a Running pod's status alone, so the patch stays."""
    running(cluster, ns, app)
    for pod in pods(cluster, ns, app):
        container = pod["spec"]["containers"][0]
        condition = "True" if ready else "False"
        now = pod["status"]["startTime"]
        conditions = [{"type": t, "status": condition, "lastTransitionTime": now} for t in ("Ready", "ContainersReady")]
        patch = {"status": {
            "conditions": [*conditions, {"type": "PodScheduled", "status": "True", "lastTransitionTime": now}],
            "containerStatuses": [{"name": container["name"], "image": container["image"], "imageID": "",
                                   "ready": ready, "restartCount": 0, "started": False, **status}],
        }}  # fmt: skip
        cluster.kubectl("patch", "pod", pod["metadata"]["name"], "-n", ns, "--subresource=status", "--type=merge",
                        "-p", json.dumps(patch))  # fmt: skip


def _serving(ns: str, name: str = "qwen", *, gpus: int = 1, replicas: int = 1, port: int = 8000,
             product: GpuProduct = H100) -> dict:  # fmt: skip
    deployment = vllm_deployment(name, ns, gpus=gpus, tolerate=True, replicas=replicas, product=product)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["args"] = [*container["args"][:-1], str(port)]  # --port
    container["ports"] = [{"name": "http", "containerPort": port}]
    return deployment


@scenario("healthy", "one vLLM server behind its Service and Ingress, idle", None)
def build_healthy(cluster: ControlPlane, ns: str) -> None:
    ingress = _ingress(ns, "qwen", "qwen")
    apply(cluster, namespace(ns), _serving(ns), service("qwen", ns), ingress)
    running(cluster, ns, "qwen")


@scenario("healthy-busy", "three vLLM replicas serving requests, with a fine-tuning job beside them", None, busy=True)
def build_healthy_busy(cluster: ControlPlane, ns: str) -> None:
    svc = service("llama", ns)
    svc["spec"]["ports"][0]["port"] = BUSY_PORT
    apply(cluster, namespace(ns), _serving(ns, "llama", replicas=3, port=BUSY_PORT), svc,
          _ingress(ns, "llama", "llama"), training_deployment("finetune", ns, gpus=2))  # fmt: skip
    running(cluster, ns, "llama", 3)
    running(cluster, ns, "finetune")


def _ingress(ns: str, name: str, backend: str) -> dict:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"rules": [{"host": f"{name}.example.internal", "http": {"paths": [
            {"path": "/v1", "pathType": "Prefix", "backend": {"service": {"name": backend, "port": {"name": "http"}}}},
        ]}}]},
    }  # fmt: skip


@scenario("svc-selector", "the Service selects app=qwen-chat, the pods are app=qwen", "K8S-302", ("qwen-chat",))
def build_service_selector(cluster: ControlPlane, ns: str) -> None:
    svc = service("qwen-chat", ns)
    apply(cluster, namespace(ns), _serving(ns), svc)
    running(cluster, ns, "qwen")


@scenario("target-port", 'the Service\'s targetPort "api" is no port of its pods (they name "http")', "K8S-303",
          ("port", "api"))  # fmt: skip
def build_target_port(cluster: ControlPlane, ns: str) -> None:
    svc = service("qwen", ns)
    svc["spec"]["ports"][0]["targetPort"] = "api"
    apply(cluster, namespace(ns), _serving(ns), svc)
    running(cluster, ns, "qwen")
    wait_for("the Endpoints object", lambda: get(cluster, "endpoints", "-n", ns)["items"])


@scenario("weekend", "the vLLM Deployment behind the Service was scaled from 1 replica to 0", "K8S-304", ("scale",))
def build_scaled_to_zero(cluster: ControlPlane, ns: str) -> None:
    apply(cluster, namespace(ns), _serving(ns), service("qwen", ns))
    running(cluster, ns, "qwen")
    cluster.kubectl("scale", "deployment/qwen", "--replicas=0", "-n", ns)
    wait_for(f"no qwen pod left in {ns}", lambda: not pods(cluster, ns, "qwen"))


@scenario("ingress-backend", "the Ingress routes to Service qwen-chat, which does not exist", "K8S-320",
          ("qwen-chat",))  # fmt: skip
def build_ingress_backend(cluster: ControlPlane, ns: str) -> None:
    apply(cluster, namespace(ns), _serving(ns), service("qwen", ns), _ingress(ns, "qwen", "qwen-chat"))
    running(cluster, ns, "qwen")


@scenario("hpa-target", "the HPA scales Deployment qwen-chat, which does not exist", "K8S-313", ("qwen-chat",))
def build_hpa_target(cluster: ControlPlane, ns: str) -> None:
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "qwen", "namespace": ns},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "qwen-chat"},
            "minReplicas": 1,
            "maxReplicas": 4,
            "metrics": [{"type": "Resource",
                         "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}],
        },
    }  # fmt: skip
    apply(cluster, namespace(ns), _serving(ns), service("qwen", ns), hpa)
    running(cluster, ns, "qwen")

    def unable() -> bool:
        conditions = get(cluster, "hpa", "qwen", "-n", ns).get("status", {}).get("conditions") or []
        return any(c["type"] == "AbleToScale" and c["status"] == "False" for c in conditions)

    wait_for("the HPA controller's AbleToScale False", unable, timeout_s=90)


@scenario("pvc-storageclass", 'the model cache claim asks for StorageClass "premium-rwo", which does not exist',
          "K8S-506", ("premium-rwo",))  # fmt: skip
def build_pvc_storageclass(cluster: ControlPlane, ns: str) -> None:
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "model-cache", "namespace": ns},
             "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "premium-rwo",
                      "resources": {"requests": {"storage": "200Gi"}}}}  # fmt: skip
    deployment = _serving(ns)
    template = deployment["spec"]["template"]["spec"]
    template["volumes"] = [{"name": "cache", "persistentVolumeClaim": {"claimName": "model-cache"}}]
    template["containers"][0]["volumeMounts"] = [{"name": "cache", "mountPath": "/root/.cache/huggingface"}]
    apply(cluster, namespace(ns), claim, deployment, service("qwen", ns))
    scheduling_refused(cluster, ns, "unbound")


@scenario(
    "too-large", "a vLLM replica asks for 16 GPUs, no node has more than 8", "K8S-102", ("insufficient nvidia.com/gpu",)
)
def build_too_large(cluster: ControlPlane, ns: str) -> None:
    apply(cluster, namespace(ns), vllm_deployment("llama-405b", ns, gpus=16, tolerate=True), service("llama-405b", ns))
    scheduling_refused(cluster, ns, "Insufficient nvidia.com/gpu")


H200_POOL = tuple(gpu_node(f"gpu-h200-pool-{i}", 8, H200) for i in (1, 2))


@scenario("cluster-full", "research jobs hold all 16 H200 GPUs; a new vLLM replica waits for 4", "K8S-101",
          ("insufficient nvidia.com/gpu",), nodes=H200_POOL)  # fmt: skip
def build_cluster_full(cluster: ControlPlane, ns: str) -> None:
    apply(cluster, namespace(ns), vllm_deployment("research", ns, gpus=8, tolerate=True, replicas=2, product=H200))
    running(cluster, ns, "research", 2)
    apply(cluster, vllm_deployment("llama-70b", ns, gpus=4, tolerate=True, product=H200), service("llama-70b", ns))
    scheduling_refused(cluster, ns, "Insufficient nvidia.com/gpu")


@scenario("taint", "a rollout dropped the GPU toleration: the new replica waits on the nodes' taint", "K8S-104",
          ("untolerated taint",))  # fmt: skip
def build_taint(cluster: ControlPlane, ns: str) -> None:
    apply(cluster, namespace(ns), vllm_deployment("llama-70b", ns, gpus=4, tolerate=True), service("llama-70b", ns))
    running(cluster, ns, "llama-70b")
    apply(cluster, vllm_deployment("llama-70b", ns, gpus=4, tolerate=False))
    scheduling_refused(cluster, ns, "untolerated taint")


@scenario("node-selector", "the pods select nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB, no node has it",
          "K8S-105", ("node affinity/selector",))  # fmt: skip
def build_node_selector(cluster: ControlPlane, ns: str) -> None:
    a100 = GpuProduct("NVIDIA-A100-SXM4-80GB", 81920)
    apply(cluster, namespace(ns), vllm_deployment("qwen", ns, gpus=1, tolerate=True, product=a100), service("qwen", ns))
    scheduling_refused(cluster, ns, "didn't match Pod's node affinity/selector")


L40S = GpuProduct("NVIDIA-L40S", 46068)


@scenario("cordoned", "the only L40S node was cordoned: the second replica cannot go there", "K8S-111",
          ("unschedulable",), nodes=(gpu_node("gpu-l40s-1", 4, L40S),))  # fmt: skip
def build_cordoned(cluster: ControlPlane, ns: str) -> None:
    apply(cluster, namespace(ns), vllm_deployment("mistral", ns, gpus=2, tolerate=True, product=L40S),
          service("mistral", ns))  # fmt: skip
    running(cluster, ns, "mistral")
    cluster.kubectl("cordon", "gpu-l40s-1")
    cluster.kubectl("scale", "deployment", "mistral", "-n", ns, "--replicas=2")
    scheduling_refused(cluster, ns, "unschedulable")


@scenario("quota", "the namespace's GPU quota is spent by a fine-tuning job: the vLLM pods are refused", "K8S-116",
          ("exceeded quota",))  # fmt: skip
def build_quota(cluster: ControlPlane, ns: str) -> None:
    refuse_by_quota(cluster, ns, gpus=2)  # other scenarios' pods spread over the shared nodes: none has 8 free


L4 = GpuProduct("NVIDIA-L4", 23034)


@scenario("replicas-apart", "three replicas that must not share a node, on a pool of two L4 nodes", "K8S-106",
          ("anti-affinity",), nodes=tuple(gpu_node(f"gpu-l4-{i}", 4, L4) for i in (1, 2)))  # fmt: skip
def build_anti_affinity(cluster: ControlPlane, ns: str) -> None:
    deployment = vllm_deployment("gemma", ns, gpus=1, tolerate=True, replicas=3, product=L4)
    apart = {"labelSelector": {"matchLabels": {"app": "gemma"}}, "topologyKey": "kubernetes.io/hostname"}
    required = {"requiredDuringSchedulingIgnoredDuringExecution": [apart]}
    deployment["spec"]["template"]["spec"]["affinity"] = {"podAntiAffinity": required}
    apply(cluster, namespace(ns), deployment, service("gemma", ns))
    scheduling_refused(cluster, ns, "anti-affinity")


@scenario("limitrange", "a LimitRange caps a container at 32Gi of memory, the vLLM pods ask for 64Gi", "K8S-507",
          ("maximum memory usage",))  # fmt: skip
def build_limitrange(cluster: ControlPlane, ns: str) -> None:
    limits = {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "per-container", "namespace": ns},
              "spec": {"limits": [{"type": "Container", "max": {"memory": "32Gi"}}]}}  # fmt: skip
    deployment = _serving(ns)
    deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] = "64Gi"
    apply(cluster, namespace(ns), limits)
    apply(cluster, deployment, service("qwen", ns))

    def refused() -> bool:
        events = get(cluster, "events", "-n", ns, "--field-selector", "reason=FailedCreate")["items"]
        return any("maximum memory usage per Container" in e["message"] for e in events)

    wait_for("the ReplicaSet's FailedCreate (LimitRange)", refused)


@scenario(
    "crashloop", "the vLLM container exits at start and restarts in a loop", "K8S-213", ("restarting failed container",)
)
def build_crashloop(cluster: ControlPlane, ns: str) -> None:
    apply(cluster, namespace(ns), _serving(ns), service("qwen", ns))
    pod = pods(cluster, ns, "qwen") or [{"metadata": {"name": "qwen"}}]
    name = pod[0]["metadata"]["name"]
    set_container_status(cluster, ns, "qwen", {
        "restartCount": 14,
        "state": {"waiting": {"reason": "CrashLoopBackOff",
                              "message": f"back-off 5m0s restarting failed container=vllm pod={name}_{ns}"}},
        "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": "2026-12-01T14:15:31Z",
                                     "finishedAt": "2026-12-01T14:15:38Z"}},
    })  # fmt: skip


@scenario("image-pull", "the image tag vllm/vllm-openai:v0.10.9 does not exist", "K8S-211", ("v0.10.9",))
def build_image_pull(cluster: ControlPlane, ns: str) -> None:
    deployment = _serving(ns)
    deployment["spec"]["template"]["spec"]["containers"][0]["image"] = "vllm/vllm-openai:v0.10.9"
    apply(cluster, namespace(ns), deployment, service("qwen", ns))
    set_container_status(cluster, ns, "qwen", {
        "state": {"waiting": {"reason": "ImagePullBackOff",
                              "message": 'Back-off pulling image "vllm/vllm-openai:v0.10.9"'}},
    })  # fmt: skip


@scenario("missing-secret", 'the pods read HF_TOKEN from Secret "hf-token", which does not exist', "K8S-221",
          ("hf-token",))  # fmt: skip
def build_missing_secret(cluster: ControlPlane, ns: str) -> None:
    deployment = _serving(ns)
    deployment["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}}]  # fmt: skip
    apply(cluster, namespace(ns), deployment, service("qwen", ns))
    set_container_status(cluster, ns, "qwen", {
        "state": {"waiting": {"reason": "CreateContainerConfigError", "message": 'secret "hf-token" not found'}},
    })  # fmt: skip


@scenario("memory-limit", "the vLLM container is killed at its 16Gi memory limit while loading", "K8S-210",
          ("oomkilled",))  # fmt: skip
def build_oomkilled(cluster: ControlPlane, ns: str) -> None:
    deployment = _serving(ns)
    deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] = "16Gi"
    deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"] = "16Gi"
    apply(cluster, namespace(ns), deployment, service("qwen", ns))
    pod = pods(cluster, ns, "qwen") or [{"metadata": {"name": "qwen"}}]
    name = pod[0]["metadata"]["name"]
    set_container_status(cluster, ns, "qwen", {
        "restartCount": 6,
        "state": {"waiting": {"reason": "CrashLoopBackOff",
                              "message": f"back-off 5m0s restarting failed container=vllm pod={name}_{ns}"}},
        "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "startedAt": "2026-12-01T14:12:40Z",
                                     "finishedAt": "2026-12-01T14:13:58Z"}},
    })  # fmt: skip


@scenario("readiness-port", "the readiness probe asks port 8080, vLLM listens on 8000", "K8S-202", ("8080",))
def build_readiness_port(cluster: ControlPlane, ns: str) -> None:
    deployment = _serving(ns)
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"] = {
        "httpGet": {"path": "/health", "port": 8080}, "periodSeconds": 10}  # fmt: skip
    apply(cluster, namespace(ns), deployment, service("qwen", ns))
    set_container_status(cluster, ns, "qwen", {"state": {"running": {"startedAt": "2026-12-01T14:12:40Z"}}})
