"""Every answer the Python precheck gives is the CEL evaluator's: held against it on generated
conditions and values, and on the cases the rules meet most."""

import math
import random

import pytest

from diag.engine.cel_evaluator import cel
from diag.engine.precheck import MAYBE, UNKNOWN, compile_check
from diag.engine.rules import _reads_unknown

VALUES = [
    None,
    True,
    False,
    0,
    1,
    2,
    -1,
    2**63,
    -(2**63) - 1,
    2**63 - 1,
    1.5,
    0.0,
    -2.5,
    math.nan,
    math.inf,
    "",
    "a",
    "Pending",
    "DaemonSet",
    [],
    ["a"],
    ["a", "b"],
    [1, 2],
    [None],
    [1.0, True],
    [{"message": "x"}],
    {},
    {"a": 1},
    {"k": None, "x": "a"},
    {"message": "a"},
]
LEAVES = [
    "m.a",
    "m.b",
    "m.c",
    "m.missing",
    "m.a.x",
    "m.b.k",
    "n",
    "settings.t",
    "0",
    "1",
    "2",
    "1.5",
    "'a'",
    '"Pending"',
    "''",
    "true",
    "false",
    "null",
]
RELATIONS = ["==", "!=", "<", "<=", ">", ">=", "in"]


def _expression(rng: random.Random, depth: int) -> str:
    if depth == 0 or rng.random() < 0.25:
        return rng.choice(LEAVES)
    choice = rng.randrange(11)
    inner = _expression(rng, depth - 1)
    if choice == 0:
        return f"!{inner}"
    if choice in (1, 2):
        return f"({inner} {rng.choice(['&&', '||'])} {_expression(rng, depth - 1)})"
    if choice in (3, 4):
        return f"{_expression(rng, 0)} {rng.choice(RELATIONS)} {_expression(rng, 0)}"
    if choice == 5:
        return f"size({inner})" + rng.choice(["", " > 0", " == 0"])
    if choice == 6:
        return f"({_expression(rng, 0)} + {_expression(rng, 0)}) {rng.choice(RELATIONS)} {_expression(rng, 0)}"
    if choice == 7:
        return f"{rng.choice(LEAVES[:8])}.{rng.choice(['contains', 'startsWith', 'endsWith'])}({rng.choice(LEAVES)})"
    if choice == 8:
        body = rng.choice(["x == 1", "x > 0", "x", "x.message == 'a'", "x.message.matches('a')", "x in m.b"])
        return f"{rng.choice(LEAVES[:8])}.{rng.choice(['exists', 'all', 'exists_one'])}(x, {body})"
    if choice == 9:
        return f"{rng.choice(LEAVES[:8])}.size() > 0"
    # what it leaves to CEL, inside what it decides around
    leaf, relation = _expression(rng, 0), rng.choice(RELATIONS)
    return rng.choice(
        [
            f"({leaf} ? {inner} : {_expression(rng, 0)})",
            f"-{leaf} {relation} {_expression(rng, 0)}",
            f"{leaf} * 2 {relation} {_expression(rng, 0)}",
            f"{leaf} {relation} [{_expression(rng, 0)}, {_expression(rng, 0)}]",
            f"{leaf} {relation} {_expression(rng, 0)} {rng.choice(RELATIONS)} {_expression(rng, 0)}",
            f"{rng.choice(LEAVES[:8])}[0] {relation} {leaf}",
            f"{rng.choice(LEAVES[:8])}['a'] {relation} {leaf}",
            f"has({rng.choice(LEAVES[:6])})",
        ]
    )


def _variables(rng: random.Random) -> dict:
    facts = {key: rng.choice(VALUES) for key in "abc" if rng.random() < 0.9}
    return {"m": facts, "n": None, "settings": {"t": rng.choice([0, 1, 0.5, "a"])}}


def _cel_answer(text: str, variables: dict):
    """CEL's result, or UNKNOWN / the error for a failure; None when CEL cannot compile or hold it."""
    try:
        program = cel.compile(text)
        context = cel.Context(variables)
    except Exception:  # not a condition CEL takes, or values it cannot hold
        return None
    try:
        return program.execute(context)
    except Exception as e:  # as the engine sees it
        return UNKNOWN if _reads_unknown(e) else e


