"""The container image ci/image/build.py built from the Dockerfile's lines without a Docker daemon
(mmdebstrap, our wheel, an OCI image layout unpacked by umoci), run for real by crun as the image says:
uid 65532, a read-only root and a tmpfs on /tmp, as the chart's pods run it; on a bundle, and in
triage of the REAL control plane (tests/live/k8s_cluster.py) with the ServiceAccount token of
deploy/'s RBAC."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml
from conftest import _absent
from k8s_cluster import ControlPlane, write_kubeconfig
from live_services import ServiceUnavailable

pytestmark = pytest.mark.live

REPO = Path(__file__).resolve().parents[2]
(VERSION,) = re.findall(r'^version = "([^"]+)"$', (REPO / "pyproject.toml").read_text(), re.MULTILINE)


@pytest.fixture(scope="module")
def image() -> Path:
    """$LLMDIAG_IMAGE: the folder ci/image/build.py printed (.ci/run builds it and sets it)."""
    try:
        path = Path(os.environ.get("LLMDIAG_IMAGE", ""))
        if not os.environ.get("LLMDIAG_IMAGE") or not (path / "done").exists():
            raise ServiceUnavailable("no image built (run ci/image/build.py and set LLMDIAG_IMAGE)")
        if shutil.which("crun") is None or os.geteuid() != 0:
            raise ServiceUnavailable("crun and root are needed to run the image")
    except ServiceUnavailable as e:
        _absent(e)
    wheel = (path / "done").read_text().strip()
    assert wheel == f"llmdiag-{VERSION}-py3-none-any.whl", wheel  # the image of this tree's version
    return path


def crun(
    image: Path, tmp_path: Path, argv: list[str], binds: dict[Path, str] | None = None, host_network: bool = False
) -> subprocess.CompletedProcess:
    """`crun run` of the unpacked image with its own config (user, env, cwd), the root read-only; with
    host_network, in this host's network namespace (the control plane listens on its loopback)."""
    config = json.loads((image / "bundle" / "config.json").read_text())
    config["root"] = {"path": str(image / "bundle" / "rootfs"), "readonly": True}
    config["process"]["args"] = argv
    config["process"]["terminal"] = False
    config["mounts"] = [m for m in config["mounts"] if m["destination"] != "/sys/fs/cgroup"]
    config["mounts"].append({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
                             "options": ["nosuid", "nodev", "mode=1777", "size=64m"]})  # fmt: skip
    for source, target in (binds or {}).items():
        config["mounts"].append({"destination": target, "type": "bind", "source": str(source),
                                 "options": ["rbind", "ro"]})  # fmt: skip
    # no cgroup of its own (see the unified mount below): no resource limits, no cgroup namespace
    config["linux"].pop("resources", None)
    dropped = {"cgroup", "network"} if host_network else {"cgroup"}
    config["linux"]["namespaces"] = [n for n in config["linux"]["namespaces"] if n["type"] not in dropped]
    bundle = tmp_path / f"bundle-{uuid.uuid4().hex[:8]}"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps(config))
    run = ["crun", "--cgroup-manager=disabled", "run", "--bundle", str(bundle), f"llmdiag-test-{bundle.name}"]
    if Path("/sys/fs/cgroup/unified").is_dir():
        # A hybrid cgroup host (v1 controllers, v2 at /sys/fs/cgroup/unified), which crun refuses: in a
        # mount namespace of its own, crun sees a unified cgroup2 hierarchy at /sys/fs/cgroup.
        run = ["unshare", "--mount", "--propagation=private", "sh", "-c",
               'mount -t cgroup2 none /sys/fs/cgroup && exec "$@"', "sh", *run]  # fmt: skip
    return subprocess.run(run, capture_output=True, text=True, timeout=300)


