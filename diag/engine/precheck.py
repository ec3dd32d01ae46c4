"""Rule conditions answered in Python, before any CEL value is made, wherever the answer is exact.

Making a subject's CEL values costs more than running its rules, and at a fleet's size nearly every
condition is false for nearly every subject: a pod with no log signal, no failed scheduling, no GPU.
Of the condition's tree (diag/engine/cel_syntax.py, the parse the engine also finds the facts a rule
reads in) this models the part the conditions mostly use (`&&`, `||`, `!`, fields, `==` and the other
comparisons, `in`, `+`, `size`, `contains`/`startsWith`/`endsWith`, and `exists`/`all` over a list)
and answers as the CEL evaluator would: true, false, or UNKNOWN, where CEL fails on a null value
(which the engine counts as "could not be decided"). Whatever it does not model (`matches()`, `?:`,
a key the facts lack, a list compared with a list, a value CEL could not hold) is MAYBE, and the
engine runs CEL. `&&` and `||` decide around an undecided side as CEL's do: `false && <anything>` is
false.

Each condition becomes one Python function, its source generated from the condition and compiled
once: a fleet runs some 300,000 checks, and a function call per node of the condition (the closures
this replaced) cost three times the checks themselves.

tests/unit/engine/test_precheck.py holds every answer against the CEL evaluator on generated values, and
tests/unit/engine/test_engine_precheck.py checks that every fixture's analysis is the same without it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from diag.engine import cel_syntax

INT64 = range(-(2**63), 2**63)


class _Undecided:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


MAYBE = _Undecided("MAYBE")  # run CEL
UNKNOWN = _Undecided("UNKNOWN")  # CEL fails on a null: the engine's "could not be decided"

Env = dict[str, Any]
Check = Callable[[Env], Any]

_STRING_METHODS = {
    "contains": lambda s, t: t in s,
    "startsWith": lambda s, t: s.startswith(t),
    "endsWith": lambda s, t: s.endswith(t),
}


def compile_check(text: str) -> Check:
    """A function of the variables (scope, cluster, settings) that answers `text` as True, False,
    UNKNOWN or MAYBE; one that always answers MAYBE where the text is not parsed."""
    tree = cel_syntax.parse(text)
    if tree is None:
        return undecided
    try:
        return _Code.function(_node(tree))
    except (SyntaxError, RecursionError):  # nested deeper than Python compiles (20 blocks): CEL decides
        return undecided


def undecided(env: Env) -> Any:
    """The check of a condition beyond what this reads: CEL decides."""
    return MAYBE


def _node(tree: cel_syntax.Expr) -> Node:
    """The node that answers `tree`: what this does not model is MAYBE, for CEL to decide."""
    if isinstance(tree, cel_syntax.Literal):
        return _Constant(tree.value)
    if isinstance(tree, cel_syntax.Name):
        return _variable(tree.name)
    if isinstance(tree, cel_syntax.Select):
        return _field(_node(tree.operand), tree.key)
    if isinstance(tree, cel_syntax.Junction):
        return _junction([_node(operand) for operand in tree.operands], decisive=tree.operator == "||")
    if isinstance(tree, cel_syntax.Unary) and tree.operator == "!":
        return _not(_node(tree.operand))
    if isinstance(tree, cel_syntax.Binary) and tree.operator in _RELATIONS:
        return _relation(tree.operator, _node(tree.left), _node(tree.right))
    if isinstance(tree, cel_syntax.Binary) and tree.operator == "+":
        return _plus(_node(tree.left), _node(tree.right))
    if isinstance(tree, cel_syntax.Call):
        operands = tree.arguments if tree.target is None else (tree.target, *tree.arguments)
        if tree.function == "size" and len(operands) == 1:
            return _size(_node(operands[0]))
        if tree.target is not None and tree.function in _STRING_METHODS and len(operands) == 2:
            return _string_method(_STRING_METHODS[tree.function], _node(operands[0]), _node(operands[1]))
    if isinstance(tree, cel_syntax.Macro) and tree.macro in _QUANTIFIERS and len(tree.body) == 1:
        return _quantifier(_QUANTIFIERS[tree.macro], _node(tree.target), tree.variable, _node(tree.body[0]))
    return _left_to_cel  # matches(), an index, `?:`, arithmetic but `+`, literals of lists and maps ...


class _Code:
    """The source of one check function being written: `env` is its argument, `t<n>` its locals, and
    every constant and helper it names is a global of its own namespace."""

    def __init__(self) -> None:
        self.globals: dict[str, Any] = {"MAYBE": MAYBE, "UNKNOWN": UNKNOWN, "INT64": INT64, "weak": _weak}
        self.variables: dict[str, str] = {}  # a variable of the condition -> the local holding its value
        self.lines: list[str] = []
        self.depth = 1
        self.count = 0

    @classmethod
    def function(cls, node: Node) -> Check:
        code = cls()
        result = node(code, {})
        loads = [f"    {local} = env.get({code.constant(name)}, MAYBE)" for name, local in code.variables.items()]
        source = "\n".join(["def check(env):", *loads, *code.lines, f"    return {result}"])
        # no text of the condition is in the source: its names and literals are constants of the namespace
        exec(compile(source, "<precheck>", "exec"), code.globals)
        return code.globals["check"]

    def local(self) -> str:
        self.count += 1
        return f"t{self.count}"

    def constant(self, value: Any) -> str:
        name = f"k{len(self.globals)}"
        self.globals[name] = value
        return name

    def variable(self, name: str) -> str:
        """The local holding the variable's value, read once at the start of the function."""
        if name not in self.variables:
            self.variables[name] = self.local()
        return self.variables[name]

    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def assign(self, expression: str) -> str:
        name = self.local()
        self.line(f"{name} = {expression}")
        return name


