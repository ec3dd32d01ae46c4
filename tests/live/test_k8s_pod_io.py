"""Logs, exec and the pod proxy through the REAL API server, for kwok pods (tests/live/k8s_cluster.py).

kwok answers the kubelet's API for the pods of the pod I/O namespace (PodIO): `pods/log` of the vLLM
container is the log of a REAL vLLM server (CPU build) that listens on that pod's IP inside the test's
network namespace, which is also where the API server's pod proxy takes `/metrics`; `pods/exec` of
`nvidia-smi` prints our H200 capture; `ray status` and `ray list` in the head pod of a RayCluster (its
CRD and objects as KubeRay's operator leaves them) run the real Ray CLI against the live Ray head.
`llmdiag collect` reads all of it as it would on a cluster.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from k8s_cluster import H200_CAPTURE, ControlPlane, cri_log_copy, wait_for
from k8s_scenarios import H200, apply, assert_only_test_addresses, get, gpu_node, namespace, service, vllm_deployment
from live_services import RayHead
from vllm_server import DEFAULT_MODEL, SCENARIOS, SERVED_MODEL_NAME, RunningServer, start_server

pytestmark = pytest.mark.live

REPO = Path(__file__).resolve().parents[2]
RAY_CLUSTER = "vllm-ray"
VLLM_PORT = 8000


def cpu_node(name: str) -> dict:
    resources = {"cpu": "32", "memory": "131072000Ki", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "kwok"},
        },  # fmt: skip
        "status": {"capacity": resources, "allocatable": resources},
    }


def kuberay_crd(kind: str, plural: str) -> dict:
    """A ray.io/v1 CRD as KubeRay's operator chart installs it, less its long schema (any spec is kept)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.ray.io"},
        "spec": {
            "group": "ray.io", "scope": "Namespaced",
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()},
            "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                          "schema": {"openAPIV3Schema": {"type": "object",
                                                         "x-kubernetes-preserve-unknown-fields": True}}}],
        },
    }  # fmt: skip


def ray_cluster(ns: str) -> dict:
    """RayCluster vllm-ray: a head that serves (its 2 GPUs come from the live head's --num-gpus=2)."""
    head = {
        "name": "ray-head",
        "image": "rayproject/ray:2.40.0",
        "resources": {"limits": {"cpu": "2", "memory": "8Gi"}},
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": RAY_CLUSTER, "namespace": ns},
        "spec": {"rayVersion": "2.40.0",
                 "headGroupSpec": {"rayStartParams": {"dashboard-host": "0.0.0.0", "num-gpus": "2"},
                                   "template": {"spec": {"containers": [head]}}},
                 "workerGroupSpecs": []},
    }  # fmt: skip


def ready_status(head_pod: dict) -> dict:
    """What KubeRay's operator writes once the head pod is Running and Ready."""
    now = head_pod["status"]["startTime"]
    return {"status": {
        "state": "ready", "desiredWorkerReplicas": 0, "availableWorkerReplicas": 0, "readyWorkerReplicas": 0,
        "head": {"podIP": head_pod["status"]["podIP"], "podName": head_pod["metadata"]["name"],
                 "serviceName": f"{RAY_CLUSTER}-head-svc"},
        "conditions": [
            {"type": "HeadPodReady", "status": "True", "reason": "HeadPodRunningAndReady", "message": "",
             "lastTransitionTime": now},
            {"type": "RayClusterProvisioned", "status": "True", "reason": "AllPodRunningAndReadyFirstTime",
             "message": "",
             "lastTransitionTime": now},
        ],
    }}  # fmt: skip


