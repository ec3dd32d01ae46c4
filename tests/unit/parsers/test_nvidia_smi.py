"""nvidia-smi XML and CSV across driver generations.

Real outputs: fixtures/real/h200 (driver 580). Older drivers' schemas (power_readings,
clocks_throttle_reasons, single_bit/double_bit ECC; the 535 sram/dram ECC) are written here in the
shape of public captures of those drivers, with values of our own.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diag.core.errors import ParseError
from diag.parsers import nvidia_smi
from diag.parsers.gpu_common import clocks_event_reason_names
from diag.parsers.nvidia_smi import parse_csv, parse_xml

EARLIER = Path(__file__).resolve().parents[3] / "fixtures" / "real" / "h200" / "earlier"


def _log(*gpus: str, driver: str = "470.82.01", cuda: str = "11.4") -> str:
    body = "".join(f'\t<gpu id="00000000:{i + 4:02X}:00.0">{gpu}</gpu>\n' for i, gpu in enumerate(gpus))
    return (
        '<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v11.dtd">\n<nvidia_smi_log>\n'
        f"\t<driver_version>{driver}</driver_version>\n\t<cuda_version>{cuda}</cuda_version>\n"
        f"\t<attached_gpus>{len(gpus)}</attached_gpus>\n{body}</nvidia_smi_log>\n"
    )


def _throttle(active: set[str], element: str = "clocks_throttle_reason") -> str:
    names = ["gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "hw_thermal_slowdown",
             "hw_power_brake_slowdown", "sync_boost", "sw_thermal_slowdown", "display_clocks_setting"]  # fmt: skip
    rows = "".join(f"<{element}_{n}>{'Active' if n in active else 'Not Active'}</{element}_{n}>" for n in names)
    return f"<{element}s>{rows}</{element}s>"


def _bit_counts(device_memory: str, total: str) -> str:
    return (
        f"<device_memory>{device_memory}</device_memory><register_file>0</register_file>"
        f"<l1_cache>N/A</l1_cache><l2_cache>0</l2_cache><texture_memory>0</texture_memory>"
        f"<texture_shm>0</texture_shm><cbu>N/A</cbu><total>{total}</total>"
    )


# A Volta-era GPU on a 470 driver: power_readings, clocks_throttle_reasons, single/double-bit ECC.
OLD_DRIVER_GPU = (
    "<product_name>Tesla V100-SXM2-16GB</product_name>"
    "<mig_mode><current_mig>N/A</current_mig><pending_mig>N/A</pending_mig></mig_mode>"
    "<uuid>GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee</uuid>"
    "<pci><pci_bus_id>00000000:04:00.0</pci_bus_id><pci_gpu_link_info>"
    "<pcie_gen><max_link_gen>3</max_link_gen><current_link_gen>1</current_link_gen></pcie_gen>"
    "<link_widths><max_link_width>16x</max_link_width><current_link_width>8x</current_link_width></link_widths>"
    "</pci_gpu_link_info></pci>"
    + _throttle({"hw_slowdown", "sw_thermal_slowdown"})
    + "<fb_memory_usage><total>16160 MiB</total><used>15000 MiB</used><free>1160 MiB</free></fb_memory_usage>"
    "<utilization><gpu_util>87 %</gpu_util><memory_util>40 %</memory_util></utilization>"
    "<ecc_errors><volatile><single_bit>"
    + _bit_counts("4", "4")
    + "</single_bit><double_bit>"
    + _bit_counts("2", "2")
    + "</double_bit></volatile><aggregate><single_bit>"
    + _bit_counts("9", "9")
    + "</single_bit><double_bit>"
    + _bit_counts("5", "5")
    + "</double_bit></aggregate></ecc_errors>"
    "<retired_pages><multiple_single_bit_retirement><retired_count>1</retired_count><retired_pagelist>"
    "</retired_pagelist></multiple_single_bit_retirement><double_bit_retirement><retired_count>2</retired_count>"
    "<retired_pagelist></retired_pagelist></double_bit_retirement>"
    "<pending_blacklist>Yes</pending_blacklist><pending_retirement>Yes</pending_retirement></retired_pages>"
    "<remapped_rows>N/A</remapped_rows>"
    "<temperature><gpu_temp>83 C</gpu_temp></temperature>"
    "<power_readings><power_state>P0</power_state><power_management>Supported</power_management>"
    "<power_draw>248.12 W</power_draw><power_limit>300.00 W</power_limit>"
    "<default_power_limit>300.00 W</default_power_limit><enforced_power_limit>250.00 W</enforced_power_limit>"
    "<min_power_limit>150.00 W</min_power_limit><max_power_limit>300.00 W</max_power_limit></power_readings>"
    "<clocks><graphics_clock>1005 MHz</graphics_clock><sm_clock>1005 MHz</sm_clock></clocks>"
    "<max_clocks><graphics_clock>1530 MHz</graphics_clock><sm_clock>1530 MHz</sm_clock></max_clocks>"
    "<processes><process_info><gpu_instance_id>N/A</gpu_instance_id><compute_instance_id>N/A</compute_instance_id>"
    "<pid>3120</pid><type>C</type><process_name>/usr/bin/python3</process_name>"
    "<used_memory>14990 MiB</used_memory></process_info></processes>"
)

# An Ada-era GPU on a 535 driver: gpu_power_readings with power_draw, clocks_event_reasons, sram/dram ECC.
DRIVER_535_GPU = (
    "<product_name>NVIDIA L40S</product_name>"
    "<mig_mode><current_mig>N/A</current_mig><pending_mig>N/A</pending_mig></mig_mode>"
    + _throttle({"applications_clocks_setting"}, element="clocks_event_reason")
    + "<fb_memory_usage><total>46068 MiB</total><reserved>577 MiB</reserved><used>30211 MiB</used>"
    "<free>15279 MiB</free></fb_memory_usage>"
    "<ecc_errors><volatile><sram_correctable>0</sram_correctable><sram_uncorrectable>1</sram_uncorrectable>"
    "<dram_correctable>3</dram_correctable><dram_uncorrectable>2</dram_uncorrectable></volatile>"
    "<aggregate><sram_correctable>0</sram_correctable><sram_uncorrectable>1</sram_uncorrectable>"
    "<dram_correctable>7</dram_correctable><dram_uncorrectable>4</dram_uncorrectable></aggregate></ecc_errors>"
    "<remapped_rows><remapped_row_corr>0</remapped_row_corr><remapped_row_unc>1</remapped_row_unc>"
    "<remapped_row_pending>Yes</remapped_row_pending><remapped_row_failure>No</remapped_row_failure>"
    "</remapped_rows>"
    "<gpu_power_readings><power_state>P0</power_state><power_draw>301.50 W</power_draw>"
    "<current_power_limit>350.00 W</current_power_limit><requested_power_limit>350.00 W</requested_power_limit>"
    "</gpu_power_readings>"
    "<module_power_readings><power_draw>N/A</power_draw><current_power_limit>N/A</current_power_limit>"
    "</module_power_readings>"
)


def test_h200_driver_580_fills_every_field() -> None:
    [gpu] = parse_xml((EARLIER / "h200-load.xml").read_text(), "node-a")
    assert (gpu.host, gpu.index, gpu.uuid, gpu.name) == (
        "node-a", 0, "GPU-0db5a9f0-15de-450f-d9e4-1d3a34348673", "NVIDIA H200",
    )  # fmt: skip
    assert (gpu.pci_bus_id, gpu.driver_version, gpu.cuda_version) == ("00000000:00:06.0", "580.159.04", "13.0")
    assert (gpu.memory_used_mib, gpu.memory_total_mib) == (42367, 143771)
    assert (gpu.utilization_gpu_pct, gpu.temperature_c) == (100, 59)
    assert (gpu.power_draw_w, gpu.power_limit_w) == (692.94, 700)  # average_power_draw, current_power_limit
    assert (gpu.clock_sm_mhz, gpu.clock_sm_max_mhz) == (1515, 1980)
    assert gpu.clocks_event_reasons == ["sw_power_cap"]
    assert (gpu.ecc_uncorrected_volatile, gpu.ecc_uncorrected_aggregate) == (0, 0)
    assert gpu.retired_pages_pending is None  # N/A: this GPU remaps rows instead
    assert (gpu.remapped_rows_pending, gpu.remapped_rows_failure) == (False, False)
    assert (gpu.pcie_gen_current, gpu.pcie_gen_max, gpu.pcie_width_current, gpu.pcie_width_max) == (5, 5, 16, 16)
    assert gpu.mig_mode == "Disabled"
    assert gpu.persistence_mode is True
    assert [(p.pid, p.name, p.used_memory_mib) for p in gpu.processes] == [
        (429, "python3", 41478),
        (430, "python3", 874),
    ]


def test_h200_idle_keeps_gpu_idle_as_a_named_reason() -> None:
    [gpu] = parse_xml((EARLIER / "h200-idle.xml").read_text(), "node-a")
    assert gpu.clocks_event_reasons == ["gpu_idle"]
    assert gpu.processes == [] and gpu.utilization_gpu_pct == 0


def test_old_driver_schema() -> None:
    [gpu] = parse_xml(_log(OLD_DRIVER_GPU), "node-b")
    assert gpu.clocks_event_reasons == ["hw_slowdown", "sw_thermal_slowdown"]  # bit order
    assert gpu.power_draw_w == 248.12
    assert gpu.power_limit_w == 250  # the enforced limit, not the requested 300 W
    assert (gpu.ecc_uncorrected_volatile, gpu.ecc_uncorrected_aggregate) == (2, 5)  # double_bit totals
    assert gpu.retired_pages_pending is True
    assert gpu.remapped_rows_pending is None and gpu.remapped_rows_failure is None
    assert gpu.mig_mode is None
    assert (gpu.pcie_gen_current, gpu.pcie_gen_max, gpu.pcie_width_current, gpu.pcie_width_max) == (1, 3, 8, 16)
    assert (gpu.driver_version, gpu.cuda_version) == ("470.82.01", "11.4")
    assert [(p.pid, p.name, p.used_memory_mib) for p in gpu.processes] == [(3120, "/usr/bin/python3", 14990)]


def test_driver_535_schema() -> None:
    [gpu] = parse_xml(_log(DRIVER_535_GPU, driver="535.104.05", cuda="12.2"), "node-c")
    assert gpu.clocks_event_reasons == ["applications_clocks_setting"]
    assert (gpu.power_draw_w, gpu.power_limit_w) == (301.5, 350)
    assert (gpu.ecc_uncorrected_volatile, gpu.ecc_uncorrected_aggregate) == (3, 5)  # sram + dram
    assert (gpu.remapped_rows_pending, gpu.remapped_rows_failure) == (True, False)
    assert gpu.memory_used_mib == 30211
    assert gpu.utilization_gpu_pct is None and gpu.clock_sm_mhz is None  # absent: unknown


def test_driver_580_split_sram_counters_are_summed_and_na_left_out() -> None:
    ecc = (
        "<ecc_errors><volatile><sram_correctable>0</sram_correctable>"
        "<sram_uncorrectable_parity>1</sram_uncorrectable_parity>"
        "<sram_uncorrectable_secded>2</sram_uncorrectable_secded>"
        "<dram_correctable>N/A</dram_correctable><dram_uncorrectable>N/A</dram_uncorrectable></volatile>"
        "<aggregate><sram_uncorrectable_parity>N/A</sram_uncorrectable_parity>"
        "<sram_uncorrectable_secded>N/A</sram_uncorrectable_secded>"
        "<dram_uncorrectable>N/A</dram_uncorrectable></aggregate></ecc_errors>"
    )
    [gpu] = parse_xml(_log(ecc), "n")
    assert gpu.ecc_uncorrected_volatile == 3
    assert gpu.ecc_uncorrected_aggregate is None  # every counter N/A: unknown, not 0


def test_gpus_are_indexed_in_document_order_and_bus_id_falls_back_to_the_gpu_id() -> None:
    gpus = parse_xml(_log("<uuid>GPU-1</uuid>", "<uuid>GPU-2</uuid>"), "n")
    assert [(g.index, g.uuid, g.pci_bus_id) for g in gpus] == [
        (0, "GPU-1", "00000000:04:00.0"),
        (1, "GPU-2", "00000000:05:00.0"),
    ]


@pytest.mark.parametrize(
    "unknown", ["N/A", "[N/A]", "Not Supported", "[Not Supported]", "Requested functionality has been deprecated"]
)
def test_unknown_words_are_none(unknown: str) -> None:
    body = (
        f"<fb_memory_usage><used>{unknown}</used></fb_memory_usage><temperature><gpu_temp>{unknown}</gpu_temp>"
        f"</temperature><retired_pages><pending_retirement>{unknown}</pending_retirement></retired_pages>"
        f"<mig_mode><current_mig>{unknown}</current_mig></mig_mode><uuid>{unknown}</uuid>"
        f"<persistence_mode>{unknown}</persistence_mode>"
    )
    [gpu] = parse_xml(_log(body), "n")
    assert (gpu.memory_used_mib, gpu.temperature_c, gpu.retired_pages_pending, gpu.mig_mode, gpu.uuid) == (None,) * 5
    assert gpu.persistence_mode is None


def test_persistence_mode_disabled_enabled_or_absent() -> None:
    [off] = parse_xml(_log("<persistence_mode>Disabled</persistence_mode>"), "n")
    [on] = parse_xml(_log("<persistence_mode>Enabled</persistence_mode>"), "n")
    [absent] = parse_xml(_log("<uuid>GPU-1</uuid>"), "n")
    assert (off.persistence_mode, on.persistence_mode, absent.persistence_mode) == (False, True, None)
    [row] = parse_csv("index, persistence_mode\n0, Disabled\n", "n")
    assert row.persistence_mode is False
    [row] = parse_csv("index, name\n0, NVIDIA H200\n", "n")
    assert row.persistence_mode is None  # not queried: unknown
    with pytest.raises(ParseError, match="persistence_mode: 'Off' is neither Enabled nor Disabled"):
        parse_csv("index, persistence_mode\n0, Off\n", "n")


def test_mig_enabled_gpu_with_volatile_ecc_unknown() -> None:
    body = (
        "<mig_mode><current_mig>Enabled</current_mig><pending_mig>Enabled</pending_mig></mig_mode>"
        "<utilization><gpu_util>N/A</gpu_util></utilization>"
        "<ecc_errors><volatile><sram_correctable>N/A</sram_correctable><sram_uncorrectable>N/A</sram_uncorrectable>"
        "<dram_correctable>N/A</dram_correctable><dram_uncorrectable>N/A</dram_uncorrectable></volatile>"
        "<aggregate><sram_uncorrectable>0</sram_uncorrectable><dram_uncorrectable>0</dram_uncorrectable>"
        "</aggregate></ecc_errors>"
    )
    [gpu] = parse_xml(_log(body), "n")
    assert gpu.mig_mode == "Enabled"
    assert gpu.utilization_gpu_pct is None
    assert (gpu.ecc_uncorrected_volatile, gpu.ecc_uncorrected_aggregate) == (None, 0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('<?xml version="1.0" ?>\n<nvidia_smi_log>\n\t<gpu id="0">\n\t\t<uuid>GPU-1', "not valid XML"),
        ("", "not valid XML"),
        ('{"gpus": []}', "not valid XML"),
        ("<html><body>502 Bad Gateway</body></html>", "root element is <html>"),
        (
            _log("<fb_memory_usage><used>lots</used></fb_memory_usage>"),
            "gpu 0 <fb_memory_usage/used>: 'lots' is not a number in MiB",
        ),
        (_log("<fb_memory_usage><used>42 GiB</used></fb_memory_usage>"), "'42 GiB' is not a number in MiB"),
        (
            _log(
                "<pci><pci_gpu_link_info><link_widths><current_link_width>16.5x</current_link_width></link_widths></pci_gpu_link_info></pci>"
            ),
            "not a whole number",
        ),
        (
            _log(
                _throttle(set()).replace(
                    "<clocks_throttle_reason_sync_boost>Not Active", "<clocks_throttle_reason_sync_boost>Maybe"
                )
            ),
            "'Maybe' is neither Active nor Not Active",
        ),
        (
            _log("<retired_pages><pending_retirement>Perhaps</pending_retirement></retired_pages>"),
            "'Perhaps' is neither Yes nor No",
        ),
        (_log("<processes><process_info><pid>abc</pid></process_info></processes>"), "<pid>: 'abc' is not a number"),
    ],
)
def test_bad_xml_is_one_readable_parse_error(text: str, message: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse_xml(text, "n")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


# --------------------------------------------------------------------------------------------- CSV


def test_h200_csv_with_units() -> None:
    [gpu] = parse_csv((EARLIER / "h200-load.csv").read_text(), "node-a")
    assert (gpu.index, gpu.uuid, gpu.name, gpu.pci_bus_id, gpu.driver_version) == (
        0, "GPU-0db5a9f0-15de-450f-d9e4-1d3a34348673", "NVIDIA H200", "00000000:00:06.0", "580.159.04",
    )  # fmt: skip
    assert (gpu.memory_used_mib, gpu.memory_total_mib, gpu.utilization_gpu_pct, gpu.temperature_c) == (
        42367,
        143771,
        100,
        59,
    )
    assert (gpu.power_draw_w, gpu.clock_sm_mhz, gpu.clock_sm_max_mhz) == (692.63, 1515, 1980)
    assert gpu.clocks_event_reasons == ["sw_power_cap"]
    assert (gpu.pcie_gen_current, gpu.pcie_gen_max, gpu.pcie_width_current, gpu.pcie_width_max) == (5, 5, 16, 16)
    assert (gpu.ecc_uncorrected_volatile, gpu.retired_pages_pending, gpu.mig_mode) == (0, None, "Disabled")
    assert gpu.power_limit_w is None and gpu.ecc_uncorrected_aggregate is None  # columns not asked for


def test_every_documented_clocks_event_bit_decodes_to_its_short_name() -> None:
    assert clocks_event_reason_names(0x1FF) == [
        "gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
        "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "display_clocks_setting",
    ]  # fmt: skip
    assert clocks_event_reason_names(0) == []
    assert clocks_event_reason_names(0x800 | 0x4) == ["sw_power_cap", "0x800"]


def test_old_throttle_bitmask_column_and_nounits() -> None:
    text = (
        "index, name, clocks_throttle_reasons.active, power.draw [W], power.limit [W], enforced.power.limit [W], "
        "ecc.errors.uncorrected.aggregate.total, retired_pages.pending, remapped_rows.pending, remapped_rows.failure\n"
        "0, Tesla V100-SXM2-16GB, 0x0000000000000048, 248.12, 300.00, 250.00, 5, Yes, [N/A], [N/A]\n"
    )
    [gpu] = parse_csv(text, "n")
    assert gpu.clocks_event_reasons == ["hw_slowdown", "hw_thermal_slowdown"]
    assert (gpu.power_draw_w, gpu.power_limit_w) == (248.12, 250)
    assert (gpu.ecc_uncorrected_aggregate, gpu.retired_pages_pending) == (5, True)
    assert (gpu.remapped_rows_pending, gpu.remapped_rows_failure) == (None, None)


def test_aliases_and_average_power_is_preferred() -> None:
    text = (
        "gpu_name, gpu_bus_id, gpu_uuid, clocks.sm [MHz], "
        "power.draw [W], power.draw.average [W], power.draw.instant [W]\n"
        "NVIDIA H100 80GB HBM3, 00000000:1B:00.0, GPU-1, 1980 MHz, 640.10 W, 633.02 W, 701.55 W\n"
        "NVIDIA H100 80GB HBM3, 00000000:43:00.0, GPU-2, [N/A], 120.00 W, [N/A], 118.00 W\n"
    )
    first, second = parse_csv(text, "n")
    assert (first.index, first.name, first.pci_bus_id, first.uuid, first.clock_sm_mhz) == (
        0, "NVIDIA H100 80GB HBM3", "00000000:1B:00.0", "GPU-1", 1980,
    )  # fmt: skip
    assert first.power_draw_w == 633.02
    assert second.index == 1 and second.power_draw_w == 120  # average unknown: the plain draw
    assert second.clock_sm_mhz is None


def test_per_reason_columns_without_the_bitmask() -> None:
    text = (
        "index, clocks_event_reasons.gpu_idle, clocks_event_reasons.sw_power_cap, clocks_event_reasons.hw_slowdown\n"
        "0, Not Active, Active, Active\n"
    )
    assert parse_csv(text, "n")[0].clocks_event_reasons == ["sw_power_cap", "hw_slowdown"]


def test_noheader_reads_the_bundle_columns_or_the_given_ones() -> None:
    [gpu] = parse_csv("0, GPU-1, NVIDIA H200, 42623, 143771, 98, 56\n", "n")
    assert (gpu.uuid, gpu.memory_used_mib, gpu.utilization_gpu_pct, gpu.temperature_c) == ("GPU-1", 42623, 98, 56)
    [gpu] = parse_csv("3, 0x0000000000000004\n", "n", columns=("index", "clocks_event_reasons.active"))
    assert (gpu.index, gpu.clocks_event_reasons) == (3, ["sw_power_cap"])


def test_empty_csv_has_no_gpus() -> None:
    assert parse_csv("", "n") == []
    assert parse_csv("index, uuid\n", "n") == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("index, uuid, memory.used [MiB]\n0, GPU-1\n", "GPU row 1: 2 fields, but there are 3 columns"),
        ("index, memory.used [MiB]\n0, plenty MiB\n", "GPU row 1 memory.used: 'plenty MiB' is not a number in MiB"),
        ('Field "memory.usd" is not a valid field to query.\n', "line 1 is not a --query-gpu header"),
        ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", "not a --query-gpu header"),
        (
            "pid, process_name, gpu_uuid, used_gpu_memory [MiB]\n429, python3, GPU-1, 41478 MiB\n",
            "--query-compute-apps output",
        ),
        ("index, retired_pages.pending\n0, Maybe\n", "'Maybe' is neither Yes nor No"),
        ("index, mig.mode.current\n0, Sometimes\n", "'Sometimes' is neither Enabled nor Disabled"),
        ("index, clocks_event_reasons.active\n0, 0xZZ\n", "'0xZZ' is not a hexadecimal bitmask"),
        ("index, pcie.link.gen.current\n0, 4.5\n", "not a whole number"),
    ],
)
def test_bad_csv_is_one_readable_parse_error(text: str, message: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse_csv(text, "n")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_csv_that_the_csv_module_refuses_is_a_parse_error():
    """Found by tests/fuzz: an unclosed quote runs a field past csv's limit (csv.Error escaped)."""
    with pytest.raises(ParseError, match="not nvidia-smi CSV: field larger than field limit"):
        parse_csv('index, name\n0, "' + "x" * 200_000 + "\n", "host")


