"""The Prometheus collector without a Prometheus: scoping, the window's step, the flags, the messages."""

from __future__ import annotations

import base64
import json
import time

import pytest

from diag.bundle.files import Bundle
from diag.bundle.prometheus_queries import RANGE_QUERIES
from diag.collect.base import Sink, Target
from diag.collect.http import REFUSED, TIMEOUT, Unreachable
from diag.collect.prometheus import (
    MAX_POINTS,
    collect_prometheus,
    namespace_matcher,
    promql,
    step_for,
    vllm_selector,
    window_ending,
)
from diag.collect.prometheus_access import PASSWORD_ENV, TOKEN_ENV, PromAccess, parse_matchers, prometheus_access
from diag.core.errors import UserError

BY_STEM = {q.stem: q for q in RANGE_QUERIES}
DAY_S = 24 * 3600


@pytest.fixture(autouse=True)
def _no_credentials_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    monkeypatch.delenv(PASSWORD_ENV, raising=False)


# ----------------------------------------------------------------------------- window


@pytest.mark.parametrize(
    ("window_s", "step"),
    [(30 * 60, 15), (6 * 3600, 15), (10_999 * 15, 15), (10_999 * 15 + 1, 16), (7 * DAY_S, 55), (30 * DAY_S, 236)],
)
def test_step_keeps_a_series_under_prometheus_point_limit(window_s: float, step: int) -> None:
    assert step_for(window_s) == step
    assert window_s / step + 1 <= MAX_POINTS


def test_a_seven_day_window_spans_seven_days_in_under_11000_points() -> None:
    window = window_ending(1_800_000_000.25, 7 * DAY_S)
    assert window.end - window.start == pytest.approx(7 * DAY_S)
    points = int((window.end - window.start) // window.step) + 1
    assert points <= 11_000
    assert points > 10_900  # no coarser than it must be


# ----------------------------------------------------------------------------- scoping


def test_one_namespace_is_an_equality_matcher() -> None:
    assert namespace_matcher(["llm-serving"]) == 'namespace="llm-serving"'


def test_several_namespaces_are_one_escaped_regex() -> None:
    assert namespace_matcher(["team-b", "team-a", "team-a"]) == 'namespace=~"team-a|team-b"'
    # regex metacharacters match literally; the backslash is then escaped for the PromQL string
    assert namespace_matcher(["a.b", "c|d"]) == 'namespace=~"a\\\\.b|c\\\\|d"'


def test_a_quote_in_a_value_cannot_end_the_string() -> None:
    assert namespace_matcher(['x"}or vector(1)']) == 'namespace="x\\"}or vector(1)"'


def test_all_namespaces_leave_the_query_unscoped() -> None:
    assert namespace_matcher(None) is None
    assert vllm_selector(None) == ""
    assert promql(BY_STEM["vllm_num_requests_waiting"], vllm_selector(None)) == "vllm:num_requests_waiting"


def test_vllm_queries_carry_namespace_and_extra_matchers_gpu_queries_do_not() -> None:
    selector = vllm_selector(["llm"], ('job="vllm"',))
    assert selector == '{namespace="llm",job="vllm"}'
    assert (
        promql(BY_STEM["vllm_kv_cache_usage_perc"], selector) == 'vllm:kv_cache_usage_perc{namespace="llm",job="vllm"}'
    )
    assert promql(BY_STEM["vllm_ttft_p99_5m"], selector) == (
        'histogram_quantile(0.99, rate(vllm:time_to_first_token_seconds_bucket{namespace="llm",job="vllm"}[5m]))'
    )
    assert promql(BY_STEM["dcgm_xid_errors"], selector) == "DCGM_FI_DEV_XID_ERRORS"
    assert promql(BY_STEM["dcgm_power_violation_rate_5m"], selector) == "rate(DCGM_FI_DEV_POWER_VIOLATION[5m])"


# ----------------------------------------------------------------------------- flags


@pytest.mark.parametrize(
    ("text", "matchers"),
    [
        ('job="vllm"', ('job="vllm"',)),
        ('{job="vllm", cluster=~"eu-.*"}', ('job="vllm"', 'cluster=~"eu-.*"')),
        ("team!='a,b', env!~`dev|test`", ("team!='a,b'", "env!~`dev|test`")),
        ('note="say \\"hi\\""', ('note="say \\"hi\\""',)),
    ],
)
def test_selector_flag_accepts_label_matchers(text: str, matchers: tuple[str, ...]) -> None:
    assert parse_matchers(text) == matchers


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("job=vllm", "not a comma-separated list of label matchers"),
        ('job="vllm",', "not a comma-separated list of label matchers"),
        ('job="vllm" or up', "not a comma-separated list of label matchers"),
        ('job="vllm"}[5m]) or vector(1', "not a comma-separated list of label matchers"),
        ("", "empty"),
        ('__name__="up"', "__name__"),
    ],
)
def test_selector_flag_rejects_anything_else_in_one_line(text: str, says: str) -> None:
    with pytest.raises(UserError, match=r"^--prometheus-selector: ") as e:
        parse_matchers(text)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_no_prometheus_means_no_access_and_env_credentials_alone_are_no_mistake(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(TOKEN_ENV, "from-another-run")
    assert prometheus_access(Target()) is None


@pytest.mark.parametrize(
    ("target", "says"),
    [
        (Target(prometheus_selector='job="x"'), "--prometheus-selector needs --prometheus-url or --prometheus-service"),
        (Target(prometheus_token="t"), "--prometheus-token needs --prometheus-url"),
        (Target(prometheus_url="http://p:9090", prometheus_service="mon/prom"), "not both"),
        (
            Target(prometheus_url="http://p:9090", prometheus_token="t", prometheus_user="u", prometheus_password="p"),
            "not both",
        ),
        (
            Target(prometheus_url="http://p:9090", prometheus_user="u"),
            "--prometheus-user needs a password (--prometheus-password, or the variable",
        ),
        (
            Target(prometheus_url="http://p:9090", prometheus_password="p"),
            "a password needs a user (--prometheus-user)",
        ),
        (Target(prometheus_url="ftp://p"), "is not an http(s) URL"),
        (Target(prometheus_url="http://p:9090/?token=abc"), "query string"),
        (Target(prometheus_url="http://p:9090", prometheus_ca_file="/nonexistent/ca.pem"), "is not a file"),
        (Target(prometheus_url="http://p:9090", prometheus_headers=["X-Scope-OrgID team-a"]), "'Name: value'"),
        (
            Target(
                prometheus_url="http://p:9090", prometheus_headers=["Authorization: Bearer x"], prometheus_token="t"
            ),
            "Authorization",
        ),
        (Target(prometheus_service="monitoring"), "NAMESPACE/NAME[:PORT]"),
        (Target(prometheus_service="monitoring/Prom_UI:9090"), "NAMESPACE/NAME[:PORT]"),
        (
            Target(prometheus_service="monitoring/prometheus", prometheus_token="t"),
            "cannot go with --prometheus-service",
        ),
    ],
)
def test_flag_mistakes_are_one_line(target: Target, says: str) -> None:
    with pytest.raises(UserError) as e:
        prometheus_access(target)
    assert says in str(e.value) and "\n" not in str(e.value)
    for secret in ("abc", "Bearer x"):
        assert secret not in str(e.value)


def test_service_port_defaults_to_9090_and_keeps_a_port_name() -> None:
    access = prometheus_access(Target(prometheus_service="monitoring/prometheus-operated"))
    assert access is not None and str(access.service) == "monitoring/prometheus-operated:9090"
    access = prometheus_access(Target(prometheus_service="monitoring/kube-prometheus:http-web"))
    assert access is not None and access.service is not None and access.service.port == "http-web"


def test_token_from_env_becomes_a_bearer_header_that_describe_never_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, "s3cr3t-token\n")
    access = prometheus_access(
        Target(prometheus_url="https://prom.example:9090/", prometheus_headers=["X-Scope-OrgID: team-a"])
    )
    assert access is not None
    assert access.headers == {"X-Scope-OrgID": "team-a", "Authorization": "Bearer s3cr3t-token"}
    described = access.describe()
    assert described["url"] == "https://prom.example:9090" and described["login"] == "bearer token"
    assert described["headers"] == ["X-Scope-OrgID"]
    assert "s3cr3t" not in json.dumps(described) + repr(access)


