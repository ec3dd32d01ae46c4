"""A Prometheus on 127.0.0.1 answering 250,000 series to every query: each query fails by name within the
run's deadline, before its answer is parsed, and the Ray dashboard and vLLM server given by URL are
read in full. The collection runs in a process of its own so that its time and peak memory are its own
(asserted loosely: a shared 2-core machine; docs/security.md has the measured figures)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
TOTAL_TIMEOUT_S = 30

COLLECT = f"""
import json, sys
from diag.collect.base import Target
from diag.collect.runner import collect, default_collectors
from tests.replay.upstream import Answer, RecordedHttp, vllm_routes
from tests.unit.collect.test_collect_bounds import _ray_dashboard_routes

series = ",".join(
    '{{"metric":{{"__name__":"DCGM_FI_DEV_GPU_UTIL","gpu":"%d","Hostname":"node-%d"}},'
    '"values":[[1700000000,"1"],[1700000015,"2"]]}}' % (i % 8, i)
    for i in range(250_000)
)
answer = ('{{"status":"success","data":{{"resultType":"matrix","result":[' + series + "]}}}}").encode()
with (
    RecordedHttp(vllm_routes()) as vllm,
    RecordedHttp(_ray_dashboard_routes()) as ray,
    RecordedHttp({{"/api/v1/query_range": [Answer(200, answer)]}}) as prom,
):
    target = Target(
        kubeconfig="/nonexistent", vllm_urls=[vllm.url], ray_address=ray.url, prometheus_url=prom.url,
        local_gpu=False, scrapes=1, source_timeout_s=15, total_timeout_s={TOTAL_TIMEOUT_S},
    )
    bundle, results = collect(target, default_collectors(target))
json.dump({{"answer_mb": len(answer) / 1e6, "results": [[r.name, r.status, r.detail] for r in results]}}, sys.stdout)
"""


def test_a_prometheus_of_250k_series_fails_each_query_by_name_and_starves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    started = time.monotonic()
    with out.open("w") as stdout:
        # the test server's own complaints (the collector hung up on it) stay out of the test's output
        child = subprocess.Popen([sys.executable, "-c", COLLECT], cwd=REPO, stdout=stdout, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(child.pid, 0)
    seconds, cpu_s, rss_mb = time.monotonic() - started, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024
    assert status == 0
    done = json.loads(out.read_text())
    assert 25 < done["answer_mb"] < 64  # within --max-answer-bytes: the byte cap alone lets it through
    results = {name: (state, detail) for name, state, detail in done["results"]}
    queries = {name: got for name, got in results.items() if name.startswith("prometheus/")}
    assert len(queries) > 10
    for name, (state, detail) in queries.items():
        assert state == "failed", name
        assert "over the work budget: more than 50,000 series in one answer (stopped reading at " in detail
        assert float(detail.rsplit("at ", 1)[1].split()[0]) < 10  # MB: about 6 of the 32
    for name in ("ray/nodes.json", "ray/actors.json", "ray/placement_groups.json", "ray/cluster_status.json"):
        assert results[name][0] == "ok", (name, results[name])
    assert any(name.startswith("vllm/") and state == "ok" for name, (state, _) in results.items())
    # before the budget: 34 s under --timeout 30 (Prometheus timed out), peak RSS 4.9 GB
    assert seconds < TOTAL_TIMEOUT_S  # within the run's deadline, on a busy machine too
    assert cpu_s < 15
    assert rss_mb < 1024  # each of the 40 queries holds what it read (about 6 MB) until it stops
