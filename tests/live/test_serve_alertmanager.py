"""`llmdiag serve` in the real chain, every part a real process on loopback: the vLLM stand-in (a real
vLLM server's recorded answers) scraped by a real Prometheus that evaluates an alert rule on
`vllm:num_requests_waiting` and sends it to a real Alertmanager (Debian's prometheus-alertmanager),
whose webhook_config, with a bearer token from a file, points at serve's /alertmanager; serve triages
the alert's server and Prometheus' history, and the same Prometheus scrapes the verdict back.

The storm (the `kv-cache-small` recording: 10 requests waiting, the KV cache nearly full) starts after
serve's first scheduled cycle and is over long before the next (`--every 1h`); the report the alert
asked for is still served after it ended, and after serve restarts.

The stand-in hands each GET /metrics the next of its recorded scrapes (the last one repeats, counters
still): Prometheus scrapes it every 10 s, and fires at the first scrape that shows the queue, so that the
alert's triage, seconds later, reads scrapes whose counters still move, as a loaded server's do."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import _absent
from live_services import LOOPBACK, ServiceUnavailable, StandIn, free_port, http_get, stop_process_group, wait_until

from diag.parsers.prom_text import parse_exposition

pytestmark = pytest.mark.live

REPO = Path(__file__).resolve().parents[2]
ALERTMANAGER = Path("/usr/bin/prometheus-alertmanager")
PROMETHEUS = Path("/usr/bin/prometheus")
TOKEN = "e2e-token-0123456789"
ALERT = "VLLMRequestsWaiting"


def prometheus_config(work: Path, standin_port: int, serve_port: int, alertmanager_port: int) -> Path:
    (work / "rules.yml").write_text(f"""groups:
  - name: vllm
    rules:
      - alert: {ALERT}
        expr: vllm:num_requests_waiting > 5
        for: 0s
        labels: {{severity: warning}}
        annotations: {{summary: requests wait for a vLLM server}}
""")
    config = work / "prometheus.yml"
    config.write_text(f"""global: {{scrape_interval: 1s, evaluation_interval: 1s}}
rule_files: [{work / "rules.yml"}]
alerting:
  alertmanagers: [{{static_configs: [{{targets: ["{LOOPBACK}:{alertmanager_port}"]}}]}}]
scrape_configs:
  - job_name: vllm
    scrape_interval: 10s  # each scrape takes the stand-in's next recorded answer: leave serve its moving ones
    static_configs: [{{targets: ["{LOOPBACK}:{standin_port}"]}}]
  - job_name: llmdiag
    static_configs: [{{targets: ["{LOOPBACK}:{serve_port}"]}}]
""")
    return config


def alertmanager_config(work: Path, serve_port: int) -> Path:
    (work / "token").write_text(TOKEN + "\n")
    config = work / "alertmanager.yml"
    config.write_text(f"""route:
  receiver: llmdiag
  group_by: [alertname, instance]
  group_wait: 1s
  group_interval: 5s
  repeat_interval: 1h
receivers:
  - name: llmdiag
    webhook_configs:
      - url: http://{LOOPBACK}:{serve_port}/alertmanager
        send_resolved: true
        http_config:
          authorization: {{type: Bearer, credentials_file: {work / "token"}}}
