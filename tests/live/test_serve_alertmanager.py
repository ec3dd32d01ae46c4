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

import os
import signal
import time
from pathlib import Path

import pytest
from live_services import LOOPBACK, StandIn, free_port, wait_until
from serve_chain import (
    AlertRule,
    Chain,
    VllmScrape,
    get_json,
    port_open,
    reports,
    require_prometheus_and_alertmanager,
    verdicts,
)

pytestmark = pytest.mark.live

TOKEN = "e2e-token-0123456789"
ALERT = "VLLMRequestsWaiting"


def stop_standin(server: StandIn) -> None:
    os.killpg(server.pid, signal.SIGTERM)
    wait_until("the stand-in's port to close", lambda: not port_open(server.port), 20)


def test_an_alert_through_alertmanager_is_triaged_kept_and_scraped_back(vllm_standin, tmp_path: Path) -> None:
    require_prometheus_and_alertmanager()
    started = time.monotonic()
    chain = Chain(tmp_path, TOKEN)
    serve_url, standin_port = chain.serve_url, free_port()
    calm = vllm_standin("healthy", port=standin_port)
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"} | {"HOME": str(tmp_path)}  # no cluster
    serve = chain.serve_argv("--every=1h", "--deadline=30s", f"--vllm-url={calm.url}", "--since=5m",
                             "--scrapes=2", "--scrape-interval=0.5")  # fmt: skip
    # each scrape takes the stand-in's next recorded answer: leave serve its moving ones
    scrape = VllmScrape(f"{LOOPBACK}:{standin_port}", interval="10s")
    with chain.prometheus_and_alertmanager(scrape, [AlertRule(ALERT, "vllm:num_requests_waiting > 5")]):
        with chain.serve(serve, env):
            wait_until("the first scheduled triage", lambda: reports(serve_url, "schedule"), 60)
            (first,) = reports(serve_url, "schedule")

            stop_standin(calm)  # the storm: the same server, now with ten requests waiting
            storm = vllm_standin("kv-cache-small", port=standin_port)
            wait_until("the alert's triage", lambda: reports(serve_url, "alert"), 60, log=tmp_path / "serve.log")
            (kept,) = reports(serve_url, "alert")

            (fired,) = get_json(f"{chain.alertmanager_url}/api/v2/alerts")  # what Alertmanager holds and sent
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
            wait_until("Prometheus to scrape the verdict back", lambda: bool(chain.query(query)), 30)
            assert reports(serve_url, "schedule") == [first]  # no scheduled cycle ran meanwhile

        # a restart loses nothing it kept: the alert's report, its verdict on /metrics, the alert answered
        with chain.serve(serve, env, "llmdiag serve again"):
            assert reports(serve_url, "alert") == [kept]
            assert get_json(f"{serve_url}/reports/{kept['id']}") == report
            alert_verdict = {"trigger": "alert", "status": "fault", "layer": "vllm", "rule": rule,
                             "severity": kept["verdict"]["severity"], "namespace": ""}  # fmt: skip
            assert alert_verdict in verdicts(serve_url)
    assert time.monotonic() - started < 120
