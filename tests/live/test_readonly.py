"""llmdiag only reads: checked on the requests it really sends (to the replay server, over real HTTP,
with the real `kubernetes` client, which records each request and can refuse any), and
deploy/clusterrole.yaml grants exactly what a full collection uses. tests/live/test_k8s_rbac.py checks
the same role against the real API server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.replay.harness import REPO, VLLM_POD, collect_from, recorded_cluster
from tests.replay.server import RecordedRequest, ReplayServer
from tests.replay.upstream import RecordedHttp, vllm_routes

DEPLOY = REPO / "deploy"
READ_VERBS = {"get", "list", "watch"}  # what the role grants on objects; llmdiag itself lists and gets
Rule = tuple[str, str, str]  # (API group, resource[/subresource], verb)


def _full_collection(tmp_path: Path, forbidden: frozenset[str] = frozenset()) -> list[RecordedRequest]:
    """Everything `llmdiag collect -A` does: every kind, logs, both proxies, exec; what the server saw."""
    cluster = recorded_cluster()
    with ReplayServer(cluster, forbidden=forbidden) as server, RecordedHttp(vllm_routes()) as vllm:
        cluster.upstreams[("pods", *VLLM_POD)] = vllm.url
        collect_from(server, tmp_path, all_namespaces=True)
        return server.seen()


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[RecordedRequest]]:
    # Endpoints denied in the second run: llmdiag then reads EndpointSlices, which the role must allow too.
    full = _full_collection(tmp_path_factory.mktemp("full"))
    fallback = _full_collection(tmp_path_factory.mktemp("fallback"), forbidden=frozenset({"endpoints"}))
    yield full + fallback


def _rules_used(requests: list[RecordedRequest]) -> set[Rule]:
    """The RBAC checks the requests need. The exec websocket upgrade is a GET, authorized as "get" on
    pods/exec, and since Kubernetes 1.35 also as "create" (compound authorization, KEP-4006)."""
    used: set[Rule] = set()
    for r in requests:
        if r.path == "/version":  # the pre-flight: every user may read it (ClusterRole system:public-info-viewer)
            continue
        assert r.info is not None, f"not an API path: {r.path}"
        resource = f"{r.info.resource}/{r.info.subresource}" if r.info.subresource else r.info.resource
        used.add((r.info.api_group, resource, r.info.verb))
        if r.upgrade:
            used.add((r.info.api_group, resource, "create"))
    return used


def _rules_granted() -> set[Rule]:
    (role,) = [d for d in yaml.safe_load_all((DEPLOY / "clusterrole.yaml").read_text()) if d]
    assert role["kind"] == "ClusterRole"
    return {
        (g, res, v)
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for res in rule["resources"]
        for v in rule["verbs"]
    }


def test_only_reads_are_sent(seen: list[RecordedRequest]) -> None:
    assert {r.method for r in seen} == {"GET"}
    assert {r.info.verb for r in seen if r.info} == {"get", "list"}
    upgrades = {r.info.subresource for r in seen if r.upgrade and r.info}
    assert upgrades == {"exec"}  # the one "create" in RBAC terms: a fixed command, no stdin, no tty
    assert all(r.query.get("stdin") == ["false"] and r.query.get("tty") == ["false"] for r in seen if r.upgrade)
    assert not [r for r in seen if r.query.get("watch") in (["true"], ["1"])]


def test_the_clusterrole_grants_exactly_what_a_full_collection_uses(seen: list[RecordedRequest]) -> None:
    used, granted = _rules_used(seen), _rules_granted()
    assert used <= granted, f"used but not granted: {sorted(used - granted)}"
    # every resource the role names is one llmdiag reads: nothing granted "just in case"
    assert {(g, res) for g, res, _ in granted} == {(g, res) for g, res, _ in used}
    for group, resource in {(g, res) for g, res, _ in granted}:
        verbs = {v for g, res, v in granted if (g, res) == (group, resource)}
        if "/" in resource or resource == "secrets":  # logs, proxies, exec, Secrets: exactly the verbs used
            assert verbs == {v for g, res, v in used if (g, res) == (group, resource)}, resource
        else:  # objects: read verbs only
            assert verbs == READ_VERBS, resource
    assert not [rule for rule in granted if "*" in rule]


def test_the_deploy_manifests_fit_together() -> None:
    docs = [d for f in sorted(DEPLOY.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
    by_kind = {d["kind"]: d for d in docs}
    account, binding, job = by_kind["ServiceAccount"], by_kind["ClusterRoleBinding"], by_kind["Job"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": by_kind["ClusterRole"]["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": account["metadata"]["namespace"]}
    ]
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    assert job["metadata"]["namespace"] == account["metadata"]["namespace"] == by_kind["Namespace"]["metadata"]["name"]
    (container,) = pod["containers"]
    assert container["command"] == ["llmdiag"] and container["args"][0] in ("triage", "collect")
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_a_denied_kind_is_one_failed_source_and_the_rest_goes_on(tmp_path: Path) -> None:
    with ReplayServer(recorded_cluster(), forbidden=frozenset({"nodes", "pods/log", "pods/exec"})) as server:
        bundle, results = collect_from(server, tmp_path)
    by_name = {r.name: r for r in results}
    nodes = by_name["k8s/nodes.json"]
    assert nodes.status == "failed" and "forbidden" in nodes.detail and "\n" not in nodes.detail
    assert "k8s/nodes.json" not in bundle.files and "k8s/pods.json" in bundle.files
    logs = [r for r in results if r.name.startswith("k8s/logs/") and r.status != "skipped"]
    assert logs and all(r.status == "failed" and "forbidden" in r.detail for r in logs)
    gpu = [r for r in results if r.name.startswith("gpu/")]
    assert len(gpu) == 4 and all(r.status == "failed" for r in gpu)  # the exec websocket was refused
    assert all('cannot get resource "pods/exec" in API group "" in the namespace "llm"' in r.detail for r in gpu)
    assert all(r.detail.endswith("(llmdiag's read-only ClusterRole is deploy/clusterrole.yaml)") for r in gpu)
    manifest = json.loads(bundle.files["manifest.json"])
    assert manifest["sources"]["k8s/nodes.json"]["status"] == "failed"
