"""Parsers for `kubectl get <kind> -o json`. Test objects follow the Kubernetes / KubeRay API shapes;
messages follow the scheduler and kubelet wording in shared/reference/k8s/."""

import copy
import json
import re
from pathlib import Path

import pytest

from diag.core.errors import ParseError
from diag.parsers import kubernetes
from diag.snapshot.model import ConfigRef, Container, Event, Pod, Probe, XidLine


def as_list(*items: dict) -> str:
    """What `kubectl get ... -o json` prints for several objects."""
    return json.dumps(
        {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": list(items)}, indent=4
    )


def one_line_error(parse, text, *args) -> str:
    with pytest.raises(ParseError) as err:
        parse(text, *args)
    message = str(err.value)
    assert message and "\n" not in message
    return message


# --------------------------------------------------------------------------- pods

VLLM_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "llama-8b-7d9c6b5f4-x2x9k",
        "namespace": "llm",
        "uid": "5f0c2a6e-3f1e-4b8e-9a57-0d8f2c1b7e11",
        "labels": {"app": "llama-8b", "pod-template-hash": "7d9c6b5f4"},
        "annotations": {"kubectl.kubernetes.io/restartedAt": "2025-08-12T05:40:00Z"},
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "blockOwnerDeletion": True,
                "controller": True,
                "kind": "ReplicaSet",
                "name": "llama-8b-7d9c6b5f4",
                "uid": "c1b2d3e4-0000-4000-8000-000000000001",
            }
        ],
    },
    "spec": {
        "nodeName": "gpu-node-1",
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {
                "effect": "NoExecute",
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "tolerationSeconds": 300,
            },
        ],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["0"]}]}
                    ]
                }
            }
        },
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "llama-8b"}},
            }
        ],
        "volumes": [
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
            {"name": "models", "persistentVolumeClaim": {"claimName": "hf-cache"}},
        ],
        "containers": [
            {
                "name": "vllm",
                "image": "vllm/vllm-openai:v0.10.1",
                "command": ["vllm", "serve"],
                "args": [
                    "meta-llama/Llama-3.1-8B-Instruct",
                    "--max-model-len",
                    "8192",
                    "--gpu-memory-utilization",
                    "0.95",
                ],
                "env": [
                    {"name": "VLLM_LOGGING_LEVEL", "value": "INFO"},
                    {"name": "EMPTY"},
                    {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}},
                ],
                "ports": [
                    {"name": "http", "containerPort": 8000, "protocol": "TCP"},
                    {"containerPort": 9090, "protocol": "TCP"},
                ],
                "resources": {
                    "limits": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"},
                    "requests": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": "1"},
                },
                "livenessProbe": {
                    "httpGet": {"path": "/health", "port": 8000, "scheme": "HTTP"},
                    "initialDelaySeconds": 60,
                    "periodSeconds": 10,
                    "timeoutSeconds": 5,
                    "failureThreshold": 3,
                    "successThreshold": 1,
                },
                "readinessProbe": {"exec": {"command": ["curl", "-sf", "localhost:8000/health"]}, "periodSeconds": 5},
                "startupProbe": {"tcpSocket": {"port": "http"}, "failureThreshold": 60, "periodSeconds": 10},
            }
        ],
    },
    "status": {
        "phase": "Running",
        "podIP": "10.244.1.18",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2025-08-12T05:45:20Z"},
            {
                "type": "Ready",
                "status": "False",
                "reason": "ContainersNotReady",
                "message": "containers with unready status: [vllm]",
                "lastTransitionTime": "2025-08-12T06:42:07Z",
            },
        ],
        "containerStatuses": [
            {
                "name": "vllm",
                "ready": False,
                "restartCount": 16,
                "image": "docker.io/vllm/vllm-openai:v0.10.1",
                "state": {
                    "waiting": {
                        "reason": "CrashLoopBackOff",
                        "message": "back-off 5m0s restarting failed container=vllm "
                        "pod=llama-8b-7d9c6b5f4-x2x9k_llm(5f0c2a6e-3f1e-4b8e-9a57-0d8f2c1b7e11)",
                    }
                },
                "lastState": {
                    "terminated": {
                        "exitCode": 137,
                        "reason": "OOMKilled",
                        "startedAt": "2025-08-12T06:42:07Z",
                        "finishedAt": "2025-08-12T06:42:07Z",
                        "containerID": "containerd://58906e3c",
                    }
                },
            }
        ],
    },
}

PENDING_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "llama-70b-0",
        "namespace": "llm",
        "labels": {"app": "llama-70b"},
        "ownerReferences": [{"kind": "StatefulSet", "name": "llama-70b", "controller": True}],
    },
    "spec": {
        "containers": [
            {
                "name": "vllm",
                "image": "vllm/vllm-openai:v0.10.1",
                "resources": {"limits": {"nvidia.com/gpu": "8"}, "requests": {"nvidia.com/gpu": "8"}},
            }
        ]
    },
    "status": {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are "
                "available: 3 No preemption victims found for incoming pod.",
            }
        ],
    },
}

EVICTED_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "embedder-5c7d8-abcde", "namespace": "llm"},
    "spec": {"nodeName": "cpu-node-2", "containers": [{"name": "embedder", "image": "embedder:1"}]},
    "status": {
        "phase": "Failed",
        "reason": "Evicted",
        "message": "The node was low on resource: memory. Threshold quantity: 100Mi, available: 91604Ki. ",
    },
}

RAY_WORKER_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "llm-cluster-gpu-group-worker-4xk2p",
        "namespace": "ray",
        "labels": {
            "ray.io/cluster": "llm-cluster",
            "ray.io/node-type": "worker",
            "ray.io/group": "gpu-group",
            "ray.io/is-ray-node": "yes",
        },
        "ownerReferences": [
            {
                "apiVersion": "ray.io/v1",
                "kind": "RayCluster",
                "name": "llm-cluster",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    },
    "spec": {
        "nodeName": "gpu-node-2",
        "initContainers": [
            {"name": "wait-gcs-ready", "image": "rayproject/ray:2.46.0", "command": ["/bin/bash", "-lc", "--"]}
        ],
        "containers": [
            {
                "name": "ray-worker",
                "image": "rayproject/ray:2.46.0",
                "resources": {"limits": {"nvidia.com/mig-3g.40gb": "1"}},
            }
        ],
    },
    "status": {
        "phase": "Running",
        "initContainerStatuses": [
            {
                "name": "wait-gcs-ready",
                "ready": True,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": "2025-08-12T05:45:21Z"}},
            }
        ],
        "containerStatuses": [
            {
                "name": "ray-worker",
                "ready": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": "2025-08-12T05:46:02Z"}},
                "lastState": {},
            }
        ],
    },
}


