"""The kubeconfig's exec credential plugin (`aws eks get-token`, `gke-gcloud-auth-plugin`, `kubelogin`),
run as kubectl runs it, but within the run's deadline and never interactively, and with what it prints
on failure redacted: a plugin that fails often names the token it could not refresh.

The protocol: https://kubernetes.io/docs/reference/access-authn-authz/authentication/#client-go-credential-plugins
(the ExecCredential in KUBERNETES_EXEC_INFO, the answer's `status` on stdout).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from typing import Any

from diag.collect.redact import redact_text

_SHOWN = 300  # characters of the plugin's stderr in the line
EXEC_CONFIG_EXTENSION = "client.authentication.k8s.io/exec"


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


class CredentialError(Exception):
    """A plugin run that gave no credential: one line, redacted."""


class Plugin:
    """A user's `exec` entry of a kubeconfig, ready to run."""

    def __init__(self, spec: dict, cwd: str, cluster: dict, timeout_s: float) -> None:
        for key in ("command", "apiVersion"):
            if not spec.get(key):
                raise CredentialError(f"the kubeconfig's exec credential plugin has no {key}")
        self.api_version = str(spec["apiVersion"])
        args, env = (_list(spec.get(key)) for key in ("args", "env"))
        self.args = [str(spec["command"]), *(str(a) for a in args)]
        self.env = {str(e["name"]): str(e.get("value") or "") for e in env if isinstance(e, dict) and "name" in e}
        self.cwd = cwd or None
        self.cluster = cluster if spec.get("provideClusterInfo") else None
        self.timeout_s = timeout_s
        self.what = f"the kubeconfig's exec credential plugin ({redact_text(os.path.basename(self.args[0]))})"

    def run(self, previous_response: Any = None) -> dict:
        """The ExecCredential's status (token, or clientCertificateData and clientKeyData; maybe
        expirationTimestamp), or CredentialError."""
        spec: dict[str, Any] = {"interactive": False}
        if previous_response:
            spec["response"] = previous_response
        if self.cluster is not None:
            spec["cluster"] = dict(self.cluster)
            config = next((e.get("extension") for e in self.cluster.get("extensions") or []
                           if isinstance(e, dict) and e.get("name") == EXEC_CONFIG_EXTENSION), None)  # fmt: skip
            if config is not None:
                spec["cluster"]["config"] = config
        info = json.dumps({"apiVersion": self.api_version, "kind": "ExecCredential", "spec": spec})
        env = {**os.environ, **self.env, "KUBERNETES_EXEC_INFO": info}
        try:
            process = subprocess.Popen(
                self.args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                cwd=self.cwd, env=env, text=True, start_new_session=True,
            )  # fmt: skip
        except OSError as e:
            raise CredentialError(f"{self.what} could not be started ({e.strerror})") from None
        try:
            stdout, stderr = process.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the plugin and whatever it started
            process.communicate()
            raise CredentialError(
                f"{self.what} gave no credential within {self.timeout_s:g}s (the run's time for it): stopped"
            ) from None
        if process.returncode != 0:
            said = redact_text(" ".join(stderr.split()))
            said = said if len(said) <= _SHOWN else said[:_SHOWN] + "..."
            raise CredentialError(f"{self.what} failed (exit status {process.returncode}){': ' + said if said else ''}")
        try:
            data = json.loads(stdout)
            status = data["status"]
            if data.get("apiVersion") != self.api_version or not isinstance(status, dict):
                raise ValueError
        except (ValueError, KeyError, TypeError):
            raise CredentialError(f"{self.what} printed no ExecCredential of {self.api_version}") from None
        return status