def test_user_and_password_in_the_url_move_to_basic_auth_and_out_of_the_url() -> None:
    access = prometheus_access(Target(prometheus_url="https://alice:pa55word@prom.example/prometheus"))
    assert access is not None
    assert access.url == "https://prom.example/prometheus"
    assert access.headers["Authorization"] == "Basic " + base64.b64encode(b"alice:pa55word").decode()
    assert "pa55word" not in json.dumps(access.describe()) + access.where


def test_password_from_env_completes_the_user_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PASSWORD_ENV, "from-env")
    access = prometheus_access(Target(prometheus_url="p:9090", prometheus_user="bob"))
    assert access is not None and access.login == "basic" and access.url == "http://p:9090"
    assert access.headers["Authorization"] == "Basic " + base64.b64encode(b"bob:from-env").decode()


def test_target_repr_hides_credentials() -> None:
    text = repr(
        Target(
            prometheus_url="http://p",
            prometheus_token="tok-123",
            prometheus_password="pw-456",
            prometheus_headers=["A: b"],
        )
    )
    assert "tok-123" not in text and "pw-456" not in text


# ----------------------------------------------------------------------------- answers


def _window():
    return window_ending(time.time(), 1800)


def _matrix(n_series: int) -> bytes:
    result = [{"metric": {"namespace": "llm", "pod": f"p{i}"}, "values": [[1, "1"]]} for i in range(n_series)]
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}).encode()


class FakeGet:
    """Answers by the metric a query names; records what was asked."""

    def __init__(
        self, answers: dict[str, tuple[int, bytes] | Exception], default: tuple[int, bytes] | None = None
    ) -> None:
        self.answers = answers
        self.default = default or (200, _matrix(1))
        self.asked: list[str] = []

    def __call__(self, path: str, timeout: float) -> tuple[int, bytes]:
        from urllib.parse import parse_qs, urlsplit

        query = parse_qs(urlsplit(path).query)["query"][0]
        self.asked.append(query)
        for needle, answer in self.answers.items():
            if needle in query:
                if isinstance(answer, Exception):
                    raise answer
                return answer
        return self.default


