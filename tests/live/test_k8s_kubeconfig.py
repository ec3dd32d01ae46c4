"""llmdiag's own kubeconfig loader and transport (diag.collect.kubeconfig) against the `kubernetes`
package's, on the same kubeconfigs and the same REAL API server (tests/live/k8s_cluster.py): client
certificates as files and as data, the CA as a file, as data and skipped, a ServiceAccount token inline,
in a file and from an exec plugin, and an HTTP proxy. Both must read the same objects, as the same user."""

from __future__ import annotations

import base64
import json
import select
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from k8s_cluster import ControlPlane
from kubernetes import client, config

from diag.collect.kube import KubeAccess, KubeError

pytestmark = pytest.mark.live

ACCOUNT, NAMESPACE = "kubeconfig-diff", "kubeconfig-diff"


class _ConnectProxy:
    """An HTTP CONNECT proxy on loopback that counts the tunnels it opened."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.tunnels = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                peer, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._tunnel, args=(peer,), daemon=True).start()

    def _tunnel(self, peer: socket.socket) -> None:
        request = b""
        while b"\r\n\r\n" not in request:
            chunk = peer.recv(4096)
            if not chunk:
                peer.close()
                return
            request += chunk
        method, target = request.split(b" ", 2)[:2]
        host, _, port = target.decode().rpartition(":")
        if method != b"CONNECT" or host != "127.0.0.1":
            peer.sendall(b"HTTP/1.1 403 Forbidden\r\n\r\n")
            peer.close()
            return
        upstream = socket.create_connection((host, int(port)))
        self.tunnels += 1
        peer.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        pair = {peer: upstream, upstream: peer}
        try:
            while True:
                ready, _, _ = select.select(list(pair), [], [], 30)
                if not ready:
                    return
                for end in ready:
                    data = end.recv(65536)
                    if not data:
                        return
                    pair[end].sendall(data)
        finally:
            peer.close()
            upstream.close()


@pytest.fixture(scope="module")
def proxy() -> Iterator[_ConnectProxy]:
    running = _ConnectProxy()
    yield running
    running.listener.close()


@pytest.fixture(scope="module")
def token(control_plane: ControlPlane) -> str:
    control_plane.kubectl("create", "namespace", NAMESPACE, check=False)
    control_plane.kubectl("create", "serviceaccount", ACCOUNT, "-n", NAMESPACE, check=False)
    control_plane.kubectl("create", "clusterrolebinding", ACCOUNT, "--clusterrole=view",
                          f"--serviceaccount={NAMESPACE}:{ACCOUNT}", check=False)  # fmt: skip
    return control_plane.kubectl("create", "token", ACCOUNT, "-n", NAMESPACE, "--duration=1h").stdout.strip()


def _kubeconfig(path: Path, cluster: dict, user: dict) -> Path:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "live",
        "clusters": [{"name": "live", "cluster": cluster}], "users": [{"name": "me", "user": user}],
        "contexts": [{"name": "live", "context": {"cluster": "live", "user": "me", "namespace": NAMESPACE}}],
    }))  # fmt: skip
    return path


def _variants(control_plane: ControlPlane, token: str, proxy: _ConnectProxy, folder: Path) -> dict[str, Path]:
    admin = yaml.safe_load(control_plane.kubeconfig.read_text())["users"][0]["user"]
    cert, key = Path(admin["client-certificate"]), Path(admin["client-key"])
    ca_file = {"server": control_plane.server, "certificate-authority": str(control_plane.ca)}
    ca_data = {"server": control_plane.server,
               "certificate-authority-data": base64.b64encode(control_plane.ca.read_bytes()).decode()}  # fmt: skip
    (folder / "sa-token").write_text(token)
    plugin = folder / "get-token"
    answer = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": {"token": token}}
    plugin.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(answer)}\nEOF\n")
    plugin.chmod(0o755)
    cases = {
        "certificate files": (ca_file, {"client-certificate": str(cert), "client-key": str(key)}),
        "certificate data": (
            ca_data,
            {
                "client-certificate-data": base64.b64encode(cert.read_bytes()).decode(),
                "client-key-data": base64.b64encode(key.read_bytes()).decode(),
            },
        ),  # fmt: skip
        "token": (ca_data, {"token": token}),
        "token file": (ca_file, {"tokenFile": str(folder / "sa-token")}),
        "exec plugin": (ca_file, {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin)}}),
        "insecure": ({"server": control_plane.server, "insecure-skip-tls-verify": True}, {"token": token}),
        "proxy": ({**ca_file, "proxy-url": proxy.url}, {"token": token}),
    }
    return {name: _kubeconfig(folder / name.replace(" ", "-"), *pair) for name, pair in cases.items()}


def _package_reads(path: Path) -> tuple[str, list[str]]:
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(path), client_configuration=configuration, persist_config=False)
    api = client.CoreV1Api(client.ApiClient(configuration))
    uid = api.read_namespace("kube-system").metadata.uid
    return uid, sorted(n.metadata.name for n in api.list_namespace().items)


def _our_reads(path: Path) -> tuple[str, list[str]]:
    kube = KubeAccess(str(path))
    assert kube.preflight(10) is None
    uid = json.loads(kube._get("read", "/api/v1/namespaces/kube-system", {}))["metadata"]["uid"]
    listed = json.loads(kube._get("list", "/api/v1/namespaces", {"limit": "500"}))["items"]
    return uid, sorted(n["metadata"]["name"] for n in listed)


def test_both_loaders_read_the_same_objects_on_every_kubeconfig(
    control_plane: ControlPlane, token: str, proxy: _ConnectProxy, tmp_path: Path
) -> None:
    for name, path in _variants(control_plane, token, proxy, tmp_path).items():
        before = proxy.tunnels
        ours = _our_reads(path)
        assert ours == _package_reads(path), name
        assert "kube-system" in ours[1], name
        if name == "proxy":
            assert proxy.tunnels >= before + 2, "both clients went through the proxy"


def test_a_wrong_ca_is_refused_by_both(control_plane: ControlPlane, token: str, tmp_path: Path) -> None:
    other = tmp_path / "other-ca.crt"
    other.write_text(Path("/etc/ssl/certs/ca-certificates.crt").read_text())
    path = _kubeconfig(tmp_path / "config", {"server": control_plane.server, "certificate-authority": str(other)},
                       {"token": token})  # fmt: skip
    kube = KubeAccess(str(path))
    assert "certificate verify failed" in (kube.preflight(10) or "")
    with pytest.raises(KubeError, match="certificate verify failed"):
        kube.list_json("pods", NAMESPACE)
    with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        _package_reads(path)


def test_an_insecure_kubeconfig_reads_without_a_warning_a_request(
    control_plane: ControlPlane, token: str, proxy: _ConnectProxy, tmp_path: Path
) -> None:
    """kubectl reads through insecure-skip-tls-verify silently; urllib3 would warn on every request."""
    path = _variants(control_plane, token, proxy, tmp_path)["insecure"]
    script = (
        "import sys; from diag.collect.kube import KubeAccess; k = KubeAccess(sys.argv[1]);"
        " assert k.preflight(10) is None; k._get('list', '/api/v1/namespaces', {'limit': '1'})"
    )
    ran = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0 and ran.stderr == "", ran.stderr
