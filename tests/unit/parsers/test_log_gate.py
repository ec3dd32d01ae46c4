"""The literal gate in front of the log signals: it must never hide a line a pattern matches."""

import dataclasses
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from diag.core.rules_dir import builtin_rules_dir
from diag.parsers.log_gate import MIN_LITERAL, ONE_PASS_FROM, LineGate, candidate_lines, required_literals
from diag.parsers.logs import scan_log
from diag.parsers.signals import builtin_signals, load_signals

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("regex", "literals"),
    [
        (r"CUDA out of memory", [("CUDA out of memory", False)]),
        (r"(?:Spilled \d+ MiB, \d+ objects)", [("Spilled ", False)]),
        # the common "Engine" is factored out of both branches, but lets through more lines than either
        (r"(?:EngineDeadError)|(?:Engine core proc \S+ died)", [("DeadError", False), (" core proc ", False)]),
        (r"(?i:Failed to initialize NVML)", [("Failed to initialize NVML", True)]),
        (r"(?:NCCL )?WARN Call to ibv_create_qp failed", [("WARN Call to ibv_create_qp failed", False)]),
        (r"(?:ab)+cdefg", [("cdefg", False)]),
        (r"\S+ failed", [(" failed", False)]),
        (r"E\d+ \w+", None),  # no literal of MIN_LITERAL characters
        (r"(?:Xid \d+)|\d+ errors", [("Xid ", False), (" errors", False)]),
        (r"(?:Xid \d+)|\d+", None),  # one branch has no literal: a line could match it alone
        (r"ab(?=cdef)", None),  # a lookahead's text is not part of the match it must contain
    ],
)
def test_required_literals(regex: str, literals: list | None) -> None:
    assert required_literals(re.compile(regex)) == literals


def test_every_builtin_signal_is_gated() -> None:
    """A built-in pattern without a literal would make every line of every log run every pattern."""
    assert builtin_signals().gate.literals is not None
    for name, pattern in builtin_signals().patterns.items():
        assert required_literals(pattern) is not None, name


def test_candidate_lines_keep_order_and_the_lines_splitlines_would_cut() -> None:
    gate = LineGate.of([re.compile("needle")])
    text = "a\nneedle one\r\nb\nc needle\rx\nneedle\n"
    assert candidate_lines(text, gate) == ["needle one", "c needle", "x", "needle"]
    assert candidate_lines(text, gate.joined(LineGate(None))) == text.splitlines()
    assert gate.may_match(text) and not gate.may_match("a\nb\n") and LineGate(None).may_match("a\nb\n")
    assert candidate_lines(text, gate.joined(LineGate.of([re.compile("one\r")]))) == [
        "needle one",
        "c needle",
        "x",
        "needle",
    ]
    assert candidate_lines(
        text, LineGate.of([re.compile("absent")]).joined(LineGate.of([re.compile("(?i:NEEDLE one)")]))
    ) == ["needle one"]


@st.composite
def _literals_and_text(draw: st.DrawFn, how_many: int) -> tuple[list[str], str]:
    """Literals over a few characters, so that they overlap, share heads and tails, and are cut at
    different characters; a text of lines made of them, pieces of them and those characters."""
    alphabet = "ab_Qx "
    literals = draw(
        st.lists(st.text(alphabet, min_size=MIN_LITERAL, max_size=9), min_size=how_many, max_size=how_many, unique=True)
    )
    parts = st.one_of(
        st.sampled_from(literals),
        st.sampled_from(literals).map(lambda literal: literal[1:]),
        st.text(alphabet + "\n", max_size=6),
    )
    return literals, "".join(draw(st.lists(parts, max_size=30)))


@pytest.mark.parametrize("how_many", [ONE_PASS_FROM - 1, ONE_PASS_FROM, 3 * ONE_PASS_FROM])
@settings(max_examples=300, derandomize=True, deadline=None, database=None)
@given(data=st.data())
def test_the_gate_finds_exactly_the_lines_holding_a_literal(how_many: int, data: st.DataObject) -> None:
    literals, text = data.draw(_literals_and_text(how_many))
    expected, line_start = set(), 0
    for line in text.split("\n"):
        if any(literal in line for literal in literals):
            expected.add(line_start)
        line_start += len(line) + 1
    assert LineGate(tuple(sorted(literals))).line_starts(text) == expected


def test_a_literal_ignoring_case_is_found_in_any_text() -> None:
    gate = LineGate.of([re.compile("(?i:version mismatch)")])
    for text in ("a\nNVML: Version Mismatch\nb", "é\nNVML: VERSION MISMATCH\nb", "a\nverſion miſmatch\nb"):
        assert candidate_lines(text, gate) == [text.splitlines()[1]]
    non_ascii = LineGate.of([re.compile("(?i:ſhutdown now)")])  # the long s matches an ASCII "s" ignoring case
    assert candidate_lines("a\nShutdown now\nb", non_ascii) == ["Shutdown now"]


def _logs_of_the_fixtures() -> list[str]:
    return [p.read_text(errors="replace") for p in sorted((REPO / "fixtures").rglob("*.log"))]


def _examples() -> list[str]:
    return [
        pattern["example"]
        for path in sorted((builtin_rules_dir() / "signals").glob("*.yaml"))
        for spec in yaml.safe_load(path.read_text())["signals"].values()
        for pattern in spec["patterns"]
    ]


def test_the_gate_finds_what_scanning_every_line_finds() -> None:
    signals = builtin_signals()
    ungated = dataclasses.replace(signals, gate=LineGate(None))
    examples = _examples()
    noisy = "\n".join(
        f"INFO 03-14 09:00:{i % 60:02d} [loggers.py:123] Engine 000: Running: {i} reqs\n  {line}  \r\n"
        f"\x1b[31m{line}\x1b[0m"
        for i, line in enumerate(examples)
    )
    shutdown = "(APIServer pid=1) INFO 03-14 10:00:00 [launcher.py:99] [shutdown] received signal=SIGTERM\n" + noisy
    texts = [*_logs_of_the_fixtures(), noisy, shutdown, "\n".join(examples)]
    assert len(texts) > 30
    for text in texts:
        assert scan_log(text, signals) == scan_log(text, ungated)
    assert set(scan_log(noisy, signals)) == set(signals.patterns)


def test_a_user_signal_without_a_literal_scans_every_line(tmp_path: Path) -> None:
    folder = tmp_path / "signals"
    folder.mkdir()
    (folder / "mine.yaml").write_text(
        "signals:\n  any_fatal:\n    layer: vllm\n    description: d\n"
        "    patterns: [{regex: 'E\\d+ \\w+', source: s, example: 'E42 boom'}]\n"
    )
    signals = load_signals([builtin_rules_dir(), tmp_path])
    assert signals.gate.literals is None
    assert scan_log("ok\nE42 boom\nok\n", signals) == {"any_fatal": ["E42 boom"]}
