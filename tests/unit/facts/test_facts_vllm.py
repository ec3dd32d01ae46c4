"""What the vLLM rules read: diag.facts.vllm over small snapshots built from /metrics texts and pod specs."""

from __future__ import annotations

import pytest

from diag.core.rules_dir import builtin_rules_dir, default_settings, load_settings
from diag.engine.rules import Evaluation, evaluate, load_rules
from diag.facts import build_facts, vllm
from diag.link.join import join
from diag.parsers.engine_args import parse_engine_args
from diag.parsers.prom_text import parse_exposition
from diag.parsers.workloads import spec_engine_args
from diag.snapshot.clock import Clock
from diag.snapshot.model import (
    Container,
    Pod,
    RayClusterSpec,
    RayWorkerGroup,
    Scrape,
    Service,
    Snapshot,
    SourceStatus,
    VllmServer,
)
from diag.verdict.diagnosis import link_causes

MODEL = 'model_name="llama"'


def scrape(text: str, taken_at: float | None = None) -> Scrape:
    return Scrape(parse_exposition(text).samples, taken_at)


def v1(running: float, waiting: float, generated: float, engines: int = 1, kv: float = 0.1) -> str:
    lines = []
    for e in range(engines):
        labels = f'engine="{e}",{MODEL}'
        lines += [
            f"vllm:num_requests_running{{{labels}}} {running / engines}",
            f"vllm:num_requests_waiting{{{labels}}} {waiting / engines}",
            f"vllm:kv_cache_usage_perc{{{labels}}} {kv}",
            f"vllm:generation_tokens_total{{{labels}}} {generated / engines}",
            f"vllm:prompt_tokens_total{{{labels}}} {generated / engines}",
        ]
    return "\n".join(lines) + "\n"


def vllm_pod(
    args: list[str], gpus: str = "1", name: str = "vllm-0", labels: dict | None = None, ip: str = "10.0.0.5"
) -> Pod:
    pod = Pod(
        namespace="llm",
        name=name,
        labels=labels or {"app": "vllm"},
        node_name="gpu-1",
        phase="Running",
        pod_ip=ip,
        owner_kind="ReplicaSet",
        owner_name="vllm-6c9d",
        containers=[
            Container(
                name="vllm",
                image="vllm/vllm-openai:v0.11.0",
                command=["vllm", "serve"],
                args=args,
                limits={"nvidia.com/gpu": gpus, "cpu": "8"},
                ready=True,
                state="running",
            )
        ],
    )
    pod.containers[0].engine_args = spec_engine_args(pod.containers[0], ray_pod=False)  # as parse_pods reads them
    return pod


def facts_of(snap: Snapshot, name: str = "vllm-0") -> dict:
    join(snap)
    return next(s for s in vllm.scopes(snap, default_settings(), Clock.of(snap))["vllm_server"] if s["name"] == name)


def served(pod: Pod, *scrapes: Scrape, health: str | None = "200") -> Snapshot:
    server = VllmServer(name=pod.name, scrapes=list(scrapes), health=health)
    return Snapshot(pods=[pod], vllm_servers=[server])


# --------------------------------------------------------------------------- the scheduler cap


def test_the_seq_cap_is_per_engine_core_times_the_cores_one_metrics_covers() -> None:
    pod = vllm_pod(["m", "--max-num-seqs", "16", "--data-parallel-size", "2"])
    facts = facts_of(served(pod, scrape(v1(32, 5, 100, engines=2))))
    assert facts["engines"] == 2
    assert facts["max_num_seqs"] == 16
    assert facts["max_num_seqs_total"] == 32
    assert facts["flag"]["max_num_seqs"] == "16"


def test_an_absent_max_num_seqs_is_unknown_not_a_guessed_default() -> None:
    facts = facts_of(served(vllm_pod(["m"]), scrape(v1(256, 9, 100))))
    assert facts["max_num_seqs"] is None
    assert facts["max_num_seqs_total"] is None
    assert facts["max_num_seqs_given"] is False
    assert facts["flag"]["max_num_seqs"] == "not set (vLLM's default)"
    assert facts["flag"]["gpu_memory_utilization"] == "0.9 (default)"


