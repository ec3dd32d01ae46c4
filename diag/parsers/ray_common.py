"""What the Ray parsers share: typed reads of JSON answers, Ray's memory strings, resource names."""

from __future__ import annotations

import json
import re
from typing import Any

from diag.errors import ParseError

_QUANTITY = re.compile(r"^(?P<value>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?) ?(?P<unit>[KMGT]iB|B)?$")
_UNIT_BYTES = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
# "0B/16.17GiB memory", "1.0/2.0 GPU (1.0 used of 2.0 reserved in placement groups)", and Ray 1.x's
# "0.00/4.628 GiB memory" where the unit after the total is the unit of both numbers.
_USAGE = re.compile(r"^(?P<used>\S+)/(?P<total>\S+?(?: [KMGT]iB)?) (?P<name>\S+)(?: \(.*\))?$")
# A resource held in a placement group: <name>_group_<pg id> or <name>_group_<bundle index>_<pg id>.
_PG_RESOURCE = re.compile(r"^(?P<name>.+?)_group_(?:\d+_)?[0-9a-f]{28,}$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def load_json(text: str, expected: str) -> Any:
    """The decoded JSON of `text`; `expected` says what the file should hold, for the error line."""
    if not text.strip():
        raise ParseError(f"empty file, expected {expected}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ParseError(f"not valid JSON ({e.msg} at line {e.lineno} column {e.colno}), expected {expected}") from None


def kind_of(value: Any) -> str:
    """A JSON value's type in words, for error lines."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Fields:
    """One JSON object whose fields are read with their types checked: a wrong type is a ParseError.

    A missing field and a null both read as None (or as an empty map/list where the reader says so).
    `where` names the object in error lines, e.g. "actors[3]".
    """

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, dict):
            raise ParseError(f"{where}: expected an object, got {kind_of(data)}")
        self.data: dict[str, Any] = data
        self.where = where

    def _wrong(self, key: str, expected: str) -> ParseError:
        return ParseError(f"{self.where}.{key}: expected {expected}, got {kind_of(self.data[key])}")

    def has(self, key: str) -> bool:
        return key in self.data

    def text(self, key: str) -> str | None:
        value = self.data.get(key)
        if value is None or isinstance(value, str):
            return value
        raise self._wrong(key, "a string")

    def required_text(self, key: str) -> str:
        value = self.text(key)
        if not value:
            raise ParseError(f"{self.where}.{key} is missing")
        return value

    def number(self, key: str) -> float | None:
        value = self.data.get(key)
        if value is None:
            return None
        if is_number(value):
            return float(value)
        raise self._wrong(key, "a number")

    def integer(self, key: str) -> int | None:
        """An integer; protobuf's 64-bit integers come as JSON strings of digits, so those count too."""
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and value.isdigit():
            return int(value)
        raise self._wrong(key, "an integer")

    def required_integer(self, key: str) -> int:
        value = self.integer(key)
        if value is None:
            raise ParseError(f"{self.where}.{key} is missing")
        return value

    def flag(self, key: str) -> bool | None:
        value = self.data.get(key)
        if value is None or isinstance(value, bool):
            return value
        raise self._wrong(key, "true or false")

    def child(self, key: str) -> Fields | None:
        value = self.data.get(key)
        return None if value is None else Fields(value, f"{self.where}.{key}")

    def items(self, key: str) -> list[Any] | None:
        value = self.data.get(key)
        if value is None or isinstance(value, list):
            return value
        raise self._wrong(key, "a list")

    def children(self, key: str) -> list[Fields]:
        """A list of objects (empty when absent)."""
        return [Fields(item, f"{self.where}.{key}[{i}]") for i, item in enumerate(self.items(key) or [])]

    def numbers(self, key: str) -> dict[str, float]:
        """A map of numbers, e.g. resources (empty when absent)."""
        found: dict[str, float] = {}
        for name, value in self._map(key).items():
            if not is_number(value):
                raise ParseError(f"{self.where}.{key}.{name}: expected a number, got {kind_of(value)}")
            found[name] = float(value)
        return found

    def resources(self, key: str) -> dict[str, float]:
        """A map of resource amounts where memory may come humanised ("16.165 GiB", as `ray list` prints it)."""
        found: dict[str, float] = {}
        for name, value in self._map(key).items():
            amount = float(value) if is_number(value) else parse_quantity(value) if isinstance(value, str) else None
            if amount is None:
                raise ParseError(f"{self.where}.{key}.{name}: expected an amount, got {value!r}")
            found[name] = amount
        return found

    def strings(self, key: str) -> dict[str, str]:
        """A map of strings, e.g. labels (empty when absent)."""
        found = self._map(key)
        for name, value in found.items():
            if not isinstance(value, str):
                raise ParseError(f"{self.where}.{key}.{name}: expected a string, got {kind_of(value)}")
        return dict(found)

    def _map(self, key: str) -> dict[str, Any]:
        value = self.data.get(key)
        if value is None:
            return {}
        if isinstance(value, dict):
            return value
        raise self._wrong(key, "an object")


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
    return Fields(answer["data"], "data")


def parse_quantity(text: str) -> float | None:
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
    used, total = parse_quantity(used_text), parse_quantity(total_text)
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