# A node of a condition writes the code that works out its value and names the local (or constant)
# holding it. `names`: the variables a macro bound (`x` of `exists(x, ...)`), to their locals.
Node = Callable[[_Code, dict[str, str]], str]


def _weak(value: Any) -> _Undecided:
    """The answer for a value that is not what an operation takes: UNKNOWN for a null, else MAYBE."""
    return UNKNOWN if value is None or value is UNKNOWN else MAYBE


# --------------------------------------------------------------------------- the answers


class _Constant:
    """A literal of the condition; _relation reads its value to write a shorter test."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __call__(self, code: _Code, names: dict[str, str]) -> str:
        return code.constant(self.value)


def _variable(name: str) -> Node:
    def write(code: _Code, names: dict[str, str]) -> str:
        return names[name] if name in names else code.variable(name)

    return write


def _left_to_cel(code: _Code, names: dict[str, str]) -> str:
    """What this does not model: CEL decides."""
    return "MAYBE"


def _undecided(*values: Any) -> _Undecided | None:
    """MAYBE if any value is, else UNKNOWN if any is; None when all are values."""
    if MAYBE in values:
        return MAYBE
    return UNKNOWN if UNKNOWN in values else None


def _not_both_values(a: Any, b: Any) -> _Undecided | None:
    """The answer of an operation CEL fails on a null operand of: as _undecided, and UNKNOWN for a null."""
    undecided = _undecided(a, b)
    if undecided is not None:
        return undecided
    return UNKNOWN if a is None or b is None else None


def _field(receiver: Node, name: str) -> Node:
    # CEL: a missing key is an error of its own (KeyError), so MAYBE
    def write(code: _Code, names: dict[str, str]) -> str:
        value = receiver(code, names)
        return code.assign(f"{value}.get({code.constant(name)}, MAYBE) if type({value}) is dict else weak({value})")

    return write


def _junction(operands: list[Node], decisive: bool) -> Node:
    """`||` (decisive True) or `&&` (decisive False): the decisive value wherever it comes, else the
    other one when every operand is it, else the weaker of the undecided ones (MAYBE over UNKNOWN).
    The operands after a decisive one are not worked out (a `while` left by `break`)."""
    neutral = not decisive

    def write(code: _Code, names: dict[str, str]) -> str:
        answer = code.assign(str(neutral))
        code.line("while True:")
        code.depth += 1
        for operand in operands:
            value = operand(code, names)
            code.line(f"if {value} is {decisive}: {answer} = {decisive}; break")
            code.line(f"if {value} is not {neutral} and {answer} is not MAYBE: {answer} = weak({value})")
        code.line("break")
        code.depth -= 1
        return answer

    return write


def _not(operand: Node) -> Node:
    def write(code: _Code, names: dict[str, str]) -> str:
        value = operand(code, names)
        return code.assign(f"(not {value}) if type({value}) is bool else weak({value})")

    return write


def _kind(value: Any) -> str | None:
    """The CEL type of a scalar the answers model: bool, number (int64 or double), string, null."""
    kind = type(value)
    if kind is bool:
        return "bool"
    if kind is int:
        return "number" if value in INT64 else None
    if kind is float:
        return "number" if value == value else None  # NaN: left to CEL
    if kind is str:
        return "string"
    return "null" if value is None else None


def _equal(left: Any, right: Any) -> Any:
    undecided = _undecided(left, right)
    if undecided is not None:
        return undecided
    left_kind, right_kind = _kind(left), _kind(right)
    if left_kind is None or right_kind is None:
        return MAYBE
    return left_kind == right_kind and left == right


def _not_equal(left: Any, right: Any) -> Any:
    equal = _equal(left, right)
    return not equal if type(equal) is bool else equal


def _ordered(compare: Callable[[Any, Any], bool]) -> Callable[[Any, Any], Any]:
    def run(left: Any, right: Any) -> Any:
        if (answer := _not_both_values(left, right)) is not None:
            return answer
        if _kind(left) == "number" and _kind(right) == "number":
            return compare(left, right)
        return MAYBE

    return run


def _in(item: Any, container: Any) -> Any:
    undecided = _undecided(item, container)
    if undecided is not None:
        return undecided
    if container is None:
        return UNKNOWN
    if type(container) is dict:
        return item in container if type(item) is str else MAYBE
    if type(container) is not list:
        return MAYBE
    found = False
    for element in container:
        equal = _equal(item, element)
        if type(equal) is not bool:
            return MAYBE
        found = found or equal
    return found


_RELATIONS: dict[str, Callable[[Any, Any], Any]] = {
    "==": _equal,
    "!=": _not_equal,
    "<": _ordered(lambda a, b: a < b),
    "<=": _ordered(lambda a, b: a <= b),
    ">": _ordered(lambda a, b: a > b),
    ">=": _ordered(lambda a, b: a >= b),
    "in": _in,
}


def _call(function: Callable[..., Any], *arguments: Node) -> Node:
    """A node whose value is `function` of its arguments' values."""

    def write(code: _Code, names: dict[str, str]) -> str:
        values = [argument(code, names) for argument in arguments]
        return code.assign(f"{code.constant(function)}({', '.join(values)})")

    return write


