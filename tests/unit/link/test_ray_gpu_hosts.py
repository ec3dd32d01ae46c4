"""Ray outside Kubernetes: Ray nodes joined to the machines whose GPUs were captured (by hostname,
node IP, the addresses an NVML snapshot records, loopback on one machine), GPU processes to Ray's
workers, and the CUDA out-of-memory deaths a process outside Ray explains."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diag.analyze import analyze_bundle, settings_with_overrides
from diag.bundle.files import Bundle
from diag.bundle.load import load_bundle
from diag.core.rules_dir import builtin_rules_dir
from diag.engine.config import Config
from diag.engine.rules import evaluate, load_rules
from diag.facts import build_facts
from diag.link.join import join
from diag.parsers.ray_state import parse_nodes_summary
from diag.snapshot.model import (
    GPU,
    Container,
    GPUProcess,
    Node,
    Pod,
    RayActor,
    RayNode,
    RayStatus,
    Snapshot,
    SourceStatus,
)
from diag.verdict.diagnosis import link_causes

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
RULES = {r.id: r for r in load_rules([builtin_rules_dir()])}
SETTINGS = settings_with_overrides(builtin_rules_dir(), Config())
READ = {name: SourceStatus("ok") for name in ("gpu/gpu-a.nvml.json", "ray/nodes.json", "ray/actors.json")}
OOM = (
    "creation task failed: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 40.00 GiB. GPU 0 has a total"
    " capacity of 79.19 GiB of which 18.12 GiB is free. Process 1434 has 60.51 GiB memory in use. Of the allocated"
    " memory 0 bytes is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated."
)


def gpu(host: str, *processes: GPUProcess, **more) -> GPU:
    return GPU(host=host, index=0, uuid=f"GPU-{host}", name="NVIDIA H100 80GB HBM3", memory_used_mib=61960.0,
               memory_total_mib=81559.0, processes=list(processes), **more)  # fmt: skip


def ray_node(node_id: str, ip: str, free: float = 1.0, **more) -> RayNode:
    return RayNode(node_id * 56, node_ip=ip, node_name=ip, state="ALIVE", resources_total={"GPU": 1.0},
                   resources_available={"GPU": free}, **more)  # fmt: skip


def snapshot(gpus: list[GPU], nodes: list[RayNode], actors: list[RayActor] = ()) -> Snapshot:
    listed = {f"gpu/{g.host}.xml": SourceStatus("ok") for g in gpus}  # nvidia-smi -q -x: the process lists
    return join(Snapshot(gpus=gpus, ray_nodes=nodes, ray_actors=list(actors), sources=dict(READ) | listed))


def fired(snap: Snapshot, *rule_ids: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {r: [] for r in rule_ids}
    for finding in evaluate([RULES[r] for r in rule_ids], build_facts(snap), SETTINGS).findings:
        found[finding.rule].append(finding.subject)
    return found


# --------------------------------------------------------------------------- which machine a Ray node runs on


def test_nodes_join_their_machines_by_the_addresses_the_nvml_snapshot_records():
    # Two machines, Ray's default node_name (its IP): pid 1434 is an actor's on gpu-a and a stranger's on gpu-b.
    snap = snapshot(
        [gpu("gpu-a", GPUProcess(1434, "ray::Engine", 60510.0), host_addresses=["127.0.0.1", "10.0.0.5"]),
         gpu("gpu-b", GPUProcess(1434, "python3", 60510.0), host_addresses=["10.0.0.6"])],
        [ray_node("a", "10.0.0.5", free=0.0), ray_node("b", "10.0.0.6")],
        [RayActor("e" * 32, class_name="Engine", state="ALIVE", node_id="a" * 56, pid=1434, gpu_ids=["0"])],
    )  # fmt: skip
    assert [n.gpu_host for n in snap.ray_nodes] == ["gpu-a", "gpu-b"]
    assert [p.ray_actor_id for g in snap.gpus for p in g.processes] == ["e" * 32, None]
    assert fired(snap, "GPU-106") == {"GPU-106": ["gpu/gpu-b/0"]}


def test_a_node_joins_by_hostname_or_by_a_file_named_after_its_ip():
    snap = snapshot(
        [gpu("h100-07.example.internal"), gpu("10.0.0.6")],
        [ray_node("a", "10.0.0.5", hostname="h100-07"), ray_node("b", "10.0.0.6")],
    )
    assert [n.gpu_host for n in snap.ray_nodes] == ["h100-07.example.internal", "10.0.0.6"]


def test_a_loopback_node_joins_the_only_machine_captured_and_no_machine_of_two():
    one = snapshot([gpu("vm", GPUProcess(1434, "python3", 60510.0))], [ray_node("a", "127.0.0.1")])
    assert one.ray_nodes[0].gpu_host == "vm"
    assert fired(one, "GPU-106") == {"GPU-106": ["gpu/vm/0"]}
    # every machine has a loopback address: one that records it is no likelier to be the node's
    two = snapshot([gpu("vm", host_addresses=["127.0.0.1"]), gpu("other")], [ray_node("a", "127.0.0.1")])
    assert two.ray_nodes[0].gpu_host is None


def test_two_live_raylets_on_one_machine_join_neither():
    snap = snapshot(
        [gpu("vm", GPUProcess(1434, "python3", 60510.0))], [ray_node("a", "10.0.0.5"), ray_node("b", "10.0.0.5")]
    )
    assert [n.gpu_host for n in snap.ray_nodes] == [None, None]
    assert fired(snap, "GPU-106") == {"GPU-106": []}


def test_a_dead_raylet_gives_way_to_the_live_one_on_its_machine():
    dead = ray_node("a", "10.0.0.5", free=0.0)
    dead.state = "DEAD"
    snap = snapshot([gpu("vm", host_addresses=["10.0.0.5"])], [dead, ray_node("b", "10.0.0.5")])
    assert [n.gpu_host for n in snap.ray_nodes] == [None, "vm"]


# --------------------------------------------------------------------------- which GPU Ray gave out


def test_a_task_worker_holding_the_gpu_is_ray_s_own_and_makes_it_taken():
    worker = {"pid": 2210, "actor_id": None, "gpu_ids": ["0"]}
    snap = snapshot([gpu("vm", GPUProcess(2210, "ray::IDLE", 60510.0))], [ray_node("a", "127.0.0.1", workers=[worker])])
    assert snap.gpus[0].processes[0].ray_worker
    [facts] = build_facts(snap).scopes["gpu"]
    assert facts["unowned_processes"] == []
    assert facts["ray_counts_free"] is False


def test_the_healthy_busy_vm_bundle_reads_the_actors_gpu_slots_from_the_node_summary():
    [node] = parse_nodes_summary((FIXTURES / "ray-vm-healthy-busy" / "ray" / "nodes_summary.json").read_text())
    assert node.hostname == "vm"
    assert sorted(w["gpu_ids"] == ["0"] and w["actor_id"] is not None for w in node.workers) == [True, True]
    snap = join(load_bundle(Bundle.open(FIXTURES / "ray-vm-healthy-busy")))
    assert all(p.ray_worker and p.ray_actor_id for p in snap.gpus[0].processes)
    assert build_facts(snap).scopes["gpu"][0]["ray_counts_free"] is False


# --------------------------------------------------------------------------- the verdict on a VM


def test_an_actor_dead_of_cuda_oom_is_explained_by_the_process_its_message_names():
    # Ray's placement group still reserves the GPU (0 free), so GPU-106 is silent: GPU-111 explains the death.
    actor = RayActor("d" * 32, class_name="LLMServer", name="llm", state="DEAD", node_id="a" * 56, death_cause=OOM)
    snap = snapshot([gpu("vm", GPUProcess(1434, "python3", 61962.0))], [ray_node("a", "127.0.0.1", free=0.0)], [actor])
    assert fired(snap, "GPU-106", "GPU-111") == {"GPU-106": [], "GPU-111": ["gpu/vm/0"]}
    [facts] = build_facts(snap).scopes["gpu"]
    assert facts["oom_from_unowned"][0].startswith(
        "Ray actor llm (dddddddd, DEAD): CUDA out of memory while pid 1434 (60.51 GiB) held the GPU"
    )
    other = snapshot([gpu("vm", GPUProcess(977, "python3", 61962.0))], [ray_node("a", "127.0.0.1", free=0.0)], [actor])
    assert fired(other, "GPU-111") == {"GPU-111": []}  # the message names another process


def test_the_vm_bundle_of_a_dead_actor_blames_the_pids_outside_ray():
    report = analyze_bundle(Bundle.open(FIXTURES / "ray-vm-actor-cuda-oom-foreign-process"))
    assert (report.verdict.status, report.verdict.layer, report.verdict.rule) == ("fault", "gpu", "GPU-106")
    by_rule = {f.rule: f for f in report.findings}
    assert by_rule["RAY-104"].explained_by == "GPU-106"
    assert "pid 458 (python3): 41478 MiB" in by_rule["GPU-106"].evidence[1]
    remediation = by_rule["GPU-106"].remediation
    assert "On vm, the machine with the GPU:" in remediation
    assert "\n  ps -o pid,ppid,etime,args -p 458,459\n" in remediation
    assert "kubectl" not in remediation


def test_without_kubernetes_its_lists_are_skipped_not_missing():
    report = analyze_bundle(Bundle.open(FIXTURES / "ray-vm-foreign-gpu-memory"))
    assert report.verdict.gaps == []
    assert {name: report.sources[name].status for name in ("k8s/pods.json", "k8s/events.json", "k8s/nodes.json")} == {
        name: "skipped" for name in ("k8s/pods.json", "k8s/events.json", "k8s/nodes.json")
    }
    assert report.sources["k8s/pods.json"].detail == "no Kubernetes configuration"
    manifest = json.loads((FIXTURES / "ray-vm-foreign-gpu-memory" / "manifest.json").read_text())
    assert manifest["kubernetes"]["context"] is None


def test_a_vllm_pod_dead_of_cuda_oom_is_explained_by_the_process_its_log_names():
    line = "torch.OutOfMemoryError: " + OOM.split("torch.OutOfMemoryError: ", 1)[1]
    container = Container("vllm", command=["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"],
                          limits={"nvidia.com/gpu": "1"},
                          log_signals={"cuda_oom": [line]}, logs=line + "\n", logs_scanned=True)  # fmt: skip
    pod = Pod("llm", "llama-0", node_name="gpu-a", phase="Running", containers=[container])
    snap = join(Snapshot(pods=[pod], nodes=[Node("gpu-a")], gpus=[gpu("gpu-a", GPUProcess(1434, "python3", 61962.0))],
                         sources=dict(READ) | {"k8s/pods.json": SourceStatus("ok"),
                                               "k8s/logs/llm.llama-0.log": SourceStatus("ok")}))  # fmt: skip
    assert snap.vllm_servers[0].gpus == ["GPU-gpu-a"]
    result = evaluate([RULES["GPU-111"], RULES["VLLM-105"]], build_facts(snap), SETTINGS)
    assert sorted(f.rule for f in result.findings) == ["GPU-111", "VLLM-105"]
    link_causes(result.findings, RULES)
    assert {f.rule: f.explained_by for f in result.findings} == {"GPU-111": None, "VLLM-105": "GPU-111"}


def test_a_full_hostname_wins_over_a_short_one_two_domains_share():
    snap = snapshot(
        [gpu("gpu-1.zone-a.internal"), gpu("gpu-1.zone-b.internal")],
        [ray_node("a", "10.0.0.5", hostname="gpu-1.zone-b.internal")],
    )
    assert snap.ray_nodes[0].gpu_host == "gpu-1.zone-b.internal"
    bare = snapshot(
        [gpu("gpu-1.zone-a.internal"), gpu("gpu-1.zone-b.internal")], [ray_node("a", "10.0.0.5", hostname="gpu-1")]
    )
    assert bare.ray_nodes[0].gpu_host is None


def test_without_the_node_summary_the_only_node_s_free_gpus_are_the_cluster_s():
    unreported = ray_node("a", "127.0.0.1")
    unreported.resources_available = None
    snap = snapshot([gpu("vm", GPUProcess(1434, "python3", 60510.0))], [unreported])
    snap.ray_status = RayStatus(usage={"GPU": (0.0, 1.0)})
    assert fired(snap, "GPU-106") == {"GPU-106": ["gpu/vm/0"]}
    other = ray_node("b", "10.0.0.9")
    other.resources_available = None
    two = snapshot([gpu("vm", GPUProcess(1434, "python3", 60510.0))], [unreported, other])
    two.ray_status = RayStatus(usage={"GPU": (0.0, 2.0)})
    assert (
        build_facts(two).scopes["gpu"][0]["ray_counts_free"] is None
    )  # whose free GPU, the cluster's usage does not say


def test_with_only_the_csv_the_memory_in_use_on_a_gpu_ray_counts_free_is_outside_ray():
    csv_only = gpu("vm")  # --query-gpu lists no processes
    snap = join(
        Snapshot(
            gpus=[csv_only],
            ray_nodes=[ray_node("a", "127.0.0.1")],
            sources={"gpu/vm.csv": SourceStatus("ok"), "ray/nodes.json": SourceStatus("ok")},
        )
    )
    [facts] = build_facts(snap).scopes["gpu"]
    assert facts["unowned_processes"] is None and facts["unowned_memory_mib"] == 61960.0
    assert facts["oom_from_unowned"] is None  # which pids, the CSV does not say
    assert fired(snap, "GPU-106") == {"GPU-106": ["gpu/vm/0"]}


@pytest.mark.parametrize(
    ("dashboard", "joined"), [("http://127.0.0.1:8265", True), ("http://ray-head.example.internal:8265", False)]
)
def test_the_head_of_a_dashboard_reached_on_loopback_runs_on_the_captured_machine(dashboard: str, joined: bool) -> None:
    """A real H100 capture (fixtures/real/h100-ray): the head advertises 192.0.2.2 and the capture, made by
    an older collector, records no host name or address. `collect --ray-address http://127.0.0.1:8265
    --local-gpu` ran on the head's machine, so the head joins the capture; a dashboard reached by a
    name does not say where it runs, and the join is a named gap instead."""
    scenario = FIXTURES / "real-ray-gpu-foreign-memory"
    files = {
        str(p.relative_to(scenario)): p.read_bytes()
        for p in scenario.rglob("*")
        if p.is_file() and p.name != "expected.json"
    }
    files.pop("ray/nodes_summary.json")
    manifest = json.loads(files["manifest.json"])
    manifest["outside"]["ray_address"] = dashboard
    files["manifest.json"] = json.dumps(manifest).encode()
    for name in [n for n in files if n.endswith(".nvml.json")]:
        snapshot = json.loads(files[name])
        snapshot.pop("host", None)
        files[name] = json.dumps(snapshot).encode()
    verdict = analyze_bundle(Bundle(files)).verdict
    if joined:
        assert (verdict.layer, verdict.rule) == ("gpu", "GPU-106")
    else:
        assert verdict.status != "healthy"
        assert any("could not be joined to a GPU capture" in g.problem for g in verdict.gaps)
