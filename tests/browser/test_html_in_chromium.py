"""The HTML report opened in Debian's headless Chromium with every request refused: each fixture's page
loads with no console error and asks for nothing; the shaded episodes sit on the minutes the data says,
in the DOM and in a screenshot; the page passes axe-core; hostile text stays text."""

from __future__ import annotations

import base64
import io
import json
import re
from datetime import datetime, timezone

import pytest
from conftest import FIXTURES

from tests.hostile_html import MESSAGES, NAMES, hostile_html_bundle

ALL = sorted(p.name for p in FIXTURES.iterdir() if (p / "expected.json").is_file())
_DATED = re.compile(
    r"(?:from|since) (\d{4}-\d\d-\d\d \d\d:\d\d(?::\d\d)?)(?: to (\d{4}-\d\d-\d\d \d\d:\d\d(?::\d\d)?))? UTC"
)
HISTORY = ["history-kv-storm-ended", "history-queue-building", "history-xid-on-one-gpu", "history-power-slowdown"]

# The first chart's first shaded episode, and its top panel's tick labels, where the page put them (CSS px).
_GEOMETRY = """(() => {
  const fig = document.getElementById("tl1");
  const shade = fig.querySelector('[id="tl1-episode-0"]').getBoundingClientRect();
  const axes = fig.querySelector('[id="tl1-patch_2"]').getBoundingClientRect();
  const ticks = [...fig.querySelectorAll("svg text")].filter(t => /^\\d\\d:\\d\\d$/.test(t.textContent.trim()))
    .map(t => { const r = t.getBoundingClientRect(); return [t.textContent.trim(), r.left + r.width / 2]; });
  return {left: shade.left + scrollX, right: shade.right + scrollX, top: axes.top + scrollY,
          bottom: axes.bottom + scrollY, ticks: ticks};
})()"""


def _minute(label: str, day: datetime) -> float:
    hours, minutes = label.split(":")
    return day.replace(hour=int(hours), minute=int(minutes), second=0, microsecond=0).timestamp()


def _time_to_x(ticks: list[list], day: datetime):  # type: ignore[no-untyped-def]
    """The page's x of a time, from two of its tick labels (the axis is linear)."""
    (label_a, xa), (label_b, xb) = ticks[0], ticks[-1]
    ta, tb = _minute(label_a, day), _minute(label_b, day)
    return lambda t: xa + (t - ta) * (xb - xa) / (tb - ta)


@pytest.mark.parametrize("name", ALL)
def test_every_fixture_opens_offline_without_an_error(name: str, browser, report_page) -> None:
    _, path = report_page(name)
    visit = browser.open(path)
    assert visit.errors == []
    assert visit.requests == []
    assert browser.evaluate("document.querySelector('h2#verdict') !== null")


def test_kv_storm_shading_spans_the_minutes_the_series_saturated(browser, report_page) -> None:
    """Against the data itself: the shade starts at the first sample of the storm where the KV cache was
    at or above kv_cache_high (0.9) with requests waiting, and ends with its last."""
    _, path = report_page("history-kv-storm-ended")
    series = json.loads((FIXTURES / "history-kv-storm-ended/prometheus/vllm_kv_cache_usage_perc.json").read_text())
    values = next(s["values"] for s in series["data"]["result"] if s["metric"].get("pod", "").endswith("pfnp5"))
    full = [float(t) for t, v in values if float(v) >= 0.9]
    storm = [t for t in full if t < full[0] + 25 * 60]  # the storm: the first run of full samples
    browser.open(path)
    geometry = browser.evaluate(_GEOMETRY)
    day = datetime.fromtimestamp(storm[0], tz=timezone.utc)
    x = _time_to_x(geometry["ticks"], day)
    minute_px = x(storm[0] + 60) - x(storm[0])
    # the evidence dates to the minute: the shade's edges are within a minute of the samples'
    assert abs(geometry["left"] - x(storm[0])) <= minute_px
    assert abs(geometry["right"] - x(storm[-1])) <= minute_px


