"""Prometheus history as the rules see it: joined to servers and GPUs, one fact with the scrapes."""

from __future__ import annotations

import pytest

from diag.core.rules_dir import builtin_rules_dir, default_settings
from diag.engine.rules import evaluate, load_rules
from diag.facts import build_facts
from diag.link.join import join
from diag.parsers.engine_args import parse_engine_args
from diag.parsers.prom_text import parse_exposition
from diag.snapshot.clock import Clock
from diag.snapshot.model import GPU, PromResult, PromSeries, PromWindow, Scrape, Snapshot, SourceStatus, VllmServer

END = 1_764_786_600.0  # 2025-12-03 18:30 UTC
STEP = 15.0
N = 120  # samples 0..N over 30 minutes
WINDOW = PromWindow(END - N * STEP, END, STEP)
LLM = {"namespace": "llm", "pod": "vllm-0", "instance": "10.0.0.5:8000", "engine": "0", "model_name": "m"}
GPU_LABELS = {"UUID": "GPU-1111", "gpu": "0", "Hostname": "gpu-1", "modelName": "NVIDIA H100 80GB HBM3",
              "pci_bus_id": "00000000:18:00.0", "namespace": "gpu-operator"}  # fmt: skip


def series(labels: dict[str, str], value: object) -> PromSeries:
    """`value`: a number, or a function of the sample index."""
    at = value if callable(value) else (lambda i: value)
    return PromSeries(metric=labels, values=[(END - (N - i) * STEP, float(at(i))) for i in range(N + 1)])


def answer(stem: str, *found: PromSeries) -> PromResult:
    return PromResult(name=stem, query="...", result_type="matrix", series=list(found), window=WINDOW)


def storm(i: int, until: int = 80) -> float:
    return 0.99 if i < until else 0.6


def vllm_history(labels: dict[str, str] = LLM, kv=storm, waiting=lambda i: 5 + i // 4 if i < 80 else 1, preempt=0.2,
                 running=40, generation=900.0) -> list[PromResult]:  # fmt: skip
    return [
        answer("vllm_kv_cache_usage_perc", series(labels, kv)),
        answer("vllm_gpu_cache_usage_perc"),
        answer("vllm_num_requests_waiting", series(labels, waiting)),
        answer("vllm_num_requests_running", series(labels, running)),
        answer("vllm_preemptions_rate_5m", series(labels, preempt)),
        answer("vllm_generation_tokens_rate_5m", series(labels, generation)),
        answer("vllm_prompt_tokens_rate_5m", series(labels, generation)),
    ]


def snapshot(prometheus: list[PromResult], servers: list[VllmServer] | None = None, gpus: list[GPU] | None = None,
             manifest: dict | None = None) -> Snapshot:  # fmt: skip
    snap = Snapshot(vllm_servers=servers or [], gpus=gpus or [], prometheus=prometheus, manifest=manifest or {})
    for result in prometheus:
        snap.sources[f"prometheus/{result.name}.json"] = SourceStatus("ok")
    return join(snap)


def facts(snap: Snapshot, scope: str = "vllm_server") -> list[dict]:
    return build_facts(snap, Clock.of(snap), default_settings()).scopes[scope]


def fired(snap: Snapshot) -> dict[str, list[str]]:
    result = evaluate(load_rules([builtin_rules_dir()]), build_facts(snap, Clock.of(snap)), default_settings())
    found: dict[str, list[str]] = {}
    for f in result.findings:
        found.setdefault(f.rule, []).append(f.subject)
    return found


# --------------------------------------------------------------------------- joining


def test_a_series_joins_the_server_of_its_pod_and_a_gpu_by_its_uuid() -> None:
    server = VllmServer(name="vllm-0", namespace="llm", pod="llm/vllm-0")
    gpu = GPU(host="gpu-1", index=0, uuid="GPU-1111")
    snap = snapshot([*vllm_history(), answer("dcgm_xid_errors", series(GPU_LABELS, 0))], [server], [gpu])
    assert [s.name for s in snap.vllm_servers] == ["vllm-0"]
    assert len(server.history["vllm_kv_cache_usage_perc"]) == N + 1
    assert server.history["vllm_gpu_cache_usage_perc"] == []  # read, nothing under the old name
    assert [g.uuid for g in snap.gpus] == ["GPU-1111"] and len(gpu.history["dcgm_xid_errors"]) == N + 1


