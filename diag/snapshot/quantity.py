"""Kubernetes resource quantities ("500m", "16Gi", "2", "1e3") and GPU counts read from them."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping

from diag.core.errors import ParseError

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"  # nvidia.com/mig-1g.10gb, ... (device plugin, mixed MIG strategy)

# k8s.io/apimachinery resource.Quantity: <signed number><binary SI | decimal SI | decimal exponent>
_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)|[eE](?P<exponent>[+-]?\d+))?$"
)
_MULTIPLIERS: dict[str, float] = {
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
}


def parse_quantity(value: str | int | float) -> float:
    """A quantity as a plain number: "500m" -> 0.5, "16Gi" -> 17179869184.0, "1e3" -> 1000.0."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ParseError(f"not a resource quantity: {value!r}")
    if not isinstance(value, str):
        return _finite(float(value), value)
    return _parsed(value)


@functools.lru_cache(maxsize=4096)
def _parsed(value: str) -> float:
    """A quantity's text as a number, once per distinct text: a fleet's pods repeat a few dozen amounts
    (a refused text is not kept: its error is raised again)."""
    m = _QUANTITY.match(value.strip())
    if m is None:
        raise ParseError(f"not a resource quantity: {value!r}")
    number = float(m["number"])
    try:
        if m["suffix"]:
            return _finite(number * _MULTIPLIERS[m["suffix"]], value)
        if m["exponent"]:
            return _finite(number * 10.0 ** int(m["exponent"]), value)
    except OverflowError:
        raise ParseError(f"not a resource quantity: {value[:40]!r} is out of range") from None
    return _finite(number, value)


def _finite(number: float, value: str | int | float) -> float:
    """Kubernetes quantities are finite (its own parser refuses larger than 2^63 milli-units)."""
    if not math.isfinite(number):
        raise ParseError(f"not a resource quantity: {str(value)[:40]!r} is out of range")
    return number


def whole_count(value: str | int | float, resource: str) -> int:
    """An extended resource's amount; Kubernetes only admits whole numbers for those."""
    amount = parse_quantity(value)
    if amount < 0 or amount != int(amount):
        raise ParseError(f"{resource}: {value!r} is not a whole number of devices")
    return int(amount)


def gpu_count(limits: Mapping[str, str], requests: Mapping[str, str] | None = None) -> int:
    """Whole GPUs (nvidia.com/gpu) asked for. Extended resources must have requests equal to limits,
    so the limit is read and the request only when no limit is given; 0 when neither names GPUs."""
    for resources in (limits, requests or {}):
        if GPU_RESOURCE in resources:
            return whole_count(resources[GPU_RESOURCE], GPU_RESOURCE)
    return 0


def mig_counts(limits: Mapping[str, str], requests: Mapping[str, str] | None = None) -> dict[str, int]:
    """MIG devices asked for, per profile resource (e.g. {"nvidia.com/mig-1g.10gb": 2})."""
    counts = {name: whole_count(value, name) for name, value in limits.items() if name.startswith(MIG_RESOURCE_PREFIX)}
    for name, value in (requests or {}).items():
        if name.startswith(MIG_RESOURCE_PREFIX) and name not in counts:
            counts[name] = whole_count(value, name)
    return counts


def mig_total(limits: Mapping[str, str], requests: Mapping[str, str] | None = None) -> int:
    """All MIG devices asked for, over every nvidia.com/mig-* profile."""
    return sum(mig_counts(limits, requests).values())