def ray_head_pod(ns: str) -> dict:
    """The head pod as KubeRay's operator creates it for RayCluster vllm-ray: its labels, its ports."""
    labels = {"ray.io/cluster": RAY_CLUSTER, "ray.io/node-type": "head", "ray.io/group": "headgroup",
              "ray.io/is-ray-node": "yes", "app.kubernetes.io/created-by": "kuberay-operator"}  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{RAY_CLUSTER}-head-x7k2p", "namespace": ns, "labels": labels},
        "spec": {
            "nodeSelector": {"type": "kwok"},
            "containers": [
                {
                    "name": "ray-head",
                    "image": "rayproject/ray:2.40.0",
                    "command": ["/bin/bash", "-lc", "--"],
                    "args": ["ulimit -n 65536; ray start --head --block --dashboard-host=0.0.0.0"],
                    "ports": [{"name": "gcs", "containerPort": 6379}, {"name": "dashboard", "containerPort": 8265}],
                }
            ],
        },  # fmt: skip
    }


def ray_head_service(ns: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"{RAY_CLUSTER}-head-svc", "namespace": ns, "labels": {"ray.io/cluster": RAY_CLUSTER}},
        "spec": {
            "selector": {"ray.io/cluster": RAY_CLUSTER, "ray.io/node-type": "head"},
            "ports": [{"name": "gcs", "port": 6379}, {"name": "dashboard", "port": 8265}],
        },  # fmt: skip
    }


def running_pod(cluster: ControlPlane, ns: str, selector: str) -> dict:
    def found() -> list[dict]:
        return [p for p in get(cluster, "pods", "-n", ns, "-l", selector)["items"]
                if p["status"].get("phase") == "Running" and p["status"].get("podIP")]  # fmt: skip

    wait_for(f"a running pod ({selector})", found)
    return found()[0]


@dataclass(frozen=True)
class PodIOScene:
    cluster: ControlPlane
    namespace: str
    vllm_pod: dict
    head_pod: dict
    server: RunningServer
    bundle: Path
    collect: subprocess.CompletedProcess

    def text(self, rel: str) -> str:
        return (self.bundle / rel).read_text()

    def sources(self) -> dict[str, dict]:
        return json.loads(self.text("manifest.json"))["sources"]


