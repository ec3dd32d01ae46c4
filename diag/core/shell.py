"""Values from a bundle in the commands a report prints, quoted for a POSIX shell where they need it.

A remediation line indented by two or more spaces that is not a list item is a command (the terminal
prints it whole, to be pasted). A hole on such a line is filled from a view of the facts in which every
string is a shell word: `vllm-0` prints as it is, `vllm-0$(id>x)` as `'vllm-0$(id>x)'`. Literals of
the rule's own CEL (`'<pod>'`, `' --previous'`) are the rule's words and stay as written, so a hole may
still build a command from the rule's words and the bundle's values. A hole inside quotes the rule's
text opened is escaped for those quotes instead. Facts that are commands already
(PREPARED) quote their values where they are built. In every hole, prose or command, a character that
no Kubernetes name holds (line breaks, other control characters, bidirectional overrides) is shown
escaped (`\\n`), so that no value can start a line of its own.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

COMMAND_LINE = re.compile(r"^ {2,}(?!- )\S")

# Fact fields that hold a command, or the arguments of one, built by a fact builder with word() on
# each value it took from the bundle.
PREPARED = frozenset({"exec_prefix", "ray_head_exec", "logs_command", "edit_hint"})

_UNSHOWABLE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


def word(value: str) -> str:
    """`value` as one shell word: as it is when nothing in it is special to the shell, else quoted
    (and escaped: a line break cannot be pasted inside one line)."""
    return shlex.quote(escaped(value)) if value else value


def escaped(text: str) -> str:
    """Control and bidirectional characters as Python writes them in a string (`\\n`, `\\u202e`)."""
    return _UNSHOWABLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def quote_state(text: str) -> str:
    """ "plain", "single" or "double": inside which quotes a POSIX shell is at the end of `text`."""
    state, i = "plain", 0
    while i < len(text):
        c = text[i]
        if state == "single":
            state = "plain" if c == "'" else state
        elif c == "\\":
            i += 1
        elif state == "double":
            state = "plain" if c == '"' else state
        elif c in "'\"":
            state = "single" if c == "'" else "double"
        i += 1
    return state


def inside(state: str, value: str) -> str:
    """`value` as part of a string the rule's text already opened with a single or a double quote."""
    value = escaped(value)
    if state == "single":
        return value.replace("'", "'\\''")
    return re.sub(r'([$`"\\])', r"\\\1", value)


def quoted_view(value: Any, key: str | None = None) -> Any:
    """The facts with every string (in maps and lists, at any depth) a shell word, PREPARED fields aside."""
    kind = type(value)
    if kind is str:
        return value if key in PREPARED else word(value)
    if kind is dict:
        return {k: quoted_view(v, k) for k, v in value.items()}
    if kind is list:
        return [quoted_view(v, key) for v in value]
    return value
