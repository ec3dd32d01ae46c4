"""One reader of CEL (diag/engine/cel_syntax.py): the facts a rule is given are found in the same tree
the precheck answers from, and what they give is what the whole facts give."""

import random
from pathlib import Path

import pytest

from diag.bundle.files import Bundle
from diag.bundle.load import load_bundle
from diag.core.rules_dir import builtin_rules_dir, default_settings
from diag.engine import cel_syntax
from diag.engine.precheck import MAYBE, compile_check
from diag.engine.rules import _cel_texts, _view, load_rules
from diag.facts import build_facts
from diag.link.join import join
from tests.unit.engine.test_precheck import _cel_answer, _expression, _variables

FIXTURES = sorted(p for p in (Path(__file__).parents[3] / "fixtures").iterdir() if (p / "expected.json").exists())
RULES = load_rules([builtin_rules_dir()])


def items(*keys: str) -> cel_syntax.Read:
    """Read through a macro: these keys of each item (a map it runs over is read whole)."""
    return cel_syntax.Read(frozenset(keys), iterated=True)


def _paths(expected: dict | None) -> cel_syntax.Paths | None:
    """The table's shorthand: a set of keys read as `field.key`, None for the field whole."""
    if expected is None:
        return None
    return {name: _read(read) for name, read in expected.items()}


def _read(read: set | cel_syntax.Read | None) -> cel_syntax.Read:
    if isinstance(read, cel_syntax.Read):
        return read
    return cel_syntax.ALL if read is None else cel_syntax.Read(frozenset(read))


@pytest.mark.parametrize(
    ("text", "paths"),
    [
        ("s.a", {"a": None}),
        ("s.a.b > 0 && s.a.c", {"a": {"b", "c"}}),
        ("s.a.b.c == 'x'", {"a": {"b"}}),
        ("s.a.exists(x, x.b)", {"a": items("b")}),
        ("s.a.exists_one(x, x.b) || s.a.all(y, y.c) || s.a.map(z, z.d).size() > 0", {"a": items("b", "c", "d")}),
        ("s.a.map(x, x.b > 0, x.c)", {"a": items("b", "c")}),  # map's filter and transform
        ("s.a.exists(x, x)", {"a": None}),  # the item whole
        ("s.a.exists(x, size(x) > 0)", {"a": None}),
        ("s.a.filter(x, x.b)[0].c", {"a": None}),  # filter's items go on to be read
        ("s.a.exists(x, x.b.exists(y, y.c && y.d))", {"a": items("b")}),  # nested: the inner list is not cut
        ("s.a.exists(x, s.b.exists(y, y.k == x.k))", {"a": items("k"), "b": items("k")}),
        ("s.a.exists(s, s.b)", {"a": items("b")}),  # the macro's `s` is the item, not the variable
        ("s.a.exists(x, x.b) && x.c", {"a": items("b")}),  # the `x` outside the macro is another variable
        ("has(s.a.b)", {"a": {"b"}}),
        ("has(s.a)", {"a": None}),
        ('s["a"].b', {"a": {"b"}}),
        ('s.a["k-1"]', {"a": {"k-1"}}),
        ("s.a[0]", {"a": None}),
        ("s.a[s.i]", {"a": None, "i": None}),
        ("s.a == null || null != s.b", {"a": set(), "b": set()}),  # a map cut to no key is not null either
        ("s.a == null || s.a.b", {"a": {"b"}}),
        ("'s.a' + \"s.b\" == s.c", {"c": None}),  # words in strings read nothing
        ("s.a ? s.b.c : [s.d]", {"a": None, "b": {"c"}, "d": None}),
        ("{'k': s.a}.k", {"a": None}),
        ("s.a.b.startsWith('x') && size(s.c) > -1 // a comment\n", {"a": {"b"}, "c": None}),
        ("cluster.nodes.exists(n, n.name == s.node)", {"node": None}),
        ("size(s) > 0", None),
        ("s", None),
        ("Message{a: s.a}", None),  # not parsed: everything may be read
    ],
)
def test_what_a_text_reads_of_a_variable(text: str, paths: dict | None) -> None:
    assert cel_syntax.paths_read("s", [text]) == _paths(paths)


def test_texts_read_what_each_reads() -> None:
    read = cel_syntax.paths_read("s", ["s.a.b", "s.a.c", "s.d == null", "s.e.all(x, x.f)", "s.e.g", "t.h"])
    assert read == _paths({"a": {"b", "c"}, "d": set(), "e": cel_syntax.Read(frozenset({"f", "g"}), iterated=True)})
    assert cel_syntax.paths_read("s", ["s.a.b", "s.a"]) == _paths({"a": None})
    assert cel_syntax.paths_read("s", ["s.a.b", "size(s)"]) is None
    assert cel_syntax.paths_read("t", ["s.a"]) == {}


def test_every_text_of_every_builtin_rule_is_parsed() -> None:
    """So the precheck sees every condition and no rule is given every fact for want of a parse."""
    texts = _cel_texts(RULES)
    assert len(texts) > 500
    assert [text for text in texts if cel_syntax.parse(text) is None] == []


def test_generated_conditions_give_on_what_they_read_what_they_give_on_everything() -> None:
    rng = random.Random(20261206)
    cut = 0
    for _ in range(3000):
        text, variables = _expression(rng, 3), _variables(rng)
        viewed = {
            name: _view(value, cel_syntax.paths_read(name, [text])) if type(value) is dict else value
            for name, value in variables.items()
        }
        cut += viewed != variables
        check = compile_check(text)
        assert check(viewed) is check(variables), f"{text} on {variables}"
        on_view, on_all = _cel_answer(text, viewed), _cel_answer(text, variables)
        if isinstance(on_all, Exception):
            assert type(on_view) is type(on_all) and str(on_view) == str(on_all), f"{text} on {variables}"
        else:
            assert on_view == on_all or repr(on_view) == repr(on_all) == "nan", f"{text} on {variables}"
    assert cut > 1000  # not vacuous: most views hold less than everything


def _facts(fixture: Path):
    return build_facts(join(load_bundle(Bundle.open(fixture))))


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name)
def test_the_precheck_reads_nothing_the_read_paths_leave_out(fixture: Path) -> None:
    """Each built-in condition answers the same in Python on the facts its rule is given as on all."""
    facts, settings = _facts(fixture), default_settings()
    decided = 0
    for rule in RULES:
        check = compile_check(rule.when)
        cluster = _view(facts.cluster, cel_syntax.paths_read("cluster", [rule.when]))
        given_settings = _view(settings, cel_syntax.paths_read("settings", [rule.when]))
        subject_paths = cel_syntax.paths_read(rule.scope, [rule.when])
        for subject in facts.scopes.get(rule.scope, []):
            whole = check({rule.scope: subject, "cluster": facts.cluster, "settings": settings})
            if rule.scope == "cluster":
                given = check({"cluster": _view(subject, subject_paths), "settings": given_settings})
            else:
                given = check(
                    {rule.scope: _view(subject, subject_paths), "cluster": cluster, "settings": given_settings}
                )
            assert given is whole, f"{rule.id} on {subject.get('_subject')}"
            decided += whole is not MAYBE
    assert decided > 0  # not vacuous: Python answers some conditions on every fixture
