"""Prometheus text exposition (format 0.0.4) and OpenMetrics text, as a /metrics endpoint serves them.

One bad line does not cost the rest of the scrape: every good sample is kept and each bad line is
reported ("line N: <why>: <the line>"). Only a text that holds no sample and is not exposition at
all (an HTML error page, a JSON answer, an empty file) is a ParseError.

Accepted beyond the basic `name{label="value"} value`: HELP/TYPE/UNIT comments, `# EOF`, escaped
quotes, backslashes and newlines in label values, +Inf/-Inf/NaN, a timestamp (milliseconds in the
Prometheus format, seconds in OpenMetrics), an OpenMetrics exemplar after `#`, and Prometheus 3's
quoted UTF-8 names (`{"my.metric", "my.label"="v"}`).

Impossible values are bad lines too: a counter (or a histogram's count or bucket) that is negative,
infinite or NaN.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from diag.core.errors import ParseError
from diag.snapshot.model import MetricSample

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')
_ESCAPE = re.compile(r"\\(.)")
_ESCAPED_CHARS = {"\\": "\\", '"': '"', "n": "\n"}
# What Go's strconv.ParseFloat accepts in exposition, without its hexadecimal and underscore forms.
_FLOAT = re.compile(r"[+-]?(?:inf(?:inity)?|nan|(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?)", re.IGNORECASE)
_METRIC_TYPES = frozenset(
    {"counter", "gauge", "histogram", "summary", "untyped", "unknown", "gaugehistogram", "stateset", "info"}
)
_SHOWN_CHARS = 60
# The shape nearly every line of a real scrape has: a name, labels without escapes, blanks or empty
# pairs, a value and maybe a timestamp, one space apart. parse_exposition reads such a line with
# plain numbers in one match (_PLAIN_NUMBERED_SAMPLE); _sample reads the others of that shape in one
# match too, with any token as the value (`a 1#2` has a bad value, not an exemplar); any other line
# takes the full parser.
_PLAIN_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"'
_PLAIN_NAME_AND_LABELS = rf"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{{((?:{_PLAIN_LABEL}(?:,{_PLAIN_LABEL})*,?)?)\}})?"
_PLAIN_SAMPLE = re.compile(rf"{_PLAIN_NAME_AND_LABELS} (\S+)(?: (\S+))?")
_PLAIN_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"')
# Numbers _FLOAT accepts, in ASCII only: float() reads them alike, and never refuses one.
_PLAIN_NUMBER = r"(?:[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?Inf|NaN)"
_PLAIN_NUMBERED_SAMPLE = re.compile(rf"{_PLAIN_NAME_AND_LABELS} ({_PLAIN_NUMBER})(?: {_PLAIN_NUMBER})?")
# A plain label block, read: its labels, and their sorted pairs, which key its series.
_LabelSet = tuple[dict[str, str], tuple[tuple[str, str], ...]]
# Plain label blocks read so far, in any scrape: a fleet's servers repeat the same few hundred. The
# labels are copied for each sample, never handed out. Emptied when it holds _MOST_LABEL_SETS.
_label_sets: dict[str | None, _LabelSet | None] = {}
_MOST_LABEL_SETS = 10_000
# Series that count, by suffix: (suffix, the family types whose series they are). OpenMetrics names a
# counter family without its `_total`.
_COUNT_PARTS = (
    ("_total", ("counter",)),
    ("_count", ("histogram", "summary", "gaugehistogram")),
    ("_bucket", ("histogram", "gaugehistogram")),
)


@dataclass
class Exposition:
    samples: list[MetricSample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # "line N: <why>: <first 60 chars of the line>"


class _BadLine(Exception):
    """Why one line is not exposition; becomes an entry of Exposition.errors."""


def parse_exposition(text: str) -> Exposition:
    if not text.strip():
        raise ParseError("empty file, expected Prometheus text exposition")
    result = Exposition()
    add_sample, add_error = result.samples.append, result.errors.append
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    eof_line: int | None = None
    types: dict[str, str] = {}  # family -> its # TYPE
    counts: dict[str, bool] = {}  # sample name -> whether it counts, by the # TYPE lines read so far
    if len(_label_sets) >= _MOST_LABEL_SETS:
        _label_sets.clear()
    label_sets = _label_sets
    numbered = enumerate(text.lstrip("\ufeff").splitlines(), start=1)
    for number, line in numbered:
        try:
            plain = _PLAIN_NUMBERED_SAMPLE.fullmatch(line)
            label_set = None
            if plain is not None:
                name, body, value_text = plain.groups()
                label_set = label_sets.get(body)
                if label_set is None:
                    label_set = label_sets[body] = _plain_label_set(body)
            if label_set is not None:  # `line` has no blanks around it: it is as stripped
                labels, series_labels = label_set
                labels = labels.copy()
                value = float(value_text)
            else:
                line = line.strip()
                if not line:
                    continue
                if line.startswith("#"):
                    if _read_comment(line, types, counts):
                        eof_line = number
                        break
                    continue
                name, labels, value = _sample(line)
                series_labels = tuple(sorted(labels.items()))
            counted = counts.get(name)
            if counted is None:
                counted = counts[name] = _is_count(name, types)
            # A count that is negative, infinite or NaN is impossible (a damaged scrape): refused, never read.
            if counted and not 0 <= value < math.inf:
                raise _BadLine(f"a count cannot be {value:g}")
            known = len(seen)  # one hashing of the key, not `in` and then add()
            seen.add((name, series_labels))
            if len(seen) == known:
                raise _BadLine("the same series a second time")
            add_sample(MetricSample(name, labels, value, series_labels))
        except _BadLine as why:
            add_error(f"line {number}: {why}: {line[:_SHOWN_CHARS]}")
    if eof_line is not None:
        for number, line in numbered:
            if line := line.strip():
                add_error(f"line {number}: text after '# EOF' (line {eof_line}): {line[:_SHOWN_CHARS]}")
    if not result.samples and result.errors:
        raise ParseError(_not_exposition(text, result.errors[0]))
    return result


def _plain_label_set(body: str | None) -> _LabelSet | None:
    """The labels of a plain label block (None: no block) and their series key; None when a label is
    given twice."""
    pairs = _PLAIN_PAIR.findall(body) if body else []
    labels = dict(pairs)
    return (labels, tuple(sorted(pairs))) if len(labels) == len(pairs) else None


def _not_exposition(text: str, first_error: str) -> str:
    start = text.lstrip("\ufeff \t\r\n")[:1]
    if start == "<":
        return "an HTML or XML document, not Prometheus text exposition"
    if start in ("{", "["):
        return "JSON, not Prometheus text exposition"
    return f"not Prometheus text exposition, no sample found ({first_error})"


def _read_comment(line: str, types: dict[str, str], counts: dict[str, bool]) -> bool:
    """Checks a HELP/TYPE/UNIT line (free-text comments are fine) and notes a # TYPE, which may change
    which names count; True for OpenMetrics' `# EOF`."""
    words = line[1:].split(maxsplit=3)
    if not words:
        return False
    keyword = words[0]
    if keyword == "EOF":
        return len(words) == 1
    if keyword in ("HELP", "TYPE", "UNIT"):
        if len(words) < 2 or not (_METRIC_NAME.fullmatch(words[1]) or words[1].startswith('"')):
            raise _BadLine(f"# {keyword} without a valid metric name")
        if keyword == "TYPE":
            if len(words) != 3 or words[2] not in _METRIC_TYPES:
                raise _BadLine("# TYPE names no known metric type")
            types[words[1]] = words[2]
            counts.clear()
    return False


