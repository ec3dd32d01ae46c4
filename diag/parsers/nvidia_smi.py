"""nvidia-smi's own outputs: `nvidia-smi -q -x` (XML) and `nvidia-smi --query-gpu=... --format=csv`.

Both are read across driver generations: the XML renamed clocks_throttle_reasons to
clocks_event_reasons (driver 535), power_readings to gpu_power_readings, and split the ECC counters
from single_bit/double_bit totals into dram/sram counters; the CSV takes any column set.

A GPU nvidia-smi cannot open gets one line instead of its output ("Unable to determine the device
handle for GPU 0000:05:00.0: GPU is lost. ..."): it becomes a GPU with `open_error` set.
"""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import count
from typing import Any

from diag.core.errors import ParseError
from diag.parsers.gpu_common import (
    NO_DEVICE_HANDLE,
    UnopenedGpu,
    clocks_event_reason_names,
    enabled,
    hex_mask,
    in_reason_order,
    integer,
    is_unknown,
    number,
    unopened_gpu,
    yes_no,
)
from diag.snapshot.model import GPU, GPUProcess

# ----------------------------------------------------------------------------------------- XML

_REASON_GROUPS = (
    ("clocks_event_reasons", "clocks_event_reason_"),  # driver 535 and later
    ("clocks_throttle_reasons", "clocks_throttle_reason_"),
)
# Uncorrectable ECC counters of one scope (volatile or aggregate) in the dram/sram schema; older
# drivers have double_bit/total instead, 535 has sram_uncorrectable, 580 splits it into parity/secded.
_UNCORRECTABLE_COUNTERS = (
    "dram_uncorrectable",
    "sram_uncorrectable",
    "sram_uncorrectable_parity",
    "sram_uncorrectable_secded",
)


@dataclass
class _XmlGpu:
    """One <gpu> element, read with error messages that name the GPU and the field."""

    element: ET.Element
    index: int

    def text(self, path: str, within: ET.Element | None = None) -> str | None:
        found = _find(within if within is not None else self.element, path)
        if found is None:
            return None
        value = (found.text or "").strip()
        return None if is_unknown(value) else value

    def number(self, path: str, unit: str | None, within: ET.Element | None = None) -> float | None:
        return number(self.text(path, within), unit, self.where(path))

    def integer(self, path: str, unit: str | None = None, within: ET.Element | None = None) -> int | None:
        return integer(self.text(path, within), unit, self.where(path))

    def yes_no(self, path: str) -> bool | None:
        return yes_no(self.text(path), self.where(path))

    def where(self, path: str) -> str:
        return f"gpu {self.index} <{path}>"


def _find(element: ET.Element, path: str) -> ET.Element | None:
    """`element.find(path)` one tag at a time: a path with a slash goes through ElementPath's Python
    code, four times slower, and a fleet's XML holds thousands of GPUs."""
    for tag in path.split("/"):
        found = element.find(tag)
        if found is None:
            return None
        element = found
    return element


def parse_xml(text: str, host: str) -> list[GPU]:
    """`nvidia-smi -q -x`: one GPU per <gpu> element, indexed in document order (nvidia-smi's order),
    and one per GPU nvidia-smi could not open (its line sits outside the XML document)."""
    text, unopened = _without_unopened_lines(text)
    root = _parsed(text.lstrip())
    if root.tag != "nvidia_smi_log":
        raise ParseError(f"not nvidia-smi -q -x output: the root element is <{root.tag}>, not <nvidia_smi_log>")
    driver_version = _known_text(root, "driver_version")
    cuda_version = _known_text(root, "cuda_version")
    indexes = _free_indexes(unopened)
    gpus = [
        _xml_gpu(_XmlGpu(element, next(indexes)), host, driver_version, cuda_version) for element in root.findall("gpu")
    ]
    return gpus + _unopened_gpus(unopened, host, {g.index for g in gpus}, driver_version)


