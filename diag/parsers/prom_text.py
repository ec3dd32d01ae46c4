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

from diag.errors import ParseError
from diag.model import MetricSample

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
# pairs, a value and maybe a timestamp. Read in one match; any other line takes the full parser.
_PLAIN_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"'
_PLAIN_SAMPLE = re.compile(rf"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{{((?:{_PLAIN_LABEL}(?:,{_PLAIN_LABEL})*,?)?)\}})? (\S+)(?: (\S+))?")
_PLAIN_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"')
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
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    eof_line: int | None = None
    types: dict[str, str] = {}  # family -> its # TYPE
    counts: dict[str, bool] = {}  # sample name -> whether it counts, by the # TYPE lines read so far
    for number, raw in enumerate(text.lstrip("\ufeff").splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        try:
            if eof_line is not None:
                raise _BadLine(f"text after '# EOF' (line {eof_line})")
            if line.startswith("#"):
                if _check_comment(line):
                    eof_line = number
                if _note_type(line, types):
                    counts.clear()
                continue
            sample = _sample(line)
            counted = counts.get(sample.name)
            if counted is None:
                counted = counts[sample.name] = _is_count(sample.name, types)
            if counted:
                _check_count(sample)
            series = (sample.name, tuple(sorted(sample.labels.items())))
            if series in seen:
                raise _BadLine("the same series a second time")
            seen.add(series)
            result.samples.append(sample)
        except _BadLine as why:
            result.errors.append(f"line {number}: {why}: {line[:_SHOWN_CHARS]}")
    if not result.samples and result.errors:
        raise ParseError(_not_exposition(text, result.errors[0]))
    return result


def _not_exposition(text: str, first_error: str) -> str:
    start = text.lstrip("\ufeff \t\r\n")[:1]
    if start == "<":
        return "an HTML or XML document, not Prometheus text exposition"
    if start in ("{", "["):
        return "JSON, not Prometheus text exposition"
    return f"not Prometheus text exposition, no sample found ({first_error})"


def _check_comment(line: str) -> bool:
    """Checks a HELP/TYPE/UNIT line (free-text comments are fine); True for OpenMetrics' `# EOF`."""
    words = line[1:].split(maxsplit=3)
    if not words:
        return False
    keyword = words[0]
    if keyword == "EOF":
        return len(words) == 1
    if keyword in ("HELP", "TYPE", "UNIT"):
        if len(words) < 2 or not (_METRIC_NAME.fullmatch(words[1]) or words[1].startswith('"')):
            raise _BadLine(f"# {keyword} without a valid metric name")
        if keyword == "TYPE" and (len(words) != 3 or words[2] not in _METRIC_TYPES):
            raise _BadLine("# TYPE names no known metric type")
    return False


def _note_type(line: str, types: dict[str, str]) -> bool:
    """Notes a # TYPE line's family and type; True when the line is one."""
    words = line[1:].split()
    if len(words) == 3 and words[0] == "TYPE":
        types[words[1]] = words[2]
        return True
    return False


def _check_count(sample: MetricSample) -> None:
    """A counter, or a histogram's or summary's count or bucket, counts things: a negative, infinite
    or NaN value is impossible (a damaged scrape), so the sample is refused, never read as a count."""
    if not (math.isfinite(sample.value) and sample.value >= 0):
        raise _BadLine(f"a count cannot be {sample.value:g}")


def _is_count(name: str, types: dict[str, str]) -> bool:
    kind = types.get(name)
    if kind is not None:
        return kind == "counter"
    for suffix, families in _COUNT_PARTS:
        if name.endswith(suffix) and types.get(name.removesuffix(suffix)) in families:
            return True
    return name.endswith("_total") and name.removesuffix("_total") not in types  # untyped, named as a counter


def _sample(line: str) -> MetricSample:
    plain = _PLAIN_SAMPLE.fullmatch(line)
    if plain is not None:
        name, body, value, timestamp = plain.groups()
        pairs = _PLAIN_PAIR.findall(body) if body else []
        labels = dict(pairs)
        if len(labels) == len(pairs):  # a label given twice: the full parser says so
            number = _number(value, "value")
            if timestamp is not None:
                _number(timestamp, "timestamp")
            return MetricSample(name=name, labels=labels, value=number)
    name_match = _METRIC_NAME.match(line)
    name = name_match.group() if name_match else None
    rest = line[name_match.end() :] if name_match else line
    labels: dict[str, str] = {}
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
    return MetricSample(name=name, labels=labels, value=value)


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
