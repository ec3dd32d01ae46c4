"""`--output html` without a browser: the page's structure, what it draws, and that no text of the
bundle's becomes markup (tests/browser/ opens the same pages in Chromium)."""

from __future__ import annotations

import functools
import json
import sys
from datetime import datetime, timezone
from html.parser import HTMLParser
from pathlib import Path

import pytest

from diag.analyze import analyze_bundle
from diag.bundle.files import Bundle
from diag.core.errors import UserError
from diag.engine.config import Config
from diag.engine.rules import Finding
from diag.report import timeline
from diag.report.html_report import render_html
from diag.snapshot.model import Event, RayNode
from tests.hostile_html import MARK, MESSAGES, NAMES, hostile_html_bundle

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
# every element the page itself writes, and those matplotlib's SVG holds
OWN_TAGS = {
    "html", "head", "meta", "title", "style", "body", "main", "script", "h1", "h2", "h3", "ul", "ol", "li", "p",
    "a", "code", "pre", "span", "strong", "br", "div", "button", "section", "article", "figure", "figcaption",
    "table", "thead", "tbody", "tr", "th", "td", "details", "summary",
    "svg", "g", "path", "defs", "clippath", "clipPath", "use", "text", "rect", "metadata", "rdf:rdf", "cc:work",
    "dc:type", "dc:format", "dc:title", "dc:date", "dc:creator", "cc:agent",
}  # fmt: skip


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self.in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self.in_script = False

    def handle_data(self, data: str) -> None:
        if not self.in_script:
            self.text.append(data)


def parsed(page: str) -> Tags:
    tags = Tags()
    tags.feed(page)
    return tags


def page_of(name: str) -> tuple[str, object]:
    report = analyze_bundle(Bundle.open(FIXTURES / name))
    return render_html(report), report


@pytest.mark.parametrize("name_payload", [None, *NAMES])
def test_hostile_messages_and_names_are_text_never_markup(name_payload: str | None) -> None:
    page = render_html(analyze_bundle(hostile_html_bundle(name_payload)))
    tags = parsed(page)
    assert {t for t, _ in tags.tags} <= OWN_TAGS
    assert [t for t, _ in tags.tags].count("script") == 1
    assert not [(t, a) for t, a in tags.tags for k in a if k.startswith("on")]
    assert not [a for _, a in tags.tags for v in a.values() if v and "javascript:" in v]
    assert not [a for _, a in tags.tags if "src" in a]
    text = "".join(tags.text)
    for message in MESSAGES:  # each shown, as it was written, in the marks' table
        assert message in text
    if name_payload:
        assert name_payload in text
    # the SVG holds no text of the bundle's: only the page around it names what is drawn
    for svg in page.split("<svg ")[1:]:
        assert MARK not in svg.split("</svg>")[0]


def test_the_page_asks_for_nothing_at_view_time() -> None:
    page, _ = page_of("history-xid-on-one-gpu")
    tags = parsed(page)
    assert not [t for t, a in tags.tags if t in ("link", "img", "iframe", "object", "embed")]
    assert "@import" not in page and "url(http" not in page
    policy = next(
        a["content"] for t, a in tags.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"
    )
    assert policy and policy.startswith("default-src 'none'") and "script-src 'sha256-" in policy


def test_the_answer_comes_first_with_the_fix_commands_to_copy() -> None:
    page, _ = page_of("history-xid-on-one-gpu")
    assert page.index("Verdict: gpu layer at fault") < page.index('id="timeline"') < page.index('id="findings"')
    tags = parsed(page)
    buttons = [a for t, a in tags.tags if t == "button"]
    targets = {a["id"]: a for t, a in tags.tags if t == "pre" and a.get("id")}
    assert buttons and all(b["data-copy"] in targets for b in buttons)
    assert 'id="cmd-1">kubectl cordon gpu-h100-2</pre>' in page
    assert (
        f"<strong>When:</strong> since {_first_xid_minute('history-xid-on-one-gpu')} UTC ("
        in page.split('id="timeline"')[0]
    )


