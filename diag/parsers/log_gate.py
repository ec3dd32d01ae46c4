"""Which lines of a log can match a set of patterns, found without running each pattern on each line.

A fleet's logs are millions of lines, nearly all of which match no signal, and running some forty
patterns on every line cost a hundred times a plain line split. Every signal pattern contains a
literal that each of its matches must include ("CUDA out of memory", "EngineDeadError"): searching
the whole text for those literals (in C) finds the few lines worth running the patterns on. Any
line a pattern matches contains one of its literals, so the gate never hides a line; a pattern with
no such literal (one a user wrote as `E\\d+ \\w+`) turns the gate off and every line is scanned.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

try:
    from re import _constants as _sre
    from re import _parser as _sre_parse
except ImportError:  # Python 3.10
    import sre_constants as _sre  # type: ignore[no-redef]
    import sre_parse as _sre_parse  # type: ignore[no-redef]

# Shorter literals ("at ", "in ") would pick out most lines and save nothing.
MIN_LITERAL = 4
_REPEATS = tuple(getattr(_sre, name) for name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT") if hasattr(_sre, name))
_Needle = tuple[str, bool]  # a literal, and whether it is matched ignoring case


@dataclass(frozen=True)
class LineGate:
    """The literals to search for; None when some pattern has none (every line must be scanned)."""

    literals: tuple[str, ...] | None  # matched as written: str.find, several times faster than a regex
    folded: tuple[str, ...] = ()  # matched ignoring case

    @classmethod
    def of(cls, patterns: Iterable[re.Pattern[str]]) -> LineGate:
        found: set[_Needle] = set()
        for pattern in patterns:
            needles = required_literals(pattern)
            if needles is None:
                return cls(None)
            found.update(needles)
        return cls(tuple(sorted(text for text, icase in found if not icase)), tuple(sorted(text for text, icase in found if icase)))

    def line_starts(self, text: str) -> set[int] | None:
        """Where each '\\n'-separated line holding a literal starts; None: no gate, scan every line."""
        if self.literals is None:
            return None
        starts: set[int] = set()
        for literal in self.literals:
            _add_lines_holding(text, literal, starts)
        lowered = text.lower() if self.folded and text.isascii() else None
        for literal in self.folded:
            if lowered is not None and literal.isascii():  # then lower() keeps every offset and is what ignoring case does
                _add_lines_holding(lowered, literal.lower(), starts)
            else:  # "ſ" matches "s" ignoring case, "İ" lower-cases to two characters: the regex engine's rules
                starts.update(text.rfind("\n", 0, m.start()) + 1 for m in re.finditer(re.escape(literal), text, re.IGNORECASE))
        return starts


    def may_match(self, text: str) -> bool:
        """False only when no line of `text` can match any of the patterns."""
        return self.line_starts(text) != set()


def _add_lines_holding(text: str, literal: str, starts: set[int]) -> None:
    at = text.find(literal)
    while at >= 0:
        starts.add(text.rfind("\n", 0, at) + 1)
        line_end = text.find("\n", at)
        at = text.find(literal, line_end) if line_end >= 0 else -1


def candidate_lines(text: str, gates: Iterable[LineGate]) -> list[str]:
    """The lines (as str.splitlines cuts them) that any gate lets through, in the text's order; every
    line when a gate cannot tell."""
    starts: set[int] = set()
    for gate in gates:
        found = gate.line_starts(text)
        if found is None:
            return text.splitlines()
        starts |= found
    lines: list[str] = []
    for start in sorted(starts):
        end = text.find("\n", start)
        lines.extend(text[start : end if end >= 0 else len(text)].splitlines())
    return lines


def required_literals(pattern: re.Pattern[str]) -> list[_Needle] | None:
    """Literals at least one of which every match of `pattern` contains; None when it has none that
    are MIN_LITERAL characters long (or its syntax is beyond what this reads)."""
    try:
        parsed = _sre_parse.parse(pattern.pattern, pattern.flags)
    except Exception:  # noqa: BLE001 - compiled already; a parser change only turns the gate off
        return None
    return _of_sequence(list(parsed), bool(parsed.state.flags & _sre.SRE_FLAG_IGNORECASE))


def _of_sequence(items: list, icase: bool) -> list[_Needle] | None:
    """The best literal set of a sequence: a run of literal characters, or one item's own set."""
    options: list[list[_Needle]] = []
    run: list[str] = []

    def end_run() -> None:
        if len(run) >= MIN_LITERAL:
            options.append([("".join(run), icase)])
        run.clear()

    for op, av in items:
        if op is _sre.LITERAL:
            run.append(chr(av))
            continue
        end_run()
        if op is _sre.SUBPATTERN:
            _group, add_flags, del_flags, inner = av
            inner_icase = (icase or bool(add_flags & _sre.SRE_FLAG_IGNORECASE)) and not del_flags & _sre.SRE_FLAG_IGNORECASE
            if (found := _of_sequence(list(inner), inner_icase)) is not None:
                options.append(found)
        elif op is _sre.BRANCH:
            if (found := _of_branches(av[1], icase)) is not None:
                options.append(found)
        elif op in _REPEATS:
            low, _high, inner = av
            if low >= 1 and (found := _of_sequence(list(inner), icase)) is not None:
                options.append(found)
    end_run()
    # the longest shortest literal ("Engine" lets through far more lines than "EngineDeadError"), then
    # the fewest alternatives
    return min(options, key=lambda o: (-min(len(text) for text, _ in o), len(o)), default=None)


def _of_branches(branches: list, icase: bool) -> list[_Needle] | None:
    needles: list[_Needle] = []
    for branch in branches:
        found = _of_sequence(list(branch), icase)
        if found is None:
            return None
        needles.extend(found)
    return needles