# ------------------------------------------------------------------- the unread children of <gpu>

ALL_XML = sorted(Path(__file__).resolve().parents[3].glob("fixtures/**/*.xml"))


def _parsed_whole(text: str) -> list:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(nvidia_smi, "_without_unread", lambda whole: whole)
        return parse_xml(text, "n")


@pytest.mark.parametrize("path", ALL_XML, ids=lambda p: str(p.relative_to(EARLIER.parents[3])))
def test_cutting_the_unread_children_changes_no_gpu(path: Path) -> None:
    text = path.read_text()
    assert parse_xml(text, "n") == _parsed_whole(text)


def _children_of_the_real_gpu() -> list[str]:
    """The children of the real H200's <gpu>, each as the lines nvidia-smi wrote for it."""
    text = (EARLIER / "h200-load.xml").read_text()
    body = text[text.index("<gpu id=") : text.index("\n\t</gpu>")].split("\n", 1)[1]
    children = re.split(r"\n(?=\t\t<(?!/))", "\n" + body)[1:]
    assert len(children) > 60 and any(c.startswith("\t\t<supported_clocks>") for c in children)
    return children


REAL_CHILDREN = _children_of_the_real_gpu()
# Children nvidia-smi writes on other GPUs and drivers, in its layout: MIG devices, empty elements.
OTHER_CHILDREN = [
    "\t\t<mig_devices>\n\t\t\t<mig_device>\n\t\t\t\t<index>0</index>\n\t\t\t\t<gpu_instance_id>1</gpu_instance_id>\n"
    "\t\t\t</mig_device>\n\t\t</mig_devices>",
    "\t\t<processes>\n\t\t\t<process_info>\n\t\t\t\t<pid>4242</pid>\n\t\t\t\t<process_name>python3</process_name>\n"
    "\t\t\t\t<used_memory>70000 MiB</used_memory>\n\t\t\t</process_info>\n\t\t</processes>",
    "\t\t<accounted_processes/>",
    "\t\t<uuid/>",
    "\t\t<!-- a comment -->",
]


