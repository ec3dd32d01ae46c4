"""What the Ray parsers share: Ray's JSON quirks on top of `json_fields`, its memory strings, resource names."""

from __future__ import annotations

import re
from typing import Any

from diag.core.errors import ParseError
from diag.parsers.json_fields import Fields, load_json

_QUANTITY = re.compile(r"^(?P<value>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?) ?(?P<unit>[KMGT]iB|B)?$")
_UNIT_BYTES = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
# "0B/16.17GiB memory", "1.0/2.0 GPU (1.0 used of 2.0 reserved in placement groups)", and Ray 1.x's
# "0.00/4.628 GiB memory" where the unit after the total is the unit of both numbers.
_USAGE = re.compile(r"^(?P<used>\S+)/(?P<total>\S+?(?: [KMGT]iB)?) (?P<name>\S+)(?: \(.*\))?$")
# A resource held in a placement group: <name>_group_<pg id> or <name>_group_<bundle index>_<pg id>.
_PG_RESOURCE = re.compile(r"^(?P<name>.+?)_group_(?:\d+_)?[0-9a-f]{28,}$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def load_ray_json(text: str, expected: str) -> Any:
    """The decoded JSON of `text`; `expected` says what the file should hold when it is empty."""
    if not text.strip():
        raise ParseError(f"empty file, expected {expected}")
    return load_json(text)


def dashboard_data(answer: Any, endpoint: str) -> Fields:
    """The `data` of a dashboard answer {"result": true, "msg": ..., "data": {...}}.

    An answer with "result": false is the dashboard reporting its own failure: a ParseError with its msg.
    """
    if not isinstance(answer, dict) or not isinstance(answer.get("result"), bool) or "data" not in answer:
        raise ParseError(f"not the Ray dashboard's {endpoint} answer (no result/data envelope)")
    if answer["result"] is False:
        message = answer.get("msg")
        detail = one_line(message)[:200] if isinstance(message, str) and message.strip() else "no message"
        raise ParseError(f"the Ray dashboard answered {endpoint} with an error: {detail}")
    return Fields(answer["data"], "", "data")


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def optional_child(fields: Fields, key: str) -> Fields | None:
    """The object at `key`, or None when it is absent or null (unknown, unlike an empty object)."""
    return fields.child(key) if key in fields else None


def raw_list(fields: Fields, key: str) -> list[Any]:
    """A list whose items the caller checks itself (rows of pairs, ...); empty when absent."""
    value = fields.data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise fields.error(key, "a list", value)
    return value


def required_text(fields: Fields, key: str) -> str:
    value = fields.text(key)
    if not value:
        raise ParseError(f"{fields.place(key)} is missing")
    return value


def proto_integer(fields: Fields, key: str) -> int | None:
    """An integer; protobuf's 64-bit integers arrive as JSON strings of digits ("num_restarts": "0")."""
    value = fields.data.get(key)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if isinstance(value, str):
        raise fields.error(key, "an integer", value)
    return fields.integer(key)


def required_proto_integer(fields: Fields, key: str) -> int:
    value = proto_integer(fields, key)
    if value is None:
        raise ParseError(f"{fields.place(key)} is missing")
    return value


def number_map(fields: Fields, key: str) -> dict[str, float]:
    """A map of numbers, e.g. resources (empty when absent)."""
    found: dict[str, float] = {}
    numbers = optional_child(fields, key)
    if numbers is None:
        return found
    for name, value in numbers.data.items():
        if not is_number(value):
            raise numbers.error(name, "a number", value)
        found[name] = float(value)
    return found


def resource_map(fields: Fields, key: str) -> dict[str, float]:
    """Resource amounts where memory may come humanised ("16.165 GiB", as `ray list` prints it) or as bytes."""
    found: dict[str, float] = {}
    amounts = optional_child(fields, key)
    if amounts is None:
        return found
    for name, value in amounts.data.items():
        amount = float(value) if is_number(value) else parse_ray_memory(value) if isinstance(value, str) else None
        if amount is None:
            raise ParseError(f"{amounts.place(name)}: expected an amount, found {value!r}")
        found[name] = amount
    return found


def parse_ray_memory(text: str) -> float | None:
    """Ray's memory text ("16.17GiB", "16.165 GiB", "0B") as bytes, a bare number as itself; None if neither."""
    m = _QUANTITY.match(text.strip())
    if m is None:
        return None
    return float(m["value"]) * _UNIT_BYTES[m["unit"] or "B"]


def parse_usage_line(line: str) -> tuple[str, float, float] | None:
    """`ray status`'s "used/total resource" line as (resource, used, total), memory in bytes; None if not one."""
    m = _USAGE.match(line.strip())
    if m is None:
        return None
    total_text = m["total"]
    used_text = m["used"]
    used_match = _QUANTITY.match(used_text)
    if " " in total_text and used_match is not None and used_match["unit"] is None:
        used_text += total_text[total_text.index(" ") :]  # Ray 1.x: "0.00/4.628 GiB"
    used, total = parse_ray_memory(used_text), parse_ray_memory(total_text)
    if used is None or total is None:
        return None
    return m["name"], used, total


def original_resources(resources: dict[str, float]) -> dict[str, float]:
    """Resources with placement-group names ("GPU_group_0_<pg id>") read as the plain resource ("GPU").

    Ray lists a reservation both per bundle and for the whole group, with the same amount, so the
    two forms are not added up.
    """
    plain: dict[str, float] = {}
    for name, amount in resources.items():
        base = original_resource_name(name)
        plain[base] = max(plain.get(base, 0.0), amount)
    return plain


def original_resource_name(name: str) -> str:
    m = _PG_RESOURCE.match(name)
    return m["name"] if m else name


def one_line(text: str) -> str:
    """Text (maybe coloured, maybe several lines) as one line."""
    return " ".join(_ANSI.sub("", text).split())


def last_line(text: str) -> str:
    """The last non-empty line, e.g. the exception line that ends a traceback."""
    lines = [line.strip() for line in _ANSI.sub("", text).splitlines() if line.strip()]
    return lines[-1] if lines else ""