def test_pod_spec_fields_and_statuses_are_merged():
    vllm, pending, evicted, worker = kubernetes.parse_pods(as_list(VLLM_POD, PENDING_POD, EVICTED_POD, RAY_WORKER_POD))

    assert (vllm.namespace, vllm.name, vllm.key) == ("llm", "llama-8b-7d9c6b5f4-x2x9k", "llm/llama-8b-7d9c6b5f4-x2x9k")
    assert (vllm.owner_kind, vllm.owner_name) == ("ReplicaSet", "llama-8b-7d9c6b5f4")
    assert (vllm.node_name, vllm.phase, vllm.pod_ip) == ("gpu-node-1", "Running", "10.244.1.18")
    assert vllm.conditions["Ready"] == {
        "status": "False",
        "reason": "ContainersNotReady",
        "message": "containers with unready status: [vllm]",
    }
    assert vllm.conditions["PodScheduled"] == {"status": "True", "reason": None, "message": None}
    assert vllm.node_selector == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert vllm.tolerations[0] == {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    assert vllm.affinity == VLLM_POD["spec"]["affinity"]
    assert vllm.topology_spread_constraints[0]["topologyKey"] == "kubernetes.io/hostname"
    assert [v["name"] for v in vllm.volumes] == ["dshm", "models"]
    assert vllm.ray_cluster is None

    (c,) = vllm.containers
    assert c.command == ["vllm", "serve"] and c.args[0] == "meta-llama/Llama-3.1-8B-Instruct"
    assert c.env == {
        "VLLM_LOGGING_LEVEL": "INFO",
        "EMPTY": "",
        "HF_TOKEN": "<from:secretKeyRef>",
        "POD_IP": "<from:fieldRef>",
    }
    assert c.ports == {"http": 8000, "9090": 9090}
    assert c.limits["nvidia.com/gpu"] == "1" and c.requests["memory"] == "32Gi"
    assert (c.ready, c.restart_count, c.state, c.state_reason) == (False, 16, "waiting", "CrashLoopBackOff")
    assert c.state_message.startswith("back-off 5m0s restarting failed container=vllm")
    assert (c.last_terminated_reason, c.last_exit_code, c.last_finished_at) == (
        "OOMKilled",
        137,
        "2025-08-12T06:42:07Z",
    )
    assert c.started_at is None  # waiting: not running now

    liveness, readiness, startup = c.probes
    assert (liveness.kind, liveness.handler, liveness.path, liveness.port) == ("liveness", "httpGet", "/health", 8000)
    assert (
        liveness.initial_delay_seconds,
        liveness.period_seconds,
        liveness.timeout_seconds,
        liveness.failure_threshold,
    ) == (60, 10, 5, 3)
    assert (readiness.kind, readiness.handler, readiness.port, readiness.period_seconds) == (
        "readiness",
        "exec",
        None,
        5,
    )
    assert (readiness.timeout_seconds, readiness.failure_threshold) == (1, 3)  # the API's defaults
    assert (startup.kind, startup.handler, startup.port, startup.failure_threshold) == (
        "startup",
        "tcpSocket",
        "http",
        60,
    )

    assert pending.node_name is None and pending.phase == "Pending"
    assert pending.conditions["PodScheduled"]["reason"] == "Unschedulable"
    assert "Insufficient nvidia.com/gpu" in pending.conditions["PodScheduled"]["message"]
    assert (pending.owner_kind, pending.owner_name) == ("StatefulSet", "llama-70b")
    (waiting,) = pending.containers
    assert (waiting.ready, waiting.state, waiting.restart_count, waiting.last_exit_code) == (None, None, 0, None)
    assert waiting.probes == [] and waiting.env == {} and waiting.ports == {}

    assert (evicted.phase, evicted.reason) == ("Failed", "Evicted")
    assert evicted.message.startswith("The node was low on resource: memory.")
    assert evicted.owner_kind is None and evicted.uid == ""

    assert (worker.ray_cluster, worker.ray_node_type, worker.ray_group) == ("llm-cluster", "worker", "gpu-group")
    assert (worker.owner_kind, worker.owner_name) == ("RayCluster", "llm-cluster")
    (init,) = worker.init_containers
    assert (init.name, init.state, init.state_reason, init.ready) == ("wait-gcs-ready", "terminated", "Completed", True)
    (ray,) = worker.containers
    assert (ray.state, ray.started_at, ray.ready, ray.last_terminated_reason) == (
        "running",
        "2025-08-12T05:46:02Z",
        True,
        None,
    )
    assert (ray.finished_at, ray.last_finished_at) == (None, None)
    assert ray.limits == {"nvidia.com/mig-3g.40gb": "1"}


def test_a_single_pod_object_and_empty_list():
    (pod,) = kubernetes.parse_pods(json.dumps(VLLM_POD))
    assert pod.name == "llama-8b-7d9c6b5f4-x2x9k"
    assert kubernetes.parse_pods(as_list()) == []
    assert kubernetes.parse_pods("\ufeff" + as_list()) == []
    # the API server's own answer: kind PodList, items without kind
    bare = {k: v for k, v in PENDING_POD.items() if k not in ("kind", "apiVersion")}
    (pod,) = kubernetes.parse_pods(json.dumps({"kind": "PodList", "apiVersion": "v1", "items": [bare]}))
    assert pod.name == "llama-70b-0"


def test_first_owner_when_none_is_the_controller():
    pod = copy.deepcopy(EVICTED_POD)
    pod["metadata"]["ownerReferences"] = [{"kind": "Job", "name": "batch-1"}, {"kind": "Workflow", "name": "wf"}]
    (parsed,) = kubernetes.parse_pods(as_list(pod))
    assert (parsed.owner_kind, parsed.owner_name) == ("Job", "batch-1")


def _broken(path: list, value) -> str:
    pod = copy.deepcopy(VLLM_POD)
    target = pod
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return as_list(pod)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"apiVersion": "v1", "kind": "List", "items": [{"kind": "Pod", "metadata": {"na', "not valid JSON"),
        ("", "empty file"),
        ("[]", "expected a Pod list (kubectl get -o json), found a list"),
        ('{"kind": "ServiceList", "items": []}', "expected a Pod list, found a ServiceList"),
        (json.dumps({"kind": "Service", "metadata": {"name": "x"}}), "expected a Pod list, found a Service"),
        (as_list({"kind": "Node", "metadata": {"name": "n"}}), "items[0] is a Node, not a Pod"),
        ('{"kind": "List", "items": {"a": 1}}', "items: expected a list, found an object"),
        (as_list({"kind": "Pod", "metadata": {"namespace": "x"}}), "items[0]: metadata.name is missing"),
        (_broken(["metadata", "namespace"], KeyError), "pod llama-8b-7d9c6b5f4-x2x9k: metadata.namespace is missing"),
        (
            _broken(["spec", "containers", 0, "ports", 0, "containerPort"], "8000"),
            "pod llm/llama-8b-7d9c6b5f4-x2x9k: spec.containers[0].ports[0].containerPort: "
            "expected an integer, found a string",
        ),
        (_broken(["metadata", "labels"], ["app"]), "metadata.labels: expected an object, found a list"),
        (
            _broken(["status", "containerStatuses", 0, "restartCount"], "16"),
            "status.containerStatuses[0].restartCount: expected an integer, found a string",
        ),
        (_broken(["status", "containerStatuses", 0, "ready"], "false"), "ready: expected a boolean, found a string"),
        (
            _broken(["spec", "containers", 0, "livenessProbe"], {"periodSeconds": 10}),
            "spec.containers[0].livenessProbe: no handler",
        ),
        (
            _broken(["spec", "containers", 0, "resources", "limits", "memory"], "64GB"),
            "spec.containers[0].resources.limits.memory: not a resource quantity: '64GB'",
        ),
        (
            _broken(["spec", "containers", 0, "resources", "limits", "nvidia.com/gpu"], "0.5"),
            "nvidia.com/gpu: '0.5' is not a whole number of devices",
        ),
        (
            _broken(["spec", "containers", 0, "args"], "--port 8000"),
            "spec.containers[0].args: expected a list of strings",
        ),
        (
            _broken(["spec", "containers", 0, "command"], ["vllm", 1]),
            "spec.containers[0].command[1]: expected a string, found an integer",
        ),
        (_broken(["spec", "containers", 0, "env", 0, "name"], None), "env[0].name: expected a string, found null"),
        (
            _broken(["spec", "containers", 0, "livenessProbe", "httpGet", "port"], True),
            "port: expected a number or a name",
        ),
        (_broken(["status", "conditions"], "Ready"), "status.conditions: expected a list, found a string"),
        (
            _broken(["spec", "tolerations"], [["nvidia.com/gpu"]]),
            "spec.tolerations[0]: expected an object, found a list",
        ),
    ],
)
def test_bad_pod_files_are_one_line_parse_errors(text, expected):
    assert expected in one_line_error(kubernetes.parse_pods, text)


# --------------------------------------------------------------------------- events

CORE_EVENTS = [
    {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "llama-70b-0.17e9a2b3c4d5e6f7", "namespace": "llm"},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "llama-70b-0",
            "namespace": "llm",
            "uid": "8209d63f-aa89-450d-9813-d555ddcaa175",
        },
        "reason": "FailedScheduling",
        "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: "
        "3 No preemption victims found for incoming pod.",
        "type": "Warning",
        "count": 70,
        "firstTimestamp": "2025-08-12T00:02:00Z",
        "lastTimestamp": "2025-08-12T05:29:00Z",
        "source": {"component": "default-scheduler"},
        "reportingComponent": "default-scheduler",
        "reportingInstance": "",
    },
    {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "llama-8b-7d9c6b5f4-x2x9k.17e9a2b3c4d5e6f8", "namespace": "llm"},
        "involvedObject": {
            "kind": "Pod",
            "name": "llama-8b-7d9c6b5f4-x2x9k",
            "namespace": "llm",
            "fieldPath": "spec.containers{vllm}",
        },
        "reason": "Unhealthy",
        "message": 'Liveness probe failed: Get "http://10.244.1.18:8000/health": '
        "dial tcp 10.244.1.18:8000: connect: connection refused",
        "type": "Warning",
        "count": 3,
        "lastTimestamp": "2025-08-12T06:41:57Z",
        "source": {"component": "kubelet", "host": "gpu-node-1"},
    },
    {
        # recorded through the events.k8s.io API, read back as core/v1: no count, a series instead
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "llama-8b-7d9c6b5f4-x2x9k.17e9a2b3c4d5e6f9", "namespace": "llm"},
        "involvedObject": {"kind": "Pod", "name": "llama-8b-7d9c6b5f4-x2x9k", "namespace": "llm"},
        "reason": "BackOff",
        "message": "Back-off restarting failed container vllm in pod "
        "llama-8b-7d9c6b5f4-x2x9k_llm(5f0c2a6e-3f1e-4b8e-9a57-0d8f2c1b7e11)",
        "type": "Warning",
        "eventTime": "2025-08-12T05:46:00.000000Z",
        "series": {"count": 256, "lastObservedTime": "2025-08-12T06:44:41.000000Z"},
        "reportingComponent": "kubelet",
        "reportingInstance": "gpu-node-1",
        "source": {},
    },
    {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "gpu-node-3.17e9a2b3c4d5e6fa", "namespace": "default"},
        "involvedObject": {"kind": "Node", "name": "gpu-node-3", "uid": "gpu-node-3"},
        "reason": "NodeNotReady",
        "message": "Node is not ready",
        "type": "Normal",
        "firstTimestamp": "2025-08-12T04:00:00Z",
        "lastTimestamp": None,
        "source": {"component": "node-controller"},
    },
]