def _run(get: FakeGet, access: PromAccess | None = None, queries=RANGE_QUERIES):
    bundle = Bundle()
    access = access or PromAccess("http://prom:9090", None)
    return bundle, {
        r.name: r for r in collect_prometheus(get, access, Sink(bundle), 5.0, '{namespace="llm"}', _window(), queries)
    }


def test_each_file_is_the_answer_with_the_query_and_window_added() -> None:
    bundle, results = _run(FakeGet({}))
    assert set(results) == {f"prometheus/{q.stem}.json" for q in RANGE_QUERIES}
    saved = json.loads(bundle.files["prometheus/vllm_num_requests_waiting.json"])
    assert saved["query"] == 'vllm:num_requests_waiting{namespace="llm"}'
    assert saved["status"] == "success" and len(saved["data"]["result"]) == 1
    assert set(saved["window"]) == {"start", "end", "step"} and saved["window"]["step"] == 15
    assert saved["window"]["end"] - saved["window"]["start"] == pytest.approx(1800)


def test_a_renamed_metric_with_neither_name_in_the_window_is_one_ok_line() -> None:
    empty = (200, _matrix(0))
    bundle, results = _run(
        FakeGet({"kv_cache_usage_perc": empty, "gpu_cache_usage_perc": empty, "time_per_output_token": empty})
    )
    line = results["prometheus/vllm_kv_cache_usage_perc.json"]
    assert line.status == "ok" and "neither name has a series" in line.detail
    assert "prometheus/vllm_gpu_cache_usage_perc.json" not in results  # folded into the line above
    assert json.loads(bundle.files["prometheus/vllm_gpu_cache_usage_perc.json"])["data"]["result"] == []  # still saved
    # one of the pair answering is the normal case: each keeps its own line
    assert results["prometheus/vllm_tpot_p99_5m.json"].detail == "0 series"
    assert results["prometheus/vllm_itl_p99_5m.json"].detail == "1 series"


def test_refused_credentials_name_prometheus_and_stop_the_remaining_queries() -> None:
    get = FakeGet({}, default=(401, b"Unauthorized\n"))
    access = PromAccess("http://prom:9090", None, headers={"Authorization": "Bearer nope"}, login="bearer token")
    bundle, results = _run(get, access)
    details = [r.detail for r in results.values()]
    assert all(r.status == "failed" for r in results.values())
    assert any(
        d.startswith("Prometheus refused the credentials (HTTP 401, bearer token): Unauthorized") for d in details
    )
    assert len(get.asked) < len(RANGE_QUERIES)  # the queries after the refusal were not sent
    assert all("nope" not in d for d in details) and bundle.files == {}


def test_no_credentials_given_says_which_flags_give_them() -> None:
    _, results = _run(FakeGet({}, default=(403, b"Forbidden")), queries=RANGE_QUERIES[:1])
    [line] = results.values()
    assert "asks for credentials (HTTP 403" in line.detail and "--prometheus-token" in line.detail


def test_a_rejected_query_carries_prometheus_error_text() -> None:
    error = {"status": "error", "errorType": "bad_data", "error": '1:10: parse error: unexpected "}"'}
    _, results = _run(FakeGet({"num_requests_running": (400, json.dumps(error).encode())}))
    line = results["prometheus/vllm_num_requests_running.json"]
    assert line.status == "failed"
    assert line.detail.startswith(
        'Prometheus rejected the query (HTTP 400, bad_data): 1:10: parse error: unexpected "}"'
    )
    assert results["prometheus/vllm_num_requests_waiting.json"].status == "ok"  # one bad query stops nothing else


def test_a_timeout_gives_the_seconds_it_really_waited() -> None:
    def slow(path: str, timeout: float) -> tuple[int, bytes]:
        time.sleep(0.3)
        raise Unreachable(TIMEOUT)

    bundle = Bundle()
    [line] = collect_prometheus(
        slow, PromAccess("http://prom:9090", None), Sink(bundle), 0.3, "", _window(), RANGE_QUERIES[:1]
    )
    assert line.status == "failed"
    assert line.detail.startswith("Prometheus at http://prom:9090 did not answer: timed out after 0.3s (limit 0.3s)")


def test_connection_refused_is_one_line_naming_where() -> None:
    _, results = _run(FakeGet({"": Unreachable(REFUSED)}))
    first = [r.detail for r in results.values() if not r.detail.startswith("not asked")]
    assert first and all(d == "Prometheus at http://prom:9090 refused the connection" for d in first)


def test_every_renamed_pair_names_two_vllm_queries_of_the_contract() -> None:
    from diag.collect.prometheus import RENAMED_PAIRS

    for new, old in RENAMED_PAIRS:
        assert BY_STEM[new].subject == BY_STEM[old].subject == "vllm"
        assert "inter_token_latency" in BY_STEM[new].promql or "kv_cache_usage" in BY_STEM[new].promql
