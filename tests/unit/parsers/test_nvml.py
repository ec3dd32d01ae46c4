"""llmdiag's NVML snapshot (docs/nvml-snapshot.md): real captures from an H200, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diag.core.errors import ParseError
from diag.parsers.nvml import parse_nvml_json

H200 = Path(__file__).resolve().parents[3] / "fixtures" / "real" / "h200"


def test_first_capture_without_schema_name_is_read_as_v1() -> None:
    [gpu] = parse_nvml_json((H200 / "earlier" / "h200-load-nvml.json").read_text(), "node-a")
    assert (gpu.host, gpu.index, gpu.name, gpu.uuid) == (
        "node-a", 0, "NVIDIA H200", "GPU-0db5a9f0-15de-450f-d9e4-1d3a34348673",
    )  # fmt: skip
    assert (gpu.driver_version, gpu.cuda_version) == ("580.159.04", "13.0")
    assert gpu.memory_total_mib == 143771
    assert gpu.memory_used_mib == pytest.approx(42981.44, abs=0.01)  # NVML v1: the driver's reservation included
    assert (gpu.utilization_gpu_pct, gpu.temperature_c, gpu.power_draw_w) == (100, 59, 692.426)
    assert (gpu.clock_sm_mhz, gpu.clock_sm_max_mhz, gpu.clocks_event_reasons) == (1515, 1980, ["sw_power_cap"])
    assert gpu.ecc_uncorrected_volatile == 0
    assert gpu.retired_pages_pending is None  # "error: Not Supported"
    assert (gpu.remapped_rows_pending, gpu.remapped_rows_failure, gpu.mig_mode) == (False, False, "Disabled")
    assert (gpu.pcie_gen_current, gpu.pcie_gen_max, gpu.pcie_width_current, gpu.pcie_width_max) == (5, 5, 16, 16)
    assert [(p.pid, p.name, p.used_memory_mib) for p in gpu.processes] == [(430, None, 874), (429, None, 41478)]
    # not in that capture: unknown
    assert (gpu.pci_bus_id, gpu.power_limit_w, gpu.ecc_uncorrected_aggregate) == (None, None, None)
    assert gpu.xids == []


def test_collectors_v1_snapshot_under_load() -> None:
    [gpu] = parse_nvml_json((H200 / "load" / "gpu" / "h200-load.nvml.json").read_text(), "h200-load")
    assert gpu.pci_bus_id == "00000000:00:06.0"
    assert gpu.memory_used_mib == pytest.approx(42622.375)  # nvmlMemory_v2: reservation kept out
    assert (gpu.power_draw_w, gpu.power_limit_w) == (687.809, 700)
    assert gpu.ecc_uncorrected_aggregate == 0
    assert [(p.pid, p.name, p.used_memory_mib) for p in gpu.processes] == [
        (458, "python3", 41478),
        (459, "python3", 1130),
    ]


def _snapshot(**gpu: object) -> str:
    return json.dumps(
        {"schema": "llmdiag/nvml/v1", "driver": "535.104.05", "cuda": 12020, "gpus": [{"index": 3, **gpu}]}
    )


def test_values_and_conversions() -> None:
    [gpu] = parse_nvml_json(
        _snapshot(
            throttle_reasons=0x48,
            clocks_event_reasons=["hw_slowdown", "hw_thermal_slowdown"],
            retired_pending=1,
            remapped_rows=[2, 1, 0, 1],
            mig_mode=[1, 1],
            persistence_mode=0,
            procs=[{"pid": 77, "used": None, "name": "vllm"}],
            xids=[79],
        ),
        "n",
    )
    assert (gpu.index, gpu.cuda_version, gpu.driver_version) == (3, "12.2", "535.104.05")
    assert gpu.clocks_event_reasons == ["hw_slowdown", "hw_thermal_slowdown"]
    assert (gpu.retired_pages_pending, gpu.remapped_rows_pending, gpu.remapped_rows_failure) == (True, False, True)
    assert gpu.mig_mode == "Enabled" and gpu.persistence_mode is False
    assert [(p.pid, p.name, p.used_memory_mib) for p in gpu.processes] == [(77, "vllm", None)]
    assert gpu.xids == [79]


def test_the_bitmask_wins_over_names_and_names_alone_are_ordered() -> None:
    [gpu] = parse_nvml_json(_snapshot(throttle_reasons=0x4, clocks_event_reasons=["gpu_idle"]), "n")
    assert gpu.clocks_event_reasons == ["sw_power_cap"]
    [gpu] = parse_nvml_json(_snapshot(clocks_event_reasons=["hw_thermal_slowdown", "sw_power_cap"]), "n")
    assert gpu.clocks_event_reasons == ["sw_power_cap", "hw_thermal_slowdown"]


def test_every_refused_call_reads_as_unknown() -> None:
    refused = "error: Not Supported"
    keys = ("name", "uuid", "pci_bus_id", "memory", "util", "temp", "power_mw", "power_limit_mw", "clock_sm",
            "clock_sm_max", "throttle_reasons", "clocks_event_reasons", "pcie_gen", "pcie_gen_max", "pcie_width",
            "pcie_width_max", "ecc_uncorrected_volatile", "ecc_uncorrected_aggregate", "retired_pending",
            "remapped_rows", "mig_mode", "procs", "xids")  # fmt: skip
    [gpu] = parse_nvml_json(_snapshot(**{key: refused for key in keys}), "n")
    for field in ("name", "uuid", "pci_bus_id", "memory_used_mib", "memory_total_mib", "utilization_gpu_pct",
                  "temperature_c", "power_draw_w", "power_limit_w", "clock_sm_mhz", "clock_sm_max_mhz",
                  "pcie_gen_current", "pcie_gen_max", "pcie_width_current", "pcie_width_max",
                  "ecc_uncorrected_volatile", "ecc_uncorrected_aggregate", "retired_pages_pending",
                  "remapped_rows_pending", "remapped_rows_failure", "mig_mode"):  # fmt: skip
        assert getattr(gpu, field) is None, field
    assert (gpu.clocks_event_reasons, gpu.processes, gpu.xids) == ([], [], [])


def test_a_gpu_nvml_could_not_open_is_kept_with_nothing_known() -> None:
    [gpu] = parse_nvml_json(json.dumps({"gpus": [{"index": 1, "handle": "error: GPU is lost"}]}), "n")
    assert (gpu.index, gpu.uuid, gpu.memory_used_mib, gpu.open_error) == (1, None, None, "GPU is lost")


def test_a_gpu_nvml_opened_has_no_open_error() -> None:
    [gpu] = parse_nvml_json(_snapshot(), "n")
    assert gpu.open_error is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"driver": "580.159.04", "gpus": [{"index": 0, "memory": {"total": 15', "not valid JSON"),
        ('<?xml version="1.0" ?><nvidia_smi_log/>', "not valid JSON"),
        ("[]", "not an NVML snapshot: the document is a list"),
        ('{"driver": "580.159.04"}', 'no "gpus" list'),
        ('{"gpus": {"0": {}}}', "gpus: expected a list, found an object"),
        ('{"schema": "llmdiag/nvml/v2", "gpus": []}', "schema 'llmdiag/nvml/v2' is not 'llmdiag/nvml/v1'"),
        (_snapshot(memory={"used": "lots"}), "gpus[0].memory.used: expected a number, found a string"),
        (_snapshot(temp=True), "gpus[0].temp: expected a number, found a boolean"),
        (_snapshot(index="0"), "gpus[0].index: expected an integer, found a string"),
        (_snapshot(remapped_rows=[0, 0, 0]), "gpus[0].remapped_rows: expected a list of 4 integers"),
        (_snapshot(mig_mode=[2, 0]), "gpus[0].mig_mode: 2 is not an NVML MIG mode"),
        (_snapshot(persistence_mode=2), "gpus[0].persistence_mode: 2 is not an NVML feature state"),
        (_snapshot(procs=[{"used": 1024}]), "gpus[0].procs[0]: no pid"),
        (_snapshot(procs=["python3"]), "gpus[0].procs[0]: expected an object, found a string"),
        (_snapshot(xids=["79"]), "gpus[0].xids: expected a list of integers"),
        (_snapshot(clocks_event_reasons=[4]), "gpus[0].clocks_event_reasons[0]: expected a string"),
    ],
)
def test_bad_snapshot_is_one_readable_parse_error(text: str, message: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse_nvml_json(text, "n")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)
