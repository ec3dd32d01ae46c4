"""diag.collect.gpu against a stand-in NVML (the real nvidia-ml-py module, its C calls replaced) and
stand-in nvidia-smi programs on PATH. The same code ran on a real H200: tests/unit/parsers/test_gpu_real_h200.py."""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from diag.collect import gpu as collect_gpu
from diag.parsers.nvml import parse_nvml_json

MIB = 1024 * 1024
NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED


class FakeNvml:
    """One GPU as NVML would describe it; `refuse` maps a pynvml function name to the NVML error it raises."""

    def __init__(self, refuse: dict[str, int] | None = None, xid_events: list[int] | None = None) -> None:
        self.refuse = refuse or {}
        self.xid_events = list(xid_events or [])
        self.shut_down = False

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        handle = object()
        device = {
            "nvmlDeviceGetCount": lambda: 1,
            "nvmlDeviceGetHandleByIndex": lambda i: handle,
            "nvmlDeviceGetName": lambda h: "NVIDIA H200",
            "nvmlDeviceGetUUID": lambda h: "GPU-11111111-2222-3333-4444-555555555555",
            "nvmlDeviceGetPciInfo": lambda h: SimpleNamespace(busId=b"00000000:00:06.0"),
            "nvmlDeviceGetMemoryInfo": self._memory,
            "nvmlDeviceGetUtilizationRates": lambda h: SimpleNamespace(gpu=97, memory=31),
            "nvmlDeviceGetTemperature": lambda h, sensor: 61,
            "nvmlDeviceGetPowerUsage": lambda h: 688250,
            "nvmlDeviceGetEnforcedPowerLimit": lambda h: 700000,
            "nvmlDeviceGetClockInfo": lambda h, clock: 1605,
            "nvmlDeviceGetMaxClockInfo": lambda h, clock: 1980,
            "nvmlDeviceGetCurrentClocksEventReasons": lambda h: 0x4,
            "nvmlDeviceGetCurrPcieLinkGeneration": lambda h: 5,
            "nvmlDeviceGetMaxPcieLinkGeneration": lambda h: 5,
            "nvmlDeviceGetCurrPcieLinkWidth": lambda h: 16,
            "nvmlDeviceGetMaxPcieLinkWidth": lambda h: 16,
            "nvmlDeviceGetTotalEccErrors": lambda h, kind, counter: 2 if counter == pynvml.NVML_AGGREGATE_ECC else 0,
            "nvmlDeviceGetRetiredPagesPendingStatus": lambda h: 0,
            "nvmlDeviceGetRemappedRows": lambda h: (0, 1, 1, 0),
            "nvmlDeviceGetMigMode": lambda h: [0, 0],
            "nvmlDeviceGetPersistenceMode": lambda h: 0,
            "nvmlDeviceGetComputeRunningProcesses": lambda h: [SimpleNamespace(pid=4242, usedGpuMemory=2048 * MIB)],
            "nvmlDeviceGetGraphicsRunningProcesses": lambda h: [],
            "nvmlSystemGetProcessName": lambda pid: "python3",
            "nvmlDeviceGetIndex": lambda h: 0,
        }
        system = {
            "nvmlInit": lambda: None,
            "nvmlShutdown": self._shutdown,
            "nvmlSystemGetDriverVersion": lambda: "580.159.04",
            "nvmlSystemGetNVMLVersion": lambda: "13.580.159.04",
            "nvmlSystemGetCudaDriverVersion": lambda: 13000,
            "nvmlEventSetCreate": lambda: object(),
            "nvmlDeviceRegisterEvents": lambda h, types, event_set: None,
            "nvmlEventSetWait": self._wait,
            "nvmlEventSetFree": lambda event_set: None,
        }
        for name, function in {**device, **system}.items():
            monkeypatch.setattr(pynvml, name, self._refusing(name, function))

    def _refusing(self, name: str, function: Any) -> Any:
        if name not in self.refuse:
            return function

        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise pynvml.NVMLError(self.refuse[name])

        return refuse

    def _memory(self, handle: Any, version: int | None = None) -> SimpleNamespace:
        if version is None:
            return SimpleNamespace(total=143771 * MIB, used=40616 * MIB, free=103155 * MIB)
        if "memory_v2" in self.refuse:
            raise pynvml.NVMLError(self.refuse["memory_v2"])
        return SimpleNamespace(total=143771 * MIB, reserved=616 * MIB, used=40000 * MIB, free=103155 * MIB)

    def _wait(self, event_set: Any, timeout_ms: int) -> SimpleNamespace:
        if not self.xid_events:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
        return SimpleNamespace(device=object(), eventData=self.xid_events.pop(0))

    def _shutdown(self) -> None:
        self.shut_down = True


