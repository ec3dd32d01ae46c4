"""A source that hangs does not stall `llmdiag serve`: the real collection (collect_live) against a
loopback server that accepts and never answers, each cycle cut at the deadline, the next on time."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

from diag.collect.base import Target
from diag.engine.config import Config
from diag.serve.service import Service, Settings
from diag.serve.store import Limits, ReportStore


def test_a_hung_source_fails_at_the_deadline_and_the_next_cycle_starts_on_time(tmp_path: Path) -> None:
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(16)  # connections complete in the backlog; nothing is ever read or answered
    url = f"http://127.0.0.1:{hung.getsockname()[1]}"
    target = Target(vllm_urls=[url], local_gpu=False, scrapes=1, kubeconfig=str(tmp_path / "no-kubeconfig"))
    settings = Settings(every_s=2.0, deadline_s=1.0, target=target, config=Config())
    service = Service(settings, ReportStore(tmp_path / "state", Limits()))
    service.start()
    try:
        deadline = time.monotonic() + 20
        while len(service.store.listing()) < 3:
            assert time.monotonic() < deadline, service.store.listing()
            time.sleep(0.1)
    finally:
        service.stop()
        hung.close()
    kept = sorted(service.store.listing(), key=lambda m: m["started_at"])[:3]
    starts = [m["started_at"] for m in kept]
    assert all(1.8 < b - a < 2.3 for a, b in zip(starts, starts[1:], strict=False)), starts
    assert all(m["duration_seconds"] < 1.9 for m in kept), kept
    assert service.counters.get("llmdiag_cycles_total", trigger="schedule", outcome="skipped") == 0
    report = json.loads(service.store.body(kept[0]["id"], "json"))
    # the hung server is the gap, by name: its reads time out inside the deadline, the collector is not cut
    name = f"vllm/127.0.0.1_{url.rsplit(':', 1)[1]}"
    assert report["sources"][f"{name}.metrics"]["status"] == "failed", report["sources"]
    assert "timeout" in report["sources"][f"{name}.metrics"]["detail"]
    assert "vllm (--vllm-url)" not in report["sources"], report["sources"]
    assert [g["source"] for g in report["verdict"]["gaps"] if name in g["source"]], report["verdict"]["gaps"]