@pytest.mark.parametrize("name", HISTORY)
def test_the_shaded_episode_is_where_the_finding_dates_it_in_a_screenshot(name: str, browser, report_page) -> None:
    from PIL import Image

    report, path = report_page(name)
    browser.open(path)
    shot = Image.open(io.BytesIO(browser.screenshot())).convert("RGB")
    geometry = browser.evaluate(_GEOMETRY)
    subject = browser.evaluate("document.querySelector('#tl1-caption code').textContent")
    evidence = " ".join(
        next(f.evidence for f in report.findings if f.subject == subject and _DATED.search(" ".join(f.evidence)))
    )
    start_text, end_text = _DATED.search(evidence).groups()
    start = _utc(start_text)
    end = _utc(end_text) if end_text else report_end(report)
    day = datetime.fromtimestamp(start, tz=timezone.utc)
    x = _time_to_x(geometry["ticks"], day)
    assert abs(geometry["left"] - x(start)) <= 2  # the DOM's shade against the evidence, to the pixel
    top, bottom = int(geometry["top"]) + 3, int(geometry["bottom"]) - 3

    def shaded(t: float) -> float:
        """The share of the top panel's column at time t that has the episode's orange."""
        column = [shot.getpixel((int(x(t)), y)) for y in range(top, bottom)]
        return sum(1 for r, g, b in column if r - b > 25 and r > 200) / len(column)

    assert shaded(start + 100) > 0.6  # inside (off the minute, where a grid line may be): shaded
    if start - 120 > _minute(geometry["ticks"][0][0], day) - 300:
        assert shaded(start - 120) < 0.1  # two minutes before: not
    if end + 120 < _minute(geometry["ticks"][-1][0], day) + 300 and end + 120 < report_end(report):
        assert shaded(end + 120) < 0.1


def _utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp()


def report_end(report) -> float:  # type: ignore[no-untyped-def]
    window = report.prometheus_window
    return window.end if window else float("inf")


@pytest.mark.parametrize("name", [*HISTORY, "demo", "k8s-gpu-node-notready", "incident-vllm-hf-gated-403"])
def test_no_serious_or_critical_accessibility_violation(name: str, browser, report_page, axe) -> None:
    _, path = report_page(name)
    browser.open(path)
    violations = [v for v in axe() if v["impact"] in ("serious", "critical")]
    assert violations == []


@pytest.mark.parametrize("name_payload", [None, *NAMES])
def test_hostile_text_runs_nothing_and_adds_no_element(name_payload, browser, report_page) -> None:
    _, path = report_page(f"hostile-{(None, *NAMES).index(name_payload)}", hostile_html_bundle(name_payload))
    visit = browser.open(path)
    assert visit.errors == [] and visit.requests == []
    assert browser.evaluate("window.PWNED") is None
    assert browser.evaluate("document.querySelectorAll('img, iframe, object, embed, a[href^=javascript]').length") == 0
    assert browser.evaluate("document.scripts.length") == 1
    shown = browser.evaluate("document.body.innerText")
    assert all(message in shown for message in MESSAGES)
    assert name_payload is None or name_payload in shown


def test_a_copy_button_copies_its_command(browser, report_page) -> None:
    _, path = report_page("history-xid-on-one-gpu")
    visit = browser.open(path)
    said = browser.evaluate(
        "(() => { const b = document.querySelector('button[data-copy]'); b.click();"
        " return new Promise(r => setTimeout(() => r(b.textContent), 200)); })()",
        wait=True,
    )
    assert said in ("Copied", "Selected")
    assert visit.errors == []
    assert browser.evaluate("String(window.getSelection())") in ("", "kubectl cordon gpu-h100-2")


def test_print_hides_the_buttons_and_keeps_the_charts(browser, report_page) -> None:
    _, path = report_page("history-xid-on-one-gpu")
    visit = browser.open(path)
    pdf = base64.b64decode(browser.call("Page.printToPDF", printBackground=True)["data"])
    assert pdf.startswith(b"%PDF") and pdf.count(b"/Type /Page") >= 2 and visit.errors == []
    browser.call("Emulation.setEmulatedMedia", media="print")
    try:
        assert browser.evaluate("getComputedStyle(document.querySelector('button.copy')).display") == "none"
        assert browser.evaluate("document.querySelector('figure svg').getBoundingClientRect().height") > 100
    finally:
        browser.call("Emulation.setEmulatedMedia", media="")