def _without_unopened_lines(text: str) -> tuple[str, list[UnopenedGpu]]:
    """The output without nvidia-smi's "Unable to determine the device handle" lines, and those GPUs."""
    if NO_DEVICE_HANDLE not in text:  # nearly always: no per-line regex over a node's whole XML
        return text, []
    lines = text.splitlines()
    unopened = [found for line in lines if (found := unopened_gpu(line)) is not None]
    return "\n".join(line for line in lines if unopened_gpu(line) is None), unopened


# The children of <gpu> that _xml_gpu reads. Every other child is cut from the text before the parse
# (_without_unread): most of a GPU's elements are clock tables, encoder statistics, fabric state and
# the like, and building them cost half of a fleet's XML parse.
GPU_CHILDREN_READ = (
    "clocks", "clocks_event_reasons", "clocks_throttle_reasons", "ecc_errors", "fb_memory_usage", "gpu_power_readings",
    "max_clocks", "mig_mode", "pci", "persistence_mode", "power_readings", "processes", "product_name",
    "remapped_rows", "retired_pages", "temperature", "utilization", "uuid",
)  # fmt: skip
_READ_TAG = rf"(?:{'|'.join(GPU_CHILDREN_READ)})[\s/>]"
# nvidia-smi writes each child of <gpu> on a line of its own indented by two tabs, and what a child
# holds below it, indented deeper. A run of unread children: from a line opening one, every line up to
# the next that opens or closes a read child, or that is indented less (</gpu>, the next <gpu>).
_UNREAD_CHILDREN = re.compile(rf"\n\t\t<(?![/!?]|{_READ_TAG})[^\n]*(?:\n(?!\t\t</?{_READ_TAG}|\t?<)[^\n]*)*")
_SUPPORTED_CLOCKS = ("<supported_clocks>", "</supported_clocks>")


def _parsed(text: str) -> ET.Element:
    """The document's root, parsed without the children of <gpu> that nothing here reads. A document
    that does not parse so is parsed whole: a layout other than nvidia-smi's may have been cut where
    no element ends, and a damaged document's error then names its own line and column."""
    try:
        return ET.fromstring(_without_unread(text))
    except ET.ParseError:
        pass
    try:
        return ET.fromstring(text)
    except ET.ParseError as exc:
        raise ParseError(f"not valid XML: {exc}") from None


def _without_unread(text: str) -> str:
    """The XML without the unread children of each <gpu> (GPU_CHILDREN_READ). A truncated document
    stays truncated: no cut closes an element. What is cut is not checked: damage inside an unread
    child alone does not refuse the document. The <supported_clocks> tables, every clock pair a GPU
    supports and over half of its bytes, go first, with str.find: the run's regex is slower per line."""
    opening, closing = _SUPPORTED_CLOCKS
    pieces: list[str] = []
    start = 0
    while (cut_at := text.find(opening, start)) != -1 and (end := text.find(closing, cut_at)) != -1:
        pieces.append(text[start:cut_at])
        start = end + len(closing)
    if pieces:
        text = "".join(pieces) + text[start:]
    return _UNREAD_CHILDREN.sub("", text)


def _free_indexes(unopened: list[UnopenedGpu]) -> Iterator[int]:
    """The indexes, in order, of the GPUs nvidia-smi printed: all but those its error lines name."""
    named = {u.index for u in unopened if u.index is not None}
    return (index for index in count() if index not in named)


def _unopened_gpus(unopened: list[UnopenedGpu], host: str, taken: set[int], driver_version: str | None) -> list[GPU]:
    """GPUs nvidia-smi could not open. The index is the one the line names; an older driver's line names
    only the PCI address, and then the GPU takes the lowest index no other GPU of the output has."""
    gpus = []
    taken = set(taken) | {u.index for u in unopened if u.index is not None}
    for found in unopened:
        index = found.index
        if index is None:
            index = min(set(range(len(taken) + 1)) - taken)
            taken.add(index)
        gpus.append(
            GPU(
                host=host,
                index=index,
                pci_bus_id=found.pci_bus_id,
                driver_version=driver_version,
                open_error=found.error,
            )
        )
    return gpus


def _known_text(element: ET.Element, path: str) -> str | None:
    found = element.find(path)
    value = (found.text or "").strip() if found is not None else ""
    return None if is_unknown(value) else value