def test_a_run_time_value_is_given_but_unknown() -> None:
    facts = facts_of(served(vllm_pod(["m", "--max-num-seqs", "$(MAX_SEQS)"]), scrape(v1(96, 4, 100))))
    assert facts["max_num_seqs"] is None
    assert facts["max_num_seqs_given"] is True
    assert facts["flag"]["max_num_seqs"] == "a value known only at run time"


def test_engine_args_from_a_cmdline_file_are_named_as_such() -> None:
    server = VllmServer(
        name="10.0.7.21_8000",
        scrapes=[scrape(v1(1, 0, 10))],
        engine_args=parse_engine_args(["vllm", "serve", "m", "--max-num-seqs", "8"], []),
    )
    snap = Snapshot(vllm_servers=[server])
    snap.sources["vllm/10.0.7.21_8000.cmdline.txt"] = SourceStatus("ok")
    facts = facts_of(snap, "10.0.7.21_8000")
    assert facts["engine_args_from"] == "vllm/10.0.7.21_8000.cmdline.txt"
    assert facts["edit_hint"].startswith("the command line that starts 10.0.7.21_8000")
    assert facts["gpus_provided"] is None


def test_an_owner_reference_without_a_name_gives_the_pods_own_edit_hint() -> None:
    pod = vllm_pod(["--model", "m"])
    pod.owner_kind, pod.owner_name = "StatefulSet", None
    facts = facts_of(served(pod, scrape(v1(1, 0, 10))))
    assert facts["edit_hint"].startswith("kubectl -n llm get pod vllm-0 -o yaml")


# --------------------------------------------------------------------------- progress, idleness


def test_a_hang_needs_requests_running_in_every_scrape() -> None:
    pod = vllm_pod(["m"])
    steady = facts_of(served(pod, scrape(v1(14, 20, 500), 1000.0), scrape(v1(14, 31, 500), 1010.0)))
    assert steady["stall"]["found"] is True
    assert steady["stall"]["source"] == "the /metrics scrapes"
    assert steady["stall"]["when"] == "over 2 /metrics scrapes 10 s apart, at collection"
    started_late = facts_of(served(vllm_pod(["m"]), scrape(v1(0, 0, 500), 1000.0), scrape(v1(3, 0, 500), 1010.0)))
    assert started_late["stall"] == {"found": False}


def test_a_hang_is_unknown_when_a_scrape_lacks_the_running_gauge() -> None:
    no_gauge = "vllm:generation_tokens_total{" + MODEL + "} 5\nvllm:prompt_tokens_total{" + MODEL + "} 5\n"
    facts = facts_of(served(vllm_pod(["m"]), scrape(no_gauge, 1000.0), scrape(v1(2, 0, 5), 1010.0)))
    assert facts["stall"] is None


def test_idle_means_nothing_running_or_waiting_and_no_token_between_scrapes() -> None:
    pod = vllm_pod(["m"])
    assert facts_of(served(pod, scrape(v1(0, 0, 700)), scrape(v1(0, 0, 700))))["idle"] is True
    moved = facts_of(served(vllm_pod(["m"]), scrape(v1(0, 0, 700)), scrape(v1(0, 0, 900))))
    assert moved["idle"] is False
    assert facts_of(served(vllm_pod(["m"])))["idle"] is None  # no /metrics: unknown, not idle


def test_a_pod_left_out_of_its_service_endpoints_is_seen() -> None:
    pod = vllm_pod(["m"])
    svc = Service(
        namespace="llm",
        name="vllm",
        selector={"app": "vllm"},
        ready_addresses=[],
        not_ready_addresses=["vllm-0"],
        endpoints_seen=True,
    )
    snap = served(pod, scrape(v1(0, 0, 1)))
    snap.services.append(svc)
    facts = facts_of(snap)
    assert facts["service_ready_endpoints"] == 0
    assert facts["in_service_endpoints"] is False
    assert facts["service_endpoints"] == "ready: none; not ready: vllm-0"


# --------------------------------------------------------------------------- latency split, missing metrics