def test_core_v1_events():
    failed, unhealthy, backoff, node = kubernetes.parse_events(as_list(*CORE_EVENTS))
    assert (failed.namespace, failed.involved_kind, failed.involved_name) == ("llm", "Pod", "llama-70b-0")
    assert (failed.reason, failed.type, failed.count) == ("FailedScheduling", "Warning", 70)
    assert failed.message.startswith("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    assert (failed.last_seen, failed.source) == ("2025-08-12T05:29:00Z", "default-scheduler")
    assert (unhealthy.reason, unhealthy.count, unhealthy.source) == ("Unhealthy", 3, "kubelet")
    assert unhealthy.message.startswith("Liveness probe failed:")
    assert (backoff.count, backoff.last_seen, backoff.source) == (256, "2025-08-12T06:44:41.000000Z", "kubelet")
    assert (node.involved_kind, node.involved_name, node.namespace) == ("Node", "gpu-node-3", "default")
    assert (node.last_seen, node.count, node.source) == ("2025-08-12T04:00:00Z", 1, "node-controller")


EVENTS_K8S_IO = {
    "apiVersion": "events.k8s.io/v1",
    "kind": "Event",
    "metadata": {"name": "llama-8b-7d9c6b5f4-x2x9k.17e9a2b3c4d5e6fb", "namespace": "llm"},
    "regarding": {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "llama-8b-7d9c6b5f4-x2x9k",
        "namespace": "llm",
        "fieldPath": "spec.containers{vllm}",
    },
    "reason": "Killing",
    "note": "Container vllm failed liveness probe, will be restarted",
    "type": "Normal",
    "eventTime": None,
    "deprecatedCount": 4,
    "deprecatedFirstTimestamp": "2025-08-12T05:47:00Z",
    "deprecatedLastTimestamp": "2025-08-12T06:41:57Z",
    "deprecatedSource": {"component": "kubelet", "host": "gpu-node-1"},
    "reportingController": "",
    "reportingInstance": "",
}


def test_events_k8s_io_v1():
    killing, with_series = kubernetes.parse_events(
        as_list(
            EVENTS_K8S_IO,
            {
                **EVENTS_K8S_IO,
                "reason": "FailedScheduling",
                "note": "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector.",
                "type": "Warning",
                "reportingController": "default-scheduler",
                "regarding": {"kind": "Pod", "name": "llama-70b-0", "namespace": "llm"},
                "eventTime": "2025-08-12T05:00:00.000000Z",
                "series": {"count": 12, "lastObservedTime": "2025-08-12T05:55:00.000000Z"},
                "deprecatedCount": None,
                "deprecatedLastTimestamp": None,
                "deprecatedSource": None,
            },
        )
    )
    assert (killing.involved_kind, killing.involved_name, killing.namespace) == (
        "Pod",
        "llama-8b-7d9c6b5f4-x2x9k",
        "llm",
    )
    assert (killing.reason, killing.message) == ("Killing", "Container vllm failed liveness probe, will be restarted")
    assert (killing.count, killing.last_seen, killing.source) == (4, "2025-08-12T06:41:57Z", "kubelet")
    assert (with_series.count, with_series.last_seen, with_series.source) == (
        12,
        "2025-08-12T05:55:00.000000Z",
        "default-scheduler",
    )
    assert with_series.message.endswith("didn't match Pod's node affinity/selector.")
    (single,) = kubernetes.parse_events(json.dumps(EVENTS_K8S_IO))
    assert single.reason == "Killing"


def test_bad_events():
    no_object = {k: v for k, v in CORE_EVENTS[0].items() if k != "involvedObject"}
    assert "involvedObject.kind: expected a string, found null" in one_line_error(
        kubernetes.parse_events, as_list(no_object)
    )
    wrong_count = {**CORE_EVENTS[0], "count": "70"}
    assert "count: expected an integer, found a string" in one_line_error(kubernetes.parse_events, as_list(wrong_count))
    assert "items[0] is a Pod, not an Event" in one_line_error(kubernetes.parse_events, as_list(VLLM_POD))


# --------------------------------------------------------------------------- nodes

GPU_NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
        "name": "gpu-node-1",
        "labels": {
            "kubernetes.io/hostname": "gpu-node-1",
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "nvidia.com/gpu.count": "8",
        },
    },
    "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
    "status": {
        "capacity": {
            "cpu": "208",
            "memory": "2113442768Ki",
            "nvidia.com/gpu": "8",
            "pods": "110",
            "ephemeral-storage": "101430960Ki",
        },
        "allocatable": {"cpu": "207500m", "memory": "2113340368Ki", "nvidia.com/gpu": "7", "pods": "110"},
        "conditions": [
            {
                "type": "MemoryPressure",
                "status": "False",
                "reason": "KubeletHasSufficientMemory",
                "message": "kubelet has sufficient memory available",
            },
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"},
        ],
    },
}
CORDONED_NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "gpu-node-3"},
    "spec": {
        "unschedulable": True,
        "taints": [
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": "2025-08-12T04:00:00Z"},
            {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2025-08-12T04:00:05Z"},
        ],
    },
    "status": {
        "conditions": [
            {
                "type": "Ready",
                "status": "Unknown",
                "reason": "NodeStatusUnknown",
                "message": "Kubelet stopped posting node status.",
            }
        ]
    },
}


def test_nodes():
    gpu, cordoned = kubernetes.parse_nodes(as_list(GPU_NODE, CORDONED_NODE))
    assert gpu.name == "gpu-node-1" and gpu.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert gpu.taints == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert gpu.unschedulable is False
    assert gpu.capacity["nvidia.com/gpu"] == "8" and gpu.allocatable["nvidia.com/gpu"] == "7"
    assert gpu.conditions["Ready"]["status"] == "True"
    assert cordoned.unschedulable is True
    assert cordoned.taints[1] == {"key": "node.kubernetes.io/unreachable", "value": None, "effect": "NoExecute"}
    assert cordoned.conditions["Ready"] == {
        "status": "Unknown",
        "reason": "NodeStatusUnknown",
        "message": "Kubelet stopped posting node status.",
    }
    assert cordoned.capacity == {} and cordoned.labels == {}


def test_bad_nodes():
    node = copy.deepcopy(GPU_NODE)
    node["status"]["allocatable"]["nvidia.com/gpu"] = "seven"
    assert "node gpu-node-1: status.allocatable.nvidia.com/gpu" in one_line_error(kubernetes.parse_nodes, as_list(node))
    node = copy.deepcopy(GPU_NODE)
    node["spec"]["unschedulable"] = "yes"
    assert "spec.unschedulable: expected a boolean" in one_line_error(kubernetes.parse_nodes, as_list(node))


# --------------------------------------------------------------------------- services and endpoints

SERVICE = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "llama-8b", "namespace": "llm"},
    "spec": {
        "type": "ClusterIP",
        "clusterIP": "10.96.40.83",
        "selector": {"app": "llama-8b"},
        "ports": [
            {"name": "http", "port": 80, "protocol": "TCP", "targetPort": "http"},
            {"port": 9090, "protocol": "TCP", "targetPort": 9090},
        ],
    },
}


def test_services():
    (svc,) = kubernetes.parse_services(
        as_list(
            SERVICE,
        )
    )
    assert (svc.namespace, svc.name, svc.type, svc.selector) == ("llm", "llama-8b", "ClusterIP", {"app": "llama-8b"})
    assert [(p.port, p.target_port, p.name) for p in svc.ports] == [(80, "http", "http"), (9090, 9090, None)]
    assert svc.endpoints_seen is False and svc.ready_addresses == []
    headless = {**SERVICE, "spec": {"clusterIP": "None"}}
    (svc,) = kubernetes.parse_services(as_list(headless))
    assert (svc.type, svc.selector, svc.ports) == ("ClusterIP", {}, [])
    bad = copy.deepcopy(SERVICE)
    bad["spec"]["ports"][0]["port"] = "80"
    assert "spec.ports[0].port: expected an integer" in one_line_error(kubernetes.parse_services, as_list(bad))


ENDPOINTS = {
    "apiVersion": "v1",
    "kind": "Endpoints",
    "metadata": {"name": "llama-8b", "namespace": "llm"},
    "subsets": [
        {
            "addresses": [
                {
                    "ip": "10.244.2.7",
                    "nodeName": "gpu-node-2",
                    "targetRef": {"kind": "Pod", "name": "llama-8b-7d9c6b5f4-q8r2m", "namespace": "llm"},
                },
                {"ip": "10.244.3.9"},
            ],
            "notReadyAddresses": [
                {
                    "ip": "10.244.1.18",
                    "nodeName": "gpu-node-1",
                    "targetRef": {"kind": "Pod", "name": "llama-8b-7d9c6b5f4-x2x9k", "namespace": "llm"},
                }
            ],
            "ports": [{"name": "http", "port": 8000, "protocol": "TCP"}],
        }
    ],
}


