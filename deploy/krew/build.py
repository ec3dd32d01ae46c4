"""The krew plugin of a release: its archive, built from this checkout's wheel, and the manifest that
names the archive's release URL and real sha256.

    python deploy/krew/build.py --out dist/krew                                   # archive + manifest there
    python deploy/krew/build.py --out dist/krew --manifest deploy/krew/llmdiag.yaml   # at release

The archive (kubectl-llmdiag-vVERSION.tar.gz) holds the wheel and `kubectl-llmdiag`, a POSIX sh
launcher: its first run installs the wheel, with its dependencies from the user's pip index, into a
virtualenv of its own; every later run starts that virtualenv's `kubectl-llmdiag`. The wheel is pure
Python, so one archive serves every platform (the manifest lists each with the same uri and digest).
The archive is reproducible: the same wheel gives the same bytes, so the digest can be checked again.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
# The URL scheme of a release's files (deploy/README.md): one GitHub release per tag vVERSION.
RELEASES = "https://github.com/llmdiag/llmdiag/releases/download"
HOMEPAGE = "https://github.com/llmdiag/llmdiag"
PLATFORMS = [("linux", "amd64"), ("linux", "arm64"), ("darwin", "amd64"), ("darwin", "arm64")]

LAUNCHER = """\
#!/bin/sh
# kubectl-llmdiag: llmdiag @VERSION@ as a kubectl plugin. The first run installs the wheel beside this
# file into a virtualenv of its own (Python 3.10 or newer, and pip's index, are needed that once);
# later runs start it. LLMDIAG_PYTHON chooses the interpreter.
set -eu
python=${LLMDIAG_PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
  echo "kubectl-llmdiag: needs Python 3.10 or newer as $python (or set LLMDIAG_PYTHON)" >&2
  exit 3
fi
# krew runs a link to this file: the wheel lies beside the file itself
here=$(dirname "$("$python" -c 'import os, sys; print(os.path.realpath(sys.argv[1]))' "$0")")
venv=${XDG_CACHE_HOME:-$HOME/.cache}/kubectl-llmdiag/@VERSION@
if [ ! -e "$venv/.installed" ]; then
  echo "kubectl-llmdiag: installing llmdiag @VERSION@ into $venv (once)" >&2
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "$here/@WHEEL@" >&2
  touch "$venv/.installed"
fi
exec "$venv/bin/kubectl-llmdiag" "$@"
"""

DESCRIPTION = """\
Reads what every layer of LLM inference knows at once (pod specs, events and logs; Ray's nodes,
actors and placement groups; nvidia-smi; vLLM's /metrics; Prometheus history) through the
Kubernetes API server, and names the layer at fault (kubernetes, ray, vllm or gpu), the
evidence and the fix. It only reads: deploy/clusterrole.yaml lists what it needs.
"""

CAVEATS = """\
Needs Python 3.10 or newer as python3 (or LLMDIAG_PYTHON). The first run installs llmdiag and
its dependencies from your pip index into ~/.cache/kubectl-llmdiag/.
Start with `kubectl llmdiag triage -n <namespace>`. Exit codes: 0 healthy, 1 warnings,
2 critical, 3 inconclusive or could not analyze.
"""


def version() -> str:
    text = (ROOT / "pyproject.toml").read_text()  # read as text: tomllib is not in Python 3.10
    (found,) = re.findall(r'^version = "([^"]+)"$', text, re.MULTILINE)
    return found


def build_wheel(out: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
                   check=True, timeout=600)  # fmt: skip
    (wheel,) = out.glob("llmdiag-*.whl")
    return wheel


def archive(wheel: Path, launcher: str, target: Path) -> None:
    """A tar.gz whose bytes depend on its contents only: fixed order, owner, times and gzip header."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        members = [("kubectl-llmdiag", launcher.encode(), 0o755), (wheel.name, wheel.read_bytes(), 0o644)]
        for name, data, mode in members:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))
    with target.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
        gz.write(buffer.getvalue())


def manifest(release: str, name: str, sha256: str, wheel: str) -> dict:
    uri = f"{RELEASES}/v{release}/{name}"
    return {
        "apiVersion": "krew.googlecontainertools.github.com/v1alpha2",
        "kind": "Plugin",
        "metadata": {"name": "llmdiag"},
        "spec": {
            "version": f"v{release}",
            "homepage": HOMEPAGE,
            "shortDescription": "Name the layer at fault in LLM serving (Kubernetes, Ray, vLLM, GPU)",
            "description": DESCRIPTION,
            "caveats": CAVEATS,
            "platforms": [
                {
                    "selector": {"matchLabels": {"os": os, "arch": arch}},
                    "uri": uri,
                    "sha256": sha256,
                    "files": [{"from": "kubectl-llmdiag", "to": "."}, {"from": wheel, "to": "."}],
                    "bin": "kubectl-llmdiag",
                }
                for os, arch in PLATFORMS
            ],
        },
    }


class _Dumper(yaml.SafeDumper):
    """Multi-line text as YAML block scalars (`|`), as krew's own manifests write it."""


_Dumper.add_representer(
    str,
    lambda dumper, text: dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None),
)


def build(out: Path, wheel: Path | None = None) -> tuple[Path, Path]:
    """The archive and its manifest (llmdiag.yaml) in `out`; the wheel is built unless given."""
    out.mkdir(parents=True, exist_ok=True)
    release = version()
    with tempfile.TemporaryDirectory() as scratch:
        wheel = wheel or build_wheel(Path(scratch))
        launcher = LAUNCHER.replace("@VERSION@", release).replace("@WHEEL@", wheel.name)
        target, wheel_name = out / f"kubectl-llmdiag-v{release}.tar.gz", wheel.name
        archive(wheel, launcher, target)
    sha256 = hashlib.sha256(target.read_bytes()).hexdigest()
    header = (
        f"# krew plugin manifest of llmdiag v{release}, written by deploy/krew/build.py from the archive it\n"
        "# built (do not edit: run it again). `kubectl krew install --manifest=llmdiag.yaml\n"
        f"# --archive={target.name}` installs it before the release is published.\n"
    )
    path = out / "llmdiag.yaml"
    path.write_text(
        header
        + yaml.dump(manifest(release, target.name, sha256, wheel_name), Dumper=_Dumper, sort_keys=False, width=120)
    )
    return target, path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the archive and llmdiag.yaml")
    parser.add_argument("--wheel", type=Path, help="a wheel already built (default: build one)")
    parser.add_argument("--manifest", type=Path, help="also copy the manifest here (deploy/krew/llmdiag.yaml)")
    args = parser.parse_args()
    target, path = build(args.out, args.wheel)
    if args.manifest:
        args.manifest.write_text(path.read_text())
    print(target)
    print(path)


if __name__ == "__main__":
    main()
