"""Ways a bundle file gets damaged, each a pure function of the file's bytes and a seed.

The same functions serve the hypothesis suites (which draw the file, the kind of damage and the
seed) and the long runs. Every mutation returns new bytes; the input is never changed.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

Mutation = Callable[[bytes, random.Random], bytes]

_SWAPS: tuple[Any, ...] = (None, "", "x", 0, -1, 1.5, -1e308, 1e308, 2**70, True, [], {}, [None], {"": None})
_NON_FINITE = (b"+Inf", b"-Inf", b"NaN", b"-1e308", b"1e309", b"-0", b"-1")
_JSON_NON_FINITE = ("Infinity", "-Infinity", "NaN", "-1e308", "1e400", "-1")
DEEP = 100_000


def truncate(data: bytes, rnd: random.Random) -> bytes:
    return data[: rnd.randrange(len(data))] if data else data


def _json(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return _NOT_JSON


_NOT_JSON = object()


def _nodes(value: Any, path: tuple = ()) -> list[tuple]:
    """Every (container path) in a JSON value, the root first."""
    found = [path]
    if isinstance(value, dict):
        for key, child in value.items():
            found += _nodes(child, (*path, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            found += _nodes(child, (*path, i))
    return found


def _replace(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[head] = _replace(value[head], rest, new)
    return copy


def type_swap(data: bytes, rnd: random.Random) -> bytes:
    """One JSON value (any depth) replaced by a value of another type; not JSON: a byte flipped."""
    value = _json(data)
    if value is _NOT_JSON:
        return flip_byte(data, rnd)
    path = rnd.choice(_nodes(value))
    return json.dumps(_replace(value, path, rnd.choice(_SWAPS))).encode()


def non_finite(data: bytes, rnd: random.Random) -> bytes:
    """A number replaced by +Inf/-Inf/NaN/-1e308 (JSON: Python's Infinity and NaN literals)."""
    value = _json(data)
    if value is not _NOT_JSON:
        numbers = [
            p
            for p in _nodes(value)
            if p and isinstance(_at(value, p), (int, float)) and not isinstance(_at(value, p), bool)
        ]
        if not numbers:
            return data
        text = json.dumps(_replace(value, rnd.choice(numbers), "\0MARK\0"))
        return text.replace('"\\u0000MARK\\u0000"', rnd.choice(_JSON_NON_FINITE)).encode()
    lines = data.split(b"\n")
    candidates = [i for i, line in enumerate(lines) if line and not line.startswith(b"#") and b" " in line]
    if not candidates:
        return data
    i = rnd.choice(candidates)
    head, _, _ = lines[i].rpartition(b" ")
    value_at = lines[i].rsplit(b" ", 1)
    lines[i] = (value_at[0] if len(value_at) == 2 else head) + b" " + rnd.choice(_NON_FINITE)
    return b"\n".join(lines)


def _at(value: Any, path: tuple) -> Any:
    for key in path:
        value = value[key]
    return value


def line_endings(data: bytes, rnd: random.Random) -> bytes:
    """Every newline made CRLF, or bare CR."""
    return data.replace(b"\n", rnd.choice((b"\r\n", b"\r")))


def deep_nesting(data: bytes, rnd: random.Random) -> bytes:
    """A value wrapped in DEEP lists or objects, or the whole file so, or DEEP open brackets."""
    shape = rnd.choice(("[", '{"a":'))
    close = "]" if shape == "[" else "}"
    value = _json(data)
    if value is _NOT_JSON or rnd.random() < 0.3:
        return shape.encode() * DEEP + data
    path = rnd.choice(_nodes(value))
    text = json.dumps(_replace(value, path, "\0MARK\0"))
    return text.replace('"\\u0000MARK\\u0000"', shape * DEEP + "1" + close * DEEP).encode()


def duplicate_key(data: bytes, rnd: random.Random) -> bytes:
    """An object's first key given again with another type of value (the later one wins in Python)."""
    value = _json(data)
    if value is _NOT_JSON:
        lines = data.split(b"\n")
        i = rnd.randrange(len(lines))
        return b"\n".join(lines[: i + 1] + lines[i:])  # a line twice
    objects = [p for p in _nodes(value) if isinstance(_at(value, p), dict) and _at(value, p)]
    if not objects:
        return data
    path = rnd.choice(objects)
    key = next(iter(_at(value, path)))
    text = json.dumps(_replace(value, path, "\0MARK\0"))
    inner = json.dumps(_at(value, path))[1:]
    dup = f"{{{json.dumps(key)}: {json.dumps(rnd.choice(_SWAPS))}, " + inner
    return text.replace('"\\u0000MARK\\u0000"', dup).encode()


def binary_line(data: bytes, rnd: random.Random) -> bytes:
    """A line of random bytes (NUL, invalid UTF-8, escape sequences) put between two lines."""
    junk = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 40))) + rnd.choice(
        (b"", b"\x1b[31m", b"\x00", b"\xff\xfe")
    )
    lines = data.split(b"\n")
    i = rnd.randrange(len(lines) + 1)
    return b"\n".join(lines[:i] + [junk] + lines[i:])


def flip_byte(data: bytes, rnd: random.Random) -> bytes:
    if not data:
        return bytes([rnd.randrange(256)])
    i = rnd.randrange(len(data))
    return data[:i] + bytes([rnd.randrange(256)]) + data[i + 1 :]


MUTATIONS: dict[str, Mutation] = {
    "truncate": truncate,
    "type_swap": type_swap,
    "non_finite": non_finite,
    "line_endings": line_endings,
    "deep_nesting": deep_nesting,
    "duplicate_key": duplicate_key,
    "binary_line": binary_line,
    "flip_byte": flip_byte,
}


def mutate(data: bytes, how: str, seed: int) -> bytes:
    return MUTATIONS[how](data, random.Random(seed))
