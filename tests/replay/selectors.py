"""Label and field selectors, evaluated as the API server does, for the replay server's lists."""

from __future__ import annotations

import re

_SET_TERM = re.compile(r"^(?P<key>[^\s!=]+)\s+(?P<op>in|notin)\s+\((?P<values>[^)]*)\)$")
_EQ_TERM = re.compile(r"^(?P<key>[^\s!=]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^\s,]*)$")


class SelectorError(ValueError):
    """The selector does not parse; the API server answers 400 BadRequest."""


def _terms(selector: str) -> list[str]:
    """Split on the commas that are not inside `in (...)` value lists."""
    terms, depth, current = [], 0, ""
    for ch in selector:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            terms.append(current.strip())
            current = ""
        else:
            current += ch
    terms.append(current.strip())
    return [t for t in terms if t]


def matches_labels(selector: str | None, labels: dict[str, str]) -> bool:
    for term in _terms(selector or ""):
        if (m := _SET_TERM.match(term)) is not None:
            values = {v.strip() for v in m["values"].split(",")}
            present = m["key"] in labels and labels[m["key"]] in values
            if present != (m["op"] == "in"):
                return False
        elif (m := _EQ_TERM.match(term)) is not None:
            equal = labels.get(m["key"]) == m["value"]
            if equal != (m["op"] != "!="):
                return False
        elif term.startswith("!") and re.fullmatch(r"[^\s!=(),]+", term[1:]):
            if term[1:] in labels:
                return False
        elif re.fullmatch(r"[^\s!=(),]+", term):
            if term not in labels:
                return False
        else:
            raise SelectorError(f"unable to parse requirement: {term!r}")
    return True


def _field(obj: dict, dotted: str) -> str:
    value: object = obj
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def matches_fields(selector: str | None, obj: dict) -> bool:
    for term in _terms(selector or ""):
        m = _EQ_TERM.match(term)
        if m is None:
            raise SelectorError(f"invalid field selector: {term!r}")
        equal = _field(obj, m["key"]) == m["value"]
        if equal != (m["op"] != "!="):
            return False
    return True
