"""Which lines of a log can match a set of patterns, found without running each pattern on each line.

A fleet's logs are millions of lines, nearly all of which match no signal, and running some forty
patterns on every line cost a hundred times a plain line split. Every signal pattern contains a
literal that each of its matches must include ("CUDA out of memory", "EngineDeadError"): searching
the whole text for those literals, in one pass in C, finds the few lines worth running the patterns
on. Any line a pattern matches contains one of its literals, so the gate never hides a line; a
pattern with no such literal (one a user wrote as `E\\d+ \\w+`) turns the gate off and every line
is scanned.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

if sys.version_info >= (3, 11):
    from re import _constants as _sre
    from re import _parser as _sre_parse
else:
    import sre_constants as _sre
    import sre_parse as _sre_parse

# Shorter literals ("at ", "in ") would pick out most lines and save nothing.
MIN_LITERAL = 4
# How often each printable ASCII character occurs in vLLM, Ray and kubelet logs, in steps of half a
# decade: about 1 in 10**0.5 characters is " ", 1 in 10 is each of "er1tni:0o", ... (counted over
# fixtures/ and the logs of bench/generate.py). Any other character is taken as rarer than all these.
_FREQUENCY_CLASSES = (" ", "er1tni:0o", "asgp2.lu3hcdP,4mIv/8", "-OkA_9=NFT7()Sy5][fq%VWK", "'E\"GxRU6LwHBzb", "MCD")
_REPEATS = tuple(
    getattr(_sre, name) for name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT") if hasattr(_sre, name)
)
_Needle = tuple[str, bool]  # a literal, and whether it is matched ignoring case
# One pass for all the literals (_Pieces) costs about as much as eight str.find passes, one a literal.
ONE_PASS_FROM = 8


@dataclass(frozen=True)
class LineGate:
    """The literals to search for; None when some pattern has none (every line must be scanned)."""

    literals: tuple[str, ...] | None  # matched as written
    folded: tuple[str, ...] = ()  # matched ignoring case
    _pieces: _Pieces | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        literals = self.literals
        pieces = _Pieces.of(literals) if literals is not None and len(literals) >= ONE_PASS_FROM else None
        object.__setattr__(self, "_pieces", pieces)

    @classmethod
    def of(cls, patterns: Iterable[re.Pattern[str]]) -> LineGate:
        found: set[_Needle] = set()
        for pattern in patterns:
            needles = required_literals(pattern)
            if needles is None:
                return cls(None)
            found.update(needles)
        return cls(
            tuple(sorted(text for text, icase in found if not icase)),
            tuple(sorted(text for text, icase in found if icase)),
        )

    def line_starts(self, text: str) -> set[int] | None:
        """Where each '\\n'-separated line holding a literal starts; None: no gate, scan every line."""
        if self.literals is None:
            return None
        if self._pieces is not None:
            starts = self._pieces.line_starts(text)
        else:
            starts = set()
            for literal in self.literals:
                _add_lines_holding(text, literal, starts)
        lowered = text.lower() if self.folded and text.isascii() else None
        for literal in self.folded:
            if (
                lowered is not None and literal.isascii()
            ):  # then lower() keeps every offset and is what ignoring case does
                _add_lines_holding(lowered, literal.lower(), starts)
            else:  # "ſ" matches "s" ignoring case, "İ" lower-cases to two characters: the regex engine's rules
                starts.update(
                    text.rfind("\n", 0, m.start()) + 1 for m in re.finditer(re.escape(literal), text, re.IGNORECASE)
                )
        return starts

    def joined(self, other: LineGate) -> LineGate:
        """The gate of both sets of patterns, searched for in one pass."""
        if self.literals is None or other.literals is None:
            return LineGate(None)
        return LineGate(tuple(sorted({*self.literals, *other.literals})), tuple(sorted({*self.folded, *other.folded})))

    def may_match(self, text: str) -> bool:
        """False only when no line of `text` can match any of the patterns."""
        return self.line_starts(text) != set()


@dataclass(frozen=True)
class _Pieces:
    """All the literals found in one pass over a text. Each literal is cut where one of a few
    characters rare in logs begins its tail; one regex over the tails skips, in C, every position
    holding none of those characters, and where a tail matches, a lookbehind checks the whole literal
    there, so that every match is a literal found. Ninety str.find passes, one a literal, took three
    times as long over a fleet's vLLM logs; comparing the heads in Python, where a common tail matched,
    took as long as the search."""

    search: Callable[[str, int], re.Match[str] | None]

    @classmethod
    def of(cls, literals: tuple[str, ...]) -> _Pieces:
        cuts = _rare_characters(literals)
        pieces = []
        for literal in literals:
            at = min(
                (i for i, char in enumerate(_cut_points(literal)) if char in cuts), key=lambda i: _frequency(literal[i])
            )
            pieces.append((literal[at:], literal))
        return cls(re.compile(_alternation(sorted(pieces))).search)

    def line_starts(self, text: str) -> set[int]:
        starts: set[int] = set()
        found = self.search(text, 0)
        while found is not None:
            at = found.start()
            starts.add(text.rfind("\n", 0, at) + 1)
            line_end = text.find("\n", at)
            if line_end < 0:
                break
            found = self.search(text, line_end + 1)
        return starts


def _cut_points(literal: str) -> str:
    """The characters a literal may be cut at: those leaving a tail of MIN_LITERAL characters."""
    return literal[: max(1, len(literal) - MIN_LITERAL + 1)]


def _rare_characters(literals: tuple[str, ...]) -> set[str]:
    """Characters, rare together in logs, such that each literal can be cut at one: the greedy set
    cover, each step taking the character with the least frequency per literal it serves."""
    chosen: set[str] = set()
    left = set(literals)
    while left:
        serves = Counter(char for literal in left for char in set(_cut_points(literal)))
        best = min(serves, key=lambda char: (_frequency(char) / serves[char], char))
        chosen.add(best)
        left = {literal for literal in left if best not in _cut_points(literal)}
    return chosen


def _frequency(char: str) -> float:
    """Roughly the share of log text that is `char` (_FREQUENCY_CLASSES)."""
    steps = next((i for i, chars in enumerate(_FREQUENCY_CLASSES) if char in chars), len(_FREQUENCY_CLASSES))
    return 10 ** (-(steps + 1) / 2)


def _alternation(pieces: list[tuple[str, str]]) -> str:
    """A regex matching where a literal's tail begins, if the whole literal ends where the tail does;
    `pieces` are (what is left of the tail, the literal), sorted. A trie of the tails: at each position
    the engine tries only the tails that begin with its character, and a lookbehind at each tail's end
    checks its literal (the head before the tail included)."""
    ends = [f"(?<={re.escape(literal)})" for rest, literal in pieces if not rest]
    rests_by_first: dict[str, list[tuple[str, str]]] = {}
    for rest, literal in pieces:
        if rest:
            rests_by_first.setdefault(rest[0], []).append((rest[1:], literal))
    branches = ends + [re.escape(first) + _alternation(rests) for first, rests in rests_by_first.items()]
    return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"


def _add_lines_holding(text: str, literal: str, starts: set[int]) -> None:
    at = text.find(literal)
    while at >= 0:
        starts.add(text.rfind("\n", 0, at) + 1)
        line_end = text.find("\n", at)
        at = text.find(literal, line_end) if line_end >= 0 else -1


def candidate_lines(text: str, gate: LineGate) -> list[str]:
    """The lines (as str.splitlines cuts them) that the gate lets through, in the text's order; every
    line when it cannot tell."""
    starts = gate.line_starts(text)
    if starts is None:
        return text.splitlines()
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
    except Exception:  # compiled already; a parser change only turns the gate off
        return None
    return _of_sequence(list(parsed.data), bool(parsed.state.flags & _sre.SRE_FLAG_IGNORECASE))


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
            inner_icase = (
                icase or bool(add_flags & _sre.SRE_FLAG_IGNORECASE)
            ) and not del_flags & _sre.SRE_FLAG_IGNORECASE
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