def test_the_layout_holds_the_dockerfiles_config_and_its_digests(image: Path) -> None:
    oci = image / "oci"

    def blob(digest: str) -> Path:
        return oci / "blobs" / "sha256" / digest.split(":")[1]

    (entry,) = json.loads((oci / "index.json").read_text())["manifests"]
    assert entry["annotations"]["org.opencontainers.image.ref.name"] == VERSION
    manifest = json.loads(blob(entry["digest"]).read_bytes())
    for descriptor in [entry, manifest["config"], *manifest["layers"]]:
        data = blob(descriptor["digest"]).read_bytes()
        assert "sha256:" + hashlib.sha256(data).hexdigest() == descriptor["digest"] and len(data) == descriptor["size"]
    config = json.loads(blob(manifest["config"]["digest"]).read_bytes())
    assert config["rootfs"]["diff_ids"] == [manifest["layers"][0]["digest"]]  # uncompressed: the same digest
    assert config["config"]["User"] == "65532:65532" and config["config"]["Entrypoint"] == ["llmdiag"]
    assert "HOME=/tmp" in config["config"]["Env"] and config["config"]["WorkingDir"] == "/tmp"


def test_the_image_runs_as_65532_with_a_read_only_root(image: Path, tmp_path: Path) -> None:
    who = crun(image, tmp_path, ["python3", "-c", "import os, sys; print(os.getuid(), os.getgid(), sys.prefix)"])
    assert who.returncode == 0 and who.stdout.split() == ["65532", "65532", "/opt/llmdiag"], who.stdout + who.stderr
    version = crun(image, tmp_path, ["llmdiag", "--version"])
    assert version.returncode == 0 and version.stdout == f"llmdiag {VERSION}\n", version.stdout + version.stderr
    result = crun(image, tmp_path, ["llmdiag", "analyze", "/bundle", "-o", "json"],
                  binds={REPO / "fixtures" / "demo": "/bundle"})  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]  # the demo's critical fault
    report = json.loads(result.stdout)
    assert report["verdict"]["layer"] == "kubernetes" and report["context"]["tool_version"] == VERSION
    assert "Traceback" not in result.stderr and "ermission denied" not in result.stderr, result.stderr
    refused = crun(image, tmp_path, ["sh", "-c", "touch /opt/llmdiag/x"])
    assert refused.returncode != 0 and "Read-only file system" in refused.stderr


def test_the_image_triages_the_real_control_plane_with_the_service_account(
    image: Path, control_plane: ControlPlane, tmp_path: Path
) -> None:
    docs = [d for f in sorted((REPO / "deploy").glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
    rbac = [d for d in docs if d["kind"] in ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding")]
    control_plane.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": rbac}))
    token = control_plane.kubectl("create", "token", "llmdiag", "-n", "llmdiag", "--duration=1h").stdout.strip()
    secrets = tmp_path / "secrets"  # what the pod has: the token and the cluster's CA, readable by 65532
    secrets.mkdir(mode=0o755)
    shutil.copy(control_plane.ca, secrets / "ca.crt")
    write_kubeconfig(secrets / "kubeconfig", control_plane.server, Path("/var/run/llmdiag/ca.crt"), token=token)
    for path in (secrets / "ca.crt", secrets / "kubeconfig"):
        path.chmod(0o644)
    argv = ["llmdiag", "triage", "--kubeconfig=/var/run/llmdiag/kubeconfig", "--all-namespaces", "--no-local-gpu",
            "--scrapes=1", "--timeout=90", "--output=json"]  # fmt: skip
    result = crun(image, tmp_path, argv, binds={secrets: "/var/run/llmdiag"}, host_network=True)
    assert result.returncode in (0, 1, 2, 3) and result.stdout, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert (
        report["context"]["kubernetes"]["server"] == control_plane.server
        and report["context"]["tool_version"] == VERSION
    )
    sources = report["sources"]
    assert sources["k8s/pods.json"]["status"] == sources["k8s/nodes.json"]["status"] == "ok", sources
    assert not [n for n, s in sources.items() if "forbidden" in (s.get("detail") or "").lower()], sources
