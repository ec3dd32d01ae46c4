"""deploy/helm/llmdiag rendered by the real helm (ci/helm/build.sh): the objects it makes with default
and custom values, its ClusterRole equal to deploy/clusterrole.yaml, and (against the REAL API server
of tests/live/k8s_cluster.py) the rendered chart and every deploy/ manifest pass
`kubectl apply --dry-run=server`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from k8s_cluster import ControlPlane

pytestmark = pytest.mark.live

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
CHART = DEPLOY / "helm" / "llmdiag"
RELEASE_NS = "llmdiag"
Rule = tuple[str, str, str]  # (API group, resource, verb)


def render(helm: Path, tmp_path: Path, release: str = "llmdiag", values: dict | None = None) -> list[dict]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    argv = [str(helm), "template", release, str(CHART), f"--namespace={RELEASE_NS}"]
    if values is not None:
        (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
        argv.append(f"--values={tmp_path / 'values.yaml'}")
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=helm_env(tmp_path))
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def helm_env(tmp_path: Path) -> dict[str, str]:
    """helm keeps its config, cache and data under these; nothing of the user's is read."""
    return {"PATH": "/usr/bin:/bin", "HELM_CONFIG_HOME": str(tmp_path / "helm-config"),
            "HELM_CACHE_HOME": str(tmp_path / "helm-cache"), "HELM_DATA_HOME": str(tmp_path / "helm-data")}  # fmt: skip


def of_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def rules(role: dict) -> set[Rule]:
    return {
        (g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]
    }


def deploy_role() -> dict:
    (role,) = [d for d in yaml.safe_load_all((DEPLOY / "clusterrole.yaml").read_text()) if d]
    return role


def pod_of(run: dict) -> dict:
    spec = run["spec"]["jobTemplate"]["spec"] if run["kind"] == "CronJob" else run["spec"]
    return spec["template"]["spec"]


def assert_locked_down(pod: dict, account: str) -> None:
    assert pod["serviceAccountName"] == account and pod["restartPolicy"] == "Never"
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    (container,) = pod["containers"]
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True and context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    volume = pod["volumes"][0]
    assert "emptyDir" in volume and container["volumeMounts"][0] == {"name": volume["name"], "mountPath": "/tmp"}
    assert all(m.get("readOnly") for m in container["volumeMounts"][1:])
    assert {"name": "HOME", "value": "/tmp"} in container["env"]
    assert container["command"] == ["llmdiag"] and container["args"][0] == "triage"


def test_the_default_chart_is_the_cronjob_of_deploy(helm: Path, tmp_path: Path) -> None:
    docs = render(helm, tmp_path)
    assert sorted(d["kind"] for d in docs) == ["ClusterRole", "ClusterRoleBinding", "CronJob", "ServiceAccount"]
    (account,), (role,), (binding,), (cron,) = (
        of_kind(docs, k) for k in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "CronJob")
    )
    assert role["rules"] == deploy_role()["rules"]  # verb for verb, in the same order
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": RELEASE_NS}
    ]
    assert account["metadata"]["namespace"] == cron["metadata"]["namespace"] == RELEASE_NS
    deploy_cron = next(d for d in yaml.safe_load_all((DEPLOY / "cronjob-triage.yaml").read_text()) if d)
    assert cron["spec"]["schedule"] == deploy_cron["spec"]["schedule"] == "*/15 * * * *"
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    pod = pod_of(cron)
    assert_locked_down(pod, account["metadata"]["name"])
    (container,) = pod["containers"]
    assert container["args"] == ["triage", "--all-namespaces", "--output=json", "--no-local-gpu"]
    assert container["image"] == "llmdiag:0.2.0"  # the chart's appVersion, the Dockerfile's build tag
    assert container["env"] == [{"name": "HOME", "value": "/tmp"}] and len(pod["volumes"]) == 1  # no config, no token
    assert container["resources"] == {
        "requests": {"cpu": "100m", "memory": "256Mi"},
        "limits": {"cpu": "1", "memory": "1Gi"},
    }