def _xml_gpu(gpu: _XmlGpu, host: str, driver_version: str | None, cuda_version: str | None) -> GPU:
    power = gpu.element.find("gpu_power_readings")
    if power is None:
        power = gpu.element.find("power_readings")
    return GPU(
        host=host,
        index=gpu.index,
        uuid=gpu.text("uuid"),
        name=gpu.text("product_name"),
        pci_bus_id=gpu.text("pci/pci_bus_id") or gpu.element.get("id"),
        driver_version=driver_version,
        cuda_version=cuda_version,
        memory_used_mib=gpu.number("fb_memory_usage/used", "MiB"),
        memory_total_mib=gpu.number("fb_memory_usage/total", "MiB"),
        utilization_gpu_pct=gpu.number("utilization/gpu_util", "%"),
        temperature_c=gpu.number("temperature/gpu_temp", "C"),
        # 580 reports the 1 s average and the instant draw; older drivers one power_draw
        power_draw_w=_first_power(gpu, power, ("average_power_draw", "power_draw")),
        power_limit_w=_first_power(gpu, power, ("current_power_limit", "enforced_power_limit", "power_limit")),
        clock_sm_mhz=gpu.number("clocks/sm_clock", "MHz"),
        clock_sm_max_mhz=gpu.number("max_clocks/sm_clock", "MHz"),
        clocks_event_reasons=_xml_active_reasons(gpu),
        ecc_uncorrected_volatile=_xml_uncorrectable(gpu, "volatile"),
        ecc_uncorrected_aggregate=_xml_uncorrectable(gpu, "aggregate"),
        retired_pages_pending=gpu.yes_no("retired_pages/pending_retirement"),
        remapped_rows_pending=gpu.yes_no("remapped_rows/remapped_row_pending"),
        remapped_rows_failure=gpu.yes_no("remapped_rows/remapped_row_failure"),
        pcie_gen_current=gpu.integer("pci/pci_gpu_link_info/pcie_gen/current_link_gen"),
        pcie_gen_max=gpu.integer("pci/pci_gpu_link_info/pcie_gen/max_link_gen"),
        pcie_width_current=gpu.integer("pci/pci_gpu_link_info/link_widths/current_link_width", "x"),
        pcie_width_max=gpu.integer("pci/pci_gpu_link_info/link_widths/max_link_width", "x"),
        mig_mode=gpu.text("mig_mode/current_mig"),
        persistence_mode=enabled(gpu.text("persistence_mode"), gpu.where("persistence_mode")),
        processes=_xml_processes(gpu),
    )


def _first_power(gpu: _XmlGpu, readings: ET.Element | None, names: tuple[str, ...]) -> float | None:
    if readings is None:
        return None
    for name in names:
        value = gpu.number(name, "W", within=readings)
        if value is not None:
            return value
    return None


def _xml_active_reasons(gpu: _XmlGpu) -> list[str]:
    for group, prefix in _REASON_GROUPS:
        element = gpu.element.find(group)
        if element is None:
            continue
        active = []
        for reason in element:
            state = (reason.text or "").strip()
            if state == "Active" and reason.tag.startswith(prefix):
                active.append(reason.tag[len(prefix) :])
            elif state not in ("Active", "Not Active") and not is_unknown(state):
                raise ParseError(f"{gpu.where(group + '/' + reason.tag)}: {state!r} is neither Active nor Not Active")
        return in_reason_order(active)
    return []


def _xml_uncorrectable(gpu: _XmlGpu, scope: str) -> int | None:
    counters = _find(gpu.element, f"ecc_errors/{scope}")
    if counters is None:
        return None
    if counters.find("double_bit") is not None:
        return gpu.integer("double_bit/total", within=counters)
    values = [gpu.integer(name, within=counters) for name in _UNCORRECTABLE_COUNTERS]
    known = [value for value in values if value is not None]
    # Counters the GPU does not have are N/A; the sum of those it has is its uncorrectable total.
    return sum(known) if known else None


