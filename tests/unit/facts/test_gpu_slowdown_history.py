"""Issue 31: GPU slowdown episodes from dcgm-exporter's default counters, throughput drops against the
server's own baseline, and the GPU slowdown that explains the server's in the same minutes."""

from __future__ import annotations

import json
from collections.abc import Callable

from test_prometheus_history import END, LLM, STEP, WINDOW, N, answer, facts, fired, series, snapshot

from diag.analyze import Report, analyze_bundle
from diag.bundle.files import Bundle
from diag.bundle.prometheus_queries import RANGE_QUERIES
from diag.snapshot.clock import iso_time
from diag.snapshot.model import GPU, PromResult, VllmServer

MODEL = "NVIDIA H100 80GB HBM3"
SLOW = range(60, 120)  # samples 60..119: 15 minutes, the last one before the window's end


def dcgm(index: int, pod: str, namespace: str = "llm") -> dict[str, str]:
    """dcgm-exporter's labels with its pod mapping: the pod the GPU is given to."""
    return {"UUID": f"GPU-000{index}", "gpu": str(index), "Hostname": "gpu-1", "modelName": MODEL,
            "pci_bus_id": f"00000000:1{index}:00.0", "namespace": namespace, "pod": pod, "container": "c"}  # fmt: skip


def gpu_answers(shapes: dict[int, Callable[[int], dict[str, float]]]) -> list[PromResult]:
    """One answer per default counter; `shapes`: GPU index -> its values at sample i."""
    stems = {"util": "dcgm_gpu_util", "sm_clock": "dcgm_sm_clock", "temp": "dcgm_gpu_temp",
             "power": "dcgm_power_usage", "reasons": "dcgm_clocks_event_reasons"}  # fmt: skip
    found: dict[str, list] = {stem: [] for stem in stems.values()}
    for index, shape in shapes.items():
        labels = dcgm(index, "vllm-0") if index < 2 else dcgm(index, "train-0", "research")
        for name, stem in stems.items():
            if name in shape(0):
                found[stem].append(series(labels, lambda i, n=name, s=shape: s(i)[n]))
    return [answer(stem, *s) for stem, s in found.items()]


def busy(i: int) -> dict[str, float]:
    return {"util": 100, "sm_clock": 1980, "temp": 68, "power": 690}


def hot(i: int) -> dict[str, float]:
    return {"util": 100, "sm_clock": 1005, "temp": 92, "power": 415} if i in SLOW else busy(i)


def generation(level: float, slowed: float | None = None) -> Callable[[int], float]:
    return lambda i: slowed if slowed is not None and i in SLOW else level


def vllm(gen: Callable[[int], float], running: Callable[[int], float] = lambda i: 48) -> list[PromResult]:
    return [
        answer("vllm_num_requests_waiting", series(LLM, lambda i: 0)),
        answer("vllm_num_requests_running", series(LLM, running)),
        answer("vllm_kv_cache_usage_perc", series(LLM, 0.6)),
        answer("vllm_generation_tokens_rate_5m", series(LLM, gen)),
    ]


def gpus(count: int = 4) -> list[GPU]:
    return [GPU(host="gpu-1", index=i, uuid=f"GPU-000{i}", name=MODEL) for i in range(count)]


def analyze(results: list[PromResult]) -> Report:
    """`triage --prometheus-url -n llm` on these answers alone: every query answered, most with nothing."""
    given = {r.name: r for r in results}
    files = {"manifest.json": json.dumps({"kubernetes": {"namespaces": ["llm"]}}).encode()}
    for query in RANGE_QUERIES:
        found = given[query.stem].series if query.stem in given else []
        result = [{"metric": s.metric, "values": [[t, f"{v:g}"] for t, v in s.values]} for s in found]
        window = {"start": WINDOW.start, "end": WINDOW.end, "step": WINDOW.step}
        answer = {"query": query.promql, "window": window, "status": "success",
                  "data": {"resultType": "matrix", "result": result}}  # fmt: skip
        files[f"prometheus/{query.stem}.json"] = json.dumps(answer).encode()
    return analyze_bundle(Bundle(files))


def gpu_facts(snap) -> dict[str, dict]:
    return {f["_subject"]: f for f in facts(snap, "gpu")}


# --------------------------------------------------------------------------- GPU episodes


def test_a_thermal_slowdown_is_dated_to_the_samples_that_show_it() -> None:
    snap = snapshot(gpu_answers({0: hot, 2: busy}), gpus=gpus())
    episode = gpu_facts(snap)["gpu/gpu-1/0"]["slowdown_episodes"]
    assert len(episode) == 1
    first, last = END - (N - SLOW[0]) * STEP, END - (N - SLOW[-1]) * STEP
    assert (episode[0]["kind"], episode[0]["start"], episode[0]["end"]) == ("thermal", first, last + STEP)
    assert episode[0]["minutes"] == 15 and episode[0]["lowest_sm_clock"] == 1005 and episode[0]["hottest"] == 92
    assert "(60 samples 15 s apart, 15 min)" in episode[0]["text"]
    assert "against 1980 MHz" in episode[0]["text"]  # the highest clock of the model, here GPU 2's
    assert gpu_facts(snap)["gpu/gpu-1/2"]["slowdown_episodes"] == []