def test_custom_namespaces_schedule_and_a_job(helm: Path, tmp_path: Path) -> None:
    values = {
        "namespaces": ["llm-serving", "batch"],
        "schedule": "7 * * * *",
        "job": {"enabled": True},
        "triage": {"prometheusUrl": "http://prometheus.monitoring:9090", "extraArgs": ["--since", "1h"]},
        "image": {"repository": "registry.example/llmdiag", "tag": "0.1.0-rc1"},
        "serviceAccount": {"name": "triage-bot"},
    }
    docs = render(helm, tmp_path, release="ops", values=values)
    crons, jobs = of_kind(docs, "CronJob"), of_kind(docs, "Job")
    assert [c["metadata"]["name"] for c in crons] == ["ops-llmdiag-llm-serving", "ops-llmdiag-batch"]
    assert [j["metadata"]["name"] for j in jobs] == ["ops-llmdiag-llm-serving", "ops-llmdiag-batch"]
    assert {c["spec"]["schedule"] for c in crons} == {"7 * * * *"}
    for run, ns in zip(crons + jobs, ["llm-serving", "batch"] * 2, strict=True):
        pod = pod_of(run)
        assert_locked_down(pod, "triage-bot")
        (container,) = pod["containers"]
        assert container["args"] == ["triage", f"--namespace={ns}", "--output=json", "--no-local-gpu",
                                     "--prometheus-url=http://prometheus.monitoring:9090", "--since", "1h"]  # fmt: skip
        assert container["image"] == "registry.example/llmdiag:0.1.0-rc1"
    (account,) = of_kind(docs, "ServiceAccount")
    (binding,) = of_kind(docs, "ClusterRoleBinding")
    assert account["metadata"]["name"] == "triage-bot" == binding["subjects"][0]["name"]
    (role,) = of_kind(docs, "ClusterRole")
    assert role["metadata"]["name"] == "ops-llmdiag-reader" == binding["roleRef"]["name"]


def test_without_pod_exec_the_role_loses_exactly_that(helm: Path, tmp_path: Path) -> None:
    (role,) = of_kind(render(helm, tmp_path, values={"rbac": {"podExec": False}}), "ClusterRole")
    assert rules(deploy_role()) - rules(role) == {("", "pods/exec", "get"), ("", "pods/exec", "create")}
    assert rules(role) < rules(deploy_role())


def test_the_config_value_is_a_configmap_passed_with_config(helm: Path, tmp_path: Path) -> None:
    config = {"suppress": [{"rule": "VLLM-113", "reason": "known, ticket OPS-42"}], "settings": {"kv_cache_high": 0.95}}
    docs = render(helm, tmp_path, values={"config": config, "namespaces": ["llm-serving"], "job": {"enabled": True}})
    (configmap,) = of_kind(docs, "ConfigMap")
    assert configmap["metadata"] == {**configmap["metadata"], "name": "llmdiag-config", "namespace": RELEASE_NS}
    assert yaml.safe_load(configmap["data"]["llmdiag.yaml"]) == config
    for run in of_kind(docs, "CronJob") + of_kind(docs, "Job"):
        pod = pod_of(run)
        assert_locked_down(pod, "llmdiag")
        (container,) = pod["containers"]
        assert container["args"][-1] == "--config=/etc/llmdiag/llmdiag.yaml"
        assert {"name": "config", "mountPath": "/etc/llmdiag", "readOnly": True} in container["volumeMounts"]
        assert {"name": "config", "configMap": {"name": "llmdiag-config"}} in pod["volumes"]
    # llmdiag itself accepts the file the pod will read
    (tmp_path / "llmdiag.yaml").write_text(configmap["data"]["llmdiag.yaml"])
    llmdiag = Path(sys.executable).parent / "llmdiag"
    argv = [
        str(llmdiag),
        "analyze",
        str(REPO / "fixtures" / "demo"),
        "-o",
        "json",
        f"--config={tmp_path / 'llmdiag.yaml'}",
    ]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert json.loads(result.stdout)["config"]["path"] == str(tmp_path / "llmdiag.yaml")


def test_the_prometheus_token_comes_from_the_existing_secret(helm: Path, tmp_path: Path) -> None:
    values = {"triage": {"prometheusService": "monitoring/prometheus-k8s:9090",
                         "prometheusToken": {"existingSecret": "prometheus-reader", "key": "bearer"}}}  # fmt: skip
    (cron,) = of_kind(render(helm, tmp_path, values=values), "CronJob")
    (container,) = pod_of(cron)["containers"]
    token = {
        "name": "LLMDIAG_PROMETHEUS_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "prometheus-reader", "key": "bearer"}},
    }
    assert token in container["env"]  # the variable --prometheus-token falls back to: in no argument list
    assert container["args"][-1] == "--prometheus-service=monitoring/prometheus-k8s:9090"
    assert not [a for a in container["args"] if a.startswith("--prometheus-token")]


def test_extra_args_and_resources_reach_the_container(helm: Path, tmp_path: Path) -> None:
    resources = {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}}
    values = {"triage": {"extraArgs": ["--since", "1h", "--min-severity=warning"]}, "resources": resources}
    (cron,) = of_kind(render(helm, tmp_path, values={**values}), "CronJob")
    (container,) = pod_of(cron)["containers"]
    assert container["args"][-3:] == ["--since", "1h", "--min-severity=warning"]
    # helm merges a map value into the default: setting limits.memory keeps the default limits.cpu
    assert container["resources"] == {"requests": resources["requests"], "limits": {"cpu": "1", "memory": "2Gi"}}


