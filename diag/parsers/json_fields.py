"""Reading JSON documents field by field, with each wrong type reported as one ParseError line.

`Fields` wraps one JSON object and knows where it sits in the document, so an error reads like
"pod ml/vllm-0: spec.containers[0].ports[1].containerPort: expected an integer, found a string".
A missing field (or a JSON null) reads as None / empty; only a field of the wrong type is an error.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from typing import Any

from diag.core.errors import ParseError

_TYPE_NAMES: dict[type, str] = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    list: "a list",
    dict: "an object",
}


def load_json(text: str) -> Any:
    """Strict JSON: Python's NaN / Infinity extensions, numbers too large for a float and a key given
    twice in one object are refused (no tool whose output a bundle holds writes them; read anyway,
    they would decide rules, and which of two values counts is a guess)."""
    try:
        # a byte-order mark some editors and shells write
        return json.loads(
            text.removeprefix("\ufeff"), parse_constant=_not_json, parse_float=_finite, object_pairs_hook=_unique
        )
    except json.JSONDecodeError as e:
        raise ParseError(f"not valid JSON: {e}") from None
    except ValueError as e:  # the decoder's one other error: an integer longer than Python converts
        if "digits" not in str(e):
            raise
        raise ParseError(f"not valid JSON: an integer of more than {sys.get_int_max_str_digits():,} digits") from None
    except RecursionError:
        raise ParseError("not valid JSON: nested too deeply") from None


def _not_json(word: str) -> Any:
    raise ParseError(f"not valid JSON: {word} is not a JSON number")


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))  # type: ignore[func-returns-value]
        raise ParseError(f"not valid JSON: the key {twice[:60]!r} twice in one object")
    return found


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ParseError(f"not valid JSON: the number {text[:30]} is too large for a float")
    return value


def _place(where: str, path: str) -> str:
    return f"{where}: {path}" if where and path else where or path


def type_name(value: Any) -> str:
    return "null" if value is None else _TYPE_NAMES.get(type(value), type(value).__name__)


class Fields:
    """One JSON object, read with type checks. `where` names the document part (e.g. "pod ml/vllm-0")
    and `path` the object's place in it (e.g. "spec.containers[0]"); both go into error messages."""

    def __init__(self, data: Any, where: str, path: str = "") -> None:
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ParseError(f"{_place(where, path)}: expected an object, found {type_name(data)}")
        self.data: dict[str, Any] = data
        self.where = where
        self.path = path

    def __contains__(self, key: str) -> bool:
        return self.data.get(key) is not None

    def _path(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def place(self, key: str = "") -> str:
        """Where this object (or its field `key`) is, for an error message."""
        return _place(self.where, self._path(key) if key else self.path)

    def error(self, key: str, expected: str, value: Any) -> ParseError:
        return ParseError(f"{self.place(key)}: expected {expected}, found {type_name(value)}")

    def _typed(self, key: str, kinds: tuple[type, ...], expected: str) -> Any:
        value = self.data.get(key)
        if value is None or type(value) in kinds:  # the exact type: a bool passes only where asked for
            return value
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
            raise self.error(key, expected, value)
        return value

    def text(self, key: str) -> str | None:
        value = self.data.get(key)
        if value is None or type(value) is str:  # nearly every field: no second call (a fleet reads millions)
            return value
        return self._typed(key, (str,), "a string")

    def integer(self, key: str) -> int | None:
        value = self.data.get(key)
        if value is None or type(value) is int:
            return value
        return self._typed(key, (int,), "an integer")

    def number(self, key: str) -> float | None:
        value = self._typed(key, (int, float), "a number")
        return None if value is None else float(value)

    def flag(self, key: str) -> bool | None:
        return self._typed(key, (bool,), "a boolean")

    def child(self, key: str) -> Fields:
        value = self.data.get(key)
        if value is not None and not isinstance(value, dict):
            value = self._typed(key, (dict,), "an object")
        return Fields(value, self.where, self._path(key))

    def children(self, key: str) -> Sequence[Fields]:
        items = self._typed(key, (list,), "a list") or []
        path = self._path(key)
        return [Fields(item, self.where, f"{path}[{i}]") for i, item in enumerate(items)]

    def strings(self, key: str) -> list[str]:
        items = self._typed(key, (list,), "a list of strings") or []
        for i, item in enumerate(items):
            if not isinstance(item, str):
                raise self.error(f"{key}[{i}]", "a string", item)
        return list(items)

    def string_map(self, key: str) -> dict[str, str]:
        """A map of strings (labels, nodeSelector, resource amounts); numbers are kept as their text."""
        value = self._typed(key, (dict,), "an object") or {}
        if all(type(item) is str for item in value.values()):  # as the API writes them: no item to convert
            return dict(value)
        result: dict[str, str] = {}
        for name, item in value.items():
            if isinstance(item, bool) or not isinstance(item, (str, int, float)):
                raise self.error(f"{key}.{name}", "a string", item)
            result[name] = str(item)
        return result

    def raw_object(self, key: str) -> dict:
        """An object kept as the API gives it (affinity, ...)."""
        return dict(self._typed(key, (dict,), "an object") or {})

    def raw_objects(self, key: str) -> list[dict]:
        """A list of objects kept as the API gives them (tolerations, volumes, ...)."""
        items = self.data.get(key)
        if type(items) is list and all(isinstance(item, dict) for item in items):
            return list(items)
        return [item.data for item in self.children(key)]
