"""The kubeconfig's exec credential plugin (`aws eks get-token`, `gke-gcloud-auth-plugin`, `kubelogin`),
run as the `kubernetes` client runs it, but within the run's deadline and never interactively, and with
what it prints on failure redacted: a plugin that fails often names the token it could not refresh.

The client runs the plugin when the kubeconfig is loaded and again when the credential expires; it
logs a failure and goes on without credentials. Here a failure is kept, one redacted line, for the
caller to report (`failure()`), and the client's own log line of it is dropped.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import threading
from typing import Any

from diag.collect.redact import redact_text

_state = threading.local()
_lock = threading.Lock()
_timeout_s = 30.0
_installed = False
_SHOWN = 300  # characters of the plugin's stderr in the line


def install(timeout_s: float) -> None:
    """Make the client run exec plugins through `BoundedExecProvider`, each run within `timeout_s`."""
    global _timeout_s, _installed
    from kubernetes.config import kube_config

    with _lock:
        _timeout_s = timeout_s
        if not _installed:
            # the client's loader builds its plugins from this name: the class is replaced on purpose
            kube_config.ExecProvider = BoundedExecProvider  # type: ignore[misc]
            logging.getLogger().addFilter(_drop_client_log)
            _installed = True
    _state.failure = None


def failure() -> str | None:
    """The last plugin failure of this thread since install(), one redacted line; None if none."""
    return getattr(_state, "failure", None)


def _drop_client_log(record: logging.LogRecord) -> bool:
    return record.funcName != "_load_from_exec_plugin"


def _base() -> type:
    from kubernetes.config.exec_provider import ExecProvider

    return ExecProvider


class BoundedExecProvider(_base()):  # type: ignore[misc]
    def run(self, previous_response: Any = None) -> dict:
        try:
            return self._run(previous_response)
        except Exception as e:
            _state.failure = redact_text(str(e))
            raise

    def _run(self, previous_response: Any) -> dict:
        name = redact_text(os.path.basename(str(self.args[0])))
        spec: dict[str, Any] = {"interactive": False}
        if previous_response:
            spec["response"] = previous_response
        if self.cluster:
            spec["cluster"] = dict(self.cluster.value)
            config = next((e["extension"] for e in self.cluster.value.get("extensions") or []
                           if e.get("name") == "client.authentication.k8s.io/exec"), None)  # fmt: skip
            if config is not None:
                spec["cluster"]["config"] = config
        env = dict(
            self.env,
            KUBERNETES_EXEC_INFO=json.dumps({"apiVersion": self.api_version, "kind": "ExecCredential", "spec": spec}),
        )
        what = f"the kubeconfig's exec credential plugin ({name})"
        try:
            process = subprocess.Popen(
                self.args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                cwd=self.cwd, env=env, text=True, start_new_session=True,
            )  # fmt: skip
        except OSError as e:
            raise _Failed(f"{what} could not be started ({e.strerror})") from None
        try:
            stdout, stderr = process.communicate(timeout=_timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the plugin and whatever it started
            process.communicate()
            raise _Failed(
                f"{what} gave no credential within {_timeout_s:g}s (the run's time for it): stopped"
            ) from None
        if process.returncode != 0:
            said = " ".join(stderr.split())
            said = said if len(said) <= _SHOWN else said[:_SHOWN] + "..."
            raise _Failed(f"{what} failed (exit status {process.returncode}){': ' + said if said else ''}")
        try:
            data = json.loads(stdout)
            status = data["status"]
            if data.get("apiVersion") != self.api_version or not isinstance(status, dict):
                raise ValueError
        except (ValueError, KeyError, TypeError):
            raise _Failed(f"{what} printed no ExecCredential of {self.api_version}") from None
        return status


class _Failed(Exception):
    """A plugin run that gave no credential; its words are redacted where they are shown."""