def test_namespace_scope_grants_pod_exec_only_in_the_triaged_namespaces(helm: Path, tmp_path: Path) -> None:
    docs = render(helm, tmp_path, values={"rbac": {"scope": "namespace"}, "namespaces": ["llm-serving", "batch"]})
    (role,) = of_kind(docs, "ClusterRole")
    exec_rules = {("", "pods/exec", "get"), ("", "pods/exec", "create")}
    assert rules(role) == rules(deploy_role()) - exec_rules  # cluster-wide: the reads only
    roles, bindings = of_kind(docs, "Role"), of_kind(docs, "RoleBinding")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["batch", "llm-serving"]
    for namespaced in roles:
        assert rules(namespaced) == exec_rules
        (binding,) = [b for b in bindings if b["metadata"]["namespace"] == namespaced["metadata"]["namespace"]]
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                      "name": namespaced["metadata"]["name"]}  # fmt: skip
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "llmdiag", "namespace": RELEASE_NS}]
    without_exec = render(helm, tmp_path / "no-exec", values={"rbac": {"scope": "namespace", "podExec": False},
                                                               "namespaces": ["llm-serving"]})  # fmt: skip
    assert not of_kind(without_exec, "Role") and not of_kind(without_exec, "RoleBinding")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"rbac": {"scope": "namespace"}}, "list them in namespaces"),
        ({"rbac": {"scope": "namespaces"}}, 'rbac.scope must be cluster or namespace, not "namespaces"'),
    ],
)
def test_values_that_cannot_work_are_refused(helm: Path, tmp_path: Path, values: dict, message: str) -> None:
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    result = subprocess.run([str(helm), "template", "x", str(CHART), f"--values={tmp_path / 'values.yaml'}"],
                            capture_output=True, text=True, timeout=120, env=helm_env(tmp_path))  # fmt: skip
    assert result.returncode != 0 and message in result.stderr, result.stderr


def test_helm_lint_is_clean(helm: Path, tmp_path: Path) -> None:
    every_value = {"namespaces": ["llm-serving"], "rbac": {"scope": "namespace"}, "job": {"enabled": True},
                   "config": {"suppress": [{"rule": "VLLM-113"}]},
                   "triage": {"prometheusToken": {"existingSecret": "t"}}}  # fmt: skip
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(every_value))
    for extra in ([], [f"--values={tmp_path / 'values.yaml'}"]):
        result = subprocess.run([str(helm), "lint", "--strict", str(CHART), *extra], capture_output=True, text=True,
                                timeout=120, env=helm_env(tmp_path))  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr


def test_the_chart_and_deploy_pass_server_validation(helm: Path, control_plane: ControlPlane, tmp_path: Path) -> None:
    manifests = sorted(DEPLOY.rglob("*.yaml"))
    kube = [f for f in manifests if CHART not in f.parents and f.parent.name != "krew"]
    assert {f.name for f in kube} >= {"clusterrole.yaml", "job-triage.yaml", "cronjob-triage.yaml"}
    docs = [d for f in kube for d in yaml.safe_load_all(f.read_text()) if d]
    # releases named apart from deploy/'s objects: one apply holds each object once
    docs += render(helm, tmp_path / "default", release="chart")
    custom = {"namespaces": ["llm-serving"], "schedule": "0 */6 * * *", "job": {"enabled": True},
              "rbac": {"scope": "namespace"}, "config": {"suppress": [{"rule": "VLLM-113"}]},
              "triage": {"prometheusToken": {"existingSecret": "prometheus-token"}}}  # fmt: skip
    docs += render(helm, tmp_path / "custom", release="ops", values=custom)
    kinds = {d["kind"] for d in docs}
    assert {"ClusterRole", "ClusterRoleBinding", "ServiceAccount", "Job", "CronJob", "Role", "ConfigMap"} <= kinds
    assert len({(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in docs}) == len(docs)

    # the namespaces must exist for the server to validate what goes in them
    for namespace in (RELEASE_NS, "llm-serving"):
        control_plane.kubectl(
            "apply",
            "-f",
            "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
        )
    result = control_plane.kubectl("apply", "--dry-run=server", "-o", "json", "-f", "-",
                                   stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))  # fmt: skip
    accepted = json.loads(result.stdout)["items"]

    def names(objects: list[dict]) -> list[tuple[str, str]]:
        return sorted((d["kind"], d["metadata"]["name"]) for d in objects)

    assert names(accepted) == names(docs)
    # defaulted by the server, so validated by it: a field the schema did not know would have failed the apply
    for run in (d for d in accepted if d["kind"] in ("Job", "CronJob")):
        assert pod_of(run)["containers"][0]["terminationMessagePolicy"] == "File"