def _agrees(text: str, variables: dict) -> tuple[bool, object, object]:
    answer = compile_check(text)(variables)
    expected = _cel_answer(text, variables)
    if not (answer is True or answer is False or answer is UNKNOWN):
        return True, answer, expected  # the engine leaves all else to CEL
    if expected is None:  # CEL could not even hold the values: the precheck must not have decided
        return False, answer, expected
    same = expected is answer if answer is UNKNOWN else (type(expected) is bool and expected == answer)
    return same, answer, expected


def test_generated_conditions_get_cels_answer_whenever_one_is_given() -> None:
    rng = random.Random(20261204)
    decided = {True: 0, False: 0, UNKNOWN: 0}
    for _ in range(6000):
        text, variables = _expression(rng, 3), _variables(rng)
        same, answer, expected = _agrees(text, variables)
        assert same, f"{text} on {variables}: precheck {answer!r}, CEL {expected!r}"
        for kind in decided:
            decided[kind] += answer is kind
    # not vacuous: each answer is given (random conditions are mostly type errors, left to CEL)
    assert min(decided.values()) > 200, decided


@pytest.mark.parametrize(
    ("text", "facts", "answer"),
    [
        ("size(pod.log_signals.cuda_oom) > 0", {"log_signals": {"cuda_oom": []}}, False),
        ("size(pod.log_signals.cuda_oom) > 0", {"log_signals": {"cuda_oom": ["CUDA out of memory"]}}, True),
        ("size(pod.log_signals.cuda_oom) > 0", {"log_signals": None}, UNKNOWN),  # no log read
        (
            "(pod.wants_gpus || pod.is_vllm) && pod.started && !pod.ready",
            {"wants_gpus": False, "is_vllm": False},
            False,
        ),
        ("pod.evicted && pod.message.matches('ephemeral')", {"evicted": False, "message": "x"}, False),
        ("pod.evicted && pod.message.matches('ephemeral')", {"evicted": True, "message": "x"}, MAYBE),
        ("pod.image_pull_errors.exists(e, e.message.matches('429'))", {"image_pull_errors": []}, False),
        ('pod.phase == "Pending" && size(pod.failed_mounts) > 0', {"phase": "Running", "failed_mounts": None}, False),
        ('pod.phase == "Pending" && size(pod.failed_mounts) > 0', {"phase": "Pending", "failed_mounts": None}, UNKNOWN),
        ('(pod.namespace + "/" + pod.name) in cluster.too_old', {"namespace": "a", "name": "b"}, True),
        ("pod.gpu_request > 0", {}, MAYBE),  # a missing key is CEL's error, not unknown
        ("pod.gpu_request > 0", {"gpu_request": 2**64}, MAYBE),  # past 64 bits: CEL cannot hold it
        ("pod.x.matches('a') || true", {"x": "b"}, True),
    ],
)
def test_the_conditions_rules_are_made_of(text: str, facts: dict, answer: object) -> None:
    variables = {"pod": facts, "cluster": {"too_old": ["a/b"]}, "settings": {}}
    assert compile_check(text)(variables) is answer
    if answer is not MAYBE:
        assert _agrees(text, variables)[0]


@pytest.mark.parametrize(
    "text",
    [
        "pod.a ? 1 : 2",
        "pod.a * 2 > 1",
        "-pod.a < 0",
        "pod.s == r'a'",
        "pod.s == '''a'''",
        "pod.s == 'a\\\\b'",
        "pod.a < pod.b < pod.c",
        "[1, 2].exists(x, x > pod.a)",
        "pod.l[pod.i] == 1",
        "0x10 == pod.a",
        "1u == pod.a",
    ],
)
def test_what_it_does_not_read_is_left_to_cel(text: str) -> None:
    assert compile_check(text)({"pod": {"a": False, "b": 1, "c": 2, "s": "a", "l": [1], "i": 0}}) is MAYBE


def _nested(levels: int) -> str:
    text = "pod.a"
    for i in range(levels):  # each `&&`/`||` inside another is a loop block in the compiled check
        text = f"(pod.x{i} || ({text} && pod.y{i}))"
    return text


def test_a_condition_nested_past_what_python_compiles_is_left_to_cel() -> None:
    facts = {"pod": {"a": True, **{f"x{i}": False for i in range(25)}, **{f"y{i}": True for i in range(25)}}}
    assert compile_check(_nested(8))(facts) is True
    assert compile_check(_nested(25))(facts) is MAYBE
