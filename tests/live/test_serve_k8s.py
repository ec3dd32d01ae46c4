"""`llmdiag serve` against the real control plane (tests/live/k8s_cluster.py): an Alertmanager payload
whose alert names a namespace and a pod scopes the triage to them, as `-n` and `--pod` do, one that
names a Service to the pods it selects, as `-l` does; the verdict of that scope is on /metrics with its
namespace."""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

import pytest
from k8s_cluster import ControlPlane, wait_for
from k8s_scenarios import apply, expected, get, namespace, pods, service, two_gpu_nodes, vllm_deployment
from live_services import LOOPBACK, free_port, http_get
from serve_chain import get_json, process, reports, verdicts

pytestmark = pytest.mark.live

TOKEN = "k8s-e2e-token"
NS = "serve-scope"
FIXTURE = "k8s-service-target-port-unresolved"


def post_alert(url: str, labels: dict[str, str], fingerprint: str = "0f1e2d3c4b5a6978") -> dict:
    payload = {"version": "4", "groupKey": "{}:{alertname=\"VLLMDown\"}", "truncatedAlerts": 0, "status": "firing",
               "receiver": "llmdiag", "groupLabels": {"alertname": "VLLMDown"}, "commonLabels": labels,
               "commonAnnotations": {}, "externalURL": "http://alertmanager:9093",
               "alerts": [{"status": "firing", "labels": {"alertname": "VLLMDown", **labels}, "annotations": {},
                           "startsAt": "2026-12-07T01:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
                           "generatorURL": "", "fingerprint": fingerprint}]}  # fmt: skip
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    request = urllib.request.Request(f"{url}/alertmanager", json.dumps(payload).encode(), headers, method="POST")
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 202
        return json.load(answer)


def test_an_alerts_namespace_and_pod_scope_its_triage(control_plane: ControlPlane, tmp_path: Path) -> None:
    cluster = two_gpu_nodes(control_plane)
    svc = service("qwen", NS)
    svc["spec"]["ports"][0]["targetPort"] = "api"  # the containers name their port "http": K8S-303
    apply(cluster, namespace(NS), vllm_deployment("qwen", NS, gpus=1, tolerate=True), svc)
    wait_for(
        "the qwen pod running", lambda: any(p["status"].get("phase") == "Running" for p in pods(cluster, NS, "qwen"))
    )
    wait_for("the Endpoints object", lambda: get(cluster, "endpoints", "-n", NS)["items"])
    (pod,) = [p["metadata"]["name"] for p in pods(cluster, NS, "qwen")]

    port = free_port()
    url = f"http://{LOOPBACK}:{port}"
    (tmp_path / "token").write_text(TOKEN)
    argv = [sys.executable, "-m", "diag.cli", "serve", f"--state-dir={tmp_path / 'state'}", "--every=1h",
            "--deadline=50s", f"--listen={LOOPBACK}:{port}", f"--alert-token-file={tmp_path / 'token'}",
            f"--kubeconfig={cluster.kubeconfig}", "--all-namespaces", "--no-local-gpu", "--scrapes=1"]  # fmt: skip
    with process("llmdiag serve", argv, tmp_path / "serve.log", f"{url}/readyz"):
        wait_for("the first scheduled triage", lambda: reports(url, "schedule"), 90)
        assert post_alert(url, {"namespace": NS, "pod": pod, "service": "qwen"}) == {"triaged": ["0f1e2d3c4b5a6978"]}
        wait_for("the alert's triage", lambda: reports(url, "alert"), 90)
        (kept,) = reports(url, "alert")
        assert kept["scope"] == {"namespace": NS, "pod": pod, "service": "qwen"}
        report = get_json(f"{url}/reports/{kept['id']}")
        assert report["context"]["kubernetes"]["namespaces"] == [NS]
        assert report["context"]["selectors"].get("pod") == pod, report["context"]
        want = expected(FIXTURE)["verdict"]
        assert (report["verdict"]["layer"], report["verdict"]["rule"]) == (want["layer"], want["rule"])
        assert {"trigger": "alert", "status": "fault", "layer": want["layer"], "rule": want["rule"],
                "severity": kept["verdict"]["severity"], "namespace": NS} in verdicts(url)  # fmt: skip
        assert post_alert(url, {"namespace": NS, "pod": pod, "service": "qwen"}) == {
            "deduplicated": ["0f1e2d3c4b5a6978"]
        }
        # the Service alone: its selector stands for the pods (a second alert of the same Service)
        assert post_alert(url, {"namespace": NS, "service": "qwen"}, "1a2b3c4d5e6f7081") == {
            "triaged": ["1a2b3c4d5e6f7081"]
        }
        wait_for("the second alert's triage", lambda: len(reports(url, "alert")) == 2, 90)
        latest = reports(url, "alert")[0]
        assert latest["scope"] == {"namespace": NS, "service": "qwen"} and latest["selector"] == "app=qwen"
        report = get_json(f"{url}/reports/{latest['id']}")
        assert report["context"]["selectors"]["label"] == "app=qwen", report["context"]
        assert (report["verdict"]["layer"], report["verdict"]["rule"]) == (want["layer"], want["rule"])
        assert http_get(f"{url}/healthz")[0] == 200