def test_a_gpu_always_at_low_clocks_is_measured_against_the_other_gpus_of_its_model() -> None:
    snap = snapshot(gpu_answers({0: lambda i: hot(60), 2: busy}), gpus=gpus())
    assert gpu_facts(snap)["gpu/gpu-1/0"]["slowdown_episodes"][0]["minutes"] == 30.2  # every sample


def test_the_power_cap_alone_is_no_slowdown_and_the_power_brake_is() -> None:
    def capped(i: int) -> dict[str, float]:
        return {"util": 100, "sm_clock": 1300, "temp": 60, "power": 700, "reasons": 0x4}

    def braked(i: int) -> dict[str, float]:
        return {"util": 100, "sm_clock": 705, "temp": 60, "power": 310, "reasons": 0x84} if i in SLOW else capped(i)

    snap = snapshot(gpu_answers({0: braked, 1: capped, 2: lambda i: busy(i) | {"reasons": 0x4}}), gpus=gpus())
    by_gpu = gpu_facts(snap)
    assert [e["kind"] for e in by_gpu["gpu/gpu-1/0"]["slowdown_episodes"]] == ["power"]
    assert by_gpu["gpu/gpu-1/1"]["slowdown_episodes"] == []  # 1300 of 1980 MHz, but the driver says: power cap


def test_without_reasons_a_cool_gpu_whose_clock_and_power_fell_is_power_slowed() -> None:
    def fell(i: int) -> dict[str, float]:
        return {"util": 100, "sm_clock": 900, "temp": 60, "power": 300} if i in SLOW else busy(i)

    snap = snapshot(gpu_answers({0: fell}), gpus=gpus())
    assert [e["kind"] for e in gpu_facts(snap)["gpu/gpu-1/0"]["slowdown_episodes"]] == ["power"]


def test_an_idle_gpu_at_low_clocks_is_no_slowdown() -> None:
    snap = snapshot(gpu_answers({0: lambda i: {"util": 0, "sm_clock": 345, "temp": 35, "power": 70}, 2: busy}),
                    gpus=gpus())  # fmt: skip
    assert gpu_facts(snap)["gpu/gpu-1/0"]["slowdown_episodes"] == []


# --------------------------------------------------------------------------- throughput against its baseline


def test_a_sudden_drop_is_measured_against_the_fifteen_minutes_before() -> None:
    snap = snapshot(vllm(generation(2900, 950)), [VllmServer(name="vllm-0", namespace="llm", pod="llm/vllm-0")])
    drop = facts(snap)[0]["throughput_drop"]
    assert drop["found"] and (drop["baseline"], drop["lowest"], drop["baseline_minutes"]) == (2900, 950, 15)
    assert drop["text"].endswith("fell from 2,900 to 950 tokens/s (by 67%) against the 15 minutes before")
    first, last = END - (N - SLOW[0]) * STEP, END - (N - SLOW[-1]) * STEP
    assert (drop["minutes"], drop["from"], drop["until"]) == (15, iso_time(first), iso_time(last))
    assert "(60 samples 15 s apart, 15 min)" in drop["exact"]
    assert "VLLM-119" in fired(snap)


def test_a_server_that_is_always_slow_has_no_drop() -> None:
    snap = snapshot(vllm(generation(950)), [VllmServer(name="vllm-0", namespace="llm", pod="llm/vllm-0")])
    assert facts(snap)[0]["throughput_drop"] == {"found": False}


def test_less_demand_is_no_drop() -> None:
    snap = snapshot(vllm(generation(2900, 950), running=lambda i: 12 if i in SLOW else 48),
                    [VllmServer(name="vllm-0", namespace="llm", pod="llm/vllm-0")])  # fmt: skip
    assert facts(snap)[0]["throughput_drop"] == {"found": False}


# --------------------------------------------------------------------------- the GPU explains the server


