"""What the GPU parsers share: nvidia-smi's words for "unknown", numbers with units, clocks event reasons.

Standard library only: the local GPU collector (diag.collect.gpu) imports the reason table from here
and must run on a GPU host that has nothing but Python and nvidia-ml-py.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from diag.core.errors import ParseError

# What nvidia-smi prints where it has no value. In CSV every such answer is in brackets ("[N/A]",
# "[Not Supported]", "[Requested functionality has been deprecated]"); the XML prints the bare words.
_UNKNOWN_WORDS = frozenset(
    {
        "",
        "n/a",
        "not supported",
        "unknown error",
        "insufficient permissions",
        "requested functionality has been deprecated",
    }
)

_NUMBER_WITH_UNIT = re.compile(r"^([-+]?\d+(?:\.\d+)?)\s*([A-Za-z%]*)$")

# nvmlClocksEventReason* bit values (nvidia-ml-py 13.615.71, pynvml.py; the same bits as the older
# nvmlClocksThrottleReason* names). The short names are the suffixes of nvidia-smi's XML elements
# <clocks_event_reason_NAME> / <clocks_throttle_reason_NAME>, so both sources yield the same words.
# gpu_idle, applications_clocks_setting and display_clocks_setting are not throttling.
CLOCKS_EVENT_REASON_BITS: tuple[tuple[int, str], ...] = (
    (0x0001, "gpu_idle"),
    (0x0002, "applications_clocks_setting"),
    (0x0004, "sw_power_cap"),
    (0x0008, "hw_slowdown"),
    (0x0010, "sync_boost"),
    (0x0020, "sw_thermal_slowdown"),
    (0x0040, "hw_thermal_slowdown"),
    (0x0080, "hw_power_brake_slowdown"),
    (0x0100, "display_clocks_setting"),
    (0x0200, "board_limit"),  # nvmlClocksThrottleReasonBoardLimit
    (0x0400, "reliability"),  # nvmlClocksThrottleReasonReliability
)
_REASON_RANK = {name: rank for rank, (_, name) in enumerate(CLOCKS_EVENT_REASON_BITS)}
_KNOWN_REASON_BITS = sum(bit for bit, _ in CLOCKS_EVENT_REASON_BITS)


# A fleet's thousands of GPUs repeat the same few values ("N/A", "0", "81559 MiB"): each is read once.
_VALUES_KEPT = 1 << 12


@functools.lru_cache(maxsize=_VALUES_KEPT)
def is_unknown(text: str) -> bool:
    stripped = text.strip()
    return (stripped.startswith("[") and stripped.endswith("]")) or stripped.lower() in _UNKNOWN_WORDS


def number(text: str | None, unit: str | None, what: str) -> float | None:
    """`text` ("42367 MiB", "42367", "[N/A]") as a float, or None where nvidia-smi had no value.

    `unit` is the suffix the value may carry (MiB, %, W, MHz, C, x); a different suffix is an error.
    """
    if text is None:
        return None
    value = _number(text, unit)
    if value is _NOT_A_NUMBER:
        expected = f"a number in {unit}" if unit else "a number"
        raise ParseError(f"{what}: {text.strip()!r} is not {expected}")
    return value  # type: ignore[return-value]


_NOT_A_NUMBER = object()


@functools.lru_cache(maxsize=_VALUES_KEPT)
def _number(text: str, unit: str | None) -> float | None | object:
    if is_unknown(text):
        return None
    match = _NUMBER_WITH_UNIT.match(text.strip())
    if match is None or (match.group(2) and match.group(2) != unit):
        return _NOT_A_NUMBER
    return float(match.group(1))


def integer(text: str | None, unit: str | None, what: str) -> int | None:
    value = number(text, unit, what)
    if value is None:
        return None
    if not value.is_integer():
        raise ParseError(f"{what}: {value:g} is not a whole number")
    return int(value)


def yes_no(text: str | None, what: str) -> bool | None:
    """nvidia-smi's "Yes"/"No" (retired pages and remapped rows pending, remapping failure)."""
    if text is None or is_unknown(text):
        return None
    word = text.strip().lower()
    if word not in ("yes", "no"):
        raise ParseError(f"{what}: {text.strip()!r} is neither Yes nor No")
    return word == "yes"


