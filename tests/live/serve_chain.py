"""The parts of `llmdiag serve`'s alert chain that the live serve tests share: a real Prometheus that
scrapes a vLLM server and serve, evaluates alert rules and sends them to a real Alertmanager
(Debian's prometheus-alertmanager), whose webhook_config points at serve's /alertmanager with a
bearer token from a file; and what the tests read back from serve."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from conftest import _absent
from live_services import LOOPBACK, ServiceUnavailable, free_port, http_get, stop_process_group, wait_until

from diag.parsers.prom_text import parse_exposition

ALERTMANAGER = Path("/usr/bin/prometheus-alertmanager")
PROMETHEUS = Path("/usr/bin/prometheus")
GROUP_INTERVAL_S = 5  # Alertmanager's wait before it notifies a group's new alerts


def require_prometheus_and_alertmanager() -> None:
    if not (ALERTMANAGER.is_file() and PROMETHEUS.is_file()):
        _absent(ServiceUnavailable("no prometheus-alertmanager or prometheus (apt-get install both)"))


@dataclass(frozen=True)
class AlertRule:
    name: str
    expr: str
    for_: str = "0s"  # how long the expression must hold before the alert fires


@dataclass(frozen=True)
class VllmScrape:
    """How Prometheus scrapes the vLLM server: `labels` are those Kubernetes service discovery's
    relabelling would add (namespace, pod)."""

    target: str  # host:port
    interval: str = "1s"
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class Chain:
    """Ports and URLs of one chain; `work` holds the configurations, logs and data of every part."""

    work: Path
    token: str
    serve_port: int = field(default_factory=free_port)
    prometheus_port: int = field(default_factory=free_port)
    alertmanager_port: int = field(default_factory=free_port)

    @property
    def serve_url(self) -> str:
        return f"http://{LOOPBACK}:{self.serve_port}"

    @property
    def prometheus_url(self) -> str:
        return f"http://{LOOPBACK}:{self.prometheus_port}"

    @property
    def alertmanager_url(self) -> str:
        return f"http://{LOOPBACK}:{self.alertmanager_port}"

    def prometheus_config(self, vllm: VllmScrape, rules: list[AlertRule]) -> Path:
        (self.work / "rules.yml").write_text(
            "groups:\n  - name: vllm\n    rules:\n"
            + "".join(
                f"      - alert: {r.name}\n        expr: {r.expr}\n        for: {r.for_}\n"
                "        labels: {severity: warning}\n        annotations: {summary: a vLLM server is overloaded}\n"
                for r in rules
            )
        )
        labels = f", labels: {json.dumps(vllm.labels)}" if vllm.labels else ""
        config = self.work / "prometheus.yml"
        config.write_text(f"""global: {{scrape_interval: 1s, evaluation_interval: 1s}}
rule_files: [{self.work / "rules.yml"}]
alerting:
  alertmanagers: [{{static_configs: [{{targets: ["{LOOPBACK}:{self.alertmanager_port}"]}}]}}]
scrape_configs:
  - job_name: vllm
    scrape_interval: {vllm.interval}
    scrape_timeout: {vllm.interval}
    static_configs: [{{targets: ["{vllm.target}"]{labels}}}]
  - job_name: llmdiag
    static_configs: [{{targets: ["{LOOPBACK}:{self.serve_port}"]}}]
""")
        return config

    def alertmanager_config(self, group_by: tuple[str, ...] = ("alertname", "instance")) -> Path:
        (self.work / "token").write_text(self.token + "\n")
        config = self.work / "alertmanager.yml"
        config.write_text(f"""route:
  receiver: llmdiag
  group_by: [{", ".join(group_by)}]
  group_wait: 1s
  group_interval: {GROUP_INTERVAL_S}s
  repeat_interval: 1h
receivers:
  - name: llmdiag
    webhook_configs:
      - url: {self.serve_url}/alertmanager
        send_resolved: true
        http_config:
          authorization: {{type: Bearer, credentials_file: {self.work / "token"}}}
""")
        return config

    @contextmanager
    def prometheus_and_alertmanager(
        self, vllm: VllmScrape, rules: list[AlertRule], group_by: tuple[str, ...] = ("alertname", "instance")
    ) -> Iterator[None]:
        prometheus = [str(PROMETHEUS), f"--config.file={self.prometheus_config(vllm, rules)}",
                      f"--storage.tsdb.path={self.work / 'tsdb'}",
                      f"--web.listen-address={LOOPBACK}:{self.prometheus_port}"]  # fmt: skip
        alertmanager = [str(ALERTMANAGER), f"--config.file={self.alertmanager_config(group_by)}",
                        f"--storage.path={self.work / 'am'}",
                        f"--web.listen-address={LOOPBACK}:{self.alertmanager_port}",
                        "--cluster.listen-address="]  # fmt: skip
        with (
            process("Alertmanager", alertmanager, self.work / "alertmanager.log", f"{self.alertmanager_url}/-/ready"),
            process("Prometheus", prometheus, self.work / "prometheus.log", f"{self.prometheus_url}/-/ready"),
        ):
            yield

    def serve_argv(self, *flags: str) -> list[str]:
        """`llmdiag serve` on this chain's port, its token, its Prometheus' history; `flags` say what it
        triages."""
        (self.work / "serve-token").write_text(self.token)
        return [sys.executable, "-m", "diag.cli", "serve", f"--state-dir={self.work / 'state'}",
                f"--listen={LOOPBACK}:{self.serve_port}", f"--alert-token-file={self.work / 'serve-token'}",
                f"--prometheus-url={self.prometheus_url}", "--no-local-gpu", *flags]  # fmt: skip

    @contextmanager
    def serve(self, argv: list[str], env: dict[str, str] | None = None, what: str = "llmdiag serve") -> Iterator[None]:
        with process(what, argv, self.work / "serve.log", f"{self.serve_url}/readyz", env):
            yield

    def query(self, promql: str, at: float | None = None) -> list[dict]:
        """An instant query's result vector, now or `at` (Unix time)."""
        params = {"query": promql} | ({"time": str(at)} if at is not None else {})
        answer = get_json(f"{self.prometheus_url}/api/v1/query?" + urllib.parse.urlencode(params))
        return answer["data"]["result"]


@contextmanager
def process(what: str, argv: list[str], log: Path, ready_url: str, env: dict | None = None) -> Iterator[None]:
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    try:
        wait_until(what, lambda: http_get(ready_url)[0] == 200, 60, proc, log)
        yield
    finally:
        stop_process_group(proc, grace_s=10)


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.load(answer)


def reports(serve_url: str, trigger: str) -> list[dict]:
    return [m for m in get_json(f"{serve_url}/reports")["reports"] if m["trigger"] == trigger]


def verdicts(serve_url: str) -> list[dict[str, str]]:
    status, body = http_get(f"{serve_url}/metrics")
    assert status == 200
    return [s.labels for s in parse_exposition(body.decode()).samples if s.name == "llmdiag_verdict"]


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex((LOOPBACK, port)) == 0