def test_a_hot_gpu_of_the_servers_pod_explains_its_throughput_drop() -> None:
    """Prometheus alone: the server and its GPUs are joined by dcgm-exporter's pod label; the other
    tenant's GPUs (pod train-0) are busy and cool."""
    snap = snapshot([*vllm(generation(2900, 950)), *gpu_answers({0: hot, 1: hot, 2: busy, 3: busy})],
                    manifest={"kubernetes": {"namespaces": ["llm"]}})  # fmt: skip
    served = gpu_facts(snap)["gpu/gpu-1/0"]["serving_slowdown"]
    assert served["found"] and served["kind"] == "thermal" and served["server"] == "llm.vllm-0"
    assert served["minutes"] == 15 and "fell from 2,900 to 950" in served["symptom"]
    assert gpu_facts(snap)["gpu/gpu-1/2"]["serving_slowdown"] is None  # serves no vLLM server
    report = analyze([*vllm(generation(2900, 950)), *gpu_answers({0: hot, 1: hot, 2: busy, 3: busy})])
    assert (report.verdict.layer, report.verdict.rule) == ("gpu", "GPU-119")
    drop = next(f for f in report.findings if f.rule == "VLLM-119")
    assert drop.explained_by == "GPU-119"


def test_healthy_gpus_leave_the_drop_to_vllm() -> None:
    snap = snapshot([*vllm(generation(2900, 950)), *gpu_answers({0: busy, 1: busy, 2: busy})],
                    manifest={"kubernetes": {"namespaces": ["llm"]}})  # fmt: skip
    assert gpu_facts(snap)["gpu/gpu-1/0"]["serving_slowdown"] == {"found": False}
    report = analyze([*vllm(generation(2900, 950)), *gpu_answers({0: busy, 1: busy, 2: busy})])
    assert report.verdict.rule == "VLLM-119"
    assert "GPU-119" not in {f.rule for f in report.findings}


def test_a_slowdown_outside_the_servers_slow_minutes_explains_nothing() -> None:
    def early(i: int) -> dict[str, float]:
        return {"util": 100, "sm_clock": 1005, "temp": 92, "power": 415} if i < 30 else busy(i)

    snap = snapshot([*vllm(generation(2900, 950)), *gpu_answers({0: early, 2: busy})],
                    manifest={"kubernetes": {"namespaces": ["llm"]}})  # fmt: skip
    assert gpu_facts(snap)["gpu/gpu-1/0"]["serving_slowdown"] == {"found": False}
    assert "GPU-104" in fired(snap) and "GPU-119" not in fired(snap)


def test_uncorrectable_ecc_errors_dcgm_exporter_counted_are_the_gpus() -> None:
    labels = dcgm(0, "vllm-0")
    snap = snapshot([answer("dcgm_ecc_dbe_vol_total", series(labels, lambda i: 0 if i < 100 else 2))], gpus=gpus(1))
    gpu = gpu_facts(snap)["gpu/gpu-1/0"]
    assert gpu["ecc_uncorrected_volatile"] == 2 and "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL = 2" in gpu["memory_faults"][0]
    assert "GPU-101" in fired(snap)


def test_dcgm_exporters_pod_label_keeps_a_neighbours_hot_gpu_off_the_server() -> None:
    """Both pods hold GPUs of one node: without the label every GPU of the node would be the server's."""
    from diag.link.join import join
    from diag.snapshot.model import Container, Node, Pod, Snapshot, SourceStatus

    def pod(namespace: str, name: str) -> Pod:
        return Pod(namespace=namespace, name=name, node_name="gpu-1", phase="Running",
                   containers=[Container(name="c", limits={"nvidia.com/gpu": "2"}, state="running")])  # fmt: skip

    server = VllmServer(name="vllm-0", namespace="llm", pod="llm/vllm-0")
    results = [*vllm(generation(2900, 950)), *gpu_answers({0: busy, 1: busy, 2: hot, 3: busy})]
    snap = join(Snapshot(vllm_servers=[server], gpus=gpus(), prometheus=results, nodes=[Node(name="gpu-1")],
                         pods=[pod("llm", "vllm-0"), pod("research", "train-0")],
                         sources={f"prometheus/{r.name}.json": SourceStatus("ok") for r in results}))  # fmt: skip
    assert server.gpus == ["GPU-0000", "GPU-0001"]
    by_gpu = gpu_facts(snap)
    assert by_gpu["gpu/gpu-1/2"]["serving_pods"] == ["research/train-0"]
    assert by_gpu["gpu/gpu-1/2"]["serving_slowdown"] is None and "GPU-119" not in fired(snap)


def test_a_power_limit_set_far_below_what_the_model_draws_holds_the_gpu_down() -> None:
    def lowered(i: int) -> dict[str, float]:
        return {"util": 100, "sm_clock": 1100, "temp": 60, "power": 400, "reasons": 0x4}

    snap = snapshot(gpu_answers({0: lowered, 2: lambda i: busy(i) | {"reasons": 0x4}}), gpus=gpus())
    episode = gpu_facts(snap)["gpu/gpu-1/0"]["slowdown_episodes"]
    assert [e["kind"] for e in episode] == ["power"]
    assert "drawing 400 W where GPUs of its model draw up to 690 W" in episode[0]["text"]
