"""The one spelling of a PCI address, and nvidia-smi's line for a GPU it cannot open."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diag.parsers.gpu_common import UnopenedGpu, pci_address, unopened_gpu
from diag.parsers.logs import xid_line
from diag.parsers.nvidia_smi import parse_csv, parse_xml
from diag.parsers.nvml import parse_nvml_json

REAL = Path(__file__).resolve().parents[3] / "fixtures" / "real" / "h200" / "load" / "gpu"


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("00000000:3B:00.0", "0000:3b:00"),  # nvidia-smi -q -x, --query-gpu=pci.bus_id, NVML
        ("0000:3b:00", "0000:3b:00"),  # the kernel's Xid line
        ("0000:3b:00.0", "0000:3b:00"),  # lspci -D, and some Xid lines
        ("00000001:3B:00.0", "0001:3b:00"),  # a second PCI domain stays apart
        ("GPU-4b794de7-279f-721d-5fe5-8f6fcbfb3cf4", None),
        ("", None),
        (None, None),
        ("3b:00.0", None),  # no domain: not an address this project reads
    ],
)
def test_every_spelling_of_a_pci_address_becomes_one(text: str | None, address: str | None) -> None:
    assert pci_address(text) == address


def test_the_real_h200_capture_and_a_kernel_line_name_the_same_gpu() -> None:
    """nvidia-smi -q -x, --query-gpu and NVML of our H200 against the Xid line the kernel would print for it."""
    xml = parse_xml((REAL / "h200-load.xml").read_text(), "h200")[0].pci_bus_id
    nvml = parse_nvml_json((REAL / "h200-load.nvml.json").read_text(), "h200")[0].pci_bus_id
    kernel = xid_line("NVRM: Xid (PCI:0000:00:06): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.")
    assert (xml, nvml) == ("00000000:00:06.0", "00000000:00:06.0")
    assert pci_address(xml) == pci_address(nvml) == kernel.device == "0000:00:06"


@pytest.mark.parametrize(
    ("line", "found"),
    [
        (  # drivers before 5xx: the address only
            "Unable to determine the device handle for GPU 0000:05:00.0: "
            "GPU is lost.  Reboot the system to recover this GPU",
            UnopenedGpu(None, "0000:05:00.0", "GPU is lost"),
        ),
        (  # later drivers: index and address
            "Unable to determine the device handle for GPU0: 0000:01:00.0: "
            "GPU is lost. Reboot the system to recover this GPU",
            UnopenedGpu(0, "0000:01:00.0", "GPU is lost"),
        ),
        (
            "Unable to determine the device handle for GPU1: 0000:34:00.0: Unknown Error",
            UnopenedGpu(1, "0000:34:00.0", "Unknown Error"),
        ),
        (
            "Unable to determine the device handle for GPU0000:08:00.0: Unknown Error",
            UnopenedGpu(None, "0000:08:00.0", "Unknown Error"),
        ),
        ("0, GPU-4b794de7-279f-721d-5fe5-8f6fcbfb3cf4, NVIDIA H200, 42623 MiB, 143771 MiB, 98 %, 56", None),
    ],
)
def test_the_line_for_a_gpu_nvidia_smi_cannot_open(line: str, found: UnopenedGpu | None) -> None:
    assert unopened_gpu(line) == found


LOST = "Unable to determine the device handle for GPU 0000:DB:00.0: GPU is lost.  Reboot the system to recover this GPU"


def test_a_lost_gpu_in_the_csv_is_kept_beside_the_gpus_that_answered() -> None:
    text = (REAL / "h200-load.csv").read_text() + LOST + "\n"
    answered, lost = parse_csv(text, "h200")
    assert (answered.index, answered.open_error) == (0, None)
    assert (lost.index, lost.pci_bus_id, lost.uuid, lost.open_error) == (1, "0000:DB:00.0", None, "GPU is lost")


def test_a_lost_gpu_line_before_the_xml_document_is_read() -> None:
    text = LOST.replace("GPU 0000", "GPU1: 0000") + "\n" + (REAL / "h200-load.xml").read_text()
    answered, lost = parse_xml(text, "h200")
    assert (answered.uuid, answered.open_error) == ("GPU-4b794de7-279f-721d-5fe5-8f6fcbfb3cf4", None)
    assert (lost.index, pci_address(lost.pci_bus_id), lost.open_error, lost.driver_version) == (
        1,
        "0000:db:00",
        "GPU is lost",
        "580.159.04",
    )


def test_nvidia_smi_with_only_lost_gpus_still_names_them() -> None:
    [lost] = parse_csv(LOST + "\n", "h200")
    assert (lost.index, lost.open_error) == (0, "GPU is lost")


def test_the_nvml_snapshot_of_a_lost_gpu_says_so() -> None:
    document = json.loads((REAL / "h200-load.nvml.json").read_text())
    document["gpus"].append({"index": 1, "handle": "error: GPU is lost"})
    answered, lost = parse_nvml_json(json.dumps(document), "h200")
    assert (answered.open_error, lost.index, lost.open_error) == (None, 1, "GPU is lost")


def test_gpus_around_a_lost_one_keep_their_own_indexes() -> None:
    """nvidia-smi -q -x of a node whose GPU 1 is lost: the <gpu> elements are GPUs 0 and 2, not 0 and 1."""
    xml = (REAL / "h200-load.xml").read_text()
    head, gpu_end = xml.index("<gpu id="), xml.index("</gpu>") + len("</gpu>")
    element = xml[head:gpu_end]
    two_gpus = xml[:gpu_end] + "\n\t" + element.replace("00000000:00:06.0", "00000000:00:07.0") + xml[gpu_end:]
    text = (
        "Unable to determine the device handle for GPU1: 0000:00:08.0: "
        "GPU is lost. Reboot the system to recover this GPU\n" + two_gpus
    )
    gpus = parse_xml(text, "h200")
    assert [(g.index, pci_address(g.pci_bus_id), g.open_error) for g in gpus] == [
        (0, "0000:00:06", None),
        (2, "0000:00:07", None),
        (1, "0000:00:08", "GPU is lost"),
    ]
