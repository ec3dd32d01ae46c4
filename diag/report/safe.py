"""Text from a bundle, made safe to show: a bundle is written by someone else, and its strings reach
the analyst's terminal and the tickets a report is pasted into.

- `plain`: one line with no terminal escape sequence (colours, cursor moves, window titles, OSC 8
  links), no other control character and no bidirectional override; tabs and line breaks read as spaces.
- `block`: the same for text of several lines (a remediation), line breaks kept.
- `md` / `code` / `fence`: `plain` text as Markdown text, an inline code span, a fenced block; no
  character of the bundle's can open markup (emphasis, links, HTML, headings, table cells).
The terminal report prints rich `Text` objects, never markup strings, so `[bold]` or `[link=...]`
from a bundle prints as it is. JSON keeps the text: json.dumps escapes every control character.
"""

from __future__ import annotations

import re

_ESCAPE_SEQUENCE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, erase
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: window title, hyperlinks
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"  # DCS, SOS, PM, APC strings
    r"|\x1b[ -/]*[0-~]?"  # any other escape
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_BREAK = re.compile(r"\r\n|[\t\r\n\u2028\u2029]")
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>#|~&])")
_LINE_START = re.compile(r"^(\s*)([-+=](?=\s|$)|\d+(?=[.)]))")


def block(text: str) -> str:
    lines = _ESCAPE_SEQUENCE.sub("", str(text)).replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROL.sub("", lines.replace("\t", " "))


def plain(text: str) -> str:
    return _BREAK.sub(" ", block(text))


def md(text: str) -> str:
    """Markdown that shows `text` as it is."""
    return _LINE_START.sub(_escape_start, _MARKDOWN_SPECIAL.sub(r"\\\1", plain(text)))


def _escape_start(match: re.Match[str]) -> str:
    """A list marker (`-`, `+`, `1.`) or a setext underline at the start would make a list or a heading."""
    blank, marker = match.groups()
    return f"{blank}{marker}\\" if marker.isdigit() else f"{blank}\\{marker}"


def code(text: str) -> str:
    """An inline code span of `text`, fenced by more backticks than any run inside it."""
    text = plain(text)
    ticks = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def fence(text: str) -> list[str]:
    """A fenced code block of `text`, its fence longer than any backtick run inside it."""
    text = block(text)
    ticks = "`" * max(3, max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    return [ticks, *text.split("\n"), ticks]