def enabled(text: str | None, what: str) -> bool | None:
    """nvidia-smi's "Enabled"/"Disabled" (persistence mode): True, False, or None when unknown."""
    if text is None or is_unknown(text):
        return None
    word = text.strip()
    if word not in ("Enabled", "Disabled"):
        raise ParseError(f"{what}: {word!r} is neither Enabled nor Disabled")
    return word == "Enabled"


def clocks_event_reason_names(mask: int) -> list[str]:
    """The active reasons of an NVML clocks-event bitmask, in bit order; an undocumented bit by its hex value."""
    names = [name for bit, name in CLOCKS_EVENT_REASON_BITS if mask & bit]
    unknown = mask & ~_KNOWN_REASON_BITS
    names.extend(f"0x{1 << shift:x}" for shift in range(unknown.bit_length()) if unknown >> shift & 1)
    return names


def in_reason_order(names: list[str]) -> list[str]:
    """Reason names in bit order, so every source lists the same reasons the same way."""
    return sorted(names, key=lambda name: _REASON_RANK.get(name, len(_REASON_RANK)))


def hex_mask(text: str | None, what: str) -> int | None:
    """nvidia-smi's "0x0000000000000004" bitmask, or None."""
    if text is None or is_unknown(text):
        return None
    try:
        return int(text.strip(), 16)
    except ValueError:
        raise ParseError(f"{what}: {text.strip()!r} is not a hexadecimal bitmask") from None


# A PCI address as the kernel prints it in an Xid line ("0000:3b:00": domain:bus:device) or as
# nvidia-smi and NVML print it ("00000000:3B:00.0": 8-digit domain, upper case, with the function).
_PCI_ADDRESS = re.compile(r"^([0-9A-Fa-f]{1,8}):([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})(?:\.[0-7])?$")


def pci_address(text: str | None) -> str | None:
    """One spelling for every source: "0000:3b:00" (domain, bus, device in lower-case hex), or None.

    The function is left out: the kernel's Xid line does not print it, and a GPU is function 0.
    """
    match = _PCI_ADDRESS.match((text or "").strip())
    if match is None:
        return None
    domain, bus, device = (int(part, 16) for part in match.groups())
    return f"{domain:04x}:{bus:02x}:{device:02x}"


# nvidia-smi's line for a GPU it cannot open, in place of that GPU's output. Drivers before 5xx name
# the GPU by its PCI address ("Unable to determine the device handle for GPU 0000:05:00.0: GPU is
# lost.  Reboot the system to recover this GPU"), later ones by index and address ("... for GPU0:
# 0000:01:00.0: GPU is lost. Reboot ..."); "Unknown Error" is the other answer seen for such a GPU.
_ADDRESS = r"[0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+(?:\.[0-7])?"
NO_DEVICE_HANDLE = "Unable to determine the device handle for GPU"
_NO_DEVICE_HANDLE = re.compile(
    rf"{NO_DEVICE_HANDLE}\s*"
    rf"(?:(?P<address>{_ADDRESS}):\s*|(?P<index>\d+):\s*(?:(?P<indexed_address>{_ADDRESS}):\s*)?)(?P<error>.+?)\s*$"
)


@dataclass(frozen=True)
class UnopenedGpu:
    """A GPU nvidia-smi named but could not open: its index when the line gives one, its address, NVML's error."""

    index: int | None
    pci_bus_id: str | None
    error: str


def unopened_gpu(line: str) -> UnopenedGpu | None:
    """The GPU an "Unable to determine the device handle for GPU..." line is about, or None for any other line."""
    match = _NO_DEVICE_HANDLE.search(line)
    if match is None:
        return None
    index = match.group("index")
    error = match.group("error").split(".")[0].strip()  # "GPU is lost.  Reboot the system ..." -> "GPU is lost"
    address = match.group("indexed_address") or match.group("address")
    return UnopenedGpu(None if index is None else int(index), address, error)
