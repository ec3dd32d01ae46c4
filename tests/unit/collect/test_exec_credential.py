"""The kubeconfig's exec credential plugin runs within the run's time and never prints a secret: a
plugin that hangs is stopped at the deadline, and one that fails is one redacted line."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from diag.collect.kube import KubeAccess, KubeError

LLMDIAG = str(Path(sys.executable).parent / "llmdiag")
TOKEN = "k8s-aws-v1.aHR0cHM6Ly9zdHMuYW1hem9uYXdzLmNvbS8_QWN0aW9uPUdldENhbGxlcklkZW50aXR5"
SECRETS = (
    TOKEN,
    "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEyMyJ9.eyJzdWIiOiJhZG1pbiJ9.c2lnbmF0dXJlc2lnbmF0dXJl",
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
)
FAILING = f"""echo "error: refreshing credentials failed; token: {TOKEN}" >&2
echo "Authorization: Bearer {SECRETS[1]}" >&2
echo "aws_secret_access_key = {SECRETS[2]}" >&2
exit 1
"""


def _kubeconfig(tmp_path: Path, script: str) -> Path:
    plugin = tmp_path / "get-token"
    plugin.write_text("#!/bin/sh\n" + script)
    plugin.chmod(0o755)
    config = tmp_path / "kubeconfig"
    config.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://127.0.0.1:1
contexts:
- name: c
  context: {{cluster: c, user: u, namespace: ml}}
current-context: c
users:
- name: u
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: {plugin}
      interactiveMode: Never
""")
    return config


def test_a_hanging_plugin_is_stopped_at_the_deadline(tmp_path: Path) -> None:
    config = _kubeconfig(tmp_path, "sleep 25\n")
    started = time.monotonic()
    with pytest.raises(KubeError, match=r"gave no credential within 2s"):
        KubeAccess(str(config), credential_timeout_s=2)
    assert time.monotonic() - started < 4


def test_a_failing_plugin_is_one_redacted_line(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    config = _kubeconfig(tmp_path, FAILING)
    with pytest.raises(KubeError) as raised:
        KubeAccess(str(config), credential_timeout_s=5)
    line = str(raised.value)
    assert "\n" not in line and "exit status 1" in line and "get-token" in line
    out, err = capfd.readouterr()
    for secret in SECRETS:
        assert secret not in line and secret not in out and secret not in err


def test_a_plugin_that_answers_gives_its_token(tmp_path: Path) -> None:
    answer = (
        '{"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential", "status": {"token": "abc"}}'
    )
    kube = KubeAccess(str(_kubeconfig(tmp_path, f"echo '{answer}'\n")), credential_timeout_s=5)
    assert kube._connection.authorization() == "Bearer abc"


def test_collect_holds_its_timeout_and_prints_no_token(tmp_path: Path) -> None:
    config = _kubeconfig(tmp_path, "sleep 25\n")
    started = time.monotonic()
    result = subprocess.run(
        [LLMDIAG, "collect", "--kubeconfig", str(config), "--timeout", "3", "--out", str(tmp_path / "b")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert time.monotonic() - started < 8
    assert "gave no credential within 3s" in result.stderr
    assert "internal error" not in result.stderr and "(this host): gpu (this host)" not in result.stderr
    failing = _kubeconfig(tmp_path, FAILING)
    result = subprocess.run(
        [LLMDIAG, "collect", "--kubeconfig", str(failing), "--timeout", "10", "--out", str(tmp_path / "c")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "exit status 1" in result.stderr
    for secret in SECRETS:
        assert secret not in result.stderr and secret not in result.stdout
