"""`gpu/<host>.nvml.json`: llmdiag's own NVML snapshot (schema "llmdiag/nvml/v1", docs/nvml-snapshot.md).

Any value may be the string "error: <what NVML answered>" (e.g. "error: Not Supported"): the call
failed, so the value is unknown.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from diag.errors import ParseError
from diag.model import GPU, GPUProcess
from diag.parsers.gpu_common import clocks_event_reason_names, in_reason_order

SCHEMA = "llmdiag/nvml/v1"
_MIB = 1024 * 1024
_MIG_MODES = {0: "Disabled", 1: "Enabled"}  # NVML_DEVICE_MIG_DISABLE / NVML_DEVICE_MIG_ENABLE


class _Fields:
    """One JSON object, read with error messages that say where the bad value is."""

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, dict):
            raise ParseError(f"{where}: expected an object, got {_kind(data)}")
        self.data = data
        self.where = where

    def _value(self, key: str, fits: Callable[[Any], bool], expected: str) -> Any:
        value = self.data.get(key)
        if value is None or _is_nvml_error(value):
            return None
        if not fits(value):
            raise ParseError(f"{self.where}.{key}: expected {expected}, got {_kind(value)}")
        return value

    def text(self, key: str) -> str | None:
        return self._value(key, lambda v: isinstance(v, str), "a string")

    def integer(self, key: str) -> int | None:
        return self._value(key, _is_integer, "an integer")

    def number(self, key: str) -> float | None:
        value = self._value(key, lambda v: _is_integer(v) or isinstance(v, float), "a number")
        return None if value is None else float(value)

    def items(self, key: str) -> list | None:
        return self._value(key, lambda v: isinstance(v, list), "a list")

    def child(self, key: str) -> _Fields | None:
        value = self._value(key, lambda v: isinstance(v, dict), "an object")
        return None if value is None else _Fields(value, f"{self.where}.{key}")

    def integers(self, key: str, length: int | None = None) -> list[int] | None:
        values = self.items(key)
        if values is None:
            return None
        if not all(_is_integer(v) for v in values) or (length is not None and len(values) != length):
            count = f"{length} " if length is not None else ""
            raise ParseError(f"{self.where}.{key}: expected a list of {count}integers, got {json.dumps(values)[:60]}")
        return values


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_nvml_error(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("error:")


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number"
    return {dict: "an object", list: "a list", str: "a string"}.get(type(value), type(value).__name__)


def parse_nvml_json(text: str, host: str) -> list[GPU]:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError(f"not valid JSON: {exc}") from None
    top = _Fields(document, "snapshot")
    schema = top.text("schema")
    if schema is not None and schema != SCHEMA:
        raise ParseError(f"schema {schema!r} is not {SCHEMA!r}")
    gpus = top.items("gpus")
    if gpus is None:
        raise ParseError('not an NVML snapshot: no "gpus" list')
    driver_version = top.text("driver")
    cuda_version = _cuda_version(top.integer("cuda"))
    return [
        _gpu(_Fields(entry, f"gpus[{position}]"), position, host, driver_version, cuda_version)
        for position, entry in enumerate(gpus)
    ]


def _cuda_version(encoded: int | None) -> str | None:
    """nvmlSystemGetCudaDriverVersion's 1000 * major + 10 * minor, as nvidia-smi prints it ("13.0")."""
    if encoded is None:
        return None
    return f"{encoded // 1000}.{encoded % 1000 // 10}"


def _gpu(fields: _Fields, position: int, host: str, driver_version: str | None, cuda_version: str | None) -> GPU:
    index = fields.integer("index")
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
        memory_used_mib=_mib(memory.number("used")) if memory else None,
        memory_total_mib=_mib(memory.number("total")) if memory else None,
        utilization_gpu_pct=util.number("gpu") if util else None,
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
        mig_mode=_mig_mode(mig, fields.where),
        processes=_processes(fields),
        xids=fields.integers("xids") or [],
    )


def _mib(value: float | None) -> float | None:
    return None if value is None else value / _MIB


def _reasons(fields: _Fields) -> list[str]:
    mask = fields.integer("throttle_reasons")
    if mask is not None:
        return clocks_event_reason_names(mask)
    names = fields.items("clocks_event_reasons") or []
    if not all(isinstance(name, str) for name in names):
        raise ParseError(f"{fields.where}.clocks_event_reasons: expected a list of names")
    return in_reason_order(names)


def _mig_mode(mig: list[int] | None, where: str) -> str | None:
    if mig is None:
        return None
    if mig[0] not in _MIG_MODES:
        raise ParseError(f"{where}.mig_mode: {mig[0]} is not an NVML MIG mode (0 or 1)")
    return _MIG_MODES[mig[0]]


def _processes(fields: _Fields) -> list[GPUProcess]:
    entries = fields.items("procs") or []
    processes = []
    for position, entry in enumerate(entries):
        proc = _Fields(entry, f"{fields.where}.procs[{position}]")
        pid = proc.integer("pid")
        if pid is None:
            raise ParseError(f"{proc.where}: no pid")
        processes.append(GPUProcess(pid=pid, name=proc.text("name"), used_memory_mib=_mib(proc.number("used"))))
    return processes