def test_the_first_token_time_is_split_into_queue_and_the_rest() -> None:
    text = (
        v1(4, 0, 10)
        + "\n".join(
            [
                f'vllm:time_to_first_token_seconds_bucket{{{MODEL},le="+Inf"}} 10',
                f"vllm:time_to_first_token_seconds_sum{{{MODEL}}} 40",
                f"vllm:time_to_first_token_seconds_count{{{MODEL}}} 10",
                f'vllm:request_queue_time_seconds_bucket{{{MODEL},le="+Inf"}} 10',
                f"vllm:request_queue_time_seconds_sum{{{MODEL}}} 10",
                f"vllm:request_queue_time_seconds_count{{{MODEL}}} 10",
                f'vllm:inter_token_latency_seconds_bucket{{{MODEL},le="+Inf"}} 10',
                f"vllm:inter_token_latency_seconds_sum{{{MODEL}}} 0.5",
                f"vllm:inter_token_latency_seconds_count{{{MODEL}}} 10",
            ]
        )
        + "\n"
    )
    facts = facts_of(served(vllm_pod(["m"]), scrape(text)))
    slow = facts["first_token_slow"]
    assert slow["found"] is True and slow["queue_share"] == 0.25 and slow["ttft_mean"] == 4.0
    assert "vllm:request_queue_time_seconds" not in facts["metrics_missing"]


def test_an_old_server_without_the_queue_histogram_is_reported_missing_it() -> None:
    v0 = (
        "\n".join(
            [
                f"vllm:num_requests_running{{{MODEL}}} 3",
                f"vllm:num_requests_waiting{{{MODEL}}} 0",
                f"vllm:gpu_cache_usage_perc{{{MODEL}}} 0.4",
                f"vllm:num_preemptions_total{{{MODEL}}} 0",
                f"vllm:generation_tokens_total{{{MODEL}}} 10",
            ]
        )
        + "\n"
    )
    facts = facts_of(served(vllm_pod(["m"]), scrape(v0)))
    assert facts["metrics"]["api_generation"] == "v0"
    assert facts["metric_names"]["kv_cache_usage"] == "vllm:gpu_cache_usage_perc"
    assert "vllm:request_queue_time_seconds" in facts["metrics_missing"]
    assert facts["first_token_slow"] is None


# --------------------------------------------------------------------------- GPUs for TP x PP


def test_parallel_gpus_against_the_pods_nvidia_gpu() -> None:
    facts = facts_of(served(vllm_pod(["m", "-tp", "4", "-pp", "2"], gpus="4")))
    assert facts["parallel_gpus"] == 8
    assert facts["gpus_provided"] == 4
    assert facts["gpus_provided_by"] == "pod llm/vllm-0: nvidia.com/gpu 4"


def test_under_ray_the_clusters_gpus_count_not_the_pods() -> None:
    pod = vllm_pod(
        ["m", "--tensor-parallel-size", "8"], gpus="1", labels={"ray.io/cluster": "llm-ray", "ray.io/node-type": "head"}
    )
    pod.ray_cluster = "llm-ray"
    snap = served(pod)
    snap.ray_clusters.append(
        RayClusterSpec(
            kind="RayCluster",
            namespace="llm",
            name="llm-ray",
            head_gpu_limit=0,
            worker_groups=[RayWorkerGroup(name="gpu", replicas=2, gpu_limit_per_pod=4)],
        )
    )
    facts = facts_of(snap)
    assert facts["gpus_provided"] == 8
    assert "RayCluster llm/llm-ray" in facts["gpus_provided_by"]


def test_a_server_spread_over_hosts_is_not_judged_by_one_pod() -> None:
    facts = facts_of(served(vllm_pod(["m", "-tp", "8", "--nnodes", "2"], gpus="4")))
    assert facts["gpus_provided"] is None


# --------------------------------------------------------------------------- logs


def test_the_specific_failure_line_is_preferred_over_the_engine_death_that_follows() -> None:
    pod = vllm_pod(["m"])
    pod.containers[0].logs = "(the log these lines were found in)"
    pod.containers[0].log_signals = {
        "engine_dead": [
            "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"
        ],
        "kv_cache_too_small": [
            (
                "ValueError: To serve at least one request with the models's "
                "max seq len (131072), (10.00 GiB KV cache is needed, "
                "which is larger than the available KV cache memory "
                "(6.45 GiB). Based on the available memory, the estimated "
                "maximum model length is 84528. Try increasing ..."
            )
        ],
    }
    facts = facts_of(served(pod, health="connection refused"))
    assert facts["failure_line"].startswith("ValueError: To serve at least one request")
    assert facts["estimated_max_model_len"] == 84528
    assert facts["log_signals"]["cuda_oom"] == []
    assert facts["pod_state"] == "pod llm/vllm-0 Running; container vllm running, 0 restarts"