@settings(max_examples=60, deadline=None)
@given(children=st.lists(st.sampled_from(REAL_CHILDREN + OTHER_CHILDREN), max_size=40), gpus=st.integers(1, 3))
def test_any_order_of_children_reads_as_the_whole_document_does(children: list[str], gpus: int) -> None:
    """A read child between unread ones, first, last or twice: the cut keeps every one of them."""
    gpu = "\n".join(children)
    body = "".join(f'\t<gpu id="00000000:{i + 4:02X}:00.0">\n{gpu}\n\t</gpu>\n' for i in range(gpus))
    text = _log().replace("</nvidia_smi_log>", body + "</nvidia_smi_log>")
    assert parse_xml(text, "n") == _parsed_whole(text)


def test_a_layout_the_cut_breaks_is_parsed_whole() -> None:
    """Two children on one line, the first unread: the cut takes the read one's opening tag with it
    and leaves its closing tag; the whole document is parsed instead, and nothing is lost."""
    text = _log(
        "\n\t\t<fan_speed>N/A</fan_speed><temperature>\n\t\t\t<gpu_temp>46 C</gpu_temp>\n\t\t</temperature>\n\t"
    )
    [gpu] = parse_xml(text, "n")
    assert gpu.temperature_c == 46


def _real_h200_xml() -> str:
    text = (EARLIER / "h200-idle.xml").read_text()
    assert "</supported_clocks>" in text
    return text


