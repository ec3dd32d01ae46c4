"""The chart's `llmdiag serve` (values `serve.*`), rendered by the real helm: the Deployment and its
Service, the ServiceMonitor, the PrometheusRule and the Grafana dashboard behind their values; the
alerting rules checked by `promtool check rules` and unit-tested by `promtool test rules`, the
dashboard's queries parsed by promtool; the objects pass the real API server's validation
(tests/live/k8s_cluster.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from k8s_cluster import ControlPlane
from test_helm_chart import CHART, RELEASE_NS, helm_env, of_kind, render

from diag.serve.metrics import Counters
from diag.serve.metrics import render as render_metrics

pytestmark = pytest.mark.live

SERVE = {"serve": {"enabled": True, "alertToken": {"existingSecret": "llmdiag-alert-token"},
                   "notifyUrl": {"existingSecret": "llmdiag-notify"}}}  # fmt: skip
MONITORED = {"serve": SERVE["serve"] | {"serviceMonitor": {"enabled": True, "labels": {"release": "kps"}},
                                        "prometheusRule": {"enabled": True}}}  # fmt: skip
JOB = "llmdiag-serve"  # the Service's name, the job label a ServiceMonitor's scrapes get


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("LLMDIAG_REQUIRE_LIVE") == "1":  # CI installs it: there, its absence fails
            pytest.fail("no promtool (apt-get install prometheus)", pytrace=False)
        pytest.skip("no promtool (apt-get install prometheus)")
    return found


def test_serve_is_off_by_default_and_on_it_is_a_deployment_and_its_service(helm: Path, tmp_path: Path) -> None:
    assert not of_kind(render(helm, tmp_path / "default"), "Deployment")
    docs = render(helm, tmp_path / "serve", values=SERVE)
    assert not of_kind(docs, "ServiceMonitor") and not of_kind(docs, "PrometheusRule")
    assert len(of_kind(docs, "CronJob")) == 1  # the CronJob stays, as its own value says
    (deployment,), (service,) = of_kind(docs, "Deployment"), of_kind(docs, "Service")
    pod = deployment["spec"]["template"]
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Always" and spec["serviceAccountName"] == "llmdiag"
    assert spec["securityContext"]["runAsNonRoot"] is True
    (container,) = spec["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["args"][:2] == ["serve", "--listen=0.0.0.0:8080"]
    assert "--all-namespaces" in container["args"] and "--state-dir=/var/lib/llmdiag" in container["args"]
    assert "--alert-token-file=/etc/llmdiag-alert/token" in container["args"]
    assert "--notify-url-file=/etc/llmdiag-notify/url" in container["args"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    secrets = {v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}
    assert secrets == {"llmdiag-alert-token", "llmdiag-notify"}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/etc/llmdiag-alert"]["readOnly"] and mounts["/etc/llmdiag-notify"]["readOnly"]
    assert not mounts["/var/lib/llmdiag"].get("readOnly")
    assert service["spec"]["ports"] == [{"name": "http", "port": 8080, "targetPort": "http"}]


def test_one_namespace_is_triaged_with_n_and_two_are_refused(helm: Path, tmp_path: Path) -> None:
    docs = render(helm, tmp_path / "one", values=SERVE | {"namespaces": ["llm-serving"]})
    (deployment,) = of_kind(docs, "Deployment")
    assert "--namespace=llm-serving" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    (tmp_path / "two.yaml").write_text(yaml.safe_dump(SERVE | {"namespaces": ["a", "b"]}))
    result = subprocess.run([str(helm), "template", "x", str(CHART), f"--values={tmp_path / 'two.yaml'}"],
                            capture_output=True, text=True, timeout=120, env=helm_env(tmp_path))  # fmt: skip
    assert result.returncode != 0 and "serve triages one namespace or all" in result.stderr


def test_the_service_monitor_scrapes_the_service(helm: Path, tmp_path: Path) -> None:
    docs = render(helm, tmp_path, values=MONITORED)
    (monitor,), (service,) = of_kind(docs, "ServiceMonitor"), of_kind(docs, "Service")
    assert monitor["metadata"]["labels"]["release"] == "kps"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "30s"}]


def rule_file(helm: Path, tmp_path: Path) -> Path:
    (rule,) = of_kind(render(helm, tmp_path / "render", values=MONITORED), "PrometheusRule")
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rule["spec"]))
    return path


def test_the_alerting_rules_pass_promtool_check(helm: Path, tmp_path: Path) -> None:
    checked = subprocess.run([promtool(), "check", "rules", str(rule_file(helm, tmp_path))],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    assert checked.returncode == 0 and "SUCCESS: 3 rules found" in checked.stdout, checked.stdout + checked.stderr


def verdict(status: str, severity: str, rule: str = "VLLM-101") -> str:
    return (f'llmdiag_verdict{{job="{JOB}",trigger="schedule",status="{status}",layer="vllm",rule="{rule}",'
            f'severity="{severity}",namespace="llm"}}')  # fmt: skip


def test_the_alerting_rules_fire_when_they_should_and_only_then(helm: Path, tmp_path: Path) -> None:
    critical_alert = [{"exp_labels": {"severity": "critical", "namespace": "llm"},
                       "exp_annotations": {"summary": "llmdiag has found a critical fault on the serving path for 15m",
                                           "description": 'The latest verdict is on llmdiag_verdict{namespace="llm"}; '
                                           "the report is at /reports of llmdiag-serve.llmdiag."}}]  # fmt: skip
    tests = {"rule_files": [str(rule_file(helm, tmp_path))], "evaluation_interval": "1m", "tests": [
        {   # critical for 20 minutes, one rule then another: it pages once 15 minutes have passed
            "interval": "1m",
            "input_series": [{"series": verdict("fault", "critical"), "values": "1x9 stale"},
                             {"series": verdict("fault", "critical", "GPU-201"), "values": "_x9 1x10"},
                             {"series": f'up{{job="{JOB}"}}', "values": "1x20"},
                             {"series": f'llmdiag_last_success_timestamp_seconds{{job="{JOB}",trigger="schedule"}}',
                              "values": "0+60x20"}],
            "alert_rule_test": [{"eval_time": "14m", "alertname": "LlmdiagCriticalVerdict", "exp_alerts": []},
                                {"eval_time": "16m", "alertname": "LlmdiagCriticalVerdict",
                                 "exp_alerts": critical_alert},
                                {"eval_time": "16m", "alertname": "LlmdiagTriageFailing", "exp_alerts": []},
                                {"eval_time": "16m", "alertname": "LlmdiagDown", "exp_alerts": []}],
        },
        {   # a warning, or a critical fault that clears for a cycle, never pages
            "interval": "1m",
            "input_series": [{"series": verdict("fault", "warning"), "values": "1x20"},
                             {"series": verdict("fault", "critical"), "values": "1x9 stale 1x9"}],
            "alert_rule_test": [{"eval_time": "19m", "alertname": "LlmdiagCriticalVerdict", "exp_alerts": []}],
        },
        {   # the triages stop succeeding at 0, then Prometheus cannot scrape llmdiag at all
            "interval": "1m",
            "input_series": [{"series": f'llmdiag_last_success_timestamp_seconds{{job="{JOB}",trigger="schedule"}}',
                              "values": "0x30"},
                             {"series": f'up{{job="{JOB}"}}', "values": "1x19 0x10"}],
            "alert_rule_test": [{"eval_time": "14m", "alertname": "LlmdiagTriageFailing", "exp_alerts": []},
                                {"eval_time": "16m", "alertname": "LlmdiagTriageFailing",
                                 "exp_alerts": [{"exp_labels": {"severity": "warning"}, "exp_annotations": {
                                     "summary": "llmdiag serve has not finished a scheduled triage for 600 seconds",
                                     "description": 'llmdiag_cycles_total{outcome="error"} counts the failed ones; '
                                     "its log says why."}}]},
                                {"eval_time": "23m", "alertname": "LlmdiagDown", "exp_alerts": []},
                                {"eval_time": "25m", "alertname": "LlmdiagDown", "exp_alerts": [
                                    {"exp_labels": {"severity": "warning", "job": JOB},
                                     "exp_annotations": {"summary": "Prometheus cannot scrape llmdiag serve "
                                                                    "(llmdiag-serve.llmdiag)"}}]}],
        },
    ]}  # fmt: skip
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests))
    result = subprocess.run([promtool(), "test", "rules", str(tmp_path / "tests.yaml")],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_helm_lint_is_clean_with_serve(helm: Path, tmp_path: Path) -> None:
    every = {"serve": MONITORED["serve"] | {"grafanaDashboard": {"enabled": True}}, "namespaces": ["llm-serving"]}
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(every))
    result = subprocess.run([str(helm), "lint", "--strict", str(CHART), f"--values={tmp_path / 'values.yaml'}"],
                            capture_output=True, text=True, timeout=120, env=helm_env(tmp_path))  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_deployment_and_service_pass_server_validation(
    helm: Path, control_plane: ControlPlane, tmp_path: Path
) -> None:
    docs = [d for d in render(helm, tmp_path, values=SERVE) if d["kind"] in ("Deployment", "Service")]
    control_plane.kubectl("apply", "-f", "-", stdin=json.dumps(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": RELEASE_NS}}))  # fmt: skip
    result = control_plane.kubectl("apply", "--dry-run=server", "-o", "json", "-f", "-",
                                   stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))  # fmt: skip
    accepted = json.loads(result.stdout)["items"]
    assert sorted(d["kind"] for d in accepted) == ["Deployment", "Service"]
    (deployment,) = [d for d in accepted if d["kind"] == "Deployment"]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["terminationMessagePolicy"] == "File"


def test_the_dashboard_reads_only_what_serve_exports_in_valid_promql(helm: Path, tmp_path: Path) -> None:
    values = {"serve": SERVE["serve"] | {"grafanaDashboard": {"enabled": True}}}
    (config_map,) = [d for d in of_kind(render(helm, tmp_path / "render", values=values), "ConfigMap")
                     if d["metadata"]["name"].endswith("-dashboard")]  # fmt: skip
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(config_map["data"]["llmdiag-serve.json"])
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(exprs) >= 10
    exported = set(re.findall(r"^# TYPE (\w+) ", render_metrics({}, Counters(), (0, 0)), re.MULTILINE))
    assert {n for e in exprs for n in re.findall(r"\bllmdiag_\w+", e)} <= exported
    # Grafana's variables as Prometheus would get them, each query a recording rule for promtool to parse
    queries = [e.replace("$__rate_interval", "5m").replace("$job", ".*") for e in exprs]
    rules = {"groups": [{"name": "dashboard", "rules": [{"record": f"dashboard:q{n}", "expr": q}
                                                        for n, q in enumerate(queries)]}]}  # fmt: skip
    (tmp_path / "queries.yaml").write_text(yaml.safe_dump(rules))
    checked = subprocess.run([promtool(), "check", "rules", str(tmp_path / "queries.yaml")],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
