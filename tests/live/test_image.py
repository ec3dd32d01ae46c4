"""The container image ci/image/build.py built from the Dockerfile's lines without a Docker daemon
(mmdebstrap, our wheel, an OCI image layout unpacked by umoci), run for real by crun as the image says:
uid 65532, a read-only root and a tmpfs on /tmp, as the chart's pods run it."""

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
from conftest import _absent
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
    image: Path, tmp_path: Path, argv: list[str], binds: dict[Path, str] | None = None
) -> subprocess.CompletedProcess:
    """`crun run` of the unpacked image with its own config (user, env, cwd), the root read-only."""
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
    config["linux"]["namespaces"] = [n for n in config["linux"]["namespaces"] if n["type"] != "cgroup"]
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
