"""Issue 31, second round: a vLLM server that went away and came back (VLLM-130), the Xid before it
(GPU-120), memory another process took on its GPU (GPU-121), and Kubernetes events and Ray deaths on
the same time axis."""

from __future__ import annotations

from collections.abc import Callable

from test_prometheus_history import END, LLM, STEP, N, answer, facts, fired, snapshot

from diag.facts.replica_restarts import WindowEvents
from diag.snapshot.clock import iso_time
from diag.snapshot.model import GPU, Event, Node, Pod, PromResult, PromSeries, RayActor, Snapshot, VllmServer

DOWN, STARTED, BACK = range(71, 91), 78, 91  # `up` 0 for 20 samples (5 min); the new process answers at BACK
LONG_AGO = END - 6 * 86400
GPU0 = {"UUID": "GPU-0000", "gpu": "0", "Hostname": "gpu-1", "modelName": "NVIDIA H100 80GB HBM3",
        "namespace": "llm", "pod": "vllm-0", "container": "vllm"}  # fmt: skip
TARGET = {"namespace": "llm", "pod": "vllm-0", "instance": "10.0.0.5:8000", "job": "vllm"}


def t(i: int) -> float:
    return END - (N - i) * STEP


def partial(labels: dict[str, str], at: Callable[[int], float | None]) -> PromSeries:
    """A series with a sample where `at` gives a value: a target that is gone has none."""
    return PromSeries(labels, [(t(i), float(v)) for i in range(N + 1) if (v := at(i)) is not None])


def server_history(down: range = DOWN, started: int | None = STARTED,
                   generation: Callable[[int], float] = lambda i: 900, pod: str = "vllm-0", until: int = N + 1,
                   since: int = 0) -> list[PromResult]:  # fmt: skip
    """A busy server's series; while `down` its scrapes fail (`up` 0, nothing else); a new process from
    the end of `down` (started at sample `started`); none outside since..until (its pod did not exist)."""
    labels, target = LLM | {"pod": pod}, TARGET | {"pod": pod}
    ksm = {"namespace": "llm", "pod": pod, "container": "vllm", "job": "kube-state-metrics", "instance": "ksm:8080"}

    def answering(value: Callable[[int], float]) -> Callable[[int], float | None]:
        return lambda i: value(i) if since <= i < until and i not in down else None

    def new(i: int) -> bool:
        return bool(down) and i >= down.stop

    return [
        answer("vllm_num_requests_running", partial(labels, answering(lambda i: 40))),
        answer("vllm_num_requests_waiting", partial(labels, answering(lambda i: 0))),
        answer("vllm_generation_tokens_rate_5m", partial(labels, answering(generation))),
        answer("vllm_up", partial(target, lambda i: None if not since <= i < until else 0 if i in down else 1)),
        answer("vllm_process_start_time", partial(target, answering(
            lambda i: t(started) if new(i) and started is not None else LONG_AGO))),
        answer("kube_container_restarts", partial(ksm, lambda i: None if not since <= i < until else float(new(i)))),
    ]  # fmt: skip


def gpu_answers(xid: Callable[[int], float] = lambda i: 0, fb: Callable[[int], float] = lambda i: 74210,
                labels: dict[str, str] = GPU0) -> list[PromResult]:  # fmt: skip
    return [answer("dcgm_xid_errors", partial(labels, xid)), answer("dcgm_fb_used", partial(labels, fb))]


def setup(prometheus: list[PromResult], **snap: object) -> Snapshot:
    server = VllmServer(name="vllm-0", namespace="llm", pod="llm/vllm-0", gpus=["GPU-0000"])
    found = snapshot(prometheus, [server], [GPU(host="gpu-1", index=0, uuid="GPU-0000")])
    for key, value in snap.items():
        setattr(found, key, value)
    return found


def test_a_server_that_went_away_and_came_back_as_a_new_process_is_dated_to_the_sample() -> None:
    [server] = facts(setup(server_history()))
    restart = server["restart"]
    assert restart["found"] is True and restart["count"] == 1
    assert (restart["went_away"], restart["back"], restart["down_minutes"]) == (iso_time(t(71)), iso_time(t(91)), 5.0)
    assert "`up` 0 for 20 samples" in restart["text"]
    assert "kube_pod_container_status_restarts_total 0 -> 1" in restart["text"]


def test_the_restart_counter_alone_tells_a_restart_where_the_start_time_is_not_scraped() -> None:
    history = [r for r in server_history() if r.name != "vllm_process_start_time"]
    [server] = facts(setup(history))
    assert server["restart"]["found"] is True and server["restart"]["down_minutes"] == 5.0


def test_without_a_start_time_or_a_restart_counter_a_long_absence_is_taken_as_a_restart() -> None:
    history = [r for r in server_history() if r.name not in ("vllm_process_start_time", "kube_container_restarts")]
    [server] = facts(setup(history))
    assert (server["restart"]["found"], server["restart"]["down_minutes"]) == (True, 5.0)
    assert "taken as restarted" in server["restart"]["text"]
    short = [r for r in server_history(down=range(71, 74)) if r.name not in
             ("vllm_process_start_time", "kube_container_restarts")]  # fmt: skip
    [server] = facts(setup(short))  # 45 s of failed scrapes: a blip
    assert server["restart"] == {"found": False}