def _is_count(name: str, types: dict[str, str]) -> bool:
    kind = types.get(name)
    if kind is not None:
        return kind == "counter"
    for suffix, families in _COUNT_PARTS:
        if name.endswith(suffix) and types.get(name.removesuffix(suffix)) in families:
            return True
    return name.endswith("_total") and name.removesuffix("_total") not in types  # untyped, named as a counter


def _sample(line: str) -> tuple[str, dict[str, str], float]:
    """A sample line's (name, labels, value)."""
    plain = _PLAIN_SAMPLE.fullmatch(line)
    if plain is not None:
        name, body, value, timestamp = plain.groups()
        pairs = _PLAIN_PAIR.findall(body) if body else []
        labels: dict[str, str] = dict(pairs)
        if len(labels) == len(pairs):  # a label given twice: the full parser says so
            number = _number(value, "value")
            if timestamp is not None:
                _number(timestamp, "timestamp")
            return name, labels, number
    name_match = _METRIC_NAME.match(line)
    name = name_match.group() if name_match else None
    rest = line[name_match.end() :] if name_match else line
    labels = {}
    if rest.lstrip(" \t").startswith("{"):
        quoted_name, labels, rest = _label_set(rest.lstrip(" \t"), allow_name=name is None)
        name = name or quoted_name
    elif rest and rest[0] not in " \t":
        raise _BadLine("not a sample")
    if not name:
        raise _BadLine("not a sample (no metric name)")
    values, _, exemplar = rest.partition("#")
    fields = values.split()
    if not fields:
        raise _BadLine("no value")
    value = _number(fields[0], "value")
    if len(fields) > 2:
        raise _BadLine("more than a value and a timestamp")
    if len(fields) == 2:
        _number(fields[1], "timestamp")
    if exemplar:
        _check_exemplar(exemplar)
    return name, labels, value