def test_a_server_without_its_pod_says_so_in_its_state_line() -> None:
    """The evidence quotes the pod's state: a server whose pod was not read must not show a bare "?"."""
    on_a_host = VllmServer(name="10.0.0.9_8000", health="timeout")
    assert facts_of(Snapshot(vllm_servers=[on_a_host]), "10.0.0.9_8000")["pod_state"] == "no pod of it in the bundle"
    pods_lost = VllmServer(name="vllm-0", namespace="llm", pod="llm/vllm-0", health="timeout")
    assert facts_of(Snapshot(vllm_servers=[pods_lost]))["pod_state"] == "pod llm/vllm-0: not in k8s/pods.json"


def test_a_failing_health_without_a_pod_shows_no_unknown_line() -> None:
    snap = Snapshot(
        vllm_servers=[VllmServer(name="vllm-0", health="timeout")], sources={"vllm/vllm-0.health": SourceStatus("ok")}
    )
    facts = build_facts(join(snap), Clock.of(snap), default_settings())
    rules = [r for r in load_rules([builtin_rules_dir()]) if r.id == "VLLM-112"]
    [finding] = evaluate(rules, facts, default_settings()).findings
    assert finding.evidence[:2] == ["GET /health: timeout", "no pod of it in the bundle"]


def test_without_its_log_a_servers_failure_lines_are_unknown_not_absent() -> None:
    facts = facts_of(served(vllm_pod(["m"]), health="connection refused"))
    assert facts["log_signals"] is None and facts["failure_line"] is None


def test_mig_slices_count_as_the_gpus_a_pod_provides() -> None:
    from diag.facts.vllm import _gpus_provided
    from diag.snapshot.indexes import indexes
    from diag.snapshot.model import Container, EngineArgs, Pod, Snapshot, VllmServer

    pod = Pod("llm", "vllm-0", containers=[Container("vllm", limits={"nvidia.com/mig-3g.71gb": "2"})])
    server = VllmServer("vllm-0", namespace="llm", pod=pod.key, engine_args=EngineArgs(tensor_parallel_size=2))
    count, text = _gpus_provided(server, pod, indexes(Snapshot(pods=[pod])))
    assert count == 2 and "MIG slices 2" in text


def test_the_cap_is_seen_at_any_scrapes_in_a_row_not_only_the_last() -> None:
    """A starved server's gauges can read 0 at one scrape and the cap at others: scrapes in a row count,
    wherever they are; one scrape at the cap is a moment (issue 27)."""
    pod = vllm_pod(["m", "--max-num-seqs", "2"])
    facts = facts_of(
        served(pod, scrape(v1(2, 14, 100)), scrape(v1(2, 9, 500)), scrape(v1(0, 0, 900)), scrape(v1(0, 0, 1700)))
    )
    assert facts["seq_cap_reached"]["found"] is True
    assert facts["seq_cap_reached"]["at_cap"] == "in 2 of 4 scrapes"
    assert facts["metrics"]["requests_running"] == 0.0
    once = facts_of(served(pod, scrape(v1(2, 14, 100)), scrape(v1(0, 0, 900)), scrape(v1(0, 0, 1700))))
    assert once["seq_cap_reached"]["found"] is False


# --------------------------------------------------------------------------- the queue plane, through the rules

QUEUE_RULES = ("VLLM-101", "VLLM-102", "VLLM-114")
CAP = 32
USAGE = {"low": 0.2, "mid": 0.7, "high": 0.95}  # around kv_cache_low 0.5 and kv_cache_high 0.9
RUNNING = {"at_cap": CAP, "below": 12}
WAITING = {"grows": (5, 20), "flat": (8, 8), "drains": (20, 5), "none": (0, 0)}  # first and last scrape


def evaluate_rules(snap: Snapshot) -> Evaluation:
    join(snap)
    snap.sources["vllm/vllm-0.metrics.txt"] = SourceStatus("ok")
    rules_dir = builtin_rules_dir()
    settings = {name: spec["default"] for name, spec in load_settings(rules_dir).items()}
    return evaluate(load_rules([rules_dir]), build_facts(snap), settings)


