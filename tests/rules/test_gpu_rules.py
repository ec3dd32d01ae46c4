"""The GPU layer's facts and rules on small snapshots: which GPU an Xid line is about, what Ray counts
free, which clock and link readings are faults and which are a busy or idle GPU doing its job."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from diag.analyze import settings_with_overrides
from diag.core.rules_dir import builtin_rules_dir
from diag.engine.config import Config
from diag.engine.rules import evaluate, load_rules
from diag.facts import build_facts
from diag.link.join import join
from diag.parsers.gpu_common import pci_address
from diag.parsers.logs import xid_in_message
from diag.snapshot.model import (
    GPU,
    Container,
    Event,
    GPUProcess,
    Node,
    Pod,
    RayActor,
    RayNode,
    Snapshot,
    SourceStatus,
)

RULES = {r.id: r for r in load_rules([builtin_rules_dir()])}
SETTINGS = settings_with_overrides(builtin_rules_dir(), Config())
PCI = ["00000000:18:00.0", "00000000:2A:00.0"]
# Rules are skipped when none of the sources they require was read.
READ = {name: SourceStatus("ok") for name in ("gpu/gpu-node-a.nvml.json", "k8s/pods.json", "ray/nodes.json")}


def xid_event(node: str, line: str) -> Event:
    return Event(None, "Node", node, "NVRMXid", line, "Warning", source="kernel-monitor", xid=xid_in_message(line))


def busy_gpu(index: int = 0, **values) -> GPU:
    """A GPU serving at its power cap, as in our real H200 load capture."""
    fields = {
        "host": "gpu-node-a",
        "index": index,
        "uuid": f"GPU-{index}",
        "name": "NVIDIA H200",
        "pci_bus_id": PCI[index],
        "memory_used_mib": 42623.0,
        "memory_total_mib": 143771.0,
        "utilization_gpu_pct": 98.0,
        "temperature_c": 55.0,
        "power_draw_w": 689.3,
        "power_limit_w": 700.0,
        "clock_sm_mhz": 1470.0,
        "clock_sm_max_mhz": 1980.0,
        "clocks_event_reasons": ["sw_power_cap"],
        "ecc_uncorrected_volatile": 0,
        "ecc_uncorrected_aggregate": 0,
        "remapped_rows_pending": False,
        "remapped_rows_failure": False,
        "pcie_gen_current": 5,
        "pcie_gen_max": 5,
        "pcie_width_current": 16,
        "pcie_width_max": 16,
    }
    fields.update(values)
    return GPU(**fields)


def snapshot(*gpus: GPU, events: list[Event] = (), **more) -> Snapshot:
    for gpu in gpus:  # as the loader reads it
        gpu.pci_address = pci_address(gpu.pci_bus_id)
    snap = Snapshot(gpus=list(gpus), nodes=[Node("gpu-node-a")], events=list(events), sources=dict(READ), **more)
    return join(snap)


def fired(snap: Snapshot, *rule_ids: str) -> dict[str, list[str]]:
    """rule -> subjects it fired on, for the given rules."""
    result = evaluate([RULES[r] for r in rule_ids], build_facts(snap), SETTINGS)
    found: dict[str, list[str]] = {r: [] for r in rule_ids}
    for finding in result.findings:
        found[finding.rule].append(finding.subject)
    return found


def gpu_facts(snap: Snapshot) -> list[dict]:
    return build_facts(snap).scopes["gpu"]


# --------------------------------------------------------------------------- Xid lines


def test_an_xid_line_goes_to_the_gpu_whose_pci_address_it_names():
    line = (
        "NVRM: Xid (PCI:0000:2a:00): 48, pid=1911, name=python3, An uncorrectable double bit "
        "error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0."
    )
    snap = snapshot(busy_gpu(0), busy_gpu(1), events=[xid_event("gpu-node-a", line)])
    assert [g.xids for g in snap.gpus] == [[], [48]]
    assert snap.gpus[1].xid_lines == [line]
    assert fired(snap, "GPU-102") == {"GPU-102": ["gpu/gpu-node-a/1"]}


def test_an_xid_line_with_the_pci_function_matches_too():
    line = "NVRM: Xid (PCI:0000:18:00.0): 79, pid=0, GPU has fallen off the bus."
    snap = snapshot(busy_gpu(0), busy_gpu(1), events=[xid_event("gpu-node-a", line)])
    assert [g.xids for g in snap.gpus] == [[79], []]


def test_an_xid_naming_gpu_b_gives_only_gpu_b_the_finding():
    """Two GPUs on one node: the line names the second one's address in the kernel's spelling."""
    line = "NVRM: Xid (PCI:0000:2a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    snap = snapshot(busy_gpu(0), busy_gpu(1), events=[xid_event("gpu-node-a", line)])
    assert fired(snap, "GPU-102", "GPU-108") == {"GPU-102": ["gpu/gpu-node-a/1"], "GPU-108": []}
    assert [f["pci_address"] for f in gpu_facts(snap)] == ["0000:18:00", "0000:2a:00"]


def test_a_line_naming_no_known_gpu_is_one_node_finding_not_every_gpu():
    line = "NVRM: Xid (PCI:0000:db:00): 74, pid=<unknown>, name=<unknown>, NVLink: fatal error detected on link 6"
    snap = snapshot(busy_gpu(0), busy_gpu(1), events=[xid_event("gpu-node-a", line)])
    assert [g.xids for g in snap.gpus] == [[], []]
    assert fired(snap, "GPU-102", "GPU-108") == {"GPU-102": [], "GPU-108": ["node/gpu-node-a"]}
    [node] = build_facts(snap).scopes["gpu_node"]
    [report] = node["unplaced_xid_reports"]
    assert (report["meaning"], report["text"]) == ("NVLINK Error", f"Xid 74 (NVLINK Error): {line}")
    assert (report["mnemonic"], report["action"], report["named_by"]) == (
        "NVLINK_ERROR",
        "WORKFLOW_NVLINK_ERR",
        "GPU-102",
    )
    assert node["catalogue_xids"] == []  # GPU-102 names Xid 74 with a procedure of its own


def test_an_xid_no_rule_names_is_quoted_with_nvidias_catalogued_action():
    halt = "NVRM: Xid (PCI:0000:2a:00): 62, 324c1547 0000ca08 00000000 20726198 20725344 207254b2 207237b4 20723fa4"
    recovery = (
        "NVRM: Xid (PCI:0000:2a:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
    )
    snap = snapshot(busy_gpu(0), busy_gpu(1), events=[xid_event("gpu-node-a", halt), xid_event("gpu-node-a", recovery)])
    assert fired(snap, "GPU-102", "GPU-118") == {"GPU-102": ["gpu/gpu-node-a/1"], "GPU-118": ["node/gpu-node-a"]}
    [node] = build_facts(snap).scopes["gpu_node"]
    assert [(r["xid"], r["mnemonic"], r["action"]) for r in node["catalogue_xids"]] == [
        (62, "PMU_HALT_ERROR", "RESET_GPU"),
        (154, "GPU_RECOVERY_ACTION_CHANGED", "XID_154"),
    ]
    assert node["catalogue_xids"][0]["text"] == f"Xid 62 (Internal micro-controller halt): {halt}"


def test_the_xid_catalogue_holds_every_code_of_nvidias_table():
    from diag.parsers.xid_catalogue import builtin_catalogue

    catalogue = builtin_catalogue()
    assert sorted(catalogue.entries) == list(range(1, 173))
    assert catalogue.entry(79).immediate == "RESTART_BM" and catalogue.entry(48).immediate == "WORKFLOW_XID_48"
    assert catalogue.entry(3).meaning == "unused (no GPU it applies to)"
    assert catalogue.entry(999).mnemonic is None  # a code newer than the table: said so, not guessed
    # the application Xids the device plugin ignores are the ones the catalogue gives to GPU-103
    assert {code for code, e in catalogue.entries.items() if e.named_by == "GPU-103"} == {13, 31, 43, 68, 109}


def test_a_lost_gpu_without_an_address_does_not_take_a_line_for_an_unknown_address():
    lost = GPU(host="gpu-node-a", index=1, open_error="GPU is lost")  # NVML could not open it: no address, no UUID
    line = "NVRM: Xid (PCI:0000:db:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    snap = snapshot(busy_gpu(0), lost, events=[xid_event("gpu-node-a", line)])
    assert [g.xids for g in snap.gpus] == [[], []]
    assert fired(snap, "GPU-102", "GPU-108", "GPU-109") == {
        "GPU-102": [],
        "GPU-108": ["node/gpu-node-a"],
        "GPU-109": ["gpu/gpu-node-a/1"],
    }
    facts = gpu_facts(snap)[1]
    assert facts["identity"].startswith("no name, UUID or PCI address") and facts["lost"] is True


def test_a_lost_gpu_is_a_finding_without_any_xid():
    snap = snapshot(busy_gpu(0), GPU(host="gpu-node-a", index=1, pci_bus_id="0000:2A:00.0", open_error="GPU is lost"))
    assert fired(snap, "GPU-102", "GPU-109") == {"GPU-102": [], "GPU-109": ["gpu/gpu-node-a/1"]}


def test_a_lost_gpu_nvidia_smi_names_by_address_takes_its_xid_line():
    lost = GPU(host="gpu-node-a", index=1, pci_bus_id="0000:2A:00.0", open_error="GPU is lost")
    line = "NVRM: Xid (PCI:0000:2a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    snap = snapshot(busy_gpu(0), lost, events=[xid_event("gpu-node-a", line)])
    assert fired(snap, "GPU-102", "GPU-108", "GPU-109") == {
        "GPU-102": ["gpu/gpu-node-a/1"],
        "GPU-108": [],
        "GPU-109": ["gpu/gpu-node-a/1"],
    }


def test_an_xid_on_a_node_whose_gpus_were_not_captured_is_a_node_finding():
    line = (
        "NVRM: Xid (PCI:0000:18:00): 48, pid=1911, name=python3, An uncorrectable double bit "
        "error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0."
    )
    snap = join(Snapshot(nodes=[Node("gpu-node-b")], events=[xid_event("gpu-node-b", line)], sources=dict(READ)))
    assert fired(snap, "GPU-108") == {"GPU-108": ["node/gpu-node-b"]}


def test_an_application_xid_at_an_unknown_address_is_no_gpu_fault():
    line = "NVRM: Xid (PCI:0000:db:00): 109, pid=2271934, name=python3, Ch 00000008"
    snap = snapshot(busy_gpu(0), events=[xid_event("gpu-node-a", line)])
    assert fired(snap, "GPU-108") == {"GPU-108": []}


@pytest.mark.parametrize("xid", [13, 31, 43, 45, 68, 109])
def test_the_xids_the_device_plugin_ignores_are_no_gpu_fault(xid: int):
    snap = snapshot(busy_gpu(0, xids=[xid]))
    assert fired(snap, "GPU-102") == {"GPU-102": []}


def gpu_node(name: str, capacity: str, allocatable: str) -> Node:
    return Node(name, capacity={"nvidia.com/gpu": capacity}, allocatable={"nvidia.com/gpu": allocatable})


def test_a_node_advertising_fewer_gpus_than_it_has_fires_gpu_110():
    nodes = [gpu_node("gpu-node-a", "4", "3"), gpu_node("gpu-node-b", "4", "4"), Node("cpu-node")]
    snap = join(Snapshot(nodes=nodes, sources=dict(READ)))
    assert fired(snap, "GPU-110") == {"GPU-110": ["node/gpu-node-a"]}
    assert [n["name"] for n in build_facts(snap).scopes["gpu_node"]] == ["gpu-node-a", "gpu-node-b"]


def test_without_nodes_json_the_gpu_count_of_a_node_is_unknown():
    [node] = build_facts(join(Snapshot(gpus=[busy_gpu(0)], sources=dict(READ)))).scopes["gpu_node"]
    assert (node["name"], node["gpu_capacity"], node["gpus_unadvertised"]) == ("gpu-node-a", None, None)


def test_application_and_followup_xids_are_not_gpu_faults():
    lines = [
        "NVRM: Xid (PCI:0000:18:00): 13, pid='<unknown>', name=<unknown>, "
        "Graphics SM Warp Exception on (GPC 2, TPC 1, SM 0): Out Of Range Address",
        "NVRM: Xid (PCI:0000:18:00): 45, pid=2271934, name=python3, Ch 00000008",
    ]
    snap = snapshot(busy_gpu(0), events=[xid_event("gpu-node-a", line) for line in lines])
    assert fired(snap, "GPU-102", "GPU-103") == {"GPU-102": [], "GPU-103": ["gpu/gpu-node-a/0"]}
    assert RULES["GPU-103"].layer == "vllm"  # the workload is at fault, not the GPU


def test_a_followup_xid_alone_raises_nothing():
    line = "NVRM: Xid (PCI:0000:18:00): 45, pid=2271934, name=python3, Ch 00000008"
    snap = snapshot(busy_gpu(0), events=[xid_event("gpu-node-a", line)])
    assert fired(snap, "GPU-102", "GPU-103") == {"GPU-102": [], "GPU-103": []}


def test_xids_nvml_reported_are_read_without_a_kernel_line():
    snap = snapshot(busy_gpu(0, xids=[95]))
    assert gpu_facts(snap)[0]["xid_reports"][0]["text"] == "Xid 95 (Uncontained memory error): reported by NVML"
    assert fired(snap, "GPU-102") == {"GPU-102": ["gpu/gpu-node-a/0"]}


# --------------------------------------------------------------------------- memory, clocks, link


@pytest.mark.parametrize(
    "values",
    [
        {"ecc_uncorrected_volatile": 3},
        {"remapped_rows_pending": True},
        {"remapped_rows_failure": True},
        {"retired_pages_pending": True},
    ],
)
def test_each_uncorrectable_memory_sign_fires_gpu_101(values):
    assert fired(snapshot(busy_gpu(0, **values)), "GPU-101") == {"GPU-101": ["gpu/gpu-node-a/0"]}


def test_errors_corrected_long_ago_are_not_a_current_fault():
    snap = snapshot(busy_gpu(0, ecc_uncorrected_aggregate=4))  # the lifetime count, none since the driver loaded
    assert fired(snap, "GPU-101") == {"GPU-101": []}


def test_memory_not_reported_is_unknown_not_healthy():
    snap = snapshot(busy_gpu(0, ecc_uncorrected_volatile=None, remapped_rows_pending=None, remapped_rows_failure=None))
    outcome = evaluate([RULES["GPU-101"]], build_facts(snap), SETTINGS).outcomes["GPU-101"]
    assert outcome.status == "unknown"


def test_a_busy_gpu_at_its_power_cap_is_healthy():
    snap = snapshot(busy_gpu(0))
    assert fired(snap, "GPU-104", "GPU-105") == {"GPU-104": [], "GPU-105": []}


@pytest.mark.parametrize(
    "reason", ["hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown", "hw_power_brake_slowdown"]
)
def test_slowdown_reasons_fire_gpu_104(reason):
    snap = snapshot(busy_gpu(0, clocks_event_reasons=["sw_power_cap", reason], clock_sm_mhz=990.0))
    assert fired(snap, "GPU-104") == {"GPU-104": ["gpu/gpu-node-a/0"]}
    assert gpu_facts(snap)[0]["sm_clock_text"] == "990 of 1980 MHz (50 %)"


def test_a_hot_gpu_fires_gpu_104_without_a_reason_reported():
    snap = snapshot(busy_gpu(0, clocks_event_reasons=[], temperature_c=SETTINGS["gpu_temperature_high_c"] + 2.0))
    assert fired(snap, "GPU-104") == {"GPU-104": ["gpu/gpu-node-a/0"]}


def test_an_idle_gpu_with_a_downshifted_link_is_healthy():
    idle = busy_gpu(0, utilization_gpu_pct=0.0, clocks_event_reasons=["gpu_idle"], pcie_gen_current=1)
    assert fired(snapshot(idle), "GPU-105") == {"GPU-105": []}


@pytest.mark.parametrize("link", [{"pcie_width_current": 8}, {"pcie_gen_current": 3}])
def test_a_reduced_link_under_load_fires_gpu_105(link):
    snap = snapshot(busy_gpu(0, **link))
    assert fired(snap, "GPU-105") == {"GPU-105": ["gpu/gpu-node-a/0"]}


def test_a_link_not_reported_is_unknown():
    gpu = busy_gpu(0, pcie_gen_current=None, pcie_gen_max=None, pcie_width_current=None, pcie_width_max=None)
    assert gpu_facts(snapshot(gpu))[0]["pcie_link_below_max"] is None


# --------------------------------------------------------------------------- Ray and foreign processes


def ray_snapshot(
    available_gpus: float, processes: dict[int, list[GPUProcess]], actor_gpu_ids: list[str] | None
) -> Snapshot:
    pod = Pod(
        "llm",
        "vllm-ray-gpu-group-worker-7rxcz",
        node_name="gpu-node-a",
        pod_ip="10.244.3.17",
        containers=[Container("ray-worker", limits={"nvidia.com/gpu": "2"})],
    )
    node = RayNode(
        "w" * 56,
        node_ip="10.244.3.17",
        node_name="10.244.3.17",
        state="ALIVE",
        resources_total={"GPU": 2.0},
        resources_available={"GPU": available_gpus},
    )
    actor = RayActor(
        "a" * 32,
        class_name="RayWorkerWrapper",
        state="ALIVE",
        node_id=node.node_id,
        pid=1502,
        gpu_ids=actor_gpu_ids or [],
    )
    gpus = [busy_gpu(i, processes=processes.get(i, [])) for i in (0, 1)]
    return snapshot(*gpus, pods=[pod], ray_nodes=[node], ray_actors=[actor])


def test_a_stray_process_on_a_gpu_ray_counts_free_fires_gpu_106():
    snap = ray_snapshot(
        1.0,
        {0: [GPUProcess(1502, "ray::RayWorkerWrapper", 128512.0)], 1: [GPUProcess(2875, "python3", 71230.0)]},
        ["0"],
    )
    facts = gpu_facts(snap)
    assert [f["ray_counts_free"] for f in facts] == [False, True]
    assert (
        snap.gpus[0].processes[0].pod == "llm/vllm-ray-gpu-group-worker-7rxcz"
    )  # the actor's process belongs to its pod
    assert facts[1]["unowned_process_text"] == ["pid 2875 (python3): 71230 MiB"]
    assert facts[1]["ray_pod"] == {"namespace": "llm", "name": "vllm-ray-gpu-group-worker-7rxcz"}
    assert fired(snap, "GPU-106") == {"GPU-106": ["gpu/gpu-node-a/1"]}


def test_without_gpu_ids_a_gpu_running_a_ray_actor_is_not_free():
    snap = ray_snapshot(1.0, {0: [GPUProcess(1502, "ray::RayWorkerWrapper", 128512.0)]}, None)
    assert [f["ray_counts_free"] for f in gpu_facts(snap)] == [False, True]


def test_an_engine_process_of_no_actor_leaves_ray_s_free_gpus_unknown():
    # vLLM V1 runs its engine in a child of the Ray actor: its pid is no actor's. Ray holds one GPU,
    # and which one cannot be told without the actors' GPU ids.
    snap = ray_snapshot(1.0, {0: [GPUProcess(1733, "VLLM::EngineCore", 128512.0)]}, None)
    assert [f["ray_counts_free"] for f in gpu_facts(snap)] == [None, None]
    assert fired(snap, "GPU-106") == {"GPU-106": []}


def test_gpus_beyond_those_ray_was_given_leave_it_unknown():
    snap = ray_snapshot(1.0, {1: [GPUProcess(2875, "python3", 71230.0)]}, ["0"])
    snap.gpus.append(replace(busy_gpu(1), index=2, uuid="GPU-2", pci_bus_id="00000000:BA:00.0"))  # another pod's GPU
    assert [f["ray_counts_free"] for f in gpu_facts(snap)] == [None, None, None]


def test_no_gpu_free_in_ray_means_no_gpu_106():
    snap = ray_snapshot(0.0, {1: [GPUProcess(2875, "python3", 71230.0)]}, ["0"])
    assert [f["ray_counts_free"] for f in gpu_facts(snap)] == [False, False]
    assert fired(snap, "GPU-106") == {"GPU-106": []}


def test_a_small_stray_process_stays_under_the_threshold():
    snap = ray_snapshot(1.0, {1: [GPUProcess(3311, "python3", 514.0)]}, ["0"])
    assert fired(snap, "GPU-106") == {"GPU-106": []}


def test_memory_of_processes_that_report_none_is_unknown():
    snap = snapshot(busy_gpu(0, processes=[GPUProcess(2875, "python3", None)]))
    facts = gpu_facts(snap)[0]
    assert facts["unowned_memory_mib"] is None and facts["ray_counts_free"] is None


# --------------------------------------------------------------------------- driver against the container's CUDA


def crashing_pod(**container_values) -> Pod:
    container = Container("vllm", image="vllm/vllm-openai:v0.10.2", **container_values)
    return Pod("llm", "mistral-7b-7b9d4c6f8-tqbxd", node_name="gpu-node-a", containers=[container])


def test_the_container_runtime_refusing_an_old_driver_fires_gpu_107():
    message = (
        "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: "
        "unable to start container process: error during container init: error running hook #0: error running hook: "
        "exit status 1, stdout: , stderr: Auto-detected mode as 'legacy'\nnvidia-container-cli: requirement error: "
        "unsatisfied condition: cuda>=12.8, please update your driver "
        "to a newer version, or use an earlier cuda container: unknown"
    )
    pod = crashing_pod(state="waiting", state_reason="RunContainerError", state_message=message)
    snap = snapshot(busy_gpu(0, driver_version="535.183.01", cuda_version="12.2"), pods=[pod])
    cluster = build_facts(snap).cluster
    assert cluster["cuda_driver_too_old"]["llm/mistral-7b-7b9d4c6f8-tqbxd"]["last"] == message
    assert cluster["gpu_drivers"] == {"gpu-node-a": "driver 535.183.01 (CUDA 12.2)"}
    assert fired(snap, "GPU-107") == {"GPU-107": ["pod/llm/mistral-7b-7b9d4c6f8-tqbxd"]}


def test_the_log_line_fires_gpu_107_even_without_gpu_data():
    line = "RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version"
    pod = crashing_pod(log_signals={"cuda_driver_too_old": [line]})
    snap = join(Snapshot(pods=[pod], sources={"k8s/pods.json": SourceStatus("ok")}))
    assert fired(snap, "GPU-107") == {"GPU-107": ["pod/llm/mistral-7b-7b9d4c6f8-tqbxd"]}


def test_the_real_h200_load_capture_raises_nothing():
    from diag.analyze import analyze_bundle
    from diag.bundle.files import Bundle

    bundle = Path(__file__).resolve().parents[2] / "fixtures" / "real-h200-load"
    report = analyze_bundle(Bundle.open(bundle))
    assert report.findings == []
    assert {rid: report.outcomes[rid].status for rid in ("GPU-101", "GPU-104", "GPU-105")} == {
        "GPU-101": "silent",
        "GPU-104": "silent",
        "GPU-105": "silent",
    }