def test_a_server_known_only_from_history_becomes_a_subject_named_after_its_pod() -> None:
    snap = snapshot(vllm_history())
    [server] = facts(snap)
    assert server["name"] == "llm.vllm-0" and server["namespace"] == "llm"
    assert server["kv_saturation"]["found"] is True


def test_engines_of_one_server_are_summed_for_queues_and_maxed_for_the_cache() -> None:
    other_engine = LLM | {"engine": "1"}
    snap = snapshot([
        answer("vllm_num_requests_waiting", series(LLM, 3), series(other_engine, 4)),
        answer("vllm_kv_cache_usage_perc", series(LLM, 0.5), series(other_engine, 0.8)),
    ])  # fmt: skip
    [server] = snap.vllm_servers
    assert {v for _, v in server.history["vllm_num_requests_waiting"]} == {7.0}
    assert {v for _, v in server.history["vllm_kv_cache_usage_perc"]} == {0.8}


def test_another_tenants_series_outside_the_collected_namespaces_join_nothing() -> None:
    research = LLM | {"namespace": "research", "pod": "mistral-0", "instance": "10.0.9.9:8000"}
    prometheus = [
        answer(r.name, *r.series, *[PromSeries(research, s.values) for s in r.series]) for r in vllm_history()
    ]
    scoped = snapshot(prometheus, manifest={"kubernetes": {"namespaces": ["llm"]}})
    assert [s.name for s in scoped.vllm_servers] == ["llm.vllm-0"]
    everywhere = snapshot(prometheus, manifest={"kubernetes": {"namespaces": ["*"]}})
    assert sorted(s.name for s in everywhere.vllm_servers) == ["llm.vllm-0", "research.mistral-0"]


# --------------------------------------------------------------------------- one fact from either source


def test_a_kv_storm_that_ended_is_dated_and_not_ongoing() -> None:
    [server] = facts(snapshot(vllm_history()))
    kv = server["kv_saturation"]
    assert kv["found"] is True and kv["ongoing"] is False
    assert kv["peak"] == 0.99 and kv["now"] == 0.6
    assert kv["minutes"] == 20.0
    assert kv["when"].startswith("from 2025-12-03 18:00 to 2025-12-03 18:20 UTC (20 min), ended 10m before collection")
    assert kv["preemptions"] == round(0.2 * 80 * STEP)
    assert fired(snapshot(vllm_history())).get("VLLM-101") == ["vllm/llm/llm.vllm-0"]