def test_endpoints():
    found = kubernetes.parse_endpoints(
        as_list(ENDPOINTS, {"kind": "Endpoints", "metadata": {"name": "nothing-ready", "namespace": "llm"}})
    )
    assert found[("llm", "llama-8b")] == (["llama-8b-7d9c6b5f4-q8r2m", "10.244.3.9"], ["llama-8b-7d9c6b5f4-x2x9k"])
    assert found[("llm", "nothing-ready")] == ([], [])
    bad = copy.deepcopy(ENDPOINTS)
    del bad["subsets"][0]["addresses"][1]["ip"]
    assert "subsets[0].addresses[1].ip: expected a string, found null" in one_line_error(
        kubernetes.parse_endpoints, as_list(bad)
    )


def _slice(name: str, service: str | None, endpoints: list) -> dict:
    labels = {"endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}
    if service:
        labels["kubernetes.io/service-name"] = service
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "addressType": "IPv4",
        "metadata": {"name": name, "namespace": "llm", "labels": labels},
        "endpoints": endpoints,
        "ports": [{"name": "http", "port": 8000, "protocol": "TCP"}],
    }


def test_endpointslices_are_merged_per_service():
    text = as_list(
        _slice(
            "llama-8b-abcde",
            "llama-8b",
            [
                {
                    "addresses": ["10.244.2.7"],
                    "conditions": {"ready": True, "serving": True, "terminating": False},
                    "nodeName": "gpu-node-2",
                    "targetRef": {"kind": "Pod", "name": "llama-8b-7d9c6b5f4-q8r2m", "namespace": "llm"},
                },
                {
                    "addresses": ["10.244.1.18"],
                    "conditions": {"ready": False, "serving": False, "terminating": False},
                    "targetRef": {"kind": "Pod", "name": "llama-8b-7d9c6b5f4-x2x9k", "namespace": "llm"},
                },
            ],
        ),
        _slice("llama-8b-fghij", "llama-8b", [{"addresses": ["10.244.3.9"], "conditions": {}}]),
        _slice("custom", None, [{"addresses": ["10.0.0.1"]}]),
    )
    assert kubernetes.parse_endpointslices(text) == {
        ("llm", "llama-8b"): (["llama-8b-7d9c6b5f4-q8r2m", "10.244.3.9"], ["llama-8b-7d9c6b5f4-x2x9k"]),
    }
    bad = as_list(_slice("x", "llama-8b", [{"addresses": "10.244.3.9"}]))
    assert "endpoints[0].addresses: expected a list of strings" in one_line_error(kubernetes.parse_endpointslices, bad)
    assert "expected an EndpointSlice list, found an Endpoints" in one_line_error(
        kubernetes.parse_endpointslices, json.dumps(ENDPOINTS)
    )


# --------------------------------------------------------------------------- workloads, HPAs, daemonsets

DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "llama-8b", "namespace": "llm"},
    "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "llama-8b"}}, "template": {}},
    "status": {
        "replicas": 2,
        "readyReplicas": 1,
        "availableReplicas": 1,
        "unavailableReplicas": 1,
        "conditions": [
            {
                "type": "Available",
                "status": "False",
                "reason": "MinimumReplicasUnavailable",
                "message": "Deployment does not have minimum availability.",
            },
            {
                "type": "Progressing",
                "status": "True",
                "reason": "ReplicaSetUpdated",
                "message": 'ReplicaSet "llama-8b-7d9c6b5f4" is progressing.',
            },
        ],
    },
}


def test_workloads():
    (deploy,) = kubernetes.parse_workloads(as_list(DEPLOYMENT), "Deployment")
    assert (deploy.kind, deploy.namespace, deploy.name) == ("Deployment", "llm", "llama-8b")
    assert (deploy.replicas, deploy.ready_replicas, deploy.available_replicas) == (2, 1, 1)
    assert deploy.selector == {"app": "llama-8b"}
    assert deploy.conditions["Available"]["reason"] == "MinimumReplicasUnavailable"
    sts = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "llama-70b", "namespace": "llm"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "llama-70b"}}},
        "status": {"replicas": 1, "currentReplicas": 1},
    }
    (parsed,) = kubernetes.parse_workloads(as_list(sts), "StatefulSet")
    assert (parsed.kind, parsed.replicas, parsed.ready_replicas, parsed.available_replicas) == ("StatefulSet", 1, 0, 0)
    assert "items[0] is a Deployment, not a StatefulSet" in one_line_error(
        kubernetes.parse_workloads, as_list(DEPLOYMENT), "StatefulSet"
    )


