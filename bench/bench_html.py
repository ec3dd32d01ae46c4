"""`--output html` of a fleet bundle: the page's size, the time to write it, and the time headless
Chromium takes to open it (navigation start to the load event, then to two painted frames).

    python bench/bench_html.py BUNDLE [--runs 3]

BUNDLE: a folder generate.py wrote (e.g. /tmp/llmdiag-fleet/L). Needs the html extra and
/usr/bin/chromium (tests/browser/cdp.py drives it, every request refused).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from diag.analyze import analyze_bundle
from diag.bundle.files import Bundle
from diag.report.html_report import render_html

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "browser"))  # the tests' DevTools client

from cdp import Chromium  # noqa: E402

_PAINTED = (
    "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => "
    "r(performance.now() - performance.getEntriesByType('navigation')[0].startTime))))"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    report = analyze_bundle(Bundle.open(args.bundle))
    writes = []
    for _ in range(args.runs):
        began = time.perf_counter()
        page = render_html(report)
        writes.append(time.perf_counter() - began)
    out = Path(tempfile.mkdtemp(prefix="llmdiag-html-")) / "report.html"
    out.write_text(page, encoding="utf-8")
    browser = Chromium()
    try:
        opened, loads = [], []
        for _ in range(args.runs):
            began = time.perf_counter()
            visit = browser.open(out)
            opened.append(time.perf_counter() - began)
            loads.append(browser.evaluate(_PAINTED, wait=True) / 1000)
            assert not visit.errors and not visit.requests, (visit.errors, visit.requests)
    finally:
        browser.close()
    charts = page.count("<svg ")
    print(f"bundle {args.bundle}: {len(report.findings)} findings, {charts} charts")
    print(f"page: {len(page.encode()) / 1e6:.2f} MB")
    print(f"render_html: median {statistics.median(writes):.2f} s (min {min(writes):.2f}, max {max(writes):.2f})")
    print(f"chromium, navigation to two painted frames: median {statistics.median(loads):.2f} s (max {max(loads):.2f})")
    print(f"chromium, open() as the tests call it: median {statistics.median(opened):.2f} s")


if __name__ == "__main__":
    main()
