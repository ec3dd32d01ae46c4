import math
import random
import re
from pathlib import Path

import pytest

from diag.core.errors import ParseError
from diag.parsers import prom_text
from diag.parsers.prom_text import parse_exposition

# A V1 server's /metrics as prometheus_client prints it in one process: counters as <name>_total
# with a <name>_created gauge beside them, histogram buckets with `le` last.
V1_TEXT = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="Qwen/Qwen2.5-7B-Instruct",engine="0"} 3.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="Qwen/Qwen2.5-7B-Instruct",engine="0"} 0.4182
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{model_name="Qwen/Qwen2.5-7B-Instruct",engine="0"} 12.0
# HELP vllm:num_preemptions_created Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_created gauge
vllm:num_preemptions_created{model_name="Qwen/Qwen2.5-7B-Instruct",engine="0"} 1.7649e+09
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{model_name="Qwen/Qwen2.5-7B-Instruct",engine="0",le="0.001"} 0.0
vllm:time_to_first_token_seconds_bucket{model_name="Qwen/Qwen2.5-7B-Instruct",engine="0",le="0.25"} 7.0
vllm:time_to_first_token_seconds_bucket{model_name="Qwen/Qwen2.5-7B-Instruct",engine="0",le="2560.0"} 9.0
vllm:time_to_first_token_seconds_bucket{model_name="Qwen/Qwen2.5-7B-Instruct",engine="0",le="+Inf"} 9.0
vllm:time_to_first_token_seconds_count{model_name="Qwen/Qwen2.5-7B-Instruct",engine="0"} 9.0
vllm:time_to_first_token_seconds_sum{model_name="Qwen/Qwen2.5-7B-Instruct",engine="0"} 1.9325
"""


def test_v1_samples_with_labels_and_values():
    exposition = parse_exposition(V1_TEXT)
    assert exposition.errors == []
    by_name = {(s.name, s.labels.get("le")): s for s in exposition.samples}
    assert len(exposition.samples) == 10
    running = by_name[("vllm:num_requests_running", None)]
    assert running.labels == {"model_name": "Qwen/Qwen2.5-7B-Instruct", "engine": "0"}
    assert running.value == 3.0
    assert by_name[("vllm:num_preemptions_created", None)].value == 1.7649e9
    assert by_name[("vllm:time_to_first_token_seconds_bucket", "+Inf")].value == 9.0
    assert by_name[("vllm:time_to_first_token_seconds_sum", None)].value == 1.9325


def test_v0_samples_without_engine_label_and_le_first():
    text = (
        "# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.\n"
        "# TYPE vllm:gpu_cache_usage_perc gauge\n"
        'vllm:gpu_cache_usage_perc{model_name="facebook/opt-125m"} 0.0\n'
        "# TYPE vllm:e2e_request_latency_seconds histogram\n"
        'vllm:e2e_request_latency_seconds_bucket{le="0.3",model_name="facebook/opt-125m"} 1.0\n'
    )
    samples = parse_exposition(text).samples
    assert [(s.name, s.labels) for s in samples] == [
        ("vllm:gpu_cache_usage_perc", {"model_name": "facebook/opt-125m"}),
        ("vllm:e2e_request_latency_seconds_bucket", {"le": "0.3", "model_name": "facebook/opt-125m"}),
    ]


def test_escaped_quotes_backslashes_and_newlines_in_label_values():
    text = 'http_requests_total{handler="/v1/\\"chat\\"",path="C:\\\\models",note="a\\nb"} 201.0\n'
    (sample,) = parse_exposition(text).samples
    assert sample.labels == {"handler": '/v1/"chat"', "path": "C:\\models", "note": "a\nb"}


def test_special_values_and_timestamps():
    text = (
        'vllm:x_bucket{le="+Inf"} +Inf\n'
        "vllm:y -Inf 1733900000000\n"
        "vllm:z NaN\n"
        "http_request_duration_highr_seconds_count 201.0 -12\n"
        "vllm:w 1.5e-3\n"
    )
    samples = parse_exposition(text).samples
    assert samples[0].value == math.inf
    assert samples[1].value == -math.inf
    assert math.isnan(samples[2].value)
    assert samples[3].value == 201.0
    assert samples[4].value == 0.0015


def test_openmetrics_with_exemplar_and_eof():
    text = (
        "# TYPE vllm:prompt_tokens counter\n"
        "# HELP vllm:prompt_tokens Number of prefill tokens processed.\n"
        'vllm:prompt_tokens_total{model_name="m",engine="0"} 1024.0 # {trace_id="KOO5S4vxi0o"} 8.0 1733900000.5\n'
        'vllm:prompt_tokens_created{model_name="m",engine="0"} 1733899000.25\n'
        "# EOF\n"
    )
    exposition = parse_exposition(text)
    assert exposition.errors == []
    assert [(s.name, s.value) for s in exposition.samples] == [
        ("vllm:prompt_tokens_total", 1024.0),
        ("vllm:prompt_tokens_created", 1733899000.25),
    ]


def test_text_after_eof_is_an_error():
    exposition = parse_exposition("vllm:a 1\n# EOF\nvllm:b 2\n")
    assert [s.name for s in exposition.samples] == ["vllm:a"]
    assert exposition.errors == ["line 3: text after '# EOF' (line 2): vllm:b 2"]


def test_quoted_utf8_names_of_prometheus_3():
    (sample,) = parse_exposition('{"vllm.requests.running", "model.name"="m"} 2\n').samples
    assert sample.name == "vllm.requests.running"
    assert sample.labels == {"model.name": "m"}


def test_garbage_lines_are_reported_and_good_samples_kept():
    log_line = "INFO 08-25 09:12:34 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s"
    text = V1_TEXT + log_line + "\n" + 'vllm:x{a="b"} twelve\n'
    exposition = parse_exposition(text)
    assert len(exposition.samples) == 10
    assert exposition.errors == [
        f"line 21: value '08-25' is not a number: {log_line[:60]}",
        "line 22: value 'twelve' is not a number: vllm:x{a=\"b\"} twelve",
    ]


def test_truncated_last_line():
    text = V1_TEXT + 'vllm:num_requests_waiting{model_name="Qwen/Qwen2.5-7B-Ins'
    exposition = parse_exposition(text)
    assert len(exposition.samples) == 10
    assert len(exposition.errors) == 1
    assert exposition.errors[0].startswith("line 21: quoted string not closed: vllm:num_requests_waiting{")


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ('vllm:a{model_name="m"', "label set not closed"),
        ('vllm:a{model_name="m" 1', "expected ',' or '}' between labels"),
        ('vllm:a{model_name="m" engine="0"} 1', "expected ',' or '}' between labels"),
        ("vllm:a{model_name=m} 1", "label model_name: value not in double quotes"),
        ('vllm:a{model_name="m",model_name="n"} 1', "label model_name given twice"),
        ('vllm:a{model_name="\\t"} 1', "invalid escape \\t in a quoted string"),
        ('vllm:a{0abc="m"} 1', "invalid label name"),
        ("vllm:a", "no value"),
        ("vllm:a 1 2 3", "more than a value and a timestamp"),
        ("vllm:a 1 # trace", "text after the value that is not an exemplar"),
        ("vllm-a 1", "not a sample"),
        ("{} 1", "not a sample (no metric name)"),
        ("vllm:a 1_000", "value '1_000' is not a number"),
        ("vllm:a 0x10", "value '0x10' is not a number"),
        ("vllm:a 1 soon", "timestamp 'soon' is not a number"),
        ("# TYPE vllm:a sometimes", "# TYPE names no known metric type"),
        ("# HELP", "# HELP without a valid metric name"),
    ],
)
def test_bad_lines_say_why(line, why):
    exposition = parse_exposition("vllm:ok 1\n" + line + "\n")
    assert [s.name for s in exposition.samples] == ["vllm:ok"]
    assert exposition.errors == [f"line 2: {why}: {line[:60]}"]


def test_error_shows_only_the_first_60_characters():
    line = "x" * 30 + " " + "y" * 100
    (error,) = parse_exposition(f"vllm:ok 1\n{line}\n").errors
    assert error == f"line 2: value {('y' * 20)!r} is not a number: {line[:60]}"


def test_same_series_twice_is_reported_once_kept():
    exposition = parse_exposition('vllm:a{engine="0"} 1\nvllm:a{engine="1"} 2\nvllm:a{engine="0"} 3\n')
    assert [s.value for s in exposition.samples] == [1.0, 2.0]
    assert exposition.errors == ['line 3: the same series a second time: vllm:a{engine="0"} 3']


def test_free_comments_blank_lines_and_crlf_are_fine():
    exposition = parse_exposition("\ufeff# scraped by hand\r\n\r\n  vllm:a 1\r\n\t# another comment\r\n")
    assert exposition.errors == []
    assert [(s.name, s.value) for s in exposition.samples] == [("vllm:a", 1.0)]


def test_only_comments_is_an_exposition_without_samples():
    exposition = parse_exposition("# HELP vllm:a help\n# TYPE vllm:a gauge\n")
    assert exposition.samples == [] and exposition.errors == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty file, expected Prometheus text exposition"),
        ("  \n\n", "empty file, expected Prometheus text exposition"),
        (
            "<!DOCTYPE html>\n<html><body>502 Bad Gateway</body></html>\n",
            "an HTML or XML document, not Prometheus text exposition",
        ),
        ('{"detail": "Not Found"}', "JSON, not Prometheus text exposition"),
        (
            "Internal Server Error",
            "not Prometheus text exposition, no sample found (line "
            "1: value 'Server' is not a number: Internal Server Error)",
        ),
    ],
)
def test_not_exposition_raises_one_line(text, message):
    with pytest.raises(ParseError) as raised:
        parse_exposition(text)
    assert str(raised.value) == message


@pytest.mark.parametrize(
    "text",
    [
        'vllm:a{model_name="m\\',
        "vllm:a{",
        "{",
        '{"',
        'vllm:a{="x"} 1',
        "vllm:a 1 # {",
        'vllm:a 1 # {a="b"}',
        "\x00\x01\x02 \ufffd",
        "# TYPE",
        "vllm:a\t\t",
    ],
)
def test_odd_lines_are_reported_not_raised(text):
    exposition = parse_exposition("vllm:ok 1\n" + text)
    assert [s.name for s in exposition.samples] == ["vllm:ok"]
    assert len(exposition.errors) == 1 and exposition.errors[0].startswith("line 2: ")


def test_hash_and_braces_inside_label_values_are_text():
    text = 'http_requests_total{handler="/v1/#anchor",note="{not a label set}"} 3 # {trace_id="#1"} 1\n'
    (sample,) = parse_exposition(text).samples
    assert sample.labels == {"handler": "/v1/#anchor", "note": "{not a label set}"}
    assert sample.value == 3.0


@pytest.mark.parametrize("value", ["-1e308", "-1", "+Inf", "-Inf", "NaN"])
@pytest.mark.parametrize(
    "lines",
    [
        ["# TYPE vllm:num_preemptions counter", 'vllm:num_preemptions_total{engine="0"} {v}'],
        ["# TYPE vllm:num_preemptions_total counter", 'vllm:num_preemptions_total{engine="0"} {v}'],
        ['vllm:num_preemptions_total{engine="0"} {v}'],  # no TYPE: named as a counter
        ["# TYPE vllm:e2e_request_latency_seconds histogram", 'vllm:e2e_request_latency_seconds_count{engine="0"} {v}'],
        ["# TYPE vllm:e2e_request_latency_seconds histogram", 'vllm:e2e_request_latency_seconds_bucket{le="+Inf"} {v}'],
    ],
)
def test_an_impossible_count_is_a_bad_line_not_a_sample(lines: list[str], value: str) -> None:
    text = "\n".join([*lines[:-1], lines[-1].replace("{v}", value), "vllm:num_requests_running 1", ""])
    result = parse_exposition(text)
    assert [s.name for s in result.samples] == ["vllm:num_requests_running"]
    assert result.errors == [
        f"line {len(lines)}: a count cannot be {float(value):g}: {lines[-1].replace('{v}', value)}"
    ]


def test_gauges_keep_their_special_values() -> None:
    result = parse_exposition("# TYPE g gauge\ng -1e308\nh_total_x NaN\nvllm:num_requests_waiting -Inf\n")
    assert not result.errors and len(result.samples) == 3


def test_plain_lines_read_alike_by_the_one_match_and_by_the_full_parser(monkeypatch) -> None:
    """Most lines are read by one regex match (two forms); every scrape in the fixtures must come out the same as
    from the full parser alone."""
    scrapes = sorted(Path(__file__).parents[3].joinpath("fixtures").glob("*/vllm/*.metrics*.txt"))
    assert len(scrapes) > 20
    texts = [p.read_text() for p in scrapes]
    fast = [parse_exposition(t) for t in texts]
    monkeypatch.setattr(prom_text, "_PLAIN_NUMBERED_SAMPLE", re.compile(r"(?!)"))
    monkeypatch.setattr(prom_text, "_PLAIN_SAMPLE", re.compile(r"(?!)"))
    full = [parse_exposition(t) for t in texts]
    assert fast == full
    assert sum(len(e.samples) for e in fast) > 1000


@pytest.mark.parametrize(
    ("line", "name", "labels", "value"),
    [
        ('a{x="a\\"b"} 1', "a", {"x": 'a"b'}, 1.0),
        ('a{x="C:\\\\m",y="1\\n2"} 1', "a", {"x": "C:\\m", "y": "1\n2"}, 1.0),
        ('a{x="}",y=",",z="{"} 1', "a", {"x": "}", "y": ",", "z": "{"}, 1.0),
        ('a{x="",y=""} 1', "a", {"x": "", "y": ""}, 1.0),
        ('a{x="1",} 1', "a", {"x": "1"}, 1.0),
        ("a{} 1", "a", {}, 1.0),
        ('a  {x="1"} 1', "a", {"x": "1"}, 1.0),
        ('a{x="1"}1', "a", {"x": "1"}, 1.0),
        ("a 1  #", "a", {}, 1.0),
        ('a{ x = "1" , y="2" } 1', "a", {"x": "1", "y": "2"}, 1.0),
        ('a{x="1"}\t1', "a", {"x": "1"}, 1.0),
        ("a  1", "a", {}, 1.0),
        ("a\t1\t2", "a", {}, 1.0),
        ("  a 1  ", "a", {}, 1.0),
        ("a 1 \t", "a", {}, 1.0),
        ("a 1e3", "a", {}, 1000.0),
        ("a 1E3", "a", {}, 1000.0),
        ("a -1.5e-3", "a", {}, -0.0015),
        ("a +3", "a", {}, 3.0),
        ("a .5", "a", {}, 0.5),
        ("a 5.", "a", {}, 5.0),
        ("a -0.0", "a", {}, 0.0),
        ("a +Inf", "a", {}, math.inf),
        ("a -Inf", "a", {}, -math.inf),
        ("a inf", "a", {}, math.inf),
        ("a -Infinity", "a", {}, -math.inf),
        ("a 1.14296162304e+011", "a", {}, 1.14296162304e11),
        ("a \u0661\u0662", "a", {}, 12.0),  # Arabic-Indic digits: Go refuses them, float() reads them
        ("a 1 1733900000000", "a", {}, 1.0),
        ("a 1 -12", "a", {}, 1.0),
        ("a 1 1.5e3", "a", {}, 1.0),
        ("a 1 +Inf", "a", {}, 1.0),
        ('a{x="1"} 2 1733900000000', "a", {"x": "1"}, 2.0),
        ("_a:b_c 1", "_a:b_c", {}, 1.0),
        (':a{_x="1"} 1', ":a", {"_x": "1"}, 1.0),
    ],
)
def test_one_sample_line(line: str, name: str, labels: dict[str, str], value: float) -> None:
    for end in ("\n", "\r\n", ""):
        result = parse_exposition(f"{line}{end}")
        assert result.errors == []
        assert [(s.name, s.labels, s.value) for s in result.samples] == [(name, labels, value)]


def test_nan_values() -> None:
    samples = parse_exposition('a NaN\nb nan\nc +NaN\nd{x="1"} NaN 12\n').samples
    assert [s.name for s in samples] == ["a", "b", "c", "d"]
    assert all(math.isnan(s.value) for s in samples)


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("a 1#2", "value '1#2' is not a number"),
        ("a 1 2#3", "timestamp '2#3' is not a number"),
        ('a{x="1"} 1 #', "timestamp '#' is not a number"),
        ("a #", "value '#' is not a number"),
        ("a 1 #x", "timestamp '#x' is not a number"),
        ("a 1e", "value '1e' is not a number"),
        ("a 1.2.3", "value '1.2.3' is not a number"),
        ("a --1", "value '--1' is not a number"),
        ("a 1 2.3.4", "timestamp '2.3.4' is not a number"),
        ('a{x="1",x="2"} 1', "label x given twice"),
        ('a{x="1",y="2",x="1"} 1', "label x given twice"),
        ('a{x="1",,y="2"} 1', "invalid label name"),
        ('a {x="1"} 1', "value '{x=\"1\"}' is not a number"),  # read as `name value timestamp`
        ('a{x="1"} ', "no value"),
    ],
)
def test_damaged_sample_lines_say_why(line: str, why: str) -> None:
    exposition = parse_exposition(f"vllm:ok 1\n{line}\n")
    assert exposition.errors == [f"line 2: {why}: {line.strip()}"]


def test_the_same_series_written_differently_is_a_duplicate() -> None:
    text = (
        'a{x="1",y="2"} 1\n'
        'a{y="2",x="1"} 2\n'
        ' a{x="1",y="2"} 3\n'
        'a{x="1" ,y="2"} 4\n'
        'b{x="\\\\"} 5\n'
        'b{x="\\\\"} 6\n'
        "c 7\n"
        "c{} 8\n"
    )
    result = parse_exposition(text)
    assert [s.value for s in result.samples] == [1.0, 5.0, 7.0]
    assert [e.split(":")[0] for e in result.errors] == ["line 2", "line 3", "line 4", "line 6", "line 8"]
    assert all("the same series a second time" in e for e in result.errors)


def test_counts_are_checked_on_every_shape_of_line() -> None:
    text = (
        "# TYPE a counter\n"
        'a_total{x="1"} -1\n'
        ' a_total{x="2"} -1\n'
        'a_total{x="\\"3"} -Inf 12\n'
        'a_total{x="4"} NaN\n'
        'a_total{x="5"} 4\n'
    )
    result = parse_exposition(text)
    assert [s.labels["x"] for s in result.samples] == ["5"]
    assert [e.split(": ")[1] for e in result.errors] == [
        "a count cannot be -1",
        "a count cannot be -1",
        "a count cannot be -inf",
        "a count cannot be nan",
    ]


def test_eof_ends_the_exposition_blank_lines_after_it_are_fine() -> None:
    result = parse_exposition("a 1\n# EOF\n\n  \nb 2\n# EOF\n# a comment\n")
    assert [s.name for s in result.samples] == ["a"]
    assert result.errors == [
        "line 5: text after '# EOF' (line 2): b 2",
        "line 6: text after '# EOF' (line 2): # EOF",
        "line 7: text after '# EOF' (line 2): # a comment",
    ]


def test_a_type_line_changes_what_counts_after_it() -> None:
    text = 'a_total -1\n# TYPE a_total gauge\na_total{x="1"} -1\n# TYPE h histogram\nh_count -1\nh_sum -1\n'
    result = parse_exposition(text)
    assert [(s.name, s.labels) for s in result.samples] == [("a_total", {"x": "1"}), ("h_sum", {})]
    assert [e.split(":")[0] for e in result.errors] == ["line 1", "line 5"]


# Parts of sample lines: (the usual ones, odd or damaged ones).
_NAMES = (["a", "a_total", "h_bucket", "h_count", "vllm:x", "_y"], ["1a", "a-b", "", '{"q.n"', "a "])
_LABELS = (
    ['x="1"', 'x="2"', 'le="+Inf"', '_k=""', 'k="}"', 'k=","', 'k="#"', 'k="a b"'],
    ['x="a\\"b"', 'x="\\\\"', 'x="\\n"', 'x="\\t"', '0k="1"', '"k.k"="1"', 'x = "1"', 'x="1', "x=1", "x", ""],
)
_COMMAS = ([","], [", ", ",,", " ,"])
_ENDS = (["}"], [",}", "", " }"])
_BLANKS = ([" "], ["  ", "\t", "", " # ", "#"])
_NUMBERS = (
    ["1", "-1", "1.5", "1e3", "1E-3", "+Inf", "-Inf", "NaN", ".5", "5.", "-0.0", "1733900000000"],
    ["Inf", "nan", "+NaN", "Infinity", "1_0", "0x1", "1#2", "#", "\u0663", "1e", "--1", "1.2.3", "", '{x="1"}'],
)
_AROUND = ([""], [" ", "\t", "\r"])
_COMMENTS = [
    "# TYPE a counter",
    "# TYPE a_total gauge",
    "# TYPE h histogram",
    "# HELP a x",
    "# EOF",
    "# free",
    "# TYPE a",
]


def _random_line(rand: random.Random) -> str:
    def part(choices: tuple[list[str], list[str]]) -> str:
        usual, odd = choices
        return rand.choice(odd if rand.random() < 0.05 else usual)

    if rand.random() < 0.05:
        return rand.choice(_COMMENTS)
    line = part(_NAMES)
    if rand.random() < 0.8:
        line += "{" + part(_COMMAS).join(part(_LABELS) for _ in range(rand.randrange(4))) + part(_ENDS)
    line += part(_BLANKS) + part(_NUMBERS)
    if rand.random() < 0.2:
        line += part(_BLANKS) + part(_NUMBERS)
    if rand.random() < 0.05:
        line += rand.choice([' # {t="1"} 1', " # x", " 2 3"])
    return part(_AROUND) + line + part(_AROUND)


def _read(text: str) -> object:
    """What parse_exposition makes of `text`, NaN values comparable."""
    try:
        result = parse_exposition(text)
    except ParseError as e:
        return str(e)
    return [(s.name, s.labels, repr(s.value)) for s in result.samples], result.errors


def test_the_one_match_of_plain_numbered_lines_reads_random_lines_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lines of a plain shape with plain numbers skip _sample; random lines near that shape, damaged or
    not, must come out as _sample reads them."""
    rand = random.Random(9)
    texts = ["\n".join(_random_line(rand) for _ in range(rand.randrange(1, 8))) for _ in range(3000)]
    plain = [line for text in texts for line in text.splitlines() if prom_text._PLAIN_NUMBERED_SAMPLE.fullmatch(line)]
    assert len(plain) > 5000
    fast = [_read(t) for t in texts]
    monkeypatch.setattr(prom_text, "_PLAIN_NUMBERED_SAMPLE", re.compile(r"(?!)"))
    assert fast == [_read(t) for t in texts]
    read = [r for r in fast if isinstance(r, tuple)]
    assert sum(len(samples) for samples, _ in read) > 3000 and sum(len(errors) for _, errors in read) > 3000


def test_each_sample_carries_its_series_key_whichever_way_its_line_was_read():
    """The metrics index keys series by it: plain lines, lines with escapes and quoted names alike."""
    text = 'a{z="1",b="2"} 1\na{b="3",z="1"} 2\nb{x="a\\"q",y="p"} 3 1700000000000\n{"my.metric",k="v"} 4\nc 5\n'
    samples = parse_exposition(text).samples
    assert [s.series_key for s in samples] == [tuple(sorted(s.labels.items())) for s in samples]
    assert samples[0].series_key == (("b", "2"), ("z", "1")) and samples[-1].series_key == ()
