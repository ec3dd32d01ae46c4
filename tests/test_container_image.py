"""The Dockerfile's steps, without a container engine (none runs here): the wheel is built from exactly
the files the Dockerfile copies, with its own `pip wheel` line; installed into a fresh virtualenv
with its own `pip install` line; then `llmdiag analyze` runs as a non-root user, with the virtualenv
and HOME read-only, and must work and write nothing. The Dockerfile is parsed so the two stay in step."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOBODY = 65534


@dataclass
class Stage:
    image: str
    name: str | None
    steps: list[tuple[str, str]] = field(default_factory=list)  # (instruction, arguments)

    def all(self, instruction: str) -> list[str]:
        return [args for (i, args) in self.steps if i == instruction]


def dockerfile() -> tuple[dict[str, str], list[Stage]]:
    """The Dockerfile's ARG defaults and its stages, continuation lines joined."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, rest = line.partition(" ")
        instruction, rest = instruction.upper(), rest.strip()
        if instruction == "ARG" and not stages:
            name, _, default = rest.partition("=")
            args[name] = default
        elif instruction == "FROM":
            words = rest.split()
            image = words[0]
            for name, value in args.items():
                image = image.replace(f"${{{name}}}", value)
            stages.append(Stage(image, words[2] if len(words) == 3 and words[1].upper() == "AS" else None))
        else:
            stages[-1].steps.append((instruction, rest))
    return args, stages


def env_of(stage: Stage) -> dict[str, str]:
    env: dict[str, str] = {}
    for args in stage.all("ENV"):
        for pair in shlex.split(args):
            name, _, value = pair.partition("=")
            env[name] = value
    return env


def pip_line(stage: Stage, verb: str) -> list[str]:
    """The argv after `pip <verb>` of the stage's one RUN that calls it (before any `&&`)."""
    for run in stage.all("RUN"):
        argv = shlex.split(run.split("&&")[0])
        if argv[:2] == ["pip", verb]:
            return argv[2:]
    raise AssertionError(f"no `pip {verb}` RUN in the stage FROM {stage.image}")


def test_the_dockerfile_pins_its_base_and_runs_as_non_root() -> None:
    _, stages = dockerfile()
    build, final = stages[0], stages[-1]
    assert len(stages) == 2 and build.name
    for stage in stages:
        repository, _, tag = stage.image.partition(":")
        assert repository == "debian" and tag and tag != "latest" and "slim" in tag, stage.image
        # Debian's own Python, in a virtualenv that is first on PATH (ci/image/build.py reads these lines)
        assert any("apt-get install" in run and " python3 python3-venv " in run for run in stage.all("RUN"))
        assert "python3 -m venv /opt/llmdiag" in stage.all("RUN")
        assert env_of(stage)["PATH"].split(":")[0] == "/opt/llmdiag/bin"
    assert build.image == final.image  # the wheel is built by the Python it runs on
    assert f"--from={build.name} /wheels /wheels" in final.all("COPY")
    wheel_args = pip_line(build, "wheel")
    assert "--no-deps" in wheel_args and wheel_args[-1] == "." and "/wheels" in wheel_args
    assert pip_line(final, "install")[-1] == "/wheels/*.whl"
    (user,) = final.all("USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0 and (not gid or int(gid) != 0)  # numeric: runAsNonRoot can check it
    env = env_of(final)
    assert env["HOME"] == "/tmp" and env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert final.all("ENTRYPOINT") == ['["llmdiag"]']


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder the non-root user can read (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="llmdiag-image-"))
    path.chmod(0o755)
    yield path
    for p in [path, *path.rglob("*")]:
        if not p.is_symlink():
            p.chmod(p.stat().st_mode | stat.S_IWUSR)
    shutil.rmtree(path)


def build_wheel(stage: Stage, context: Path, wheels: Path) -> Path:
    """The build stage: its COPY lines into a fresh context, then its `pip wheel` line there."""
    for copy in stage.all("COPY"):
        *sources, target = copy.split()
        for source in sources:
            origin, dest = (
                ROOT / source,
                context / target / Path(source).name if target.endswith("/") else context / target,
            )
            if origin.is_dir():
                shutil.copytree(origin, dest, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(origin, dest)
    argv = [str(wheels) if a == "/wheels" else a for a in pip_line(stage, "wheel")]
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", *argv], cwd=context,
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    (wheel,) = wheels.glob("llmdiag-*.whl")
    return wheel


def install_wheel(stage: Stage, wheel: Path, venv: Path) -> None:
    """The final stage's `pip install` of the wheel into a fresh virtualenv. The dependencies are
    this interpreter's (the same requirement list, already resolved): the test must not need PyPI."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    argv = [str(wheel) if a == "/wheels/*.whl" else a for a in pip_line(stage, "install")]
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                    "--no-deps", *argv], check=True, capture_output=True, timeout=300)  # fmt: skip
    (site,) = venv.glob("lib/python*/site-packages")
    (site / "llmdiag-test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")


def as_non_root(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--", *argv]


def snapshot(*roots: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_mtime_ns, p.stat().st_size) for root in roots for p in [root, *root.rglob("*")]}


def read_only(path: Path) -> None:
    for p in [path, *path.rglob("*")]:
        if not p.is_symlink():
            p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) | stat.S_IROTH
                    | (stat.S_IXOTH if p.is_dir() or p.stat().st_mode & stat.S_IXUSR else 0))  # fmt: skip


def test_the_wheel_runs_as_non_root_with_nothing_writable(shared_dir: Path) -> None:
    _, stages = dockerfile()
    build, final = stages[0], stages[-1]
    (context := shared_dir / "context").mkdir()
    (wheels := shared_dir / "wheels").mkdir()
    wheel = build_wheel(build, context, wheels)
    venv, home, tmp = shared_dir / "venv", shared_dir / "home", shared_dir / "tmp"
    install_wheel(final, wheel, venv)
    home.mkdir()
    tmp.mkdir(mode=0o1777)
    tmp.chmod(0o1777)  # the pod's emptyDir on /tmp: writable, and checked to stay empty
    bundle = shared_dir / "demo"
    shutil.copytree(ROOT / "fixtures" / "demo", bundle)
    for path in (venv, home, bundle):
        read_only(path)
    before = snapshot(venv, home, tmp, bundle)

    env = {**env_of(final), "HOME": str(home), "TMPDIR": str(tmp), "PATH": f"{venv / 'bin'}:/usr/bin:/bin"}

    def run(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(as_non_root(list(argv)), cwd=home, env=env, capture_output=True, text=True, timeout=300)

    where = run(str(venv / "bin" / "python"), "-c", "import diag, os; print(diag.__file__, os.geteuid())")
    module, uid = where.stdout.split()
    assert Path(module).is_relative_to(venv), module  # the wheel's code, not the checkout's
    assert int(uid) != 0

    result = run(str(venv / "bin" / "llmdiag"), "analyze", str(bundle), "-o", "json")
    assert result.returncode == 2, result.stderr[-2000:]  # the demo's critical fault
    report = json.loads(result.stdout)
    assert report["schema"] == "llmdiag/report/v1" and report["verdict"]["layer"] == "kubernetes"
    assert "Traceback" not in result.stderr and "ermission denied" not in result.stderr, result.stderr

    plugin = run(str(venv / "bin" / "kubectl-llmdiag"), "--version")  # the krew plugin's binary
    (version,) = re.findall(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    assert plugin.returncode == 0 and plugin.stdout.split() == ["llmdiag", version], plugin.stdout + plugin.stderr

    assert snapshot(venv, home, tmp, bundle) == before