@pytest.mark.parametrize(
    "damage",
    [
        lambda t: t[: t.index("</supported_clocks>") - 40],  # cut inside the table
        lambda t: t.replace("</supported_clocks>", "</supported_clocks><processes>", 1),  # unclosed after it
        lambda t: t.replace("<processes>", "<processes> <", 1),  # bad in a read child after the cut
        lambda t: t.replace("</gpu>", "</gpux>", 1),
    ],
    ids=["truncated-in-table", "unclosed-after", "bad-read-child", "mismatched-later"],
)
def test_xml_damaged_around_a_cut_names_the_documents_own_place(damage) -> None:
    text = damage(_real_h200_xml())
    try:
        ET.fromstring(text)
    except ET.ParseError as e:
        expected = f"not valid XML: {e}"
    else:
        raise AssertionError("the damage left the XML valid")
    with pytest.raises(ParseError) as caught:
        parse_xml(text, "n")
    assert str(caught.value) == expected


def test_damage_inside_an_unread_child_is_not_checked() -> None:
    """The price of the cut: an unread child left unclosed no longer refuses the document. What is
    read is whole; a truncated document is still refused (the cases above)."""
    text = _real_h200_xml()
    damaged = text.replace("</supported_clocks>", "</supported_clocks><fan_speed>", 1)
    with pytest.raises(ET.ParseError):
        ET.fromstring(damaged)
    assert parse_xml(damaged, "n") == parse_xml(text, "n")


@pytest.mark.parametrize("path", ALL_XML, ids=lambda p: str(p.relative_to(EARLIER.parents[3])))
def test_in_nvidia_smis_layout_only_read_children_are_parsed(path: Path) -> None:
    """The cut works on what nvidia-smi writes (a cut that broke the document would cost only time,
    the whole document being parsed then, so nothing else would notice)."""
    root = ET.fromstring(nvidia_smi._without_unread(path.read_text()))
    children = {child.tag for gpu in root.findall("gpu") for child in gpu}
    assert children and children <= set(nvidia_smi.GPU_CHILDREN_READ)