def _label_set(text: str, allow_name: bool) -> tuple[str | None, dict[str, str], str]:
    """`text` starts with "{": returns (a quoted metric name inside the braces, labels, text after "}")."""
    name: str | None = None
    labels: dict[str, str] = {}
    pos = 1
    while True:
        pos = _skip_blanks(text, pos)
        if text.startswith("}", pos):
            return name, labels, text[pos + 1 :]
        quoted = text.startswith('"', pos)
        if quoted:
            key, pos = _quoted(text, pos)
        else:
            key_match = _LABEL_NAME.match(text, pos)
            if key_match is None:
                raise _BadLine("label set not closed" if pos >= len(text) else "invalid label name")
            key, pos = key_match.group(), key_match.end()
        pos = _skip_blanks(text, pos)
        if text.startswith("=", pos):
            pos = _skip_blanks(text, pos + 1)
            if not text.startswith('"', pos):
                raise _BadLine(f"label {key}: value not in double quotes")
            value, pos = _quoted(text, pos)
            if key in labels:
                raise _BadLine(f"label {key} given twice")
            labels[key] = value
        elif quoted and allow_name and name is None and not labels:
            name = key  # Prometheus 3: {"metric.name", label="v"}
        else:
            raise _BadLine(f"label {key}: expected '='")
        pos = _skip_blanks(text, pos)
        if text.startswith(",", pos):
            pos += 1
        elif not text.startswith("}", pos):
            raise _BadLine("label set not closed" if pos >= len(text) else "expected ',' or '}' between labels")


def _quoted(text: str, pos: int) -> tuple[str, int]:
    match = _QUOTED.match(text, pos)
    if match is None:
        raise _BadLine("quoted string not closed")

    def unescape(escape: re.Match[str]) -> str:
        char = escape.group(1)
        if char not in _ESCAPED_CHARS:
            raise _BadLine(f"invalid escape \\{char} in a quoted string")
        return _ESCAPED_CHARS[char]

    return _ESCAPE.sub(unescape, match.group(1)), match.end()


def _skip_blanks(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t":
        pos += 1
    return pos


def _number(text: str, what: str) -> float:
    if text.isascii() and text.replace(".", "", 1).isdigit():  # most values: digits and maybe a point
        return float(text)
    if not _FLOAT.fullmatch(text):
        raise _BadLine(f"{what} {text[:20]!r} is not a number")
    return float(text)


def _check_exemplar(text: str) -> None:
    """OpenMetrics exemplar after the value: ` {trace_id="..."} 0.67 [timestamp]`."""
    body = text.lstrip(" \t")
    if not body.startswith("{"):
        raise _BadLine("text after the value that is not an exemplar")
    _, _, rest = _label_set(body, allow_name=False)
    fields = rest.split()
    if not 1 <= len(fields) <= 2:
        raise _BadLine("exemplar needs a value and at most a timestamp")
    for item in fields:
        _number(item, "exemplar value")