def queue_scrape(
    running: float, waiting: float, kv: float, generated: float, preempted: float, at: float | None
) -> Scrape:
    labels = f'engine="0",{MODEL}'
    return scrape(
        "\n".join(
            [
                f"vllm:num_requests_running{{{labels}}} {running}",
                f"vllm:num_requests_waiting{{{labels}}} {waiting}",
                f"vllm:kv_cache_usage_perc{{{labels}}} {kv}",
                f"vllm:generation_tokens_total{{{labels}}} {generated}",
                f"vllm:prompt_tokens_total{{{labels}}} {generated}",
                f"vllm:num_preemptions_total{{{labels}}} {preempted}",
            ]
        )
        + "\n",
        at,
    )


def queue_server(usage: str, running: str, waiting: str, cap_known: bool, preempted: float = 0.0) -> Snapshot:
    args = ["m", "--max-num-seqs", str(CAP)] if cap_known else ["m"]
    first, last = WAITING[waiting]
    kv, run = USAGE[usage], RUNNING[running]
    return served(
        vllm_pod(args), queue_scrape(run, first, kv, 1000, 0, 0.0), queue_scrape(run, last, kv, 5000, preempted, 10.0)
    )


def expected_queue_finding(usage: str, running: str, waiting: str, cap_known: bool) -> tuple[str, str] | None:
    """The design of rules/vllm.yaml's header, cell by cell: one rule at most, never two."""
    if waiting == "none":
        return None
    if usage == "high":  # the cache is the limit, whatever the cap; a steady queue without preemptions is not a fault
        return ("VLLM-101", "critical") if waiting == "grows" else None
    if cap_known:  # the cap is known: at it the cap is the limit, below it neither limit holds
        return ("VLLM-102", "warning") if running == "at_cap" else None
    return ("VLLM-114", "warning") if waiting == "grows" else None  # the cap unknown: only a growing queue says


PLANE = [
    (usage, running, waiting, cap_known)
    for usage in USAGE
    for running in RUNNING
    for waiting in WAITING
    for cap_known in (True, False)
]


@pytest.mark.parametrize(
    ("usage", "running", "waiting", "cap_known"),
    PLANE,
    ids=["-".join([u, r, w, "cap" if c else "nocap"]) for u, r, w, c in PLANE],
)
def test_the_queue_plane_has_one_finding_per_cell_at_most(
    usage: str, running: str, waiting: str, cap_known: bool
) -> None:
    result = evaluate_rules(queue_server(usage, running, waiting, cap_known))
    fired = [(f.rule, f.severity) for f in result.findings if f.rule in QUEUE_RULES]
    expected = expected_queue_finding(usage, running, waiting, cap_known)
    assert fired == ([expected] if expected else [])
    assert all(result.outcomes[rule].status != "error" for rule in QUEUE_RULES)


def test_the_plane_covers_both_thresholds_and_the_unknown_cap() -> None:
    """The issue's two cells: pinned at a known cap between the thresholds, a growing queue with the cap unknown."""
    assert expected_queue_finding("mid", "at_cap", "grows", True) == ("VLLM-102", "warning")
    assert expected_queue_finding("mid", "at_cap", "grows", False) == ("VLLM-114", "warning")
    settings = load_settings(builtin_rules_dir())
    assert (
        USAGE["low"]
        < settings["kv_cache_low"]["default"]
        <= USAGE["mid"]
        < settings["kv_cache_high"]["default"]
        <= USAGE["high"]
    )


def test_preemptions_at_a_full_cache_fire_even_on_a_steady_queue() -> None:
    result = evaluate_rules(queue_server("high", "below", "flat", cap_known=False, preempted=40))
    assert [f.rule for f in result.findings if f.rule in QUEUE_RULES] == ["VLLM-101"]