def test_workload_pod_template_labels_and_gpus():
    """What its pods would be, known even while none exists (a quota refused them all)."""
    (bare,) = kubernetes.parse_workloads(as_list(DEPLOYMENT), "Deployment")
    assert (bare.template_labels, bare.template_gpus, bare.template_runs_vllm) == ({}, 0, False)
    deploy = copy.deepcopy(DEPLOYMENT)
    deploy["spec"]["template"] = {
        "metadata": {"labels": {"app": "llama-8b", "tier": "serving"}},
        "spec": {"containers": [
            {"name": "vllm", "command": ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"],
             "resources": {"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "2"}}},
            {"name": "sidecar", "resources": {"requests": {"cpu": "100m"}}},
        ]},
    }  # fmt: skip
    (parsed,) = kubernetes.parse_workloads(as_list(deploy), "Deployment")
    assert parsed.template_labels == {"app": "llama-8b", "tier": "serving"}
    assert (parsed.template_gpus, parsed.template_runs_vllm) == (2, True)


HPA_V2 = {
    "apiVersion": "autoscaling/v2",
    "kind": "HorizontalPodAutoscaler",
    "metadata": {"name": "llama-8b", "namespace": "llm"},
    "spec": {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama-8b"},
        "minReplicas": 1,
        "maxReplicas": 4,
        "metrics": [
            {
                "type": "Resource",
                "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
            },
            {
                "type": "Pods",
                "pods": {
                    "metric": {"name": "vllm:num_requests_waiting"},
                    "target": {"type": "AverageValue", "averageValue": "5"},
                },
            },
            {
                "type": "External",
                "external": {
                    "metric": {"name": "vllm:num_requests_running", "selector": {}},
                    "target": {"type": "Value", "value": "10"},
                },
            },
            {
                "type": "Object",
                "object": {
                    "metric": {"name": "requests-per-second"},
                    "describedObject": {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "name": "llm"},
                    "target": {"type": "Value", "value": "10k"},
                },
            },
            {
                "type": "ContainerResource",
                "containerResource": {
                    "name": "memory",
                    "container": "vllm",
                    "target": {"type": "Utilization", "averageUtilization": 90},
                },
            },
        ],
    },
    "status": {
        "currentReplicas": 4,
        "desiredReplicas": 4,
        "conditions": [
            {
                "type": "AbleToScale",
                "status": "True",
                "reason": "ReadyForNewScale",
                "message": "recommended size matches current size",
            },
            {
                "type": "ScalingActive",
                "status": "False",
                "reason": "FailedGetPodsMetric",
                "message": "the HPA was unable to compute the replica count: "
                "unable to get metric vllm:num_requests_waiting",
            },
            {
                "type": "ScalingLimited",
                "status": "True",
                "reason": "TooManyReplicas",
                "message": "the desired replica count is more than the maximum replica count",
            },
        ],
    },
}


def test_hpa_v2():
    (hpa,) = kubernetes.parse_hpas(as_list(HPA_V2))
    assert (hpa.target_kind, hpa.target_name, hpa.min_replicas, hpa.max_replicas) == ("Deployment", "llama-8b", 1, 4)
    assert (hpa.current_replicas, hpa.desired_replicas) == (4, 4)
    assert hpa.metrics == [
        {"type": "Resource", "name": "cpu"},
        {"type": "Pods", "name": "vllm:num_requests_waiting"},
        {"type": "External", "name": "vllm:num_requests_running"},
        {"type": "Object", "name": "requests-per-second"},
        {"type": "ContainerResource", "name": "memory"},
    ]
    assert set(hpa.conditions) == {"AbleToScale", "ScalingActive", "ScalingLimited"}
    assert hpa.conditions["ScalingActive"]["reason"] == "FailedGetPodsMetric"


def test_hpa_v1_reads_its_cpu_target_and_conditions_annotation():
    conditions = [
        {
            "type": "AbleToScale",
            "status": "True",
            "lastTransitionTime": "2025-08-12T05:00:00Z",
            "reason": "SucceededGetScale",
            "message": "the HPA controller was able to get the target's current scale",
        },
        {
            "type": "ScalingActive",
            "status": "False",
            "lastTransitionTime": "2025-08-12T05:00:00Z",
            "reason": "FailedGetResourceMetric",
            "message": "the HPA was unable to compute the replica count: failed to get cpu utilization",
        },
    ]
    v1 = {
        "apiVersion": "autoscaling/v1",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {
            "name": "embedder",
            "namespace": "llm",
            "annotations": {"autoscaling.alpha.kubernetes.io/conditions": json.dumps(conditions)},
        },
        "spec": {
            "scaleTargetRef": {"kind": "Deployment", "name": "embedder"},
            "minReplicas": 1,
            "maxReplicas": 3,
            "targetCPUUtilizationPercentage": 70,
        },
        "status": {"currentReplicas": 1, "desiredReplicas": 1},
    }
    (hpa,) = kubernetes.parse_hpas(as_list(v1))
    assert hpa.metrics == [{"type": "Resource", "name": "cpu"}]
    assert hpa.conditions["ScalingActive"] == {
        "status": "False",
        "reason": "FailedGetResourceMetric",
        "message": conditions[1]["message"],
    }
    v1["metadata"]["annotations"]["autoscaling.alpha.kubernetes.io/conditions"] = "[{"
    message = one_line_error(kubernetes.parse_hpas, as_list(v1))
    assert "autoscaling.alpha.kubernetes.io/conditions" in message and "not valid JSON" in message


DEVICE_PLUGIN = {
    "apiVersion": "apps/v1",
    "kind": "DaemonSet",
    "metadata": {
        "name": "nvidia-device-plugin-daemonset",
        "namespace": "kube-system",
        "labels": {"app.kubernetes.io/name": "nvidia-device-plugin"},
    },
    "spec": {
        "template": {
            "spec": {
                "nodeSelector": {"nvidia.com/gpu.present": "true"},
                "containers": [
                    {
                        "name": "nvidia-device-plugin-ctr",
                        "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
                        "args": ["--fail-on-init-error=false"],
                        "env": [
                            {"name": "MIG_STRATEGY", "value": "single"},
                            {"name": "FAIL_ON_INIT_ERROR", "value": "false"},
                            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                        ],
                    },
                    {"name": "gfd", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"},
                ],
            }
        }
    },
    "status": {
        "currentNumberScheduled": 3,
        "desiredNumberScheduled": 3,
        "numberAvailable": 2,
        "numberMisscheduled": 0,
        "numberReady": 2,
        "numberUnavailable": 1,
        "observedGeneration": 1,
        "updatedNumberScheduled": 3,
    },
}


def test_daemonsets():
    (ds,) = kubernetes.parse_daemonsets(as_list(DEVICE_PLUGIN))
    assert (ds.namespace, ds.name) == ("kube-system", "nvidia-device-plugin-daemonset")
    assert ds.images == ["nvcr.io/nvidia/k8s-device-plugin:v0.17.0"] * 2
    assert (ds.desired, ds.ready, ds.available, ds.unavailable) == (3, 2, 2, 1)
    assert ds.env == {"MIG_STRATEGY": "single", "FAIL_ON_INIT_ERROR": "false"}
    assert ds.args == ["--fail-on-init-error=false"]
    assert ds.node_selector == {"nvidia.com/gpu.present": "true"}
    assert ds.labels == {"app.kubernetes.io/name": "nvidia-device-plugin"}
    bad = copy.deepcopy(DEVICE_PLUGIN)
    bad["status"]["numberReady"] = "2"
    assert "status.numberReady: expected an integer" in one_line_error(kubernetes.parse_daemonsets, as_list(bad))


# --------------------------------------------------------------------------- KubeRay


def _group_template(container: str, gpus: str | None) -> dict:
    resources = {"limits": {"cpu": "8", "memory": "64Gi"}, "requests": {"cpu": "8", "memory": "64Gi"}}
    if gpus is not None:
        resources["limits"]["nvidia.com/gpu"] = gpus
    return {
        "spec": {
            "containers": [
                {"name": container, "image": "rayproject/ray:2.46.0-gpu", "resources": resources},
                {"name": "sidecar", "image": "fluent/fluent-bit:3.0", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
            ]
        }
    }


RAY_CLUSTER_SPEC = {
    "rayVersion": "2.46.0",
    "headGroupSpec": {
        "rayStartParams": {"dashboard-host": "0.0.0.0", "num-gpus": "0"},
        "template": _group_template("ray-head", None),
    },
    "workerGroupSpecs": [
        {
            "groupName": "gpu-group",
            "replicas": 2,
            "minReplicas": 1,
            "maxReplicas": 4,
            "numOfHosts": 1,
            "rayStartParams": {"num-gpus": "1"},
            "template": _group_template("ray-worker", "1"),
        },
        {
            "groupName": "big-gpu-group",
            "replicas": 0,
            "minReplicas": 0,
            "maxReplicas": 2,
            "rayStartParams": {},
            "template": _group_template("ray-worker", "8"),
        },
    ],
}

RAY_CLUSTER = {
    "apiVersion": "ray.io/v1",
    "kind": "RayCluster",
    "metadata": {"name": "llm-cluster", "namespace": "ray"},
    "spec": RAY_CLUSTER_SPEC,
    "status": {
        "state": "ready",
        "desiredWorkerReplicas": 2,
        "readyWorkerReplicas": 1,
        "conditions": [
            {
                "type": "HeadPodReady",
                "status": "True",
                "reason": "HeadPodRunningAndReady",
                "message": "",
                "lastTransitionTime": "2025-08-12T05:46:00Z",
            },
            {"type": "RayClusterProvisioned", "status": "False", "reason": "RayClusterPodsProvisioning", "message": ""},
            {
                "type": "ReplicaFailure",
                "status": "True",
                "reason": "FailedCreateWorkerPod",
                "message": 'pods "llm-cluster-gpu-group-worker-9k2mz" is forbidden: exceeded quota: gpu-quota',
            },
        ],
    },
}


def test_rayclusters():
    fresh = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "new", "namespace": "ray"},
        "spec": {"headGroupSpec": {"rayStartParams": {}, "template": _group_template("ray-head", "1")}},
    }
    cluster, new = kubernetes.parse_rayclusters(as_list(RAY_CLUSTER, fresh))
    assert (cluster.kind, cluster.namespace, cluster.name, cluster.state) == (
        "RayCluster",
        "ray",
        "llm-cluster",
        "ready",
    )
    assert cluster.head_ray_start_params == {"dashboard-host": "0.0.0.0", "num-gpus": "0"}
    assert cluster.head_gpu_limit == 0
    gpu_group, big = cluster.worker_groups
    assert (gpu_group.name, gpu_group.replicas, gpu_group.min_replicas, gpu_group.max_replicas) == (
        "gpu-group",
        2,
        1,
        4,
    )
    assert gpu_group.ray_start_params == {"num-gpus": "1"}
    assert (gpu_group.gpu_limit_per_pod, big.gpu_limit_per_pod, big.replicas) == (1, 8, 0)
    assert cluster.conditions["HeadPodReady"]["status"] == "True"
    assert cluster.conditions["ReplicaFailure"]["message"].endswith("exceeded quota: gpu-quota")
    assert cluster.serve_config is None and cluster.reason is None
    assert (new.state, new.conditions, new.worker_groups, new.head_gpu_limit) == (None, {}, [], 1)


def test_bad_rayclusters():
    bad = copy.deepcopy(RAY_CLUSTER)
    bad["spec"]["workerGroupSpecs"][0]["rayStartParams"] = {"num-gpus": ["1"]}
    message = one_line_error(kubernetes.parse_rayclusters, as_list(bad))
    assert "raycluster ray/llm-cluster: spec.workerGroupSpecs[0].rayStartParams.num-gpus: expected a string" in message
    bad = copy.deepcopy(RAY_CLUSTER)
    del bad["spec"]["workerGroupSpecs"][1]["groupName"]
    assert "workerGroupSpecs[1].groupName" in one_line_error(kubernetes.parse_rayclusters, as_list(bad))
    bad = copy.deepcopy(RAY_CLUSTER)
    bad["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = (
        "one"
    )
    assert "nvidia.com/gpu" in one_line_error(kubernetes.parse_rayclusters, as_list(bad))


SERVE_CONFIG = """\
applications:
  - name: llm
    route_prefix: /
    import_path: ray.serve.llm:build_openai_app
    args:
      llm_configs:
        - model_loading_config:
            model_id: qwen-0.5b
            model_source: Qwen/Qwen2.5-0.5B-Instruct
          engine_kwargs:
            tensor_parallel_size: 2
            max_model_len: 8192
          deployment_config:
            autoscaling_config:
              min_replicas: 1
              max_replicas: 2
"""

RAY_SERVICE = {
    "apiVersion": "ray.io/v1",
    "kind": "RayService",
    "metadata": {"name": "llm-serve", "namespace": "ray"},
    "spec": {"serveConfigV2": SERVE_CONFIG, "rayClusterConfig": RAY_CLUSTER_SPEC},
    "status": {
        "serviceStatus": "Running",
        "numServeEndpoints": 1,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "NonZeroServeEndpoints",
                "message": "Number of serve endpoints is greater than 0",
            },
            {
                "type": "UpgradeInProgress",
                "status": "False",
                "reason": "NoPendingCluster",
                "message": "Active Ray cluster exists and no pending Ray cluster",
            },
        ],
        "activeServiceStatus": {"rayClusterName": "llm-serve-raycluster-abcde"},
    },
}


