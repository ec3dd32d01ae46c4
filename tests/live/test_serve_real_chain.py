"""`llmdiag serve` in the whole chain, every part real: the CPU build of vLLM under load, serving from
the IP of a pod that kwok runs on the real control plane (tests/live/k8s_cluster.py), scraped by a real
Prometheus whose alert rules read `vllm:num_requests_waiting` and `vllm:kv_cache_usage_perc` (the names
this vLLM exposes), through a real Alertmanager to serve's /alertmanager; serve triages the alert's
namespace, pod and server, and the same Prometheus scrapes the verdict back.

The storm (vllm_server.SCENARIOS' `kv-cache-small`: a KV cache too small for the load) starts after
serve's first scheduled cycle and stops once both rules have fired and every alert Alertmanager holds
is answered, long before the next cycle (`--every 1h`). The assertions read /reports and /metrics,
and Prometheus, after the fault has cleared, and again after serve restarts. Beside the real server,
serve's scheduled target names a second one that accepts connections and never answers: the cycle
still ends by its deadline, with that server a gap by its name.

One vLLM server, one serve and one storm for the whole module (the server is slow to start on two
cores); each test asserts on what the module's run saw. The whole module takes two to three minutes."""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from k8s_cluster import SERVE_CHAIN_NAMESPACE, ControlPlane, cri_log_copy, wait_for
from k8s_scenarios import H200, apply, get, gpu_node, namespace, service, vllm_deployment
from live_services import LOOPBACK, http_get, wait_until
from serve_chain import (
    GROUP_INTERVAL_S,
    AlertRule,
    Chain,
    VllmScrape,
    get_json,
    reports,
    require_prometheus_and_alertmanager,
    verdicts,
)
from vllm_server import DEFAULT_MODEL, SCENARIOS, SERVED_MODEL_NAME, LoadGenerator, LoadResult, start_server

from diag.parsers.prom_text import parse_exposition

pytestmark = pytest.mark.live

REPO = Path(__file__).resolve().parents[2]
NS = SERVE_CHAIN_NAMESPACE  # kwok serves its pods' logs and exec (k8s_cluster.PodIO)
NODE = "gpu-chain-1"
VLLM_PORT = 8000
TOKEN = "chain-token-0123456789"
DEADLINE_S = 30
STORM = SCENARIOS["kv-cache-small"]
KV_CACHE_HIGH = yaml.safe_load((REPO / "rules" / "settings.yaml").read_text())["settings"]["kv_cache_high"]["default"]
SCRAPE_INTERVAL_S = 2
# The queue must hold, not be the storm's first burst (whose triage would find no fault yet); a full
# KV cache is the storm already.
RULES = [
    AlertRule("VLLMRequestsWaiting", "vllm:num_requests_waiting > 2", for_="10s"),
    AlertRule("VLLMKVCacheFull", f"vllm:kv_cache_usage_perc >= {KV_CACHE_HIGH}"),
]


@dataclass
class Run:
    """What the module's run saw, in order."""

    chain: Chain
    pod: str
    server_url: str
    hung_port: int
    first: dict  # the first scheduled cycle's listing entry
    first_report: dict
    alerts: list[dict] = field(default_factory=list)  # the alert triages' listing entries, oldest first
    alert_reports: dict[str, dict] = field(default_factory=dict)
    fired: list[dict] = field(default_factory=list)  # what Alertmanager held at the storm's end
    load: LoadResult | None = None
    cleared_at: float = 0.0  # when Prometheus saw the server idle and no rule firing
    after_clear: dict = field(default_factory=dict)  # /reports, /metrics and Prometheus, read after the clear
    after_restart: dict = field(default_factory=dict)


def hung_listener() -> socket.socket:
    """A port that completes the TCP handshake (the kernel's backlog) and never answers a request."""
    silent = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    silent.bind((LOOPBACK, 0))
    silent.listen(16)
    return silent


def deploy(cluster: ControlPlane) -> dict:
    """A serving Deployment whose pod runs the storm's flags; its running pod."""
    args = ["--model", str(DEFAULT_MODEL), "--served-model-name", SERVED_MODEL_NAME, "--port", str(VLLM_PORT),
            *STORM.server_args]  # fmt: skip
    apply(cluster, namespace(NS), gpu_node(NODE, 1, H200),
          vllm_deployment("tiny-llama", NS, gpus=1, tolerate=True, product=H200, args=args),
          service("tiny-llama", NS))  # fmt: skip

    def running() -> list[dict]:
        return [p for p in get(cluster, "pods", "-n", NS, "-l", "app=tiny-llama")["items"]
                if p["status"].get("phase") == "Running" and p["status"].get("podIP")]  # fmt: skip

    wait_for("the tiny-llama pod running", running, 90)
    (pod,) = running()
    node = pod["spec"]["nodeName"]
    wait_for(f"node {node}'s address", lambda: get(cluster, "node", node)["status"].get("addresses"))
    return pod