def _relation(operator: str, left: Node, right: Node) -> Node:
    """`operator`'s answer (_RELATIONS). Where both sides are of the types it takes as they are, the
    comparison is written inline, and the function is called only for the other values."""
    function = _RELATIONS[operator]

    def write(code: _Code, names: dict[str, str]) -> str:
        a, b = left(code, names), right(code, names)
        whole = f"{code.constant(function)}({a}, {b})"
        tests = _inline_tests(operator, (left, a), (right, b))
        if tests is None:
            return code.assign(whole)
        if not tests:  # two literals of the types it takes
            return code.assign(f"{a} {operator} {b}")
        return code.assign(f"({a} {operator} {b}) if {' and '.join(tests)} else {whole}")

    return write


_ORDERED = frozenset({"<", "<=", ">", ">="})


def _inline_tests(operator: str, *sides: tuple[Node, str]) -> list[str] | None:
    """The tests under which Python's own `operator` on the two values is the answer: both numbers
    CEL holds (an ordering), or one side a string or bool literal and the other of its type (`==`,
    `!=`); None when no such form is written."""
    literals = [node.value for node, _ in sides if isinstance(node, _Constant)]
    if operator in _ORDERED:
        if any(_kind(value) != "number" for value in literals):
            return None
        return [
            f"(type({name}) is int and {name} in INT64 or type({name}) is float and {name} == {name})"
            for node, name in sides
            if not isinstance(node, _Constant)
        ]
    if operator in ("==", "!=") and len(literals) == 1 and type(literals[0]) in (str, bool):
        [name] = [name for node, name in sides if not isinstance(node, _Constant)]
        return [f"type({name}) is {type(literals[0]).__name__}"]
    return None


def _add(a: Any, b: Any) -> Any:
    if (answer := _not_both_values(a, b)) is not None:
        return answer
    if type(a) is type(b) and type(a) in (str, float):
        return a + b
    if type(a) is int and type(b) is int and a in INT64 and b in INT64:
        total = a + b
        return total if total in INT64 else MAYBE  # CEL: an overflow error
    return MAYBE


def _plus(left: Node, right: Node) -> Node:
    return _call(_add, left, right)


def _size(operand: Node) -> Node:
    def write(code: _Code, names: dict[str, str]) -> str:
        value = operand(code, names)
        return code.assign(f"len({value}) if type({value}) in (list, dict, str) else weak({value})")

    return write


def _string_test(method: Callable[[str, str], bool], text: Any, part: Any) -> Any:
    undecided = _undecided(text, part)
    if undecided is not None:
        return undecided
    if text is None:
        return UNKNOWN
    return method(text, part) if type(text) is str and type(part) is str else MAYBE


def _string_method(method: Callable[[str, str], bool], receiver: Node, argument: Node) -> Node:
    return _call(functools.partial(_string_test, method), receiver, argument)


def _quantifier(settled: bool, receiver: Node, variable: str, body: Node) -> Node:
    """`exists` (settled False: it is false when no item holds) or `all` (settled True: true when
    every item holds); any other mix of answers is left to CEL. The body is worked out for each item
    until one answers otherwise (it has no effects, so the rest would change nothing)."""

    def write(code: _Code, names: dict[str, str]) -> str:
        items = receiver(code, names)
        answer, item = code.assign(str(settled)), code.local()
        code.line(f"if type({items}) is list:")
        code.line(f"    for {item} in {items}:")
        code.depth += 2
        value = body(code, {**names, variable: item})
        code.line(f"if {value} is not {settled}: {answer} = MAYBE; break")
        code.depth -= 2
        code.line(f"else: {answer} = weak({items})")
        return answer

    return write


# exists_one is false exactly when no item holds, as exists is
_QUANTIFIERS = {"exists": False, "exists_one": False, "all": True}