def test_rayservices():
    starting = {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": "starting", "namespace": "ray"},
        "spec": {"rayClusterConfig": RAY_CLUSTER_SPEC},
        "status": {"serviceStatus": ""},
    }
    service, new = kubernetes.parse_rayservices(as_list(RAY_SERVICE, starting))
    assert (service.kind, service.namespace, service.name, service.state) == (
        "RayService",
        "ray",
        "llm-serve",
        "Running",
    )
    assert [g.name for g in service.worker_groups] == ["gpu-group", "big-gpu-group"]
    assert service.head_ray_start_params["num-gpus"] == "0"
    (app,) = service.serve_config["applications"]
    assert app["import_path"] == "ray.serve.llm:build_openai_app"
    assert app["args"]["llm_configs"][0]["engine_kwargs"]["tensor_parallel_size"] == 2
    assert service.conditions["Ready"]["reason"] == "NonZeroServeEndpoints"
    assert (new.state, new.serve_config, new.conditions) == (None, None, {})
    assert (service.serve_statuses, service.pending_cluster, new.serve_statuses) == ([], None, [])


def test_rayservice_serve_statuses_of_active_and_pending_clusters():
    upgrading = copy.deepcopy(RAY_SERVICE)
    upgrading["status"]["conditions"][1] |= {"status": "True", "lastTransitionTime": "2026-12-03T02:00:00Z"}
    upgrading["status"]["activeServiceStatus"]["applicationStatuses"] = {
        "llm": {"status": "RUNNING", "serveDeploymentStatuses": {"LLMServer": {"status": "HEALTHY"}}},
    }
    upgrading["status"]["pendingServiceStatus"] = {
        "rayClusterName": "llm-serve-raycluster-fghij",
        "applicationStatuses": {
            "llm": {
                "status": "DEPLOY_FAILED",
                "message": "Deploying app 'llm' failed",
                "serveDeploymentStatuses": {
                    "LLMServer": {"status": "DEPLOY_FAILED", "message": "failed to start 3 times"}
                },
            }
        },
    }
    (service,) = kubernetes.parse_rayservices(as_list(upgrading))
    assert (service.active_cluster, service.pending_cluster) == (
        "llm-serve-raycluster-abcde",
        "llm-serve-raycluster-fghij",
    )
    assert service.condition_times == {"UpgradeInProgress": "2026-12-03T02:00:00Z"}
    assert [
        (s.cluster, s.cluster_name, s.application, s.deployment, s.status, s.message) for s in service.serve_statuses
    ] == [
        ("active", "llm-serve-raycluster-abcde", "llm", None, "RUNNING", None),
        ("active", "llm-serve-raycluster-abcde", "llm", "LLMServer", "HEALTHY", None),
        ("pending", "llm-serve-raycluster-fghij", "llm", None, "DEPLOY_FAILED", "Deploying app 'llm' failed"),
        ("pending", "llm-serve-raycluster-fghij", "llm", "LLMServer", "DEPLOY_FAILED", "failed to start 3 times"),
    ]
    upgrading["status"]["pendingServiceStatus"]["applicationStatuses"]["llm"]["serveDeploymentStatuses"] = ["LLMServer"]
    message = one_line_error(kubernetes.parse_rayservices, as_list(upgrading))
    assert (
        "pendingServiceStatus.applicationStatuses.llm.serveDeploymentStatuses: expected an object, found a list"
        in message
    )


def test_bad_rayservices():
    broken = copy.deepcopy(RAY_SERVICE)
    broken["spec"]["serveConfigV2"] = "applications:\n  - name: llm\n   import_path: [unclosed\n"
    message = one_line_error(kubernetes.parse_rayservices, as_list(broken))
    assert message.startswith("rayservice ray/llm-serve: spec.serveConfigV2: not valid YAML")
    broken["spec"]["serveConfigV2"] = "- just\n- a list\n"
    assert "expected a YAML mapping, found a list" in one_line_error(kubernetes.parse_rayservices, as_list(broken))
    broken["spec"]["serveConfigV2"] = "applications:\n  - name: llm\n    released: 2025-13-01\n"
    assert "not valid YAML: month must be in 1..12" in one_line_error(kubernetes.parse_rayservices, as_list(broken))
    broken["spec"]["serveConfigV2"] = {"applications": []}
    assert "spec.serveConfigV2: expected a string, found an object" in one_line_error(
        kubernetes.parse_rayservices, as_list(broken)
    )
    assert "items[0] is a RayCluster, not a RayService" in one_line_error(
        kubernetes.parse_rayservices, as_list(RAY_CLUSTER)
    )


# --------------------------------------------------------------------------- robustness


def _mutations(doc):
    """Every copy of `doc` with one value swapped for one of another JSON type."""

    def paths(node, prefix=()):
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, child in items:
            yield prefix + (key,)
            yield from paths(child, prefix + (key,))

    for path in paths(doc):
        for replacement in ("text", 7, 1.5, True, None, [], {}, [1], {"x": 1}):
            mutated = copy.deepcopy(doc)
            target = mutated
            for key in path[:-1]:
                target = target[key]
            if type(target[path[-1]]) is type(replacement):
                continue
            target[path[-1]] = replacement
            yield mutated


@pytest.mark.parametrize(
    ("parse", "doc"),
    [
        (kubernetes.parse_pods, VLLM_POD),
        (kubernetes.parse_pods, RAY_WORKER_POD),
        (kubernetes.parse_events, CORE_EVENTS[2]),
        (kubernetes.parse_events, EVENTS_K8S_IO),
        (kubernetes.parse_nodes, GPU_NODE),
        (kubernetes.parse_services, SERVICE),
        (kubernetes.parse_endpoints, ENDPOINTS),
        (
            kubernetes.parse_endpointslices,
            _slice("s", "svc", [{"addresses": ["10.0.0.1"], "conditions": {"ready": True}}]),
        ),
        (lambda t: kubernetes.parse_workloads(t, "Deployment"), DEPLOYMENT),
        (kubernetes.parse_hpas, HPA_V2),
        (kubernetes.parse_daemonsets, DEVICE_PLUGIN),
        (kubernetes.parse_rayclusters, RAY_CLUSTER),
        (kubernetes.parse_rayservices, RAY_SERVICE),
    ],
)
def test_wrong_typed_fields_never_escape_as_other_errors(parse, doc):
    for mutated in _mutations(doc):
        try:
            parse(as_list(mutated))
        except ParseError as e:
            assert str(e) and "\n" not in str(e)


# --------------------------------------------------------------------------- truncated lists


def pod_named(namespace: str, name: str) -> dict:
    pod = copy.deepcopy(VLLM_POD)
    pod["metadata"].update(name=name, namespace=namespace)
    return pod


ALL_NAMESPACES = as_list(  # `kubectl get pods -A -o json`: one List, items from every namespace
    pod_named("llm-serving", "vllm-0"),
    pod_named("other-team", "vllm-0"),
    pod_named("kube-system", "coredns-5d78c9869d-4kq2x"),
)


def cut_at(text: str, mark: str, occurrence: int = 1) -> str:
    """The text up to (not including) the given occurrence of `mark`."""
    at = -1
    for _ in range(occurrence):
        at = text.index(mark, at + 1)
    return text[:at]


def test_cut_mid_item_keeps_the_items_before_it():
    cut = kubernetes.recover_truncated_list(cut_at(ALL_NAMESPACES, '"containerStatuses"', 2))
    assert cut is not None and cut.items == 1
    assert [(p.namespace, p.name) for p in kubernetes.parse_pods(cut.text)] == [("llm-serving", "vllm-0")]


def test_cut_between_items_keeps_every_complete_item():
    text = ALL_NAMESPACES[: ALL_NAMESPACES.index("kube-system")]
    text = text[: text.rindex("},") + 2]  # right after the second item and its comma
    cut = kubernetes.recover_truncated_list(text)
    assert cut is not None and cut.items == 2
    assert [p.key for p in kubernetes.parse_pods(cut.text)] == ["llm-serving/vllm-0", "other-team/vllm-0"]


def test_cut_inside_a_string():
    text = cut_at(ALL_NAMESPACES, "coredns") + "core"
    cut = kubernetes.recover_truncated_list(text)
    assert cut is not None and cut.items == 2


@pytest.mark.parametrize("tail", ["tr", "fals", "nu", "1.", "-", '"ab\\'])
def test_cut_inside_a_literal_number_or_escape(tail):
    text = cut_at(ALL_NAMESPACES, "coredns") + 'x", "flag": ' + tail
    cut = kubernetes.recover_truncated_list(text)
    assert cut is not None and cut.items == 2


def test_every_cut_point_keeps_exactly_the_items_completed_before_it():
    item_ends = [m.end() for m in re.finditer(r"\n        }", ALL_NAMESPACES)]
    assert len(item_ends) == 3
    for i in range(0, len(ALL_NAMESPACES), 11):  # every 11th cut point: each kind of token is cut somewhere
        cut = kubernetes.recover_truncated_list(ALL_NAMESPACES[:i])
        items = None if cut is None else cut.items
        if i <= ALL_NAMESPACES.index("["):
            assert items is None  # cut before the items began: nothing to recover
        else:
            assert items == sum(1 for end in item_ends if end <= i)