@pytest.mark.parametrize("usage", ["low", "mid"])
@pytest.mark.parametrize("running", ["at_cap", "below"])
@pytest.mark.parametrize("cap_known", [True, False])
def test_preemptions_between_reads_show_the_cache_full_where_each_read_of_the_gauge_missed_it(
    usage: str, running: str, cap_known: bool
) -> None:
    """vLLM preempts only when no block is free: a small cache that fills and empties between reads is
    VLLM-101's, never the cap's (VLLM-102) or a queue with room (VLLM-114), nor healthy."""
    result = evaluate_rules(queue_server(usage, running, "grows", cap_known, preempted=12))
    assert [f.rule for f in result.findings if f.rule in QUEUE_RULES] == ["VLLM-101"]
    (finding,) = [f for f in result.findings if f.rule == "VLLM-101"]
    assert finding.evidence[0].startswith("vllm:num_preemptions_total rose by 12 between 2 reads of /metrics 10.0 s")
    assert f"at most {USAGE[usage]:.3g}" in finding.evidence[0]


def test_a_gauge_that_caught_the_cache_full_needs_no_word_on_the_reads_between() -> None:
    result = evaluate_rules(queue_server("high", "below", "grows", cap_known=True, preempted=12))
    (finding,) = [f for f in result.findings if f.rule == "VLLM-101"]
    assert not any("between the reads" in line for line in finding.evidence)


def test_an_unknown_cap_leaves_the_cap_rule_unknown_not_silent() -> None:
    result = evaluate_rules(queue_server("mid", "at_cap", "flat", cap_known=False))
    assert result.outcomes["VLLM-102"].status == "unknown"
    assert result.outcomes["VLLM-114"].status == "silent"  # a steady queue proves nothing without the cap


def test_one_scrape_cannot_tell_a_capped_engine_from_a_hung_one() -> None:
    snap = served(vllm_pod(["m", "--max-num-seqs", str(CAP)]), queue_scrape(CAP, 9, 0.3, 1000, 0, 0.0))
    result = evaluate_rules(snap)
    assert [f.rule for f in result.findings if f.rule in QUEUE_RULES] == []
    assert result.outcomes["VLLM-102"].status == "unknown"


# --------------------------------------------------------------------------- a server without /metrics

METRIC_RULES = ("VLLM-101", "VLLM-102", "VLLM-106", "VLLM-107", "VLLM-108", "VLLM-109", "VLLM-111", "VLLM-114")


def test_a_server_whose_metrics_were_not_scraped_leaves_the_metric_rules_unknown() -> None:
    """Known from its pod spec and /health, with no /metrics: nothing about its queue or latency may read as checked."""
    snap = served(vllm_pod(["m", "--max-num-seqs", str(CAP)]), health="200")
    snap.sources["vllm/vllm-0.health.txt"] = SourceStatus("ok")
    snap.sources["vllm/vllm-0.metrics.txt"] = SourceStatus("failed", "connection refused")
    snap.sources["k8s/services.json"] = SourceStatus("ok")
    # No ready endpoint: whether VLLM-109 holds turns on the server being idle, which only /metrics tells.
    snap.services.append(
        Service(
            namespace="llm",
            name="vllm",
            selector={"app": "vllm"},
            ready_addresses=[],
            not_ready_addresses=["vllm-0"],
            endpoints_seen=True,
        )
    )
    result = evaluate_rules(snap)
    assert {rule: result.outcomes[rule].status for rule in METRIC_RULES} == {rule: "unknown" for rule in METRIC_RULES}
    assert result.outcomes["VLLM-112"].status == "silent"  # its /health was read and answered 200


def test_metric_facts_of_a_server_without_metrics_are_unknown() -> None:
    facts = facts_of(served(vllm_pod(["m"]), health=None))
    assert facts["has_metrics"] is False
    assert facts["metrics"] is None
    assert facts["seq_cap_reached"] is None
    assert facts["metrics_missing_count"] is None
    assert facts["health_failing"] is None


def test_the_cap_is_unknown_when_no_scrape_has_both_gauges() -> None:
    def no_gauges(generated: int) -> str:
        return "vllm:generation_tokens_total{" + MODEL + f"}} {generated}\n"

    pod = vllm_pod(["m", "--max-num-seqs", "8"])
    facts = facts_of(served(pod, scrape(no_gauges(5)), scrape(no_gauges(9))))
    assert facts["seq_cap_reached"] is None


def test_health_failing_is_known_only_from_a_collected_answer() -> None:
    assert facts_of(served(vllm_pod(["m"]), health="503"))["health_failing"] is True
    assert facts_of(served(vllm_pod(["m"]), health="200"))["health_failing"] is False