def test_a_storm_still_going_says_so() -> None:
    [server] = facts(snapshot(vllm_history(kv=0.99, waiting=lambda i: 5 + i // 4)))
    assert server["kv_saturation"]["ongoing"] is True
    assert "still going on at collection" in server["kv_saturation"]["when"]


def test_a_burst_shorter_than_history_min_minutes_is_noise() -> None:
    [server] = facts(snapshot(vllm_history(kv=lambda i: storm(i, until=12))))  # 3 minutes
    assert server["kv_saturation"] == {"found": False}


def test_a_full_cache_without_preemptions_or_a_growing_queue_is_not_saturation() -> None:
    [server] = facts(snapshot(vllm_history(waiting=5, preempt=0)))
    assert server["kv_saturation"] == {"found": False}


def test_without_the_preemption_series_a_steady_queue_at_a_full_cache_is_unknown() -> None:
    history = [r for r in vllm_history(waiting=5) if r.name != "vllm_preemptions_rate_5m"]
    [server] = facts(snapshot(history))
    assert server["kv_saturation"] is None


def test_the_old_kv_name_is_read_when_the_new_one_has_no_series() -> None:
    history = [answer("vllm_gpu_cache_usage_perc", *r.series) if r.name == "vllm_kv_cache_usage_perc" else
               answer("vllm_kv_cache_usage_perc") if r.name == "vllm_gpu_cache_usage_perc" else r
               for r in vllm_history()]  # fmt: skip
    [server] = facts(snapshot(history))
    assert server["kv_saturation"]["found"] is True
    assert server["metric_names"]["kv_cache_usage"] == "vllm:gpu_cache_usage_perc"


def test_no_history_and_no_scrape_leaves_every_episode_unknown() -> None:
    [server] = facts(snapshot([], [VllmServer(name="vllm-0")]))
    assert server["kv_saturation"] is None and server["queue_growth"] is None and server["stall"] is None
    assert server["aborted_requests"] is None


def test_a_server_prometheus_never_scraped_is_unknown_not_calm() -> None:
    other = LLM | {"pod": "vllm-1", "instance": "10.0.0.6:8000"}
    server = VllmServer(name="vllm-0", namespace="llm", pod="llm/vllm-0")
    snap = snapshot(vllm_history(labels=other), [server])
    mine = next(f for f in facts(snap) if f["name"] == "vllm-0")
    assert mine["kv_saturation"] is None and mine["history_read"] is False


def _scrape(kv: float, waiting: float, preemptions: float, t: float) -> Scrape:
    text = (f'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {kv}\n'
            f'vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}\n'
            f'vllm:num_requests_running{{engine="0",model_name="m"}} 40\n'
            f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {preemptions}\n'
            f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {t}\n'
            f'vllm:prompt_tokens_total{{engine="0",model_name="m"}} {t}\n')  # fmt: skip
    return Scrape(parse_exposition(text).samples, t)


def test_calm_scrapes_at_collection_end_a_storm_the_history_still_shows() -> None:
    server = VllmServer(name="vllm-0", namespace="llm", pod="llm/vllm-0",
                        scrapes=[_scrape(0.5, 1, 10, END), _scrape(0.5, 1, 10, END + 10)])  # fmt: skip
    [found] = facts(snapshot(vllm_history(kv=0.99, waiting=lambda i: 5 + i // 4), [server]))
    kv = found["kv_saturation"]
    assert kv["found"] is True and kv["ongoing"] is False
    assert "no longer show it" in kv["note"]


def test_saturated_scrapes_fire_without_any_history() -> None:
    server = VllmServer(name="vllm-0", scrapes=[_scrape(0.95, 3, 10, END), _scrape(0.97, 6, 14, END + 10)])
    [found] = facts(snapshot([], [server]))
    kv = found["kv_saturation"]
    assert kv["found"] is True and kv["source"] == "the /metrics scrapes" and kv["preemptions"] == 4.0


def test_a_queue_that_climbs_for_twenty_minutes_grows_one_that_swings_does_not() -> None:
    climbing = facts(snapshot(vllm_history(kv=0.6, preempt=0, waiting=lambda i: 0 if i < 40 else (i - 40) // 3)))[0]
    assert climbing["queue_growth"]["found"] is True and climbing["queue_growth"]["ongoing"] is True
    assert climbing["queue_growth"]["waiting_last"] == 26.0
    swinging = facts(snapshot(vllm_history(kv=0.6, preempt=0, waiting=lambda i: [1, 4, 7, 4][i % 4])))[0]
    assert swinging["queue_growth"] == {"found": False}


def test_tokens_stopping_while_requests_run_is_a_stall_that_ended() -> None:
    gen = lambda i: 0.0 if 20 <= i < 60 else 900.0  # noqa: E731
    [server] = facts(snapshot(vllm_history(kv=0.5, preempt=0, waiting=0, generation=gen)))
    stall = server["stall"]
    assert stall["found"] is True and stall["ongoing"] is False and stall["minutes"] == 10.0


def test_aborted_requests_are_counted_by_finished_reason() -> None:
    success = answer("vllm_request_success_rate_5m", series(LLM | {"finished_reason": "stop"}, 3.0),
                     series(LLM | {"finished_reason": "abort"}, 1.0),
                     series(LLM | {"finished_reason": "length"}, 0.0))  # fmt: skip
    snap = snapshot([*vllm_history(kv=0.5, preempt=0, waiting=0), success])
    [server] = facts(snap)
    aborted = server["aborted_requests"]
    assert aborted["by_reason"] == {"abort": round(1.0 * STEP * (N + 1))}
    assert aborted["share"] == pytest.approx(0.25)
    assert "VLLM-118" in fired(snap)


# --------------------------------------------------------------------------- GPUs


def test_an_xid_only_dcgm_exporter_saw_is_the_gpus_xid() -> None:
    xid = answer("dcgm_xid_errors", series(GPU_LABELS, lambda i: 79 if i >= 96 else 0))
    snap = snapshot([xid], gpus=[GPU(host="gpu-1", index=0, uuid="GPU-1111")])
    [gpu] = facts(snap, "gpu")
    assert gpu["xids"] == [79]
    assert "DCGM_FI_DEV_XID_ERRORS = 79 (dcgm-exporter) since 2025-12-03 18:24 UTC" in gpu["xid_reports"][0]["text"]
    assert fired(snap)["GPU-102"] == ["gpu/gpu-1/0"]


def test_a_gpu_known_only_from_dcgm_has_unknown_nvidia_smi_facts() -> None:
    snap = snapshot([answer("dcgm_xid_errors", series(GPU_LABELS, 0))])
    [gpu] = facts(snap, "gpu")
    assert gpu["uuid"] == "GPU-1111" and gpu["name"] == "NVIDIA H100 80GB HBM3"
    assert gpu["xids"] == []  # dcgm-exporter reported no Xid
    assert gpu["slowdown_reasons"] is None and gpu["unowned_memory_mib"] is None


def test_row_remapping_in_history_is_pending_and_failure_is_failure() -> None:
    rows = answer("dcgm_uncorrectable_remapped_rows", series(GPU_LABELS, lambda i: 0 if i < 50 else 1))
    failure = answer("dcgm_row_remap_failure", series(GPU_LABELS, lambda i: 1 if i > 100 else 0))
    [gpu] = facts(snapshot([rows, failure], gpus=[GPU(host="gpu-1", index=0, uuid="GPU-1111")]), "gpu")
    assert gpu["remapped_rows_pending"] is True and gpu["remapped_rows_failure"] is True
    [calm] = facts(
        snapshot(
            [answer("dcgm_row_remap_failure", series(GPU_LABELS, 0))],
            gpus=[GPU(host="gpu-1", index=0, uuid="GPU-1111")],
        ),
        "gpu",
    )
    assert calm["remapped_rows_failure"] is False
    assert calm["remapped_rows_pending"] is None  # neither nvidia-smi nor dcgm-exporter said


def test_throttling_counts_only_while_the_gpu_is_busy() -> None:
    power = answer("dcgm_power_violation_rate_5m", series(GPU_LABELS, 4e8))  # throttled 40 % of the time
    busy = snapshot(
        [power, answer("dcgm_gpu_util", series(GPU_LABELS, 97))], gpus=[GPU(host="gpu-1", index=0, uuid="GPU-1111")]
    )
    [gpu] = facts(busy, "gpu")
    assert gpu["slowdown_reasons"] and gpu["slowdown_reasons"][0].startswith(
        "power throttling 40% of the time while 97-97 % busy"
    )
    idle = snapshot(
        [power, answer("dcgm_gpu_util", series(GPU_LABELS, 3))], gpus=[GPU(host="gpu-1", index=0, uuid="GPU-1111")]
    )
    assert facts(idle, "gpu")[0]["slowdown_reasons"] == []


def test_a_running_batch_pinned_at_a_known_cap_while_the_queue_waits_is_the_cap() -> None:
    server = VllmServer(name="vllm-0", namespace="llm", pod="llm/vllm-0",
                        engine_args=parse_engine_args(["vllm", "serve", "m", "--max-num-seqs", "32"], []))  # fmt: skip
    history = vllm_history(
        kv=0.6, preempt=0, running=lambda i: 32 if i >= 40 else 20, waiting=lambda i: 9 if i >= 40 else 0
    )
    [found] = facts(snapshot(history, [server]))
    capped = found["seq_cap_reached"]
    assert capped["found"] is True and capped["cap"] == 32 and capped["at_cap"] == "for 20.2 min"  # 81 samples of 15 s
    assert "VLLM-102" in fired(snapshot(history, [VllmServer(name="vllm-0", namespace="llm", pod="llm/vllm-0",
                                                             engine_args=server.engine_args)]))  # fmt: skip


def _latency(ttft: float, queue: float, itl: float) -> list[PromResult]:
    return [
        answer("vllm_ttft_mean_5m", series(LLM, ttft)),
        answer("vllm_queue_time_mean_5m", series(LLM, queue)),
        answer("vllm_itl_mean_5m", series(LLM, itl)),
        answer("vllm_tpot_mean_5m"),
        answer("vllm_ttft_p99_5m", series(LLM, 3 * ttft)),
        answer("vllm_itl_p99_5m", series(LLM, 3 * itl)),
    ]


def test_slow_first_tokens_mostly_outside_the_queue_are_prefill_bound() -> None:
    [server] = facts(snapshot([*vllm_history(kv=0.5, preempt=0, waiting=0), *_latency(ttft=4.0, queue=0.4, itl=0.05)]))
    slow = server["first_token_slow"]
    assert slow["found"] is True and slow["tail"] == "p99" and slow["ttft_tail"] == 12.0 and slow["queue_share"] == 0.1
    assert server["decode_slow"] == {"found": False}
    [queued] = facts(snapshot([*vllm_history(kv=0.5, preempt=0, waiting=0), *_latency(ttft=4.0, queue=3.6, itl=0.05)]))
    assert queued["first_token_slow"] == {"found": False}  # mostly queueing: the KV cache's or the cap's


def test_slow_tokens_after_a_fast_first_one_are_decode_bound() -> None:
    [server] = facts(snapshot([*vllm_history(kv=0.5, preempt=0, waiting=0), *_latency(ttft=0.3, queue=0.1, itl=0.4)]))
    assert server["decode_slow"]["found"] is True and server["decode_slow"]["itl_tail"] == pytest.approx(1.2)


def test_gpu_memory_dcgm_exporter_sees_is_the_unowned_memory_of_a_gpu_nvidia_smi_did_not_read() -> None:
    [gpu] = facts(snapshot([answer("dcgm_fb_used", series(GPU_LABELS, 30000))]), "gpu")
    assert gpu["unowned_memory_mib"] == 30000 and gpu["memory_used_mib"] == 30000
    assert gpu["unowned_process_text"][0].startswith("DCGM_FI_DEV_FB_USED = 30000 MiB")
    seen = GPU(host="gpu-1", index=0, uuid="GPU-1111", memory_used_mib=200.0)
    [by_nvidia_smi] = facts(snapshot([answer("dcgm_fb_used", series(GPU_LABELS, 30000))], gpus=[seen]), "gpu")
    assert by_nvidia_smi["memory_used_mib"] == 200.0  # nvidia-smi read the GPU itself: its processes decide


def test_once_prometheus_was_queried_a_missing_answer_is_a_gap_and_without_it_none() -> None:
    from diag.verdict.coverage import gaps

    history = vllm_history()
    missing = {g.source for g in gaps(snapshot(history))}
    assert "prometheus/dcgm_xid_errors.json" in missing and "prometheus/vllm_kv_cache_usage_perc.json" not in missing
    assert [g for g in gaps(snapshot(history)) if g.source == "prometheus/dcgm_xid_errors.json"][0].layer == "gpu"
    assert not any(g.source.startswith("prometheus/") for g in gaps(snapshot([], [VllmServer(name="vllm-0")])))


def test_the_json_report_says_which_window_of_history_it_read() -> None:
    from pathlib import Path

    from diag.analyze import analyze_bundle
    from diag.bundle.files import Bundle
    from diag.report.json_report import to_dict

    fixtures = Path(__file__).resolve().parents[3] / "fixtures"
    window = to_dict(analyze_bundle(Bundle.open(fixtures / "history-kv-storm-ended")))["prometheus_window"]
    assert window["step_seconds"] == 15 and window["start"] < window["end"] and window["end"].endswith("Z")
    assert to_dict(analyze_bundle(Bundle.open(fixtures / "busy-but-healthy")))["prometheus_window"] is None


def test_the_terminal_and_markdown_reports_say_which_window_they_read() -> None:
    import json
    from datetime import datetime, timezone
    from pathlib import Path

    from diag.analyze import analyze_bundle
    from diag.bundle.files import Bundle
    from diag.report.markdown import render_markdown

    fixtures = Path(__file__).resolve().parents[3] / "fixtures"
    with_history = render_markdown(analyze_bundle(Bundle.open(fixtures / "history-kv-storm-ended")))
    # the window the recording asked for (ci/prometheus/record.py), as the report writes it
    window = json.loads((fixtures / "history-kv-storm-ended/prometheus/vllm_up.json").read_text())["window"]
    start, end = (
        datetime.fromtimestamp(window[k], tz=timezone.utc).strftime("%Y-%m-%d %H:%M") for k in ("start", "end")
    )
    assert f"- Prometheus history read from {start} to {end} UTC, a sample every 15 s" in with_history
    assert "Prometheus history read" not in render_markdown(analyze_bundle(Bundle.open(fixtures / "busy-but-healthy")))