def test_whole_damaged_and_non_json_texts_are_not_truncated_lists():
    assert kubernetes.recover_truncated_list(ALL_NAMESPACES) is None
    assert kubernetes.recover_truncated_list('error: the server doesn\'t have a resource type "podz"') is None
    assert kubernetes.recover_truncated_list("") is None
    damaged = ALL_NAMESPACES.replace('"phase"', '"phase" "x"', 1)  # broken in the middle, not cut
    assert kubernetes.recover_truncated_list(damaged) is None


def test_empty_file_is_one_line_error():
    assert one_line_error(kubernetes.parse_pods, "") == "empty file: expected a Pod list (kubectl get -o json)"
    assert one_line_error(kubernetes.parse_events, " \n") == "empty file: expected an Event list (kubectl get -o json)"


def test_a_list_with_zero_items():
    assert kubernetes.parse_pods(as_list()) == []
    assert kubernetes.recover_truncated_list(as_list()) is None  # whole
    cut = kubernetes.recover_truncated_list('{\n    "apiVersion": "v1",\n    "items": [\n')
    assert cut is not None and cut.items == 0
    assert kubernetes.parse_pods(cut.text) == []


def test_a_truncated_list_keeps_its_kind_for_the_parser():
    whole = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "NodeList",
            "items": [{"metadata": {"name": "gpu-1"}}, {"metadata": {"name": "gpu-2"}}],
        }
    )
    text = cut_at(whole, "gpu-2")
    cut = kubernetes.recover_truncated_list(text)
    assert cut is not None and cut.items == 1
    assert [n.name for n in kubernetes.parse_nodes(cut.text)] == ["gpu-1"]


# --------------------------------------------------------------------------- events and pods: every field, odd input


def test_every_event_field():
    assert kubernetes.parse_events(as_list(*CORE_EVENTS, EVENTS_K8S_IO)) == [
        Event(
            "llm",
            "Pod",
            "llama-70b-0",
            "FailedScheduling",
            CORE_EVENTS[0]["message"],
            "Warning",
            70,
            "2025-08-12T05:29:00Z",
            "default-scheduler",
            "8209d63f-aa89-450d-9813-d555ddcaa175",
        ),
        Event(
            "llm",
            "Pod",
            "llama-8b-7d9c6b5f4-x2x9k",
            "Unhealthy",
            CORE_EVENTS[1]["message"],
            "Warning",
            3,
            "2025-08-12T06:41:57Z",
            "kubelet",
            None,
        ),
        Event(
            "llm",
            "Pod",
            "llama-8b-7d9c6b5f4-x2x9k",
            "BackOff",
            CORE_EVENTS[2]["message"],
            "Warning",
            256,
            "2025-08-12T06:44:41.000000Z",
            "kubelet",
            None,
        ),
        Event(
            "default",
            "Node",
            "gpu-node-3",
            "NodeNotReady",
            "Node is not ready",
            "Normal",
            1,
            "2025-08-12T04:00:00Z",
            "node-controller",
            "gpu-node-3",
        ),
        Event(
            "llm",
            "Pod",
            "llama-8b-7d9c6b5f4-x2x9k",
            "Killing",
            EVENTS_K8S_IO["note"],
            "Normal",
            4,
            "2025-08-12T06:41:57Z",
            "kubelet",
            None,
        ),
    ]


def test_event_fields_left_out_or_null():
    bare = {
        "metadata": {"name": "e1", "namespace": ""},
        "involvedObject": {"kind": "", "name": "x", "uid": ""},
        "reason": None,
        "message": None,
        "type": None,
        "count": 0,
        "source": None,
        "series": None,
    }
    (event,) = kubernetes.parse_events(as_list(bare))
    assert event == Event(None, "", "x", "", "", "", 1, None, None, None)
    regarding_only = {
        "metadata": {"name": "e2", "namespace": "llm"},
        "regarding": {"kind": "Pod", "name": "p"},
        "deprecatedSource": {"host": "gpu-node-1"},
        "deprecatedFirstTimestamp": "2025-08-12T04:00:00Z",
    }
    (event,) = kubernetes.parse_events(as_list(regarding_only))  # no apiVersion: events.k8s.io, as it has `regarding`
    assert event == Event("llm", "Pod", "p", "", "", "", 1, "2025-08-12T04:00:00Z", "gpu-node-1", None)


def test_a_node_event_reporting_an_xid_is_read_as_its_kernel_line():
    line = "NVRM: Xid (PCI:0000:2a:00): 48, pid=2211, name=python3, Double Bit ECC Error"
    kernel = {**CORE_EVENTS[3], "reason": "NVRMXid", "message": line}
    xid, plain = kubernetes.parse_events(as_list(kernel, CORE_EVENTS[3]))
    assert xid.xid == XidLine(line, (48,), "0000:2a:00") and plain.xid is None


def test_event_fields_read_only_when_needed():
    """A field behind one that answers (series.count before count) is not read, so its type does not matter."""
    event = {**CORE_EVENTS[2], "count": "many", "lastTimestamp": 7, "source": {"component": 1}}
    (parsed,) = kubernetes.parse_events(as_list(event))
    assert (parsed.count, parsed.last_seen, parsed.source) == (256, "2025-08-12T06:44:41.000000Z", "kubelet")


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ("an event", "items[0]: expected an object, found a string"),
        (None, "items[0]: metadata.name is missing"),
        ({"kind": "Event"}, "items[0]: metadata.name is missing"),
        ({"kind": 5, "metadata": {"name": "e"}}, "items[0].kind: expected a string, found an integer"),
        ({"metadata": []}, "items[0].metadata: expected an object, found a list"),
        ({"metadata": {"name": ""}}, "items[0]: metadata.name is missing"),
        ({"metadata": {"name": 1}}, "items[0].metadata.name: expected a string, found an integer"),
        (
            {"metadata": {"name": "e", "namespace": True}},
            "items[0].metadata.namespace: expected a string, found a boolean",
        ),
        (
            {**CORE_EVENTS[0], "apiVersion": 1},
            "event llm/llama-70b-0.17e9a2b3c4d5e6f7: apiVersion: expected a string, found an integer",
        ),
        (
            {**CORE_EVENTS[0], "involvedObject": ["Pod"]},
            "event llm/llama-70b-0.17e9a2b3c4d5e6f7: involvedObject: expected an object, found a list",
        ),
        (
            {**CORE_EVENTS[0], "involvedObject": {"kind": "Pod"}},
            "event llm/llama-70b-0.17e9a2b3c4d5e6f7: involvedObject.name: expected a string, found null",
        ),
        (
            {**CORE_EVENTS[0], "involvedObject": {**CORE_EVENTS[0]["involvedObject"], "uid": 5}},
            "involvedObject.uid: expected a string",
        ),
        (
            {**CORE_EVENTS[0], "reason": ["x"]},
            "event llm/llama-70b-0.17e9a2b3c4d5e6f7: reason: expected a string, found a list",
        ),
        ({**CORE_EVENTS[0], "count": True}, "count: expected an integer, found a boolean"),
        ({**CORE_EVENTS[0], "count": 2.0}, "count: expected an integer, found a number"),
        ({**CORE_EVENTS[0], "series": {"count": "2"}}, "series.count: expected an integer, found a string"),
        ({**CORE_EVENTS[0], "source": "kubelet"}, "source: expected an object, found a string"),
        ({**CORE_EVENTS[1], "reportingComponent": {}}, "reportingComponent: expected a string, found an object"),
        (
            {**CORE_EVENTS[3], "lastTimestamp": 1},
            "event default/gpu-node-3.17e9a2b3c4d5e6fa: lastTimestamp: expected a string",
        ),
        ({**EVENTS_K8S_IO, "note": 1}, "note: expected a string, found an integer"),
    ],
)
def test_bad_event_items(item, expected):
    assert expected in one_line_error(kubernetes.parse_events, as_list(item))


def test_duplicate_keys_are_refused_at_every_depth():
    text = as_list(CORE_EVENTS[0]).replace(
        '"reason": "FailedScheduling"', '"reason": "A", "reason": "FailedScheduling"'
    )
    assert one_line_error(kubernetes.parse_events, text) == "not valid JSON: the key 'reason' twice in one object"
    text = as_list(CORE_EVENTS[0]).replace('"kind": "Pod"', '"kind": "Pod", "kind": "Node"')
    assert one_line_error(kubernetes.parse_events, text) == "not valid JSON: the key 'kind' twice in one object"
    text = json.dumps(VLLM_POD).replace('"cpu": "8"', '"cpu": "8", "cpu": "9"')
    assert one_line_error(kubernetes.parse_pods, text) == "not valid JSON: the key 'cpu' twice in one object"
    text = '{"kind": "List", "items": [], "items": []}'
    assert one_line_error(kubernetes.parse_pods, text) == "not valid JSON: the key 'items' twice in one object"


