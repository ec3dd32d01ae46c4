"""The three GPU sources of one moment on a real H200 agree once parsed (fixtures/real/h200/README.md).

The sources were read one after another within about 2 s under a steady load: what moves with the
load (utilization, power, SM clock, temperature) is compared within a small band, the rest exactly.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from diag.parsers.nvidia_smi import parse_csv, parse_xml
from diag.parsers.nvml import parse_nvml_json
from diag.snapshot.model import GPU

CAPTURES = Path(__file__).resolve().parents[3] / "fixtures" / "real" / "h200"
UUID = "GPU-4b794de7-279f-721d-5fe5-8f6fcbfb3cf4"
HOLDER_PID, MATMUL_PID = 458, 459  # load/pids.txt


def _read(moment: str, name: str) -> str:
    return (CAPTURES / moment / name).read_text()


def _sources(moment: str) -> dict[str, GPU]:
    host = f"h200-{moment}"
    [xml] = parse_xml(_read(moment, f"gpu/{host}.xml"), host)
    [nvml] = parse_nvml_json(_read(moment, f"gpu/{host}.nvml.json"), host)
    [bundle_csv] = parse_csv(_read(moment, f"gpu/{host}.csv"), host)
    [rich_csv] = parse_csv(_read(moment, f"{host}.rich.csv"), host)
    return {"xml": xml, "nvml": nvml, "csv": bundle_csv, "rich_csv": rich_csv}


@pytest.fixture(params=["idle", "load"])
def moment(request: pytest.FixtureRequest) -> str:
    return request.param


def test_identity_and_static_facts_agree_exactly(moment: str) -> None:
    sources = _sources(moment)
    for gpu in sources.values():
        assert (gpu.index, gpu.uuid, gpu.name) == (0, UUID, "NVIDIA H200")
        assert gpu.memory_total_mib == 143771
    full = [sources["xml"], sources["nvml"], sources["rich_csv"]]
    for gpu in full:
        assert gpu.pci_bus_id == "00000000:00:06.0"
        assert gpu.driver_version == "580.159.04"
        assert gpu.power_limit_w == 700
        assert gpu.clock_sm_max_mhz == 1980
        assert (gpu.pcie_gen_current, gpu.pcie_gen_max, gpu.pcie_width_current, gpu.pcie_width_max) == (5, 5, 16, 16)
        assert gpu.mig_mode == "Disabled"
    assert sources["xml"].cuda_version == sources["nvml"].cuda_version == "13.0"


def test_memory_health_agrees_exactly(moment: str) -> None:
    sources = _sources(moment)
    full = [sources["xml"], sources["nvml"], sources["rich_csv"]]
    for gpu in full:
        assert gpu.ecc_uncorrected_volatile == 0 and gpu.ecc_uncorrected_aggregate == 0
        # This GPU remaps rows instead of retiring pages: nvidia-smi says N/A, NVML "Not Supported".
        assert gpu.retired_pages_pending is None
        assert gpu.remapped_rows_pending is False and gpu.remapped_rows_failure is False


def test_memory_used_agrees_within_nvidia_smi_rounding(moment: str) -> None:
    sources = _sources(moment)
    used = {name: gpu.memory_used_mib for name, gpu in sources.items()}
    assert used["xml"] == used["csv"] == used["rich_csv"]
    # NVML gives bytes (v2: the driver's reservation kept out, as nvidia-smi does); nvidia-smi whole MiB
    assert used["nvml"] == pytest.approx(used["xml"], abs=1)


def test_idle_reads_idle_everywhere() -> None:
    for gpu in _sources("idle").values():
        assert gpu.utilization_gpu_pct == 0
        assert gpu.memory_used_mib == pytest.approx(0, abs=1)
        assert gpu.processes == []
    for name in ("xml", "nvml", "rich_csv"):
        gpu = _sources("idle")[name]
        assert gpu.clocks_event_reasons == ["gpu_idle"]
        assert gpu.clock_sm_mhz == 345


def test_load_processes_agree_between_xml_nvml_and_compute_apps() -> None:
    sources = _sources("load")
    expected = {HOLDER_PID: ("python3", 41478.0), MATMUL_PID: ("python3", 1130.0)}
    for name in ("xml", "nvml"):
        assert {p.pid: (p.name, p.used_memory_mib) for p in sources[name].processes} == expected
    apps = _read("load", "h200-load.apps.csv").splitlines()
    assert apps[0] == "pid, process_name, gpu_uuid, used_gpu_memory [MiB]"
    listed = {
        int(pid): (name, float(used.removesuffix(" MiB")))
        for pid, name, uuid, used in (r.split(", ") for r in apps[1:])
    }
    assert listed == expected
    # the two processes hold what the GPU has in use, less the driver's own few MiB
    assert sum(used for _, used in expected.values()) == pytest.approx(sources["xml"].memory_used_mib, abs=32)


def test_load_shows_the_power_cap_in_every_source() -> None:
    sources = _sources("load")
    for name in ("xml", "nvml", "rich_csv"):
        gpu = sources[name]
        assert gpu.clocks_event_reasons == ["sw_power_cap"], name
        assert 97 <= gpu.utilization_gpu_pct <= 100
        assert 680 <= gpu.power_draw_w <= gpu.power_limit_w
        assert 1400 <= gpu.clock_sm_mhz < gpu.clock_sm_max_mhz  # held below max by the cap
    clocks = [sources[name].clock_sm_mhz for name in ("xml", "nvml", "rich_csv")]
    assert max(clocks) - min(clocks) <= 30  # two 15 MHz steps of the clock table
    temperatures = [gpu.temperature_c for gpu in sources.values()]
    assert max(temperatures) - min(temperatures) <= 2


def test_raw_xml_by_hand_matches_the_collectors_xml() -> None:
    [collected] = parse_xml(_read("load", "gpu/h200-load.xml"), "h200-load")
    [by_hand] = parse_xml(_read("load", "h200-load.raw.xml"), "h200-load")
    moving = ("utilization_gpu_pct", "power_draw_w", "clock_sm_mhz", "temperature_c")
    for field in moving:
        setattr(by_hand, field, getattr(collected, field))
    assert by_hand == collected


def test_noheader_nounits_form_reads_like_the_bundle_csv() -> None:
    [plain] = parse_csv(_read("load", "h200-load.noheader-nounits.csv"), "h200-load")
    [bundle] = parse_csv(_read("load", "gpu/h200-load.csv"), "h200-load")
    assert plain == bundle


def test_xid_watch_ran_on_real_hardware_and_saw_none() -> None:
    [idle] = parse_nvml_json(_read("idle", "gpu/h200-idle.nvml.json"), "h200-idle")
    assert idle.xids == []
    assert '"xids": []' in _read("idle", "gpu/h200-idle.nvml.json")