def test_a_hang_needs_the_scrape_times() -> None:
    """Counters read a moment apart prove nothing: without times VLLM-108 is unknown, with 10 s it fires."""
    pod = vllm_pod(["m"])
    timed = evaluate_rules(served(pod, queue_scrape(14, 20, 0.3, 500, 0, 0.0), queue_scrape(14, 31, 0.3, 500, 0, 10.0)))
    assert [f.rule for f in timed.findings if f.rule == "VLLM-108"] == ["VLLM-108"]
    untimed = evaluate_rules(
        served(vllm_pod(["m"]), queue_scrape(14, 20, 0.3, 500, 0, None), queue_scrape(14, 31, 0.3, 500, 0, None))
    )
    assert untimed.outcomes["VLLM-108"].status == "unknown"


def test_a_server_no_service_selects_is_known_not_to_be_behind_one() -> None:
    snap = served(vllm_pod(["m"]), scrape(v1(0, 0, 1)))
    snap.sources["k8s/services.json"] = SourceStatus("ok")
    assert facts_of(snap)["behind_service"] is False
    unread = served(vllm_pod(["m"]), scrape(v1(0, 0, 1)))
    assert facts_of(unread)["behind_service"] is None
    selected = served(vllm_pod(["m"]), scrape(v1(0, 0, 1)))
    selected.services.append(Service(namespace="llm", name="vllm", selector={"app": "vllm"}))
    assert facts_of(selected)["behind_service"] is True


def test_a_hung_engine_explains_a_queue_growing_at_a_full_cache() -> None:
    pod = vllm_pod(["m", "--max-num-seqs", str(CAP)])
    result = evaluate_rules(
        served(pod, queue_scrape(20, 5, 0.95, 500, 0, 0.0), queue_scrape(20, 30, 0.95, 500, 0, 10.0))
    )
    link_causes(result.findings, {r.id: r for r in load_rules([builtin_rules_dir()])})
    explained = {f.rule: f.explained_by for f in result.findings if f.severity != "info"}
    assert explained == {"VLLM-108": None, "VLLM-101": "VLLM-108"}


# ---------------------------------------------------------------- what counts as a queue (issue 27)

from diag.facts.vllm_episodes import held, queued  # noqa: E402

_QUEUE_SETTINGS = {"queue_waiting_min": 1, "queue_waiting_share": 0.1, "queue_min_scrapes": 2}


def test_one_request_behind_a_busy_batch_is_not_a_queue() -> None:
    assert queued(1, 24, _QUEUE_SETTINGS) is False
    assert queued(3, 24, _QUEUE_SETTINGS) is True
    assert queued(1, 2, _QUEUE_SETTINGS) is True
    assert queued(0, 0, _QUEUE_SETTINGS) is False
    assert queued(None, 24, _QUEUE_SETTINGS) is None


def test_a_queue_must_hold_in_consecutive_scrapes() -> None:
    assert held([False, True], _QUEUE_SETTINGS) is False
    assert held([True, False, True, False], _QUEUE_SETTINGS) is False
    assert held([False, True, True], _QUEUE_SETTINGS) is True
    assert held([True], _QUEUE_SETTINGS) is None  # one scrape cannot tell whether it lasted
    assert held([False], _QUEUE_SETTINGS) is False


def test_a_slow_mean_over_a_few_requests_is_not_a_slow_server() -> None:
    from diag.facts.vllm_episodes import ScrapeView, _Scrapes
    from diag.parsers.vllm_metrics import VllmMetrics

    view = ScrapeView(True, None, None, 0.1)

    def slow(requests: float) -> tuple[bool, bool]:
        scrapes = _Scrapes(
            VllmMetrics(scrapes=2, ttft_mean_s=3.0, itl_mean_s=0.05, ttft_requests=requests), view, default_settings()
        )
        decode = _Scrapes(
            VllmMetrics(scrapes=2, ttft_mean_s=0.3, itl_mean_s=0.4, ttft_requests=requests), view, default_settings()
        )
        return scrapes.first_token_slow(view)["found"], decode.decode_slow()["found"]

    assert slow(4) == (False, False)
    assert slow(16) == (True, True)
