"""Bundle text in reports: no escape sequence or control character reaches the terminal or the
Markdown, rich markup prints literally, Markdown specials cannot open markup; JSON keeps the text."""

from __future__ import annotations

import io
import json

from rich.console import Console

from diag.analyze import analyze_bundle
from diag.bundle.files import Bundle
from diag.report.json_report import render_json
from diag.report.markdown import render_markdown
from diag.report.safe import code, fence, md, plain
from diag.report.terminal import print_report

HOSTILE = (
    "\x1b]0;owned\x07\x1b[2J\x1b[31mred\x1b[0m [bold]loud[/bold] "
    "[link=https://evil.example]click[/link] :warning: `tick` a|b \u202eevil\x00\r\nnext"
)


def test_plain_drops_escapes_and_controls_and_keeps_one_line() -> None:
    assert (
        plain(HOSTILE) == "red [bold]loud[/bold] [link=https://evil.example]click[/link] :warning: `tick` a|b evil next"
    )


def test_markdown_text_and_code_cannot_open_markup() -> None:
    assert md("*x* _y_ [a](b) <img> # h | c `d` &amp;") == r"\*x\* \_y\_ \[a\](b) \<img\> \# h \| c \`d\` \&amp;"
    assert md("- item") == r"\- item" and md("1. one") == r"1\. one"
    assert code("a`b") == "``a`b``" and code("`x") == "`` `x ``"
    assert fence("x\n```\ny") == ["````", "x", "```", "y", "````"]


def _hostile_report():  # type: ignore[no-untyped-def]
    """A vLLM health file and a scrape holding escape sequences and markup, shown in the sources."""
    return analyze_bundle(Bundle({
        "vllm/srv.health.txt": HOSTILE.encode(),
        "vllm/srv.metrics.txt": f"vllm:num_requests_running 1\n{HOSTILE}\n".encode(),
    }))  # fmt: skip


def test_terminal_prints_bundle_markup_literally_and_no_escape_sequence() -> None:
    out = io.StringIO()
    print_report(_hostile_report(), Console(file=out, width=400, color_system=None, force_terminal=False))
    text = out.getvalue()
    assert "\x1b" not in text and "\x00" not in text and "\u202e" not in text
    assert "[bold]loud[/bold]" in text


def test_terminal_with_colours_has_only_its_own_escape_sequences() -> None:
    out = io.StringIO()
    print_report(_hostile_report(), Console(file=out, width=400, color_system="truecolor", force_terminal=True))
    assert "\x1b]" not in out.getvalue() and "\x1b[2J" not in out.getvalue()  # no OSC (title, link), no screen clear


def test_markdown_and_json_of_hostile_text() -> None:
    report = _hostile_report()
    markdown = render_markdown(report)
    assert "\x1b" not in markdown and "\r" not in markdown and "\\[bold\\]" in markdown
    data = json.loads(render_json(report))
    details = " ".join(s["detail"] for s in data["sources"].values())
    assert "\x1b]0;owned" in details  # JSON keeps the text, escaped by json.dumps
    assert "\x1b" not in render_json(report)
