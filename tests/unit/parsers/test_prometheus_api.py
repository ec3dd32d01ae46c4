import math

import pytest

from diag.core.errors import ParseError
from diag.parsers.prometheus_api import parse_prom_answer

VECTOR = """{
  "query": "sum by (model_name) (vllm:num_requests_waiting)",
  "status": "success",
  "data": {
    "resultType": "vector",
    "result": [
      {"metric": {"model_name": "meta-llama/Llama-3.1-8B-Instruct"}, "value": [1733900123.456, "14"]},
      {"metric": {"model_name": "Qwen/Qwen2.5-7B-Instruct"}, "value": [1733900123.456, "NaN"]}
    ]
  }
}"""

MATRIX = """{
  "status": "success",
  "data": {
    "resultType": "matrix",
    "result": [
      {"metric": {"__name__": "vllm:kv_cache_usage_perc", "engine": "0", "instance": "10.0.3.7:8000",
                  "job": "vllm", "model_name": "meta-llama/Llama-3.1-8B-Instruct"},
       "values": [[1733900000, "0.41"], [1733900015, "0.87"], [1733900030, "+Inf"]]}
    ]
  }
}"""


def test_vector_with_query_field():
    result = parse_prom_answer(VECTOR, "waiting")
    assert result.name == "waiting"
    assert result.query == "sum by (model_name) (vllm:num_requests_waiting)"
    assert result.result_type == "vector"
    assert [s.metric for s in result.series] == [
        {"model_name": "meta-llama/Llama-3.1-8B-Instruct"},
        {"model_name": "Qwen/Qwen2.5-7B-Instruct"},
    ]
    assert result.series[0].values == [(1733900123.456, 14.0)]
    assert math.isnan(result.series[1].values[0][1])


def test_matrix_without_query_field():
    result = parse_prom_answer(MATRIX, "kv")
    assert result.query is None
    assert result.result_type == "matrix"
    (series,) = result.series
    assert series.metric["__name__"] == "vllm:kv_cache_usage_perc"
    assert series.values == [(1733900000.0, 0.41), (1733900015.0, 0.87), (1733900030.0, math.inf)]


def test_scalar_and_numeric_string():
    scalar = parse_prom_answer(
        '{"status": "success", "data": {"resultType": "scalar", "result": [1733900000, "2"]}}', "s"
    )
    assert scalar.result_type == "scalar"
    assert [(s.metric, s.values) for s in scalar.series] == [({}, [(1733900000.0, 2.0)])]
    text = parse_prom_answer(
        '{"status": "success", "data": {"resultType": "string", "result": [1733900000, "0.5"]}}', "t"
    )
    assert text.series[0].values == [(1733900000.0, 0.5)]


def test_empty_vector():
    result = parse_prom_answer('{"status": "success", "data": {"resultType": "vector", "result": []}}', "none")
    assert result.series == []


def test_warnings_are_ignored():
    text = (
        '{"status": "success", "warnings": ["PromQL info: metric might not be a counter"], '
        '"data": {"resultType": "vector", "result": []}}'
    )
    assert parse_prom_answer(text, "w").result_type == "vector"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '{"status": "error", "errorType": "bad_data", '
            '"error": "invalid parameter \\"query\\": 1:9: parse error: unexpected \\"}\\""}',
            'Prometheus answered with an error (bad_data): invalid parameter "query": 1:9: parse error: unexpected "}"',
        ),
        (
            '{"status": "error", "errorType": "timeout", "error": "query timed out in expression evaluation"}',
            "Prometheus answered with an error (timeout): query timed out in expression evaluation",
        ),
        ("", "empty file, expected a Prometheus HTTP API answer"),
        ('{"status": "success", "data": {"resultType": "vector", "result": [', "not valid JSON"),
        (
            '{"data": {"resultType": "vector", "result": []}}',
            'not a Prometheus HTTP API answer (no status "success" with data)',
        ),
        ('{"status": "success"}', 'not a Prometheus HTTP API answer (no status "success" with data)'),
        (
            '{"status": "success", "data": {"resultType": "table", "result": []}}',
            "answer: data.resultType: 'table' is none of vector, matrix, scalar, string",
        ),
        (
            '{"status": "success", "data": {"resultType": "vector", "result": {}}}',
            "answer: data.result: expected a list, found an object",
        ),
        (
            '{"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1, 2]}]}}',
            "answer: data.result[0].value: the value is an integer, expected a string",
        ),
        (
            '{"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": ["1", "2"]}]}}',
            "answer: data.result[0].value: the time is a string, expected a number",
        ),
        (
            '{"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1, "many"]}]}}',
            "answer: data.result[0].value: the value 'many' is not a number",
        ),
        (
            '{"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}}]}}',
            'answer: data.result[0].value: expected a [time, "value"] pair, found null',
        ),
        (
            '{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values": [[1]]}]}}',
            'answer: data.result[0].values[0]: expected a [time, "value"] pair, found a list',
        ),
        (
            '{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "value": [1, "2"]}]}}',
            "answer: data.result[0].values: expected a list, found null",
        ),
        (
            '{"status": "success", "data": {"resultType": "vector", "result": [{"metric": ["a"], "value": [1, "2"]}]}}',
            "answer: data.result[0].metric: expected an object, found a list",
        ),
        (
            '{"status": "success", "data": {"resultType": "vector", '
            '"result": [{"metric": {"job": 3.5}, "value": [1, "2"]}]}}',
            "answer: data.result[0].metric.job: expected a string, found a number",
        ),
        (
            '{"status": "success", "data": {"resultType": "scalar", "result": "2"}}',
            'answer: data.result: expected a [time, "value"] pair, found a string',
        ),
        (
            '{"status": "success", "data": {"resultType": "string", "result": [1, "ready"]}}',
            "answer: data.result: the value 'ready' is not a number",
        ),
        (
            '{"status": "success", "data": {"resultType": "vector", "result": '
            '[{"metric": {}, "histogram": [1, {"count": "2", "sum": "3", "buckets": []}]}]}}',
            "answer: data.result[0]: native histogram samples are not supported, query a float expression",
        ),
        (
            '{"status": "success", "query": 5, "data": {"resultType": "vector", "result": []}}',
            "answer: query: expected a string, found an integer",
        ),
    ],
)
def test_bad_answers(text, message):
    with pytest.raises(ParseError) as raised:
        parse_prom_answer(text, "q")
    assert str(raised.value).startswith(message)


@pytest.mark.parametrize("time", ["-1e308", "1e300", "-1"])
def test_a_time_that_is_no_unix_time_is_a_parse_error(time: str) -> None:
    """Found by tests/fuzz: a matrix time of -1e308 reached datetime.fromtimestamp (OverflowError)."""
    with pytest.raises(ParseError, match="is not a Unix time"):
        parse_prom_answer(MATRIX.replace("1733900015", time), "q")
