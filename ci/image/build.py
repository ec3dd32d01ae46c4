"""Builds llmdiag's container image without a Docker daemon, from the Dockerfile's own lines:

1. a Debian root filesystem by mmdebstrap: the Dockerfile's Debian release (`debian:bookworm-slim` ->
   bookworm) with the packages of its final stage's `apt-get install` (cached once per machine);
2. our wheel's dependencies installed, inside that root (chroot), into the Dockerfile's virtualenv
   (`python3 -m venv /opt/llmdiag`) by the virtualenv's own pip, from a wheelhouse that pip on this
   machine fills from the index (this Python must be the image's: same minor version); that root is
   kept while the wheel's Requires-Dist stay the same; then our wheel, by the same pip;
3. an OCI image layout (one layer, the config from the Dockerfile's ENV, USER, WORKDIR, ENTRYPOINT and
   CMD), as `crane push` or `skopeo copy oci:...` take it, and the runtime bundle umoci unpacks from
   it (`umoci raw unpack`, `raw runtime-config`), which crun runs (tests/live/test_image.py).

The image is kept in $LLMDIAG_IMAGE_DIR (default /opt/llmdiag-image)/llmdiag-VERSION-<key>, the key
being the wheel's sha256 with the base's: the wheel is reproducible, so an unchanged tree is not
built again. Older images and dependency roots are removed. Needs root (chroot, file owners).
Prints the image folder on its last line.

    python ci/image/build.py [--wheel dist/llmdiag-0.2.0-py3-none-any.whl]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV = "/opt/llmdiag"


STARTED = time.monotonic()


def log(message: str) -> None:
    print(f"image [{time.monotonic() - STARTED:.0f} s]: {message}", file=sys.stderr, flush=True)


def final_stage() -> tuple[str, list[tuple[str, str]]]:
    """The final stage's base image and its (instruction, arguments), continuation lines joined."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    args: dict[str, str] = {}
    image, steps = "", []
    for line in (raw.strip() for raw in text.splitlines()):
        if not line or line.startswith("#"):
            continue
        instruction, _, rest = line.partition(" ")
        instruction, rest = instruction.upper(), rest.strip()
        if instruction == "ARG" and not image:
            name, _, default = rest.partition("=")
            args[name] = default
        elif instruction == "FROM":
            image, steps = rest.split()[0], []
            for name, value in args.items():
                image = image.replace(f"${{{name}}}", value)
        else:
            steps.append((instruction, rest))
    return image, steps


def recipe() -> dict:
    """What the Dockerfile's final stage says the image is."""
    image, steps = final_stage()
    repository, _, tag = image.partition(":")
    if repository != "debian":
        raise SystemExit(f"the Dockerfile's final stage is FROM {image}; this builds Debian images only")
    runs = [rest for instruction, rest in steps if instruction == "RUN"]
    (apt,) = [run for run in runs if "apt-get install" in run]
    packages = [w for w in shlex.split(apt.split("apt-get install", 1)[1].split("&&")[0]) if not w.startswith("-")]
    if f"python3 -m venv {VENV}" not in runs:
        raise SystemExit(f"the Dockerfile no longer makes the virtualenv {VENV}")
    env: dict[str, str] = {}
    for instruction, rest in steps:
        if instruction == "ENV":
            env.update(pair.split("=", 1) for pair in shlex.split(rest))
    (user,) = [rest for instruction, rest in steps if instruction == "USER"]
    (workdir,) = [rest for instruction, rest in steps if instruction == "WORKDIR"]
    (entrypoint,) = [json.loads(rest) for instruction, rest in steps if instruction == "ENTRYPOINT"]
    (cmd,) = [json.loads(rest) for instruction, rest in steps if instruction == "CMD"]
    return {
        "suite": tag.split("-")[0],
        "packages": packages,
        "config": {
            "User": user,
            "Env": [f"{k}={v}" for k, v in env.items()],
            "WorkingDir": workdir,
            "Entrypoint": entrypoint,
            "Cmd": cmd,
        },
    }


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def file_digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    return "sha256:" + sha.hexdigest()


def base_rootfs(cache: Path, suite: str, packages: list[str]) -> Path:
    """mmdebstrap's minimal Debian (its `essential` variant: no apt, no init) with the packages."""
    argv = ["mmdebstrap", "--quiet", "--format=tar", "--variant=essential", f"--include={','.join(packages)}", suite]
    key = hashlib.sha256(" ".join(argv).encode()).hexdigest()[:16]
    tar = cache / f"base-{suite}-{key}.tar"
    if not tar.exists():
        log(f"mmdebstrap {suite} with {', '.join(packages)} (once per machine)")
        partial = tar.with_suffix(".partial")
        subprocess.run([*argv, str(partial)], check=True)
        partial.rename(tar)
    return tar


def requirements(wheel: Path) -> list[str]:
    """The wheel's own dependencies (Requires-Dist without an extra), from its METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = archive.read(name).decode()
    found = re.findall(r"^Requires-Dist: (.+)$", metadata, re.MULTILINE)
    return sorted(r for r in found if "extra ==" not in r)


CHROOT_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LC_ALL": "C.UTF-8"}


def chroot_pip(rootfs: Path, *args: str) -> None:
    pip = [f"{VENV}/bin/pip", "install", "-q", "--no-cache-dir", "--disable-pip-version-check", "--no-index"]
    subprocess.run(["chroot", str(rootfs), *pip, "--find-links=/wheels", *args], check=True, env=CHROOT_ENV)


def install_dependencies(rootfs: Path, wheel: Path) -> None:
    """The Dockerfile's virtualenv with our wheel's dependencies, by the virtualenv's own pip."""
    image_python = sorted(p.name for p in rootfs.glob("usr/bin/python3.*") if re.fullmatch(r"python3\.\d+", p.name))
    here = f"python{sys.version_info.major}.{sys.version_info.minor}"
    if image_python != [here]:
        raise SystemExit(f"the image's Python is {image_python}, this one {here}: run this with the image's")
    log("the wheelhouse: our dependencies' wheels, from the index")
    wheels = rootfs / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(wheels), *requirements(wheel)],
                   check=True)  # fmt: skip
    log(f"python3 -m venv {VENV}; pip install of the dependencies, inside the image's root")
    subprocess.run(["chroot", str(rootfs), "python3", "-m", "venv", VENV], check=True, env=CHROOT_ENV)
    chroot_pip(rootfs, *requirements(wheel))
    shutil.rmtree(wheels)