def _first_xid_minute(fixture: str) -> str:
    """The minute of the first sample where dcgm-exporter's Xid gauge is not 0."""
    answer = json.loads((FIXTURES / fixture / "prometheus" / "dcgm_xid_errors.json").read_text())
    first = min(t for s in answer["data"]["result"] for t, v in s["values"] if float(v) > 0)
    return datetime.fromtimestamp(first, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")


def _in_window(fixture: str, minutes: float) -> str:
    """A time `minutes` after the start of the fixture's Prometheus window, as the API writes it."""
    answer = json.loads((FIXTURES / fixture / "prometheus" / "vllm_kv_cache_usage_perc.json").read_text())
    at = answer["window"]["start"] + minutes * 60
    return datetime.fromtimestamp(at, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_the_timeline_draws_the_affected_gpu_and_the_server_it_serves() -> None:
    report = analyze_bundle(Bundle.open(FIXTURES / "history-xid-on-one-gpu"))
    found = timeline.build(report, {id(f): f"f-{n}" for n, f in enumerate(report.findings)})
    assert found is not None
    assert [t.subject for t in found.items] == ["gpu/gpu-h100-2/1", "vllm/llm/llama-70b-7f8d9c6b5d-8q7hc"]
    gpu = found.items[0]
    assert [(e.rule, e.anchor) for e in gpu.episodes] == [("GPU-102", "f-0")]
    assert [(m.kind, m.text) for m in gpu.marks] == [("Xid", "DCGM_FI_DEV_XID_ERRORS = 79")]
    assert gpu.episodes[0].start <= gpu.marks[0].at < gpu.episodes[0].start + 60  # the sample in that minute


def test_an_episode_is_dated_as_the_finding_says() -> None:
    """The first evidence line with a date is the rule's own; a later one dates what it is compared with."""
    since = Finding(
        "GPU-102", "gpu", "critical", "t", "gpu/a/0",
        ["no date here", "Xid 79 since 2026-12-03 16:56:10 UTC (7.2 min), still going on at collection",
         "the server from 2026-12-03 16:33 to 2026-12-03 16:52 UTC"],
        "fix",
    )  # fmt: skip
    episodes = timeline.episodes_of(since, "f-0", collected=1796317394.0)
    assert [(e.start, e.end, e.text) for e in episodes] == [(1796316970.0, 1796317394.0, since.evidence[1])]
    ended = Finding("VLLM-101", "vllm", "critical", "t", "vllm/a/b", [since.evidence[2]], "fix")
    assert [(e.start, e.end) for e in timeline.episodes_of(ended, "f-1", None)] == [(1796315580.0, 1796316720.0)]
    unknown_end = timeline.episodes_of(since, "f-0", collected=None)
    assert [(e.start, e.end) for e in unknown_end] == [(1796316970.0, 1796316970.0)]


def test_a_report_with_no_series_says_so_and_draws_nothing() -> None:
    page, _ = page_of("k8s-gpu-node-notready")
    assert "<svg" not in page
    assert "No series to draw" in page


def test_the_scrapes_alone_are_drawn_as_points() -> None:
    report = analyze_bundle(Bundle.open(FIXTURES / "vllm-kv-cache-saturated"))
    found = timeline.build(report, {id(f): f"f-{n}" for n, f in enumerate(report.findings)})
    assert found is not None
    kv = found.items[0].panels[0].series
    assert [s.from_scrapes for s in kv] == [True] and len(kv[0].points) >= 2
    assert found.end - found.start >= 60


def test_matplotlib_missing_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    report = analyze_bundle(Bundle.open(FIXTURES / "demo"))
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(UserError) as raised:
        render_html(report)
    assert (
        str(raised.value)
        == "the HTML report (--output html, serve --html) needs matplotlib: pip install 'llmdiag[html]'"
    )


def test_marks_are_the_events_and_ray_deaths_of_the_pod_and_its_node_in_the_window() -> None:
    report = analyze_bundle(Bundle.open(FIXTURES / "history-kv-storm-ended"))
    snap = report.snapshot
    assert snap is not None
    server = next(s for s in snap.vllm_servers if s.name.endswith("pfnp5"))
    pod_ns, pod_name = str(server.pod).split("/")
    window = functools.partial(_in_window, "history-kv-storm-ended")
    snap.events += [
        Event(pod_ns, "Pod", pod_name, "Killing", "Stopping container vllm", "Normal", 1, window(10)),
        Event(None, "Node", str(server.node), "NodeNotReady", "kubelet stopped", "Warning", 3, window(11)),
        Event(None, "Node", "some-other-node", "NodeNotReady", "not ours", "Warning", 1, window(12)),
        Event(pod_ns, "Pod", pod_name, "Old", "before the window", "Warning", 1, window(-100)),
    ]
    snap.ray_nodes.append(RayNode("abc", state="DEAD", end_time=window(15.5), pod=server.pod))
    found = timeline.build(report, {id(f): f"f-{n}" for n, f in enumerate(report.findings)})
    assert found is not None
    marks = [(m.number, m.kind, m.about, m.text) for m in found.items[0].marks]
    assert marks == [
        (1, "event", f"Pod {server.pod}", "Killing: Stopping container vllm"),
        (2, "warning event", f"Node {server.node}", "NodeNotReady (x3): kubelet stopped"),
        (3, "Ray death", "Ray node abc", "died"),
    ]


def test_the_settings_used_name_what_was_changed_from_its_default() -> None:
    config = Config()
    config.settings["kv_cache_high"] = 0.95
    page = render_html(analyze_bundle(Bundle.open(FIXTURES / "vllm-kv-cache-saturated"), config))
    settings = page.split('id="settings"')[1]
    assert "<td><code>kv_cache_high</code></td><td>0.95 (default 0.9)</td>" in settings
    assert "<td><code>kv_cache_low</code></td><td>0.5</td>" in settings
    assert "<td><code>scrape_interval_s</code></td><td>5.0</td>" in settings  # how the bundle was collected


def test_a_value_that_is_not_a_finite_number_is_a_gap_in_the_chart() -> None:
    report = analyze_bundle(Bundle.open(FIXTURES / "history-kv-storm-ended"))
    assert report.snapshot is not None
    server = next(s for s in report.snapshot.vllm_servers if s.name.endswith("pfnp5"))
    samples = server.history["vllm_kv_cache_usage_perc"]
    samples[3:6] = [(samples[3][0], float("nan")), (samples[4][0], float("inf")), (samples[5][0], float("-inf"))]
    found = timeline.build(report, {id(f): f"f-{n}" for n, f in enumerate(report.findings)})
    assert found is not None
    kv = found.items[0].panels[0].series[0].points
    assert len(kv) == len(samples) - 3
    assert "<svg" in render_html(report)