def all_answered(run: Run) -> bool:
    """Both rules fired, and every alert Alertmanager holds is answered by a kept report."""
    held = get_json(f"{run.chain.alertmanager_url}/api/v2/alerts?active=true")
    answered = {a["fingerprint"] for m in reports(run.chain.serve_url, "alert") for a in m["alerts"]}
    return {a["labels"]["alertname"] for a in held} == {r.name for r in RULES} and {
        a["fingerprint"] for a in held
    } <= answered


def cleared(chain: Chain, pod: str) -> bool:
    """The fault is over: the server idle at Prometheus' last scrape, and no rule pending or firing."""
    idle = f'vllm:num_requests_running{{pod="{pod}"}} + vllm:num_requests_waiting{{pod="{pod}"}} == 0'
    return bool(chain.query(idle)) and not chain.query('ALERTS{job="vllm"}')


def all_kept(serve_url: str) -> bool:
    """Every alert triage serve started is a kept report."""
    _, body = http_get(f"{serve_url}/metrics")
    samples = parse_exposition(body.decode()).samples
    started = sum(
        s.value for s in samples if s.name == "llmdiag_alert_triages_total" and s.labels == {"outcome": "triaged"}
    )
    return started == len(reports(serve_url, "alert"))


@pytest.fixture(scope="module")
def run(vllm_cpu: None, control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    require_prometheus_and_alertmanager()
    work = tmp_path_factory.mktemp("serve-chain")
    chain = Chain(work, TOKEN)
    try:
        pod = deploy(control_plane)
        pod_ip, pod_name = pod["status"]["podIP"], pod["metadata"]["name"]
        scrape = VllmScrape(
            f"{pod_ip}:{VLLM_PORT}", interval=f"{SCRAPE_INTERVAL_S}s", labels={"namespace": NS, "pod": pod_name}
        )
        pod_log = control_plane.pod_io.container_log("vllm")
        pod_log.write_text("")  # another test's server may have logged there before
        with (
            cri_log_copy(work / "vllm.log", pod_log),
            start_server(work / "vllm.log", STORM.server_args, STORM.server_env, host=pod_ip, port=VLLM_PORT,
                         netns=control_plane.network.name) as server,
            hung_listener() as hung,
            chain.prometheus_and_alertmanager(scrape, RULES, group_by=("namespace", "pod")),
        ):  # fmt: skip
            hung_url = f"http://{LOOPBACK}:{hung.getsockname()[1]}"
            # The real server is the pod's: serve finds it through Kubernetes, as in a cluster. The only
            # server given by URL hangs; the deadline, not its own --source-timeout, must bound it.
            serve = chain.serve_argv(f"--kubeconfig={control_plane.kubeconfig}", "-n", NS, "--every=1h",
                                     f"--deadline={DEADLINE_S}s", "--source-timeout=600", "--since=5m",
                                     f"--vllm-url={hung_url}", "--scrapes=3", "--scrape-interval=1")  # fmt: skip
            env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"} | {"HOME": str(work)}
            with chain.serve(serve, env):
                url = chain.serve_url
                wait_until("the first scheduled triage", lambda: reports(url, "schedule"), DEADLINE_S + 60)
                (first,) = reports(url, "schedule")
                found = Run(chain, pod_name, server.url, hung.getsockname()[1], first,
                            get_json(f"{url}/reports/{first['id']}"))  # fmt: skip

                shape = dataclasses.replace(STORM.load, total_requests=STORM.load.total_requests * 20,
                                            max_duration_s=300)  # fmt: skip
                with LoadGenerator(server.url, shape) as load:
                    wait_until("every alert of the storm answered", lambda: all_answered(found), 240,
                               log=work / "serve.log")  # fmt: skip
                    found.fired = get_json(f"{chain.alertmanager_url}/api/v2/alerts?active=true")
                found.load = load.result

                # The cache fills and frees as requests end, so the KV alert flaps while the queue drains, and
                # each firing is a new alert. Cleared: the server idle and no rule firing, every notification
                # sent before then delivered (group_interval) and triaged.
                wait_until("the fault to clear", lambda: cleared(chain, found.pod), 120)
                found.cleared_at = time.time()
                time.sleep(GROUP_INTERVAL_S + 1)
                wait_until("every alert triage kept", lambda: all_kept(url), DEADLINE_S + 10)
                found.alerts = list(reversed(reports(url, "alert")))
                found.alert_reports = {m["id"]: get_json(f"{url}/reports/{m['id']}") for m in found.alerts}
                latest = found.alerts[-1]["verdict"]
                scraped = (f'llmdiag_verdict{{job="llmdiag",trigger="alert",status="{latest["status"]}",'
                           f'rule="{latest["rule"]}"}}')  # fmt: skip
                fresh = f"timestamp({scraped}) > {found.cleared_at}"
                wait_until("Prometheus to scrape the verdict back after the clear", lambda: chain.query(fresh), 30)
                found.after_clear = {"alert": reports(url, "alert"), "schedule": reports(url, "schedule"),
                                     "verdicts": verdicts(url), "scraped": chain.query(scraped)}  # fmt: skip

            with chain.serve(serve, env, "llmdiag serve again"):
                found.after_restart = {
                    "alert": reports(url, "alert"),
                    "bodies": {i: get_json(f"{url}/reports/{i}") for i in found.alert_reports},
                    "verdicts": verdicts(url),
                }
            yield found
    finally:
        control_plane.kubectl("delete", "namespace", NS, "--wait=false", check=False)
        control_plane.kubectl("delete", "node", NODE, check=False)


def over_triage(run: Run, aggregate: str, metric: str, meta: dict) -> float:
    """`aggregate` (min, max) of what Prometheus scraped of the server's `metric` while the triage ran."""
    span = max(3 * SCRAPE_INTERVAL_S, round(meta["finished_at"] - meta["started_at"]) + SCRAPE_INTERVAL_S)
    found = run.chain.query(f'{aggregate}_over_time({metric}{{namespace="{NS}",pod="{run.pod}"}}[{span}s])',
                            at=meta["finished_at"])  # fmt: skip
    (value,) = [float(r["value"][1]) for r in found]
    return value


def test_a_hung_source_is_a_gap_by_its_name_at_the_deadline(run: Run) -> None:
    sources = run.first_report["sources"]
    hung = f"vllm/{LOOPBACK}_{run.hung_port}.metrics"
    assert sources[hung]["status"] == "failed" and "timeout" in sources[hung]["detail"], sources
    assert hung in [g["source"] for g in run.first_report["verdict"]["gaps"]], run.first_report["verdict"]
    # the collection is held to the deadline; the analysis of what it has comes after
    assert run.first["duration_seconds"] < DEADLINE_S + 15, run.first
    # the real server, in its pod, was read in the same cycle, through the API server's pod proxy
    real = {n: s for n, s in sources.items() if n.startswith("vllm/") and run.pod in n}
    assert real and all(s["status"] == "ok" for s in real.values()), real
    assert sources[f"k8s/logs/{NS}.{run.pod}.log"]["status"] == "ok", sources


def test_each_alert_of_the_storm_is_triaged_as_the_server_showed(run: Run) -> None:
    assert run.load is not None and run.load.succeeded > 0, run.load
    assert {a["labels"]["alertname"] for a in run.fired} == {r.name for r in RULES}, run.fired
    for meta in run.alerts:
        report = run.alert_reports[meta["id"]]
        assert meta["scope"] == {"instance": f"{run.server_url.split('//')[1]}", "job": "vllm", "namespace": NS,
                                 "pod": run.pod}, meta["scope"]  # fmt: skip
        assert report["context"]["kubernetes"]["namespaces"] == [NS], report["context"]
        assert report["context"]["selectors"]["pod"] == run.pod, report["context"]
        # the alert is about the pod's server: the hung one, given by URL, is not read for it
        assert not [n for n in report["sources"] if f"{LOOPBACK}_{run.hung_port}" in n], report["sources"]
        # What Prometheus saw of the server while this triage read it decides what the triage must say:
        # a cache full and a queue at every scrape is VLLM-101's. Where the cache dipped below full in
        # between, the triage's reads may have caught it there; and a queue that drained (the KV alert
        # fires again as the storm ends: each firing is a new alert) may be no fault at all.
        brief = [(f["rule"], f["subject"], f["evidence"][:2]) for f in report["findings"]]
        if over_triage(run, "min", "vllm:num_requests_waiting", meta) >= 1 and (
            over_triage(run, "min", "vllm:kv_cache_usage_perc", meta) >= KV_CACHE_HIGH
        ):
            assert meta["verdict"]["rule"] == STORM.expected_rule, (meta["verdict"], brief)
        if meta["verdict"]["layer"] == "vllm":
            assert f"vllm/{NS}/{run.pod}" in report["verdict"]["summary"], report["verdict"]
        assert (report["verdict"]["rule"] or "") == meta["verdict"]["rule"]
    # the storm's own fault was named at least once (the scrapes read it; vllm_server.SCENARIOS says which)
    assert STORM.expected_rule in [m["verdict"]["rule"] for m in run.alerts], [m["verdict"] for m in run.alerts]


def test_the_verdict_is_kept_and_scraped_back_after_the_fault_cleared(run: Run) -> None:
    assert run.after_clear["alert"] == list(reversed(run.alerts))
    assert run.after_clear["schedule"] == [run.first]  # no scheduled cycle ran meanwhile
    latest = run.alerts[-1]["verdict"]
    alert_verdict = {"trigger": "alert", "status": latest["status"], "layer": latest["layer"],
                     "rule": latest["rule"], "severity": latest["severity"],
                     "namespace": NS if latest["rule"] else ""}  # fmt: skip
    assert alert_verdict in run.after_clear["verdicts"]
    (sample,) = run.after_clear["scraped"]
    assert sample["metric"]["namespace"] == alert_verdict["namespace"]


def test_a_restart_keeps_every_report_and_verdict(run: Run) -> None:
    assert run.after_restart["alert"] == list(reversed(run.alerts))
    assert run.after_restart["bodies"] == run.alert_reports
    assert sorted(map(str, run.after_restart["verdicts"])) == sorted(map(str, run.after_clear["verdicts"]))