def _xml_processes(gpu: _XmlGpu) -> list[GPUProcess]:
    processes = []
    listed = gpu.element.find("processes")
    for info in listed.findall("process_info") if listed is not None else []:
        pid = gpu.integer("pid", within=info)
        if pid is None:  # a process nvidia-smi cannot see from inside this PID namespace
            continue
        processes.append(
            GPUProcess(
                pid=pid,
                name=gpu.text("process_name", within=info),
                used_memory_mib=gpu.number("used_memory", "MiB", within=info),
            )
        )
    return processes


# ----------------------------------------------------------------------------------------- CSV

# The columns of the bundle's gpu/<host>.csv (docs/bundle-format.md); a headerless file is read as these.
BUNDLE_CSV_COLUMNS = (
    "index",
    "uuid",
    "name",
    "memory.used",
    "memory.total",
    "utilization.gpu",
    "temperature.gpu",
)

_HEADER_CELL = re.compile(r"^[A-Za-z_][\w.]*(?: \[[^\]]+\])?$")
_UNIT_SUFFIX = re.compile(r"\s*\[[^\]]+\]$")
_REASON_COLUMN = re.compile(r"^clocks_(?:event|throttle)_reasons\.(\w+)$")


def _text(value: str, what: str) -> str | None:
    return None if is_unknown(value) else value.strip()


def _unit(unit: str | None, whole: bool = False) -> Callable[[str, str], Any]:
    convert = integer if whole else number
    return lambda value, what: convert(value, unit, what)


def _mig_mode(value: str, what: str) -> str | None:
    mode = _text(value, what)
    if mode is not None and mode not in ("Enabled", "Disabled"):
        raise ParseError(f"{what}: {mode!r} is neither Enabled nor Disabled")
    return mode


def _reasons_mask(value: str, what: str) -> list[str] | None:
    mask = hex_mask(value, what)
    return None if mask is None else clocks_event_reason_names(mask)


# GPU attribute -> the --query-gpu names that give it, best first, and how to read the value.
_CSV_FIELDS: tuple[tuple[str, tuple[str, ...], Callable[[str, str], Any]], ...] = (
    ("index", ("index",), _unit(None, whole=True)),
    ("uuid", ("uuid", "gpu_uuid"), _text),
    ("name", ("name", "gpu_name"), _text),
    ("pci_bus_id", ("pci.bus_id", "gpu_bus_id"), _text),
    ("driver_version", ("driver_version",), _text),
    ("memory_used_mib", ("memory.used",), _unit("MiB")),
    ("memory_total_mib", ("memory.total",), _unit("MiB")),
    ("utilization_gpu_pct", ("utilization.gpu",), _unit("%")),
    ("temperature_c", ("temperature.gpu",), _unit(None)),
    ("power_draw_w", ("power.draw.average", "gpu.power.draw.average", "power.draw"), _unit("W")),
    (
        "power_limit_w",
        ("enforced.power.limit", "gpu.power.current_limit", "power.limit", "gpu.power.requested_limit"),
        _unit("W"),
    ),
    ("clock_sm_mhz", ("clocks.current.sm", "clocks.sm"), _unit("MHz")),
    ("clock_sm_max_mhz", ("clocks.max.sm",), _unit("MHz")),
    ("clocks_event_reasons", ("clocks_event_reasons.active", "clocks_throttle_reasons.active"), _reasons_mask),
    ("pcie_gen_current", ("pcie.link.gen.current",), _unit(None, whole=True)),
    ("pcie_gen_max", ("pcie.link.gen.max",), _unit(None, whole=True)),
    ("pcie_width_current", ("pcie.link.width.current",), _unit(None, whole=True)),
    ("pcie_width_max", ("pcie.link.width.max",), _unit(None, whole=True)),
    ("ecc_uncorrected_volatile", ("ecc.errors.uncorrected.volatile.total",), _unit(None, whole=True)),
    ("ecc_uncorrected_aggregate", ("ecc.errors.uncorrected.aggregate.total",), _unit(None, whole=True)),
    ("retired_pages_pending", ("retired_pages.pending",), yes_no),
    ("remapped_rows_pending", ("remapped_rows.pending",), yes_no),
    ("remapped_rows_failure", ("remapped_rows.failure",), yes_no),
    ("mig_mode", ("mig.mode.current",), _mig_mode),
    ("persistence_mode", ("persistence_mode",), enabled),
)
_KNOWN_COLUMNS = frozenset(column for _, columns, _ in _CSV_FIELDS for column in columns)
# Columns of --query-compute-apps that --query-gpu does not have: such a file is not a GPU list.
_COMPUTE_APPS_COLUMNS = frozenset({"pid", "process_name", "used_gpu_memory", "used_memory"})


