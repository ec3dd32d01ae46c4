"""`gpu/<host>.nvml.json`: llmdiag's own NVML snapshot (schema "llmdiag/nvml/v1", docs/nvml-snapshot.md).

Any value may be the string "error: <what NVML answered>" (e.g. "error: Not Supported"): the call
failed, so the value is unknown.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from diag.core.errors import ParseError
from diag.parsers.gpu_common import clocks_event_reason_names, in_reason_order
from diag.parsers.json_fields import Fields, load_json, type_name
from diag.snapshot.model import GPU, GPUProcess

SCHEMA = "llmdiag/nvml/v1"
_MIB = 1024 * 1024
_MIG_MODES = {0: "Disabled", 1: "Enabled"}  # NVML_DEVICE_MIG_DISABLE / NVML_DEVICE_MIG_ENABLE
_FEATURE_STATES = {0: False, 1: True}  # NVML_FEATURE_DISABLED / NVML_FEATURE_ENABLED


class _NvmlFields(Fields):
    """Fields that read NVML's refusals ("error: Not Supported") as unknown."""

    def _typed(self, key: str, kinds: tuple[type, ...], expected: str) -> Any:
        value = self.data.get(key)
        if isinstance(value, str) and value.startswith("error:"):
            return None
        return super()._typed(key, kinds, expected)

    def text(self, key: str) -> str | None:  # Fields.text reads a string without _typed
        value = super().text(key)
        return None if value is not None and value.startswith("error:") else value

    def child(self, key: str) -> _NvmlFields:
        return _NvmlFields(self._typed(key, (dict,), "an object"), self.where, self._path(key))

    def children(self, key: str) -> Sequence[_NvmlFields]:
        items = self._typed(key, (list,), "a list") or []
        return [_NvmlFields(item, self.where, f"{self._path(key)}[{i}]") for i, item in enumerate(items)]

    def integers(self, key: str, length: int | None = None) -> list[int] | None:
        values = self._typed(key, (list,), "a list")
        if values is None:
            return None
        expected = f"a list of {length} integers" if length is not None else "a list of integers"
        if (length is not None and len(values) != length) or any(
            isinstance(v, bool) or not isinstance(v, int) for v in values
        ):
            raise ParseError(f"{self.place(key)}: expected {expected}, found {json.dumps(values)[:60]}")
        return values


def parse_nvml_json(text: str, host: str) -> list[GPU]:
    document = load_json(text)
    if not isinstance(document, dict):
        raise ParseError(f"not an NVML snapshot: the document is {type_name(document)}, not an object")
    top = _NvmlFields(document, "")
    schema = top.text("schema")
    if schema is not None and schema != SCHEMA:
        raise ParseError(f"schema {schema!r} is not {SCHEMA!r}")
    if "gpus" not in top:
        raise ParseError('not an NVML snapshot: no "gpus" list')
    driver_version = top.text("driver")
    cuda_version = _cuda_version(top.integer("cuda"))
    gpus = [
        _gpu(gpu, position, host, driver_version, cuda_version) for position, gpu in enumerate(top.children("gpus"))
    ]
    machine = top.child("host")
    host_name, addresses = machine.text("name"), machine.strings("addresses")
    for gpu in gpus:
        gpu.host_name, gpu.host_addresses = host_name, list(addresses)
    return gpus


def _cuda_version(encoded: int | None) -> str | None:
    """nvmlSystemGetCudaDriverVersion's 1000 * major + 10 * minor, as nvidia-smi prints it ("13.0")."""
    if encoded is None:
        return None
    return f"{encoded // 1000}.{encoded % 1000 // 10}"


def _gpu(fields: _NvmlFields, position: int, host: str, driver_version: str | None, cuda_version: str | None) -> GPU:
    index = fields.integer("index")
    handle = fields.data.get("handle")
    if isinstance(handle, str) and handle.startswith("error:"):  # NVML could not open the GPU: nothing else was read
        error = handle.removeprefix("error:").strip() or "no reason given"
        return GPU(host=host, index=index if index is not None else position, open_error=error)
    memory = fields.child("memory")
    util = fields.child("util")
    remapped = fields.integers("remapped_rows", length=4)  # corr, unc, pending, failure
    mig = fields.integers("mig_mode", length=2)  # current, pending
    power_mw = fields.number("power_mw")
    power_limit_mw = fields.number("power_limit_mw")
    retired_pending = fields.integer("retired_pending")
    return GPU(
        host=host,
        index=index if index is not None else position,
        uuid=fields.text("uuid"),
        name=fields.text("name"),
        pci_bus_id=fields.text("pci_bus_id"),
        driver_version=driver_version,
        cuda_version=cuda_version,
        memory_used_mib=_mib(memory.number("used")),
        memory_total_mib=_mib(memory.number("total")),
        utilization_gpu_pct=util.number("gpu"),
        temperature_c=fields.number("temp"),
        power_draw_w=None if power_mw is None else power_mw / 1000,
        power_limit_w=None if power_limit_mw is None else power_limit_mw / 1000,
        clock_sm_mhz=fields.number("clock_sm"),
        clock_sm_max_mhz=fields.number("clock_sm_max"),
        clocks_event_reasons=_reasons(fields),
        ecc_uncorrected_volatile=fields.integer("ecc_uncorrected_volatile"),
        ecc_uncorrected_aggregate=fields.integer("ecc_uncorrected_aggregate"),
        retired_pages_pending=None if retired_pending is None else bool(retired_pending),
        remapped_rows_pending=None if remapped is None else bool(remapped[2]),
        remapped_rows_failure=None if remapped is None else bool(remapped[3]),
        pcie_gen_current=fields.integer("pcie_gen"),
        pcie_gen_max=fields.integer("pcie_gen_max"),
        pcie_width_current=fields.integer("pcie_width"),
        pcie_width_max=fields.integer("pcie_width_max"),
        mig_mode=_mig_mode(mig, fields),
        persistence_mode=_feature(fields, "persistence_mode"),
        processes=_processes(fields),
        xids=fields.integers("xids") or [],
    )


def _mib(value: float | None) -> float | None:
    return None if value is None else value / _MIB


def _reasons(fields: _NvmlFields) -> list[str]:
    mask = fields.integer("throttle_reasons")
    if mask is not None:
        return clocks_event_reason_names(mask)
    return in_reason_order(fields.strings("clocks_event_reasons"))


def _mig_mode(mig: list[int] | None, fields: _NvmlFields) -> str | None:
    if mig is None:
        return None
    if mig[0] not in _MIG_MODES:
        raise ParseError(f"{fields.place('mig_mode')}: {mig[0]} is not an NVML MIG mode (0 or 1)")
    return _MIG_MODES[mig[0]]


def _feature(fields: _NvmlFields, key: str) -> bool | None:
    state = fields.integer(key)
    if state is None:
        return None
    if state not in _FEATURE_STATES:
        raise ParseError(f"{fields.place(key)}: {state} is not an NVML feature state (0 or 1)")
    return _FEATURE_STATES[state]


def _processes(fields: _NvmlFields) -> list[GPUProcess]:
    processes = []
    for proc in fields.children("procs"):
        pid = proc.integer("pid")
        if pid is None:
            raise ParseError(f"{proc.place()}: no pid")
        processes.append(GPUProcess(pid=pid, name=proc.text("name"), used_memory_mib=_mib(proc.number("used"))))
    return processes