@pytest.fixture(scope="module")
def scene(
    vllm_cpu: None, control_plane: ControlPlane, ray_head: RayHead, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PodIOScene]:
    io = control_plane.pod_io
    ns = io.namespace
    apply(control_plane, kuberay_crd("RayCluster", "rayclusters"), kuberay_crd("RayService", "rayservices"))
    control_plane.kubectl(
        "wait", "--for=condition=Established", "crd/rayclusters.ray.io", "crd/rayservices.ray.io", "--timeout=60s"
    )
    args = ["--model", str(DEFAULT_MODEL), "--served-model-name", SERVED_MODEL_NAME, "--port", str(VLLM_PORT)]
    apply(control_plane, namespace(ns), gpu_node("gpu-h200-1", 1, H200), cpu_node("cpu-1"),
          vllm_deployment("tiny-llama", ns, gpus=1, tolerate=True, product=H200, args=args), service("tiny-llama", ns),
          ray_cluster(ns), ray_head_pod(ns), ray_head_service(ns))  # fmt: skip
    vllm_pod = running_pod(control_plane, ns, "app=tiny-llama")
    head_pod = running_pod(control_plane, ns, "ray.io/node-type=head")
    control_plane.kubectl("patch", "raycluster", RAY_CLUSTER, "-n", ns, "--subresource=status", "--type=merge",
                          "-p", json.dumps(ready_status(head_pod)))  # fmt: skip
    # kwok gives a node its address (where the API server reaches the kubelet for logs and exec) on its
    # first status update, which may come after the pods run: collect only once both have one
    for node in ("gpu-h200-1", "cpu-1"):
        wait_for(
            f"node {node}'s address", lambda node=node: get(control_plane, "node", node)["status"].get("addresses")
        )
    # and the endpoints controller, under load, may not yet have put the ready vLLM pod behind its Service
    for svc in ("tiny-llama",):
        wait_for(f"service {svc}'s ready endpoints",
                 lambda svc=svc: any(
                     s.get("addresses") for s in get(control_plane, "endpoints", svc, "-n", ns).get("subsets") or []
                 ))  # fmt: skip
    assert_only_test_addresses(control_plane)
    io.ray_address_file.write_text(ray_head.gcs_address)
    healthy = SCENARIOS["healthy"]  # a 1 GiB KV cache, as in the live vLLM tests
    server_log = io.workdir / "vllm-server.log"
    with (
        cri_log_copy(ray_head.temp_dir / "ray-start.log", io.container_log("ray-head")),
        cri_log_copy(server_log, io.container_log("vllm")),
        start_server(server_log, healthy.server_args, healthy.server_env, host=vllm_pod["status"]["podIP"],
                     port=VLLM_PORT, netns=control_plane.network.name) as server,
    ):  # fmt: skip
        bundle = tmp_path_factory.mktemp("pod-io") / "bundle"
        collect = subprocess.run(
            [sys.executable, "-m", "diag.cli", "collect", f"--kubeconfig={control_plane.kubeconfig}", "-n", ns,
             "--no-local-gpu", "--scrapes=2", "--scrape-interval=1", "--timeout=90", "--out", str(bundle)],
            cwd=REPO, capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        yield PodIOScene(control_plane, ns, vllm_pod, head_pod, server, bundle, collect)
    # leave the session's cluster as it was found, for the scenarios that count nodes and GPUs
    control_plane.kubectl("delete", "namespace", ns, "--wait=false")
    control_plane.kubectl("delete", "node", "gpu-h200-1", "cpu-1")
    control_plane.kubectl("delete", "crd", "rayclusters.ray.io", "rayservices.ray.io", "--wait=false")


def test_collect_read_every_pod_source(scene: PodIOScene) -> None:
    assert scene.collect.returncode == 0, scene.collect.stderr[-3000:]
    sources = scene.sources()
    assert sources["k8s/rayclusters.json"]["status"] == "ok", sources["k8s/rayclusters.json"]
    failed = {name: s["detail"] for name, s in sources.items() if s["status"] == "failed"}
    # the dashboard is not behind the head pod's address: collect falls back to `ray` in the pod
    assert set(failed) <= {"ray/dashboard"}, json.dumps(failed, indent=1)


def test_ray_head_log_is_the_real_heads_output(scene: PodIOScene, ray_head: RayHead) -> None:
    logs = list((scene.bundle / "k8s" / "logs").glob(f"{scene.namespace}.{scene.head_pod['metadata']['name']}*.log"))
    assert len(logs) == 1, sorted(p.name for p in (scene.bundle / "k8s" / "logs").iterdir())
    assert "Ray runtime started" in logs[0].read_text()


def test_nvidia_smi_exec_returns_the_h200_capture(scene: PodIOScene) -> None:
    node = scene.vllm_pod["spec"]["nodeName"]
    xml = [p for p in (scene.bundle / "gpu").glob("*.xml") if node in p.name]
    assert len(xml) == 1, sorted(p.name for p in (scene.bundle / "gpu").iterdir())
    assert xml[0].read_text() == H200_CAPTURE.with_suffix(".xml").read_text()
    assert xml[0].with_suffix(".csv").read_text() == H200_CAPTURE.with_suffix(".csv").read_text()


def test_pod_log_is_the_real_servers_log(scene: PodIOScene) -> None:
    logs = list((scene.bundle / "k8s" / "logs").glob(f"{scene.namespace}.{scene.vllm_pod['metadata']['name']}*.log"))
    assert len(logs) == 1, sorted(p.name for p in (scene.bundle / "k8s" / "logs").iterdir())
    served = logs[0].read_text()
    assert "Starting vLLM API server" in served or "Application startup complete" in served, served[-2000:]
    assert served.splitlines()[-1] in scene.server.log_path.read_text()


def test_metrics_come_through_the_pod_proxy_from_the_real_server(scene: PodIOScene) -> None:
    sources = scene.sources()
    metrics = {name: s for name, s in sources.items() if name.startswith("vllm/") and ".metrics" in name}
    assert metrics and all(s["status"] == "ok" for s in metrics.values()), metrics
    texts = [p.read_text() for p in (scene.bundle / "vllm").glob("*.metrics*.txt")]
    assert texts and all(f'model_name="{SERVED_MODEL_NAME}"' in t for t in texts)


def test_ray_cli_runs_in_the_head_pod_against_the_live_head(scene: PodIOScene, ray_head: RayHead) -> None:
    sources = scene.sources()
    assert sources["ray/status.txt"]["status"] == "ok", sources["ray/status.txt"]
    assert scene.head_pod["metadata"]["name"] in sources["ray/status.txt"]["detail"]
    assert "Node status" in scene.text("ray/status.txt")
    nodes = json.loads(scene.text("ray/nodes.json"))
    assert [n["node_ip"] for n in nodes] == ["127.0.0.1"], nodes


def test_the_bundle_reads_as_one_joined_snapshot(scene: PodIOScene) -> None:
    """The live Ray head holds an actor and a placement group asking for 4 GPUs on nodes of 2
    (ray_driver.py): read through `kubectl exec`, that is the verdict, as with the dashboard."""
    done = subprocess.run([sys.executable, "-m", "diag.cli", "analyze", str(scene.bundle), "--output=json"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)  # fmt: skip
    report = json.loads(done.stdout)
    assert report["verdict"]["gaps"] == [], report["verdict"]
    assert (report["verdict"]["layer"], report["verdict"]["rule"]) == ("ray", "RAY-102"), report["verdict"]
    fired = {f["rule"]: f for f in report["findings"]}
    assert "gpu4_actor_infeasible" in json.dumps(fired["RAY-102"]["evidence"])
    # the dashboard behind the head Service is not reachable here: said, and read around
    assert "read anyway: ray/actors.json" in json.dumps(fired["RAY-106"]["evidence"])
    # the RayCluster was listed and judged: KubeRay's own view is sound here
    assert {r: report["rules"][r]["status"] for r in ("K8S-401", "K8S-402")} == {
        "K8S-401": "silent",
        "K8S-402": "silent",
    }
    # the vLLM server, the GPU and the node joined: no finding about them
    assert not [f for f in report["findings"] if f["layer"] in ("vllm", "gpu")], report["findings"]


def test_exec_gives_what_the_packages_stream_gives(scene: PodIOScene) -> None:
    from kubernetes import client, config
    from kubernetes.stream import stream

    from diag.collect.kube import KubeAccess

    pod, argv = scene.vllm_pod["metadata"]["name"], ["nvidia-smi", "-q", "-x"]
    ours = KubeAccess(str(scene.cluster.kubeconfig)).exec_fixed(scene.namespace, pod, "vllm", argv, 30)
    api = client.CoreV1Api(config.new_client_from_config(str(scene.cluster.kubeconfig)))
    theirs = stream(api.connect_get_namespaced_pod_exec, pod, scene.namespace, container="vllm", command=argv,
                    stdout=True, stderr=True, stdin=False, tty=False)  # fmt: skip
    assert ours == theirs == H200_CAPTURE.with_suffix(".xml").read_text()


def test_exec_runs_as_the_impersonated_user(scene: PodIOScene) -> None:
    from diag.collect.kube import KubeAccess, KubeError

    pod = scene.vllm_pod["metadata"]["name"]
    kube = KubeAccess(str(scene.cluster.kubeconfig), impersonate_user="jane")
    with pytest.raises(KubeError, match=r'User "jane" cannot (get|create) resource "pods/exec"') as refused:
        kube.exec_fixed(scene.namespace, pod, "vllm", ["nvidia-smi", "-q", "-x"], 30)
    assert refused.value.status == 403
