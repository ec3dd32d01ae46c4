"""Every crash and every wrong reading the fuzzer (or issue 10) found, as a small explicit case on
the healthy fixture: the analysis goes on, the damaged source is failed or degraded by name, and the
verdict is not "healthy"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diag.analyze import Report, analyze_bundle
from diag.bundle.files import Bundle

HEALTHY = Path(__file__).resolve().parents[2] / "fixtures" / "healthy-k8s-vllm"
SCRAPE = "vllm/llama-70b-7f8d9c6b5d-8q7hc.metrics.txt"
LATER_SCRAPE = "vllm/llama-70b-7f8d9c6b5d-8q7hc.metrics.1.txt"
# deeper than the JSON reader's recursion limit, within the work budget's free nodes (deeper still is
# refused before it is read: tests/unit/bundle/test_work_budget.py)
DEEP = 40_000


def analyzed(changes: dict[str, bytes]) -> Report:
    files = {n: d for n, d in Bundle.open(HEALTHY).files.items() if n != "expected.json"}
    return analyze_bundle(Bundle(files | changes))


def text_of(name: str) -> str:
    return (HEALTHY / name).read_text()


def test_the_healthy_fixture_is_healthy() -> None:
    """The cases below mean something only if the untouched bundle reads healthy."""
    assert analyzed({}).verdict.status == "healthy"


CASES = {
    # RecursionError out of Bundle.manifest: json.loads of a deeply nested manifest.json
    "manifest nested too deeply": ({"manifest.json": b"[" * DEEP}, "manifest.json", "nested too deeply"),
    # AttributeError in clock.parse_time: collected_at of the wrong type
    "manifest time of the wrong type": (
        {"manifest.json": b'{"collected_at": {"a": 1}, "scrapes": {"x": [{}]}}'},
        None,
        None,
    ),
    # TypeError in load._finish_vllm: the manifest's scrape times of one server not a list
    "manifest scrape times not a list": (
        {"manifest.json": b'{"scrapes": {"llama-70b-7f8d9c6b5d-8q7hc": 7}}'},
        None,
        None,
    ),
    # IndexError in load._finish_vllm: a scrape of comments only, no sample and no bad line
    "a scrape of comments only": ({SCRAPE: b"# HELP vllm:x y\n# TYPE vllm:x gauge\n"}, SCRAPE, "no sample in it"),
    # RecursionError out of load._set_ray_version
    "ray/version.json nested too deeply": (
        {"ray/version.json": b'{"a":' * DEEP},
        "ray/version.json",
        "nested too deeply",
    ),
    # csv.Error (field larger than field limit) out of nvidia_smi.parse_csv
    "nvidia-smi CSV with an unclosed quote": (
        {"gpu/gpu-h100-1.csv": b'index, name\n0, "' + b"x" * 200_000 + b"\n"},
        "gpu/gpu-h100-1.csv",
        "not nvidia-smi CSV",
    ),
    # Python's json reads NaN and Infinity; no kubectl writes them
    "NaN in pods.json": (
        {"k8s/pods.json": text_of("k8s/pods.json").replace('"restartCount": 0', '"restartCount": NaN', 1).encode()},
        "k8s/pods.json",
        "NaN is not a JSON number",
    ),
    "a key twice in one object": (
        {
            "k8s/pods.json": text_of("k8s/pods.json")
            .replace('"restartCount": 0', '"restartCount": 0, "restartCount": -5', 1)
            .encode()
        },
        "k8s/pods.json",
        "the key 'restartCount' twice",
    ),
    "a number too large for a float": (
        {"k8s/nodes.json": text_of("k8s/nodes.json").replace("{", '{"x": 1e400, ', 1).encode()},
        "k8s/nodes.json",
        "too large for a float",
    ),
    # a counter at -1e308 was read as a value and decided rates
    "a counter at -1e308": (
        {
            SCRAPE: text_of(SCRAPE)
            .replace(
                'vllm:generation_tokens_total{engine="0",model_name="llama-70b"} 602114.0',
                'vllm:generation_tokens_total{engine="0",model_name="llama-70b"} -1e308',
            )
            .encode()
        },
        SCRAPE,
        "a count cannot be -1e+308",
    ),
    # every sample -Inf: nothing of the scrape can be used
    "every sample -Inf": (
        {
            SCRAPE: "".join(
                line.rsplit(" ", 1)[0] + " -Inf\n" if line and not line.startswith("#") else line + "\n"
                for line in text_of(SCRAPE).splitlines()
            ).encode()
        },
        SCRAPE,
        "no sample could be used",
    ),
    # a usage fraction outside 0..1
    "KV-cache usage of 7": (
        {
            SCRAPE: text_of(SCRAPE)
            .replace(
                'vllm:kv_cache_usage_perc{engine="0",model_name="llama-70b"} 0.08',
                'vllm:kv_cache_usage_perc{engine="0",model_name="llama-70b"} 7',
            )
            .encode()
        },
        SCRAPE,
        "a usage fraction outside 0..1",
    ),
    # a gauge at +Inf
    "requests waiting +Inf": (
        {
            SCRAPE: text_of(SCRAPE)
            .replace(
                'vllm:num_requests_waiting{engine="0",model_name="llama-70b"} 0.0',
                'vllm:num_requests_waiting{engine="0",model_name="llama-70b"} +Inf',
            )
            .encode()
        },
        SCRAPE,
        "a count of requests that cannot be",
    ),
    # bare CR line endings: one line to every line-based parser
    # OverflowError in clock.iso_time (facts/episodes.py): a Prometheus matrix time of -1e308
    "a Prometheus time of -1e308": (
        {
            "prometheus/x.json": b'{"status": "success", "data": {"resultType": "matrix", "result": '
            b'[{"metric": {}, "values": [[-1e308, "1"], [1733900015, "2"]]}]}}'
        },
        "prometheus/x.json",
        "is not a Unix time",
    ),
    # a text format cut mid-line read as complete
    "a scrape cut mid-line": ({SCRAPE: text_of(SCRAPE)[:-3].encode()}, SCRAPE, "cut off mid-line"),
    "ray status cut mid-line": (
        {"ray/status.txt": b"======== Autoscaler status: 2026-12-01 10:00:00 ========\nNode status\n------"},
        "ray/status.txt",
        "cut off mid-line",
    ),
    "bare CR in a scrape": ({SCRAPE: text_of(SCRAPE).replace("\n", "\r").encode()}, None, None),
    "bare CR in pods.json": ({"k8s/pods.json": text_of("k8s/pods.json").replace("\n", "\r").encode()}, None, None),
    "binary lines in a scrape": ({SCRAPE: b"\x00\xff\x1b[2J\n" + (HEALTHY / SCRAPE).read_bytes()}, SCRAPE, "line 1"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_damaged_file_fails_its_source_only(case: str) -> None:
    changes, source, detail = CASES[case]
    report = analyzed(changes)
    if source is not None:
        assert report.sources[source].status == "failed"
        assert detail in report.sources[source].detail
        assert report.verdict.status != "healthy"
    assert report.sources["k8s/events.json"].status == "ok"  # the rest was read


def test_a_counter_that_went_down_without_a_restart_degrades_the_later_scrape() -> None:
    start = "process_start_time_seconds 1.7649e+09\n"
    earlier = start + text_of(SCRAPE)
    later = start + text_of(LATER_SCRAPE).replace('model_name="llama-70b"} 604998.0', 'model_name="llama-70b"} 1.0')
    report = analyzed({SCRAPE: earlier.encode(), LATER_SCRAPE: later.encode()})
    status = report.sources[LATER_SCRAPE]
    assert status.status == "failed" and status.recovered is not None
    assert "vllm:generation_tokens_total went down" in status.detail
    assert report.verdict.status != "healthy"


def test_json_report_of_a_damaged_bundle_is_json() -> None:
    from diag.report.json_report import render_json

    json.loads(render_json(analyzed({"manifest.json": b"[" * DEEP, SCRAPE: b"\x1b]0;x\x07\n"})))


def test_a_fact_builder_that_raises_costs_its_part_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from diag.facts import gpu

    def broken(*args: object) -> dict:
        raise OverflowError("int too large to convert to float")

    monkeypatch.setattr(gpu, "scopes", broken)
    report = analyzed({})
    assert report.sources["facts/gpu"].status == "failed"
    assert "OverflowError: int too large" in report.sources["facts/gpu"].detail
    assert report.outcomes["K8S-101"].status in ("silent", "fired", "unknown")  # other layers were evaluated
    assert report.verdict.status == "inconclusive"


def test_a_rule_that_cannot_be_evaluated_is_a_gap_never_healthy(monkeypatch: pytest.MonkeyPatch) -> None:
    from diag.engine import rules as engine

    def broken(rule: engine.Rule, subject: dict, *env: object) -> engine.Finding:
        raise OverflowError("cannot convert float infinity to integer")

    monkeypatch.setattr(engine, "_finding", broken)
    report = analyze_bundle(Bundle.open(HEALTHY.parent / "k8s-oomkilled"))  # rules fire there: _finding runs
    errors = [rule for rule, o in report.outcomes.items() if o.status == "error"]
    assert errors and all("OverflowError" in report.outcomes[r].detail for r in errors)
    assert report.verdict.status == "inconclusive"
    assert f"rule {errors[0]}" in [g.source for g in report.verdict.gaps]