def test_snapshot_reads_every_field_and_parses_back(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = FakeNvml()
    nvml.install(monkeypatch)
    document = collect_gpu.snapshot_nvml()
    assert nvml.shut_down
    assert document["schema"] == "llmdiag/nvml/v1"
    gpu = document["gpus"][0]
    assert gpu["throttle_reasons"] == 4 and gpu["clocks_event_reasons"] == ["sw_power_cap"]
    assert gpu["memory"]["reserved"] == 616 * MIB
    assert "xids" not in gpu  # not listened for: unknown, not "none"

    [parsed] = parse_nvml_json(json.dumps(document), "node-a")
    assert parsed.pci_bus_id == "00000000:00:06.0"
    assert parsed.memory_used_mib == 40000 and parsed.memory_total_mib == 143771
    assert parsed.power_draw_w == pytest.approx(688.25) and parsed.power_limit_w == 700
    assert parsed.clock_sm_mhz == 1605 and parsed.clock_sm_max_mhz == 1980
    assert parsed.ecc_uncorrected_volatile == 0 and parsed.ecc_uncorrected_aggregate == 2
    assert parsed.retired_pages_pending is False
    assert parsed.remapped_rows_pending is True and parsed.remapped_rows_failure is False
    assert parsed.mig_mode == "Disabled" and parsed.cuda_version == "13.0"
    assert parsed.persistence_mode is False
    assert [(p.pid, p.name, p.used_memory_mib) for p in parsed.processes] == [(4242, "python3", 2048)]
    # the machine, for joining a Ray node outside Kubernetes (its hostname, its node_ip)
    assert parsed.host_name == socket.gethostname()
    assert parsed.host_addresses == document["host"]["addresses"] and all(
        ipaddress.ip_address(a) for a in parsed.host_addresses
    )


def test_refused_nvml_calls_become_unknown_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    refused = {
        name: NOT_SUPPORTED
        for name in (
            "nvmlDeviceGetRetiredPagesPendingStatus",
            "nvmlDeviceGetTotalEccErrors",
            "nvmlDeviceGetRemappedRows",
            "nvmlDeviceGetMigMode",
            "nvmlDeviceGetPersistenceMode",
            "nvmlDeviceGetCurrentClocksEventReasons",
            "nvmlDeviceGetEnforcedPowerLimit",
        )
    }
    refused["nvmlSystemGetProcessName"] = pynvml.NVML_ERROR_NOT_FOUND
    FakeNvml(refused).install(monkeypatch)
    document = collect_gpu.snapshot_nvml()
    gpu = document["gpus"][0]
    assert gpu["retired_pending"] == "error: Not Supported"
    assert gpu["clocks_event_reasons"] == "error: Not Supported"
    assert gpu["procs"][0]["name"] == "error: Not Found"

    [parsed] = parse_nvml_json(json.dumps(document), "node-a")
    assert parsed.retired_pages_pending is None
    assert parsed.ecc_uncorrected_volatile is None and parsed.ecc_uncorrected_aggregate is None
    assert parsed.remapped_rows_pending is None and parsed.mig_mode is None and parsed.persistence_mode is None
    assert parsed.power_limit_w is None and parsed.clocks_event_reasons == []
    assert parsed.processes[0].name is None and parsed.processes[0].used_memory_mib == 2048
    assert parsed.memory_used_mib == 40000  # the rest still read


def test_memory_falls_back_to_v1_when_the_driver_lacks_v2(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeNvml({"memory_v2": pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH}).install(monkeypatch)
    memory = collect_gpu.snapshot_nvml()["gpus"][0]["memory"]
    assert memory == {"total": 143771 * MIB, "used": 40616 * MIB, "free": 103155 * MIB}


def test_xids_seen_while_listening_are_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeNvml(xid_events=[79, 48]).install(monkeypatch)
    document = collect_gpu.snapshot_nvml(xid_wait_s=0.5)
    assert document["gpus"][0]["xids"] == [79, 48]
    assert parse_nvml_json(json.dumps(document), "n")[0].xids == [79, 48]


def test_xid_watch_refused_is_recorded_as_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeNvml({"nvmlDeviceRegisterEvents": NOT_SUPPORTED}).install(monkeypatch)
    document = collect_gpu.snapshot_nvml(xid_wait_s=0.2)
    assert document["gpus"][0]["xids"] == "error: Not Supported"
    assert parse_nvml_json(json.dumps(document), "n")[0].xids == []


def _program(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_collect_local_keeps_nvidia_smi_output_unchanged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    xml = '<?xml version="1.0" ?>\n<nvidia_smi_log>\n\t<driver_version>580.159.04</driver_version>\n</nvidia_smi_log>\n'
    (tmp_path / "out.xml").write_text(xml)
    # -q -x prints the XML; --query-gpu prints a CSV header and row
    _program(
        tmp_path,
        "nvidia-smi",
        f'if [ "$1" = "-q" ]; then /bin/cat {tmp_path}/out.xml; else echo "index, uuid"; echo "0, GPU-1"; fi\n',
    )
    monkeypatch.setenv("PATH", str(tmp_path))
    FakeNvml().install(monkeypatch)
    files, statuses = collect_gpu.collect_local("node-a")
    assert files["gpu/node-a.xml"] == xml.encode()
    assert files["gpu/node-a.csv"] == b"index, uuid\n0, GPU-1\n"
    assert json.loads(files["gpu/node-a.nvml.json"])["driver"] == "580.159.04"
    assert statuses == {path: ("ok", "") for path in files}


def test_collect_local_reports_each_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _program(
        tmp_path,
        "nvidia-smi",
        'echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver."; exit 9\n',
    )
    monkeypatch.setenv("PATH", str(tmp_path))
    FakeNvml({"nvmlInit": pynvml.NVML_ERROR_NO_PERMISSION}).install(monkeypatch)
    files, statuses = collect_gpu.collect_local("node-a")
    assert files == {}
    assert statuses["gpu/node-a.nvml.json"] == ("failed", "NVML did not start: Insufficient Permissions")
    status, detail = statuses["gpu/node-a.xml"]
    assert status == "failed"
    assert detail == (
        "nvidia-smi -q -x exited 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    )


def test_collect_local_skips_what_this_host_does_not_have(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi here
    FakeNvml({"nvmlInit": pynvml.NVML_ERROR_LIBRARY_NOT_FOUND}).install(monkeypatch)
    files, statuses = collect_gpu.collect_local("node-a")
    assert files == {}
    assert statuses == {
        "gpu/node-a.nvml.json": ("skipped", "NVML did not start: NVML Shared Library Not Found"),
        "gpu/node-a.xml": ("skipped", "nvidia-smi not found on PATH"),
        "gpu/node-a.csv": ("skipped", "nvidia-smi not found on PATH"),
    }


def test_main_writes_the_bundle_gpu_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    FakeNvml().install(monkeypatch)
    assert collect_gpu.main([str(tmp_path / "bundle"), "--host", "node-a"]) == 0
    written = tmp_path / "bundle" / "gpu" / "node-a.nvml.json"
    assert parse_nvml_json(written.read_text(), "node-a")[0].name == "NVIDIA H200"
    assert stat.S_IMODE(os.stat(written).st_mode) == 0o600
    assert sorted(os.listdir(tmp_path / "bundle" / "gpu")) == ["node-a.nvml.json"]
    assert "gpu/node-a.xml: skipped: nvidia-smi not found on PATH" in capsys.readouterr().err


def test_main_fails_when_nothing_was_collected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    FakeNvml({"nvmlInit": pynvml.NVML_ERROR_DRIVER_NOT_LOADED}).install(monkeypatch)
    assert collect_gpu.main([str(tmp_path / "bundle"), "--host", "node-a"]) == 1
    assert not (tmp_path / "bundle").exists()