def install_wheel(rootfs: Path, wheel: Path) -> None:
    """Our wheel into the virtualenv, whose dependencies are there already."""
    (rootfs / "wheels").mkdir()
    shutil.copy(wheel, rootfs / "wheels")
    log(f"pip install {wheel.name}, inside the image's root")
    chroot_pip(rootfs, "--no-deps", f"/wheels/{wheel.name}")
    shutil.rmtree(rootfs / "wheels")
    (rootfs / "tmp").chmod(0o1777)


def oci_layout(rootfs: Path, out: Path, config: dict, tag: str) -> None:
    """One uncompressed layer of the whole root, and the image config, manifest and index pointing at it."""
    blobs = out / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    layer = out / "layer.tar"
    subprocess.run(["tar", "--sort=name", "--numeric-owner", "--mtime=@0", "--xattrs", "-C", str(rootfs),
                    "-cf", str(layer), "."], check=True)  # fmt: skip
    layer_digest = file_digest(layer)
    layer_size = layer.stat().st_size
    layer.rename(blobs / layer_digest.split(":")[1])

    def blob(document: dict) -> tuple[str, int]:
        data = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
        (blobs / digest(data).split(":")[1]).write_bytes(data)
        return digest(data), len(data)

    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
    image_config = {
        "architecture": arch,
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{"created_by": "ci/image/build.py: mmdebstrap, the Dockerfile's virtualenv and our wheel"}],
    }
    config_digest, config_size = blob(image_config)
    manifest_digest, manifest_size = blob({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest,
                   "size": config_size},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest,
                    "size": layer_size}],
    })  # fmt: skip
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_digest,
                       "size": manifest_size, "annotations": {"org.opencontainers.image.ref.name": tag}}],
    }  # fmt: skip
    (out / "index.json").write_text(json.dumps(index, indent=2))
    (out / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))


def build_wheel(out: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)], check=True)
    (wheel,) = out.glob("llmdiag-*.whl")
    return wheel


def build(cache: Path, wheel: Path | None) -> Path:
    cache.mkdir(parents=True, exist_ok=True)
    spec = recipe()
    base = base_rootfs(cache, spec["suite"], spec["packages"])
    with tempfile.TemporaryDirectory(dir=cache, prefix="build-") as scratch_dir:
        scratch = Path(scratch_dir)
        wheel = wheel or build_wheel(scratch / "dist")
        tag = wheel.name.split("-")[1]
        key = hashlib.sha256(
            (file_digest(wheel) + base.name + json.dumps(spec["config"], sort_keys=True)).encode()
        ).hexdigest()[:16]
        image = cache / f"llmdiag-{tag}-{key}"
        if (image / "done").exists():
            log(f"{image.name} already built")
            return image
        for old in cache.glob("llmdiag-*"):
            shutil.rmtree(old)
        rootfs = scratch / "rootfs"
        rootfs.mkdir()
        # the root with the virtualenv and our dependencies, kept while they stay the same
        deps_key = hashlib.sha256((base.name + "\n".join(requirements(wheel))).encode()).hexdigest()[:16]
        deps = cache / f"deps-{deps_key}.tar"
        if deps.exists():
            subprocess.run(["tar", "--numeric-owner", "-xpf", str(deps), "-C", str(rootfs)], check=True)
        else:
            for old in cache.glob("deps-*.tar"):
                old.unlink()
            subprocess.run(["tar", "--numeric-owner", "-xpf", str(base), "-C", str(rootfs)], check=True)
            install_dependencies(rootfs, wheel)
            subprocess.run(
                ["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(scratch / "deps.tar"), "."], check=True
            )
            (scratch / "deps.tar").rename(deps)
        install_wheel(rootfs, wheel)
        partial = cache / f"{image.name}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        log("the OCI image layout")
        oci_layout(rootfs, partial / "oci", spec["config"], tag)
        log("umoci raw unpack and runtime-config: the runtime bundle crun runs")
        reference, bundle = f"{partial / 'oci'}:{tag}", partial / "bundle"
        bundle.mkdir()
        subprocess.run(
            ["umoci", "--log=error", "raw", "unpack", "--image", reference, str(bundle / "rootfs")], check=True
        )
        subprocess.run(["umoci", "--log=error", "raw", "runtime-config", "--image", reference,
                        "--rootfs", str(bundle / "rootfs"), str(bundle / "config.json")], check=True)  # fmt: skip
        (partial / "done").write_text(wheel.name + "\n")
        partial.rename(image)
    return image


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", type=Path, help="a wheel already built (default: build one from this tree)")
    args = parser.parse_args()
    cache = Path(os.environ.get("LLMDIAG_IMAGE_DIR") or "/opt/llmdiag-image")
    print(build(cache, args.wheel.resolve() if args.wheel else None))


if __name__ == "__main__":
    main()
