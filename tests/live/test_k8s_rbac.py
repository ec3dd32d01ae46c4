"""deploy/'s RBAC against a REAL API server (tests/live/k8s_cluster.py): a full `llmdiag collect`
with the ServiceAccount's own token is allowed everything it asks; a role missing one permission
gives an error naming it; the role cannot write. deploy/'s manifests pass the server's validation
(`kubectl apply --dry-run=server`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from k8s_cluster import ControlPlane, write_kubeconfig

pytestmark = pytest.mark.live

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
ACCOUNT, ACCOUNT_NS = "llmdiag", "llmdiag"


def deploy_docs() -> list[dict]:
    return [d for f in sorted(DEPLOY.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]


def apply(cluster: ControlPlane, docs: list[dict], *flags: str) -> subprocess.CompletedProcess:
    return cluster.kubectl(
        "apply", *flags, "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs})
    )


def token_kubeconfig(cluster: ControlPlane, path: Path, account: str = ACCOUNT, ns: str = ACCOUNT_NS) -> Path:
    """A kubeconfig holding a TokenRequest token of the ServiceAccount: exactly what a pod of the Job has."""
    token = cluster.kubectl("create", "token", account, "-n", ns, "--duration=1h").stdout.strip()
    return write_kubeconfig(path, cluster.server, cluster.ca, token=token)


@pytest.fixture(scope="module")
def rbac(control_plane: ControlPlane) -> ControlPlane:
    docs = [
        d for d in deploy_docs() if d["kind"] in ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding")
    ]
    apply(control_plane, docs)
    return control_plane


def collect(kubeconfig: Path, out: Path) -> tuple[subprocess.CompletedProcess, dict]:
    result = subprocess.run(
        [sys.executable, "-m", "diag.cli", "collect", f"--kubeconfig={kubeconfig}", "--all-namespaces",
         "--no-local-gpu", "--scrapes=1", "--timeout=90", f"--out={out}"],
        cwd=REPO, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    manifest = out / "manifest.json"
    assert manifest.is_file(), f"collect wrote no manifest (exit {result.returncode}): {result.stderr[-2000:]}"
    return result, json.loads(manifest.read_text())


def refused(manifest: dict) -> dict[str, str]:
    return {name: s.get("detail") or "" for name, s in manifest["sources"].items()
            if s.get("status") == "failed" and "forbidden" in (s.get("detail") or "").lower()}  # fmt: skip


def test_the_role_allows_every_request_of_a_full_collect(rbac: ControlPlane, tmp_path: Path) -> None:
    kubeconfig = token_kubeconfig(rbac, tmp_path / "sa.kubeconfig")
    result, manifest = collect(kubeconfig, tmp_path / "bundle")
    assert result.returncode == 0, result.stderr[-2000:]
    assert not refused(manifest), refused(manifest)
    assert manifest["sources"]["k8s/nodes.json"]["status"] == "ok"
    assert manifest["sources"]["k8s/events.json"]["status"] == "ok"


def test_a_missing_permission_is_named(rbac: ControlPlane, tmp_path: Path) -> None:
    role = next(d for d in deploy_docs() if d["kind"] == "ClusterRole")
    narrowed = json.loads(json.dumps(role))
    narrowed["metadata"]["name"] = "llmdiag-reader-no-events"
    for rule in narrowed["rules"]:
        rule["resources"] = [r for r in rule["resources"] if r != "events"]
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "no-events", "namespace": ACCOUNT_NS}}
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "llmdiag-reader-no-events"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "llmdiag-reader-no-events"},
        "subjects": [{"kind": "ServiceAccount", "name": "no-events", "namespace": ACCOUNT_NS}],
    }  # fmt: skip
    apply(rbac, [narrowed, account, binding])
    kubeconfig = token_kubeconfig(rbac, tmp_path / "no-events.kubeconfig", account="no-events")
    _, manifest = collect(kubeconfig, tmp_path / "bundle")
    denied = refused(manifest)
    assert set(denied) == {"k8s/events.json"}, denied
    detail = denied["k8s/events.json"]
    assert '"events"' in detail and "list" in detail and "\n" not in detail, detail


@pytest.mark.parametrize(
    ("verb", "resource", "argv"),
    [
        ("create", "configmaps", ("create", "configmap", "written-by-llmdiag", "-n", "default", "--from-literal=a=b")),
        # objects the role may read: the refusal is of the write itself
        ("patch", "services", ("label", "service", "kubernetes", "-n", "default", "written-by=llmdiag")),
        ("delete", "services", ("delete", "service", "kubernetes", "-n", "default")),
    ],
    ids=["create", "patch", "delete"],
)
def test_the_role_cannot_write(
    rbac: ControlPlane, tmp_path: Path, verb: str, resource: str, argv: tuple[str, ...]
) -> None:
    kubeconfig = token_kubeconfig(rbac, tmp_path / "sa.kubeconfig")
    result = rbac.kubectl(*argv, kubeconfig=kubeconfig, check=False)
    assert result.returncode != 0
    assert "forbidden" in result.stderr.lower() and f"system:serviceaccount:{ACCOUNT_NS}:{ACCOUNT}" in result.stderr, (
        result.stderr
    )
    assert f'cannot {verb} resource "{resource}"' in result.stderr, result.stderr


def test_the_deploy_manifests_pass_server_validation(control_plane: ControlPlane) -> None:
    docs = deploy_docs()
    kinds = {d["kind"] for d in docs}
    assert {"ClusterRole", "ClusterRoleBinding", "ServiceAccount", "Job", "CronJob"} <= kinds
    # the namespace must exist for the server to validate what goes in it
    apply(control_plane, [d for d in docs if d["kind"] == "Namespace"])
    result = apply(control_plane, docs, "--dry-run=server")
    for doc in docs:
        assert f"{doc['kind'].lower()}" in result.stdout.lower() and doc["metadata"]["name"] in result.stdout, (
            result.stdout
        )