def test_unicode_names_and_messages():
    event = copy.deepcopy(CORE_EVENTS[0])
    event["metadata"]["name"] = "modèle-0.17e9"
    event["message"] = "ノードが足りません \U0001f680"
    text = as_list(event)
    for same in (text, json.dumps(json.loads(text), ensure_ascii=False), "\ufeff" + text):
        (parsed,) = kubernetes.parse_events(same)
        assert parsed.message == "ノードが足りません \U0001f680"
    assert "event llm/modèle-0.17e9: count" in one_line_error(kubernetes.parse_events, as_list({**event, "count": "x"}))


def test_a_truncated_event_list_keeps_its_complete_events():
    text = as_list(*CORE_EVENTS)
    cut = kubernetes.recover_truncated_list(cut_at(text, '"NodeNotReady"'))
    assert cut is not None and cut.items == 3
    assert kubernetes.parse_events(cut.text) == kubernetes.parse_events(as_list(*CORE_EVENTS[:3]))


def test_every_pod_field():
    (pod,) = kubernetes.parse_pods(as_list(VLLM_POD))
    (vllm,) = pod.containers
    engine = vllm.engine_args
    assert engine is not None
    assert (engine.model, engine.max_model_len, engine.gpu_memory_utilization) == (
        "meta-llama/Llama-3.1-8B-Instruct",
        8192,
        0.95,
    )
    assert vllm == Container(
        name="vllm",
        image="vllm/vllm-openai:v0.10.1",
        command=["vllm", "serve"],
        args=VLLM_POD["spec"]["containers"][0]["args"],
        env={"VLLM_LOGGING_LEVEL": "INFO", "EMPTY": "", "HF_TOKEN": "<from:secretKeyRef>", "POD_IP": "<from:fieldRef>"},
        ports={"http": 8000, "9090": 9090},
        requests={"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": "1"},
        limits={"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"},
        probes=[
            Probe("liveness", "httpGet", "/health", 8000, 60, 10, 5, 3),
            Probe("readiness", "exec", None, None, 0, 5, 1, 3),
            Probe("startup", "tcpSocket", None, "http", 0, 10, 1, 60),
        ],
        ready=False,
        restart_count=16,
        state="waiting",
        state_reason="CrashLoopBackOff",
        state_message=VLLM_POD["status"]["containerStatuses"][0]["state"]["waiting"]["message"],
        last_terminated_reason="OOMKilled",
        last_exit_code=137,
        last_finished_at="2025-08-12T06:42:07Z",
        engine_args=engine,
    )
    metadata, spec = VLLM_POD["metadata"], VLLM_POD["spec"]
    assert pod == Pod(
        namespace="llm",
        name=metadata["name"],
        uid=metadata["uid"],
        labels=metadata["labels"],
        annotations=metadata["annotations"],
        owner_kind="ReplicaSet",
        owner_name="llama-8b-7d9c6b5f4",
        node_name="gpu-node-1",
        phase="Running",
        pod_ip="10.244.1.18",
        conditions={
            "PodScheduled": {"status": "True", "reason": None, "message": None},
            "Ready": {
                "status": "False",
                "reason": "ContainersNotReady",
                "message": "containers with unready status: [vllm]",
            },
        },
        containers=[vllm],
        node_selector=spec["nodeSelector"],
        affinity=spec["affinity"],
        tolerations=spec["tolerations"],
        topology_spread_constraints=spec["topologySpreadConstraints"],
        volumes=spec["volumes"],
        config_refs=[ConfigRef("Secret", "hf", "env HF_TOKEN of container vllm")],
    )


def test_pod_fields_left_out_null_or_numbers():
    pod = {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "labels": {"replicas": 2, "ratio": 0.5, "none": "x"},
            "annotations": None,
            "uid": None,
        },
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": None,
                    "env": [{"name": "A", "valueFrom": None, "value": "1"}, {"name": "B", "valueFrom": {"x": None}}],
                    "resources": None,
                }
            ],
            "tolerations": [None, {"operator": "Exists"}],
            "volumes": None,
            "affinity": None,
        },
        "status": {"containerStatuses": [{"name": "other", "ready": True}], "conditions": None},
    }
    (parsed,) = kubernetes.parse_pods(as_list(pod))
    assert parsed == Pod(
        namespace="ns",
        name="p",
        labels={"replicas": "2", "ratio": "0.5", "none": "x"},
        containers=[Container("c", env={"A": "1", "B": "<from:unknown>"})],
        tolerations=[{}, {"operator": "Exists"}],
    )


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (
            ["metadata", "labels", "app"],
            True,
            "pod llm/llama-8b-7d9c6b5f4-x2x9k: metadata.labels.app: expected a string, found a boolean",
        ),
        (["metadata", "annotations", "a"], None, "metadata.annotations.a: expected a string, found null"),
        (["metadata", "uid"], 1, "metadata.uid: expected a string, found an integer"),
        (
            ["metadata", "ownerReferences", 0, "controller"],
            "yes",
            "metadata.ownerReferences[0].controller: expected a boolean",
        ),
        (["metadata", "ownerReferences"], {}, "metadata.ownerReferences: expected a list, found an object"),
        (["spec"], [], "pod llm/llama-8b-7d9c6b5f4-x2x9k: spec: expected an object, found a list"),
        (["spec", "nodeName"], 3, "spec.nodeName: expected a string, found an integer"),
        (["spec", "containers", 0], None, "spec.containers[0].name: expected a string, found null"),
        (["spec", "containers", 0, "image"], ["x"], "spec.containers[0].image: expected a string, found a list"),
        (["spec", "containers", 0, "env", 0, "value"], 1, "spec.containers[0].env[0].value: expected a string"),
        (["spec", "containers", 0, "ports", 0, "name"], 1, "spec.containers[0].ports[0].name: expected a string"),
        (
            ["spec", "containers", 0, "resources", "limits"],
            [],
            "spec.containers[0].resources.limits: expected an object",
        ),
        (
            ["spec", "containers", 0, "livenessProbe", "periodSeconds"],
            1.5,
            "spec.containers[0].livenessProbe.periodSeconds: expected an integer, found a number",
        ),
        (["spec", "affinity"], "any", "spec.affinity: expected an object, found a string"),
        (["spec", "volumes", 1], 3, "spec.volumes[1]: expected an object, found an integer"),
        (["status", "phase"], 1, "status.phase: expected a string, found an integer"),
        (["status", "conditions", 0, "type"], None, "status.conditions[0].type: expected a string, found null"),
        (["status", "containerStatuses", 0, "name"], 1, "status.containerStatuses[0].name: expected a string"),
        (
            ["status", "containerStatuses", 0, "state", "waiting"],
            "x",
            "state.waiting: expected an object, found a string",
        ),
        (
            ["status", "containerStatuses", 0, "lastState", "terminated", "exitCode"],
            "137",
            "status.containerStatuses[0].lastState.terminated.exitCode: expected an integer, found a string",
        ),
    ],
)
def test_bad_pod_fields(path, value, expected):
    assert expected in one_line_error(kubernetes.parse_pods, _broken(path, value))


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ({}, "node gpu-node-1: status.conditions: expected a list, found an object"),
        ([{"type": "Ready"}, "Ready"], "node gpu-node-1: status.conditions[1]: expected an object, found a string"),
        ([None], "node gpu-node-1: status.conditions[0].type: expected a string, found null"),
        ([{"type": "Ready", "status": True}], "node gpu-node-1: status.conditions[0].status: expected a string"),
        # the type is read before the fields beside it
        ([{"type": 1, "status": True}], "node gpu-node-1: status.conditions[0].type: expected a string, found an int"),
        ([{"type": "Ready"}, {"type": "Ready", "message": 0}], "status.conditions[1].message: expected a string"),
    ],
)
def test_bad_node_conditions(conditions, expected):
    node = copy.deepcopy(GPU_NODE)
    node["status"]["conditions"] = conditions
    assert expected in one_line_error(kubernetes.parse_nodes, as_list(node))


def test_a_null_condition_of_a_list_otherwise_read_is_an_error_of_its_own_item():
    pod = copy.deepcopy(VLLM_POD)
    pod["status"]["conditions"] = [pod["status"]["conditions"][0], None]
    assert one_line_error(kubernetes.parse_pods, as_list(pod)).endswith(
        "status.conditions[1].type: expected a string, found null"
    )


_POD_LISTS = sorted((Path(__file__).parents[3] / "fixtures").glob("*/k8s/pods.json"))


@pytest.mark.parametrize("path", _POD_LISTS, ids=lambda p: p.parent.parent.name)
def test_pods_read_from_a_document_are_those_read_from_its_text(path: Path) -> None:
    text = path.read_text()
    assert kubernetes.parse_pods_document(json.loads(text)) == kubernetes.parse_pods(text)


@pytest.mark.parametrize(
    "doc", [[], {"kind": "NodeList", "items": []}, {"items": {}}, {"kind": "List", "items": [{"kind": "Pod"}]}]
)
def test_a_document_that_is_no_pod_list_is_refused_as_its_text_is(doc: object) -> None:
    with pytest.raises(ParseError) as from_text:
        kubernetes.parse_pods(json.dumps(doc))
    with pytest.raises(ParseError) as from_document:
        kubernetes.parse_pods_document(doc)
    assert str(from_document.value) == str(from_text.value)
