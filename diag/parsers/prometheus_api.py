"""A Prometheus HTTP API answer (/api/v1/query or /api/v1/query_range), as a PromResult.

{"status": "success", "data": {"resultType": "vector", "result": [{"metric": {...}, "value": [t, "v"]}]}}
A matrix series has "values" (a list of pairs); a scalar's or string's result is one pair itself.
Sample values are strings ("1", "NaN", "+Inf") because JSON has no NaN or infinities.
llmdiag collect writes the query into the file's top-level "query" field and the range it asked for
into "window": {"start": <unix s>, "end": <unix s>, "step": <s>}.
"""

from __future__ import annotations

import math
from typing import Any

from diag.core.errors import ParseError
from diag.parsers.json_fields import Fields, load_json, type_name
from diag.snapshot.model import PromResult, PromSeries, PromWindow

_RESULT_TYPES = ("vector", "matrix", "scalar", "string")


def parse_prom_answer(text: str, name: str) -> PromResult:
    """`name` is the file stem, kept to tell results apart."""
    if not text.strip():
        raise ParseError("empty file, expected a Prometheus HTTP API answer")
    answer = Fields(load_json(text), "answer")
    status = answer.text("status")
    if status == "error":
        error_type = answer.text("errorType") or "no errorType"
        message = " ".join((answer.text("error") or "no message").split())
        raise ParseError(f"Prometheus answered with an error ({error_type}): {message[:300]}")
    if status != "success" or "data" not in answer:
        raise ParseError('not a Prometheus HTTP API answer (no status "success" with data)')
    data = answer.child("data")
    result_type = data.text("resultType")
    if result_type not in _RESULT_TYPES:
        raise ParseError(f"answer: data.resultType: {result_type!r} is none of {', '.join(_RESULT_TYPES)}")
    result = data.data.get("result")
    if result_type in ("vector", "matrix"):
        if not isinstance(result, list):
            raise ParseError(f"answer: data.result: expected a list, found {type_name(result)}")
        series = [_series(Fields(item, "answer", f"data.result[{i}]"), result_type) for i, item in enumerate(result)]
    else:
        series = [PromSeries(metric={}, values=[_pair(result, "answer: data.result")])]
    return PromResult(
        name=name, query=answer.text("query"), result_type=result_type, series=series, window=_window(answer)
    )


def _window(answer: Fields) -> PromWindow | None:
    if "window" not in answer:
        return None
    window = answer.child("window")
    start, end, step = (window.number(key) for key in ("start", "end", "step"))
    if start is None or end is None or step is None:
        raise ParseError(f"{window.place()}: expected numbers start, end and step")
    if not (math.isfinite(start) and math.isfinite(end) and end >= start and step > 0):
        raise ParseError(f"{window.place()}: start {start}, end {end}, step {step} is not a time range")
    return PromWindow(start=start, end=end, step=step)


def _series(item: Fields, result_type: str) -> PromSeries:
    if "histogram" in item or "histograms" in item:
        raise ParseError(f"{item.place()}: native histogram samples are not supported, query a float expression")
    if result_type == "vector":
        values = [_pair(item.data.get("value"), item.place("value"))]
    else:
        pairs = item.data.get("values")
        if not isinstance(pairs, list):
            raise item.error("values", "a list", pairs)
        values = [_pair(pair, item.place(f"values[{i}]")) for i, pair in enumerate(pairs)]
    return PromSeries(metric=_labels(item), values=values)


def _labels(item: Fields) -> dict[str, str]:
    """The series' labels; Prometheus writes every label value as a string."""
    labels = item.raw_object("metric")
    for label, value in labels.items():
        if not isinstance(value, str):
            raise item.error(f"metric.{label}", "a string", value)
    return labels


_YEAR_10000 = 253_402_300_800  # Unix seconds; past it (or before 1970) a time is damage, and datetime refuses it


def _pair(pair: Any, where: str) -> tuple[float, float]:
    """[<unix time>, "<value>"]."""
    if not (isinstance(pair, list) and len(pair) == 2):
        raise ParseError(f'{where}: expected a [time, "value"] pair, found {type_name(pair)}')
    time, value = pair
    if isinstance(time, bool) or not isinstance(time, (int, float)):
        raise ParseError(f"{where}: the time is {type_name(time)}, expected a number")
    if not isinstance(value, str):
        raise ParseError(f"{where}: the value is {type_name(value)}, expected a string")
    if not 0 <= time < _YEAR_10000:
        raise ParseError(f"{where}: the time {time:g} is not a Unix time")
    try:
        return float(time), float(value)
    except ValueError:
        raise ParseError(f"{where}: the value {value[:40]!r} is not a number") from None