""")
    return config


@contextmanager
def process(what: str, argv: list[str], log: Path, ready_url: str, env: dict | None = None) -> Iterator[None]:
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    try:
        wait_until(what, lambda: http_get(ready_url)[0] == 200, 60, proc, log)
        yield
    finally:
        stop_process_group(proc, grace_s=10)


def serve_argv(work: Path, port: int, standin_url: str, prometheus_url: str) -> list[str]:
    (work / "serve-token").write_text(TOKEN)
    return [sys.executable, "-m", "diag.cli", "serve", f"--state-dir={work / 'state'}", "--every=1h",
            "--deadline=30s", f"--listen={LOOPBACK}:{port}", f"--alert-token-file={work / 'serve-token'}",
            f"--vllm-url={standin_url}", f"--prometheus-url={prometheus_url}", "--since=5m", "--no-local-gpu",
            "--scrapes=2", "--scrape-interval=0.5"]  # fmt: skip


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.load(answer)


def reports(serve_url: str, trigger: str) -> list[dict]:
    return [m for m in get_json(f"{serve_url}/reports")["reports"] if m["trigger"] == trigger]


def verdicts(serve_url: str) -> list[dict[str, str]]:
    status, body = http_get(f"{serve_url}/metrics")
    assert status == 200
    return [s.labels for s in parse_exposition(body.decode()).samples if s.name == "llmdiag_verdict"]


def stop_standin(server: StandIn) -> None:
    os.killpg(server.pid, signal.SIGTERM)
    wait_until("the stand-in's port to close", lambda: not port_open(server.port), 20)


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex((LOOPBACK, port)) == 0


def test_an_alert_through_alertmanager_is_triaged_kept_and_scraped_back(vllm_standin, tmp_path: Path) -> None:
    if not (ALERTMANAGER.is_file() and PROMETHEUS.is_file()):
        _absent(ServiceUnavailable("no prometheus-alertmanager or prometheus (apt-get install both)"))
    started = time.monotonic()
    standin_port, serve_port, prometheus_port, am_port = free_port(), free_port(), free_port(), free_port()
    serve_url, prometheus_url = f"http://{LOOPBACK}:{serve_port}", f"http://{LOOPBACK}:{prometheus_port}"
    am_url = f"http://{LOOPBACK}:{am_port}"
    calm = vllm_standin("healthy", port=standin_port)
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"} | {"HOME": str(tmp_path)}  # no cluster
    serve = serve_argv(tmp_path, serve_port, calm.url, prometheus_url)
    config = prometheus_config(tmp_path, standin_port, serve_port, am_port)
    prometheus = [str(PROMETHEUS), f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                  f"--web.listen-address={LOOPBACK}:{prometheus_port}"]  # fmt: skip
    alertmanager = [str(ALERTMANAGER), f"--config.file={alertmanager_config(tmp_path, serve_port)}",
                    f"--storage.path={tmp_path / 'am'}", f"--web.listen-address={LOOPBACK}:{am_port}",
                    "--cluster.listen-address="]  # fmt: skip
    with (
        process("Alertmanager", alertmanager, tmp_path / "alertmanager.log", f"{am_url}/-/ready"),
        process("Prometheus", prometheus, tmp_path / "prometheus.log", f"{prometheus_url}/-/ready"),
    ):
        with process("llmdiag serve", serve, tmp_path / "serve.log", f"{serve_url}/readyz", env):
            wait_until("the first scheduled triage", lambda: reports(serve_url, "schedule"), 60)
            (first,) = reports(serve_url, "schedule")

            stop_standin(calm)  # the storm: the same server, now with ten requests waiting
            storm = vllm_standin("kv-cache-small", port=standin_port)
            wait_until("the alert's triage", lambda: reports(serve_url, "alert"), 60, log=tmp_path / "serve.log")
            (kept,) = reports(serve_url, "alert")

            (fired,) = get_json(f"{am_url}/api/v2/alerts")  # what Alertmanager holds and sent
            assert fired["labels"]["alertname"] == ALERT
            assert [a["fingerprint"] for a in kept["alerts"]] == [fired["fingerprint"]]
            assert kept["scope"] == {"instance": f"{LOOPBACK}:{standin_port}", "job": "vllm"}
            # the recording's own verdict (fixtures/real/vllm-cpu/kv-cache-small/expected.json)
            assert (kept["verdict"]["status"], kept["verdict"]["rule"]) == ("fault", "VLLM-101"), kept["verdict"]
            report = get_json(f"{serve_url}/reports/{kept['id']}")
            assert report["verdict"]["rule"] == kept["verdict"]["rule"]
            assert any(f["subject"].endswith(f"{LOOPBACK}_{standin_port}") for f in report["findings"])

            stop_standin(storm)
            vllm_standin("healthy", port=standin_port)  # the storm is over, long before the next cycle

            rule = kept["verdict"]["rule"]
            query = f'llmdiag_verdict{{job="llmdiag",trigger="alert",status="fault",rule="{rule}"}}'

            def scraped_back() -> bool:
                answer = get_json(f"{prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": query}))
                return bool(answer["data"]["result"])

            wait_until("Prometheus to scrape the verdict back", scraped_back, 30)
            assert reports(serve_url, "schedule") == [first]  # no scheduled cycle ran meanwhile

        # a restart loses nothing it kept: the alert's report, its verdict on /metrics, the alert answered
        with process("llmdiag serve again", serve, tmp_path / "serve.log", f"{serve_url}/readyz", env):
            assert reports(serve_url, "alert") == [kept]
            assert get_json(f"{serve_url}/reports/{kept['id']}") == report
            alert_verdict = {"trigger": "alert", "status": "fault", "layer": "vllm", "rule": rule,
                             "severity": kept["verdict"]["severity"], "namespace": ""}  # fmt: skip
            assert alert_verdict in verdicts(serve_url)
    assert time.monotonic() - started < 120