def parse_csv(text: str, host: str, columns: tuple[str, ...] | None = None) -> list[GPU]:
    """`nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]` with any column set.

    The header names the columns; without one (noheader) they are `columns`, or else the bundle's
    default query (BUNDLE_CSV_COLUMNS). Columns llmdiag has no field for are ignored.
    """
    text, unopened = _without_unopened_lines(text)
    try:
        rows = [
            row for row in csv.reader(io.StringIO(text), skipinitialspace=True) if any(cell.strip() for cell in row)
        ]
    except csv.Error as e:  # a field past csv's limit (an unclosed quote), a NUL byte
        raise ParseError(f"not nvidia-smi CSV: {e}") from None
    if not rows:
        return _unopened_gpus(unopened, host, set(), None)
    if _is_header(rows[0]):
        names = [_UNIT_SUFFIX.sub("", cell.strip()) for cell in rows[0]]
        if _COMPUTE_APPS_COLUMNS.intersection(names):
            raise ParseError("this is nvidia-smi --query-compute-apps output, not --query-gpu")
        rows = rows[1:]
    else:
        names = list(columns or BUNDLE_CSV_COLUMNS)
        if len(rows[0]) != len(names):
            raise ParseError(
                f"line 1 is not a --query-gpu header, and its {len(rows[0])} fields are not the"
                f" {len(names)} columns {','.join(names)}: {','.join(rows[0])[:80]!r}"
            )
    gpus = []
    indexes = _free_indexes(unopened)
    for position, row in enumerate(rows):
        if len(row) != len(names):
            raise ParseError(f"GPU row {position + 1}: {len(row)} fields, but there are {len(names)} columns")
        gpus.append(_csv_gpu(dict(zip(names, row, strict=True)), host, position, next(indexes)))
    return gpus + _unopened_gpus(unopened, host, {g.index for g in gpus}, None)


def _is_header(row: list[str]) -> bool:
    cells = [cell.strip() for cell in row]
    return all(_HEADER_CELL.match(cell) for cell in cells) and any(
        _UNIT_SUFFIX.sub("", cell) in _KNOWN_COLUMNS or _REASON_COLUMN.match(_UNIT_SUFFIX.sub("", cell))
        for cell in cells
    )


def _csv_gpu(cells: dict[str, str], host: str, position: int, index: int) -> GPU:
    """One row; `index` is the GPU's place in nvidia-smi's output, for a query without the index column."""
    values: dict[str, Any] = {}
    for attribute, columns, convert in _CSV_FIELDS:
        for column in columns:
            if column in cells:
                value = convert(cells[column], f"GPU row {position + 1} {column}")
                if value is not None:
                    values[attribute] = value
                    break
    if "clocks_event_reasons" not in values:
        values["clocks_event_reasons"] = _csv_reason_flags(cells, position)
    values.setdefault("index", index)
    return GPU(host=host, **values)


def _csv_reason_flags(cells: dict[str, str], position: int) -> list[str]:
    """Reasons from per-reason columns (clocks_event_reasons.sw_power_cap: Active | Not Active), without a bitmask."""
    active = []
    for column, value in cells.items():
        match = _REASON_COLUMN.match(column)
        if match is None or match.group(1) in ("active", "supported") or is_unknown(value):
            continue
        state = value.strip()
        if state not in ("Active", "Not Active"):
            raise ParseError(f"GPU row {position + 1} {column}: {state!r} is neither Active nor Not Active")
        if state == "Active":
            active.append(match.group(1))
    return in_reason_order(active)
