"""`llmdiag serve` as its users meet it: a mistake in its flags is one line and exit 3 before anything
starts; it serves, keeps its reports under --state-dir, and a SIGTERM (Kubernetes stopping the pod) ends
it with exit 0 and every report kept."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest


def serve(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "diag.cli", "serve", f"--state-dir={tmp_path / 'state'}", *args],
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--every=10s", "--deadline=20s"], "--deadline: longer than --every"),
        (["--listen=8080"], "--listen: '8080' is not HOST:PORT"),
        (["--alert-rate=many"], "is not N/DURATION"),
        (["--alert-token-file=/nonexistent/token"], "--alert-token-file: cannot read /nonexistent/token"),
        (["--every=soon"], "--every: 'soon' is not a duration"),
    ],
)
def test_a_mistake_in_the_flags_is_one_line_and_exit_3(tmp_path: Path, args: list[str], says: str) -> None:
    result = serve(*args, tmp_path=tmp_path)
    assert result.returncode == 3 and says in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr


def test_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        result = serve(f"--listen=127.0.0.1:{taken.getsockname()[1]}", "--vllm-url=http://127.0.0.1:1",
                       tmp_path=tmp_path)  # fmt: skip
    assert result.returncode == 3 and "cannot listen on 127.0.0.1" in result.stderr, result.stderr


def test_sigterm_ends_it_with_exit_0_and_the_reports_kept(tmp_path: Path) -> None:
    port = free_port()
    (tmp_path / "token").write_text("the-token\n")
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"} | {"HOME": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "diag.cli", "serve", f"--state-dir={tmp_path / 'state'}", f"--listen=127.0.0.1:{port}",
         "--every=1h", "--vllm-url=http://127.0.0.1:1", "--no-local-gpu", "--scrapes=1",
         f"--alert-token-file={tmp_path / 'token'}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        listing: list = []
        while not listing:
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.3)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/reports", timeout=5) as answer:
                    listing = json.load(answer)["reports"]
            except OSError:
                continue
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert "the-token" not in stderr
    kept = sorted(p.name for p in (tmp_path / "state").iterdir())
    assert kept == sorted(f"{listing[0]['id']}{s}" for s in (".json", ".md", ".meta.json"))
