"""What the loader reads while it parses, so that the joins only connect objects: the Xid lines of a
pod's log and of a node's events, and each GPU's PCI address in the one spelling every source shares."""

from __future__ import annotations

import json

from diag.bundle.files import Bundle
from diag.bundle.load import load_bundle
from diag.snapshot.model import XidLine

FELL_OFF = "[ 5123.456789] NVRM: Xid (PCI:0000:2A:00): 79, pid=1234, name=python3, GPU has fallen off the bus."


def pod(name: str, node: str) -> dict:
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "gpu-operator"},
        "spec": {"nodeName": node, "containers": [{"name": "exporter", "image": "nvcr.io/nvidia/k8s/dcgm-exporter"}]},
    }


def loaded(files: dict[str, str]):
    return load_bundle(Bundle({rel: text.encode() for rel, text in files.items()}))


def test_the_xid_lines_of_a_log_are_read_with_its_container() -> None:
    snap = loaded(
        {
            "k8s/pods.json": json.dumps({"kind": "List", "items": [pod("dcgm-a", "gpu-node-a")]}),
            "k8s/logs/gpu-operator.dcgm-a.log": f"starting\n{FELL_OFF}\nNVRM: Xid (PCI:0000:2a:00): 13, 63\n",
        }
    )
    (container,) = snap.pods[0].containers
    assert container.xid_lines == [
        XidLine(FELL_OFF, (79,), "0000:2a:00"),
        XidLine("NVRM: Xid (PCI:0000:2a:00): 13, 63", (13,), "0000:2a:00"),
    ]
    assert [line.text for line in container.xid_lines] == container.log_signals["xid"]


def test_a_gpu_has_its_pci_address_once_its_files_are_merged() -> None:
    csv = "index, uuid, pci.bus_id\n0, GPU-0, 00000000:2A:00.0\n1, GPU-1, not-an-address\n"
    snap = loaded({"gpu/node.csv": csv})
    assert [(g.pci_bus_id, g.pci_address) for g in snap.gpus] == [
        ("00000000:2A:00.0", "0000:2a:00"),
        ("not-an-address", None),
    ]
