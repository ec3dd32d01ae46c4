"""Objects and steps of the live Kubernetes scenarios (tests/live/test_k8s_*.py, ci/k8s/record.py): GPU
nodes as the NVIDIA GPU operator leaves them, vLLM Deployments and Services as people write them, and
the kubectl calls that apply them and wait for the real controllers."""

from __future__ import annotations

import ipaddress
import json
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from k8s_cluster import ControlPlane, wait_for

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


def pods(cluster: ControlPlane, ns: str, app: str) -> list[dict]:
    return get(cluster, "pods", "-n", ns, "-l", f"app={app}")["items"]


def failed_scheduling(cluster: ControlPlane, ns: str) -> list[dict]:
    events = get(cluster, "events", "-n", ns, "--field-selector", "reason=FailedScheduling")["items"]
    return [e for e in events if e.get("source", {}).get("component") == "default-scheduler"
            or e.get("reportingComponent") == "default-scheduler"]  # fmt: skip


def triage(cluster: ControlPlane, ns: str, kubeconfig: Path | None = None) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "diag.cli", "triage", f"--kubeconfig={kubeconfig or cluster.kubeconfig}",
         "-n", ns, "--no-local-gpu", "--scrapes=1", "--timeout=60", "--output=json"],
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


def refuse_by_quota(cluster: ControlPlane, ns: str) -> None:
    """The namespace's ResourceQuota allows 8 GPUs; a fine-tuning job holds all 8, then the llama-70b
    vLLM Deployment (4 GPUs) and its Service arrive: the API server refuses every pod the ReplicaSet
    controller creates for it ('exceeded quota'), so none exists (fixtures/k8s-quota-exceeded)."""
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpus", "namespace": ns},
             "spec": {"hard": {"requests.nvidia.com/gpu": "8"}}}  # fmt: skip
    apply(cluster, namespace(ns), quota)
    wait_for(
        "the quota's status", lambda: get(cluster, "resourcequota", "gpus", "-n", ns).get("status", {}).get("hard")
    )
    apply(cluster, training_deployment("finetune", ns, gpus=8))
    wait_for(
        "the fine-tuning pod running",
        lambda: [p["status"].get("phase") for p in pods(cluster, ns, "finetune")] == ["Running"],
    )
    apply(cluster, vllm_deployment("llama-70b", ns, gpus=4, tolerate=True), service("llama-70b", ns))

    def refused() -> bool:
        deployment = get(cluster, "deployment", "llama-70b", "-n", ns)
        return any(
            c["type"] == "ReplicaFailure" and c["status"] == "True" for c in deployment["status"].get("conditions", [])
        )

    wait_for("the llama-70b Deployment's ReplicaFailure (exceeded quota)", refused)


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