def test_memory_taken_while_the_server_preempts_requests_is_the_cause() -> None:
    preempting = [*server_history(down=range(0)), answer("vllm_preemptions_rate_5m",
                  partial(LLM, lambda i: 2.0 if i >= 60 else 0.0))]  # fmt: skip
    [gpu] = facts(setup([*preempting, *gpu_answers(fb=lambda i: 74210 + (5670 if i >= 56 else 0))]), "gpu")
    assert gpu["foreign_memory"]["found"] is True and "preempted requests" in gpu["foreign_memory"]["symptom"]


def test_a_rollout_replaces_the_pod_and_neither_server_restarted() -> None:
    old = server_history(down=range(0), pod="vllm-old", until=60)
    new = server_history(down=range(0), pod="vllm-0", since=70)
    snap = setup([answer(o.name, *o.series, *n.series) for o, n in zip(old, new, strict=True)])
    assert [s["restart"] for s in facts(snap)] == [{"found": False}, {"found": False}]
    assert "VLLM-130" not in fired(snap)


def test_an_xid_just_before_the_server_went_away_is_its_cause() -> None:
    snap = setup([*server_history(), *gpu_answers(xid=lambda i: 48 if i >= 70 else 0)])
    [gpu] = facts(snap, "gpu")
    xid = gpu["xid_restart"]
    assert (xid["found"], xid["xid"], xid["after_s"], xid["down_minutes"]) == (True, 48, 15, 5.0)
    assert xid["xid_at"] == iso_time(t(70))
    assert fired(snap).keys() >= {"GPU-102", "GPU-120", "VLLM-130"}


def test_the_gpus_xid_is_named_before_the_applications_in_the_same_minutes() -> None:
    snap = setup([*server_history(), *gpu_answers(xid=lambda i: 48 if i >= 70 else 43 if i >= 66 else 0)])
    [gpu] = facts(snap, "gpu")
    assert (gpu["xid_restart"]["xid"], gpu["xid_restart"]["after_s"]) == (48, 15)


def test_an_xid_long_before_the_restart_did_not_cause_it() -> None:
    snap = setup([*server_history(), *gpu_answers(xid=lambda i: 48 if i >= 20 else 0)])  # 12.75 min before
    [gpu] = facts(snap, "gpu")
    assert gpu["xid_restart"] == {"found": False}
    assert "GPU-120" not in fired(snap)


def test_memory_another_process_took_while_the_server_slowed_is_measured_and_timed() -> None:
    prometheus = [
        *server_history(down=range(0), generation=lambda i: 300 if i >= 60 else 900),
        *gpu_answers(fb=lambda i: 74210 + (5670 if 56 <= i < 116 else 0)),
    ]
    [gpu] = facts(setup(prometheus), "gpu")
    memory = gpu["foreign_memory"]
    assert (memory["found"], memory["took_mib"], memory["held_mib"]) == (True, 5670, 74210)
    assert (memory["from"], memory["until"], memory["minutes"]) == (iso_time(t(56)), iso_time(t(115)), 15.0)
    assert "fell from 900 to 300 tokens/s" in memory["symptom"]


def test_memory_a_server_takes_when_it_restarts_is_its_own() -> None:
    prometheus = [
        *server_history(generation=lambda i: 300 if i >= 95 else 900),
        *gpu_answers(
            fb=lambda i: 0 if 71 <= i < STARTED else 74210 * min(1, (i - STARTED) / 12) if i < BACK else 74210
        ),
    ]
    [gpu] = facts(setup(prometheus), "gpu")
    assert gpu["foreign_memory"] == {"found": False}


def test_a_mig_instance_or_a_time_sliced_gpu_is_shared_by_design() -> None:
    prometheus = [
        *server_history(down=range(0), generation=lambda i: 300 if i >= 60 else 900),
        *gpu_answers(fb=lambda i: 20000 + (18000 if i >= 56 else 0), labels=GPU0 | {"GPU_I_ID": "1"}),
    ]
    [gpu] = facts(setup(prometheus), "gpu")
    assert gpu["foreign_memory"]["found"] is False and "MIG" in gpu["foreign_memory"]["shared"]
    sliced = Node(
        name="gpu-1", labels={"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4"}
    )
    plain_labels = [*server_history(down=range(0), generation=lambda i: 300 if i >= 60 else 900),
                    *gpu_answers(fb=lambda i: 74210 + (5670 if i >= 56 else 0))]  # fmt: skip
    [gpu] = facts(setup(plain_labels, nodes=[sliced]), "gpu")
    assert gpu["foreign_memory"]["found"] is False and "time-slicing" in gpu["foreign_memory"]["shared"]


def test_events_of_the_pod_its_node_and_ray_deaths_are_listed_within_the_margin() -> None:
    def event(kind: str, name: str, at: float, reason: str, namespace: str | None = "llm") -> Event:
        return Event(namespace, kind, name, reason, "said", "Warning", last_seen=iso_time(at))

    snap = Snapshot(
        pods=[Pod(name="vllm-0", namespace="llm", node_name="gpu-1")],
        events=[event("Pod", "vllm-0", t(70), "BackOff"), event("Node", "gpu-1", t(72), "OOMKilling", "default"),
                event("Pod", "other-0", t(70), "BackOff"), event("Pod", "vllm-0", t(10), "BackOff")],
        ray_actors=[RayActor(actor_id="a", class_name="RayWorkerWrapper", state="DEAD", death_cause="node died",
                             end_time=iso_time(t(75)))],
    )  # fmt: skip
    lines = WindowEvents(snap, {"history_event_margin_s": 120}).between(t(71), t(91), {"llm/vllm-0"})
    assert [reason for _, reason in lines] == ["BackOff", "OOMKilling", "RayActorDied"]
    assert lines[0][0].endswith("Warning BackOff pod/vllm-0: said")
