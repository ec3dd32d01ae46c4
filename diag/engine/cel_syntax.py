"""CEL texts parsed once into a tree, and what of the facts a tree reads.

The one reader of the rules' CEL: the precheck (diag/engine/precheck.py) writes its Python answers
from these trees, and the engine (diag/engine/rules.py) gives CEL only the facts that `paths_read`
finds in them. The grammar is CEL's (cel-spec's langdef.md) but for message construction
(`Type{field: ...}`) and names with a leading dot, which facts never need: a text holding them is
not parsed (`parse` answers None), and who asks must assume it reads everything.
"""

from __future__ import annotations

import functools
import re
from typing import Any, NamedTuple

_TOKEN = re.compile(
    r"""(?:\s|//[^\n]*(?=\n|\Z))*(?:
      (?P<number>(?:\d+\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\.\d+(?:[eE][+-]?\d+)?|0[xX][0-9a-fA-F]+|\d+)[uU]?)(?![\w.])
    | (?P<string>[rRbB]{0,2}(?:
        '''(?:[^\\]|\\.)*?'''|\"\"\"(?:[^\\]|\\.)*?\"\"\"|'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*"
      ))
    | (?P<name>[A-Za-z_]\w*)
    | (?P<op>&&|\|\||==|!=|<=|>=|/(?!/)|[<>!+\-*%?:().,\[\]{}])
    )""",
    re.VERBOSE,
)
_BLANK = re.compile(r"(?:\s|//[^\n]*(?=\n|\Z))*\Z")
_PLAIN_STRING = re.compile(r"""'[^'\\\n]*'|"[^"\\\n]*\"""")
_PLAIN_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_KEYWORDS = {"true": True, "false": False, "null": None}
_RELATIONS = ("==", "!=", "<", "<=", ">", ">=", "in")
# receiver.macro(variable, body...): how many expressions follow the variable
_MACROS = {"exists": (1,), "all": (1,), "exists_one": (1,), "map": (1, 2), "filter": (1,)}


class _Unparsed(Exception):
    """CEL this parser does not take (or no CEL at all)."""


# --------------------------------------------------------------------------- the tree
# Named tuples, not dataclasses: far cheaper to define, which every run of the CLI does. A node is
# told by its class (isinstance), never by ==, which compares a tuple's items alone.


class Literal(NamedTuple):
    value: Any  # None, bool, int, float or str


class Opaque(NamedTuple):
    """A literal whose value the tree does not hold: a string with escapes or a prefix, bytes, a hex
    or unsigned number. It reads nothing; the precheck leaves it to CEL."""

    text: str


class Name(NamedTuple):
    name: str


class Select(NamedTuple):
    """`operand.key`, and `operand['key']` (CEL reads a map's key either way)."""

    operand: Expr
    key: str


class Index(NamedTuple):
    """`operand[index]` with any index but a string literal."""

    operand: Expr
    subscript: Expr


class Call(NamedTuple):
    """`function(arguments)`, or `target.function(arguments)` (a method) when target is set."""

    function: str
    arguments: tuple[Expr, ...]
    target: Expr | None = None


class Macro(NamedTuple):
    """`target.exists(variable, body)` and the other comprehensions: `body` holds one expression, or
    map's filter and transform."""

    macro: str
    target: Expr
    variable: str
    body: tuple[Expr, ...]


class Unary(NamedTuple):
    operator: str  # "!" (a lone one: pairs are dropped, as CEL's parser does) or "-"
    operand: Expr


class Junction(NamedTuple):
    """`a && b && ...` or `a || b || ...`."""

    operator: str
    operands: tuple[Expr, ...]


class Binary(NamedTuple):
    """A relation (_RELATIONS) or arithmetic (`+ - * / %`), left to right."""

    operator: str
    left: Expr
    right: Expr


class Conditional(NamedTuple):
    test: Expr
    then: Expr
    otherwise: Expr


class ListOf(NamedTuple):
    items: tuple[Expr, ...]


class MapOf(NamedTuple):
    entries: tuple[tuple[Expr, Expr], ...]


Expr = (
    Literal | Opaque | Name | Select | Index | Call | Macro | Unary | Junction | Binary | Conditional | ListOf | MapOf
)


@functools.cache
def parse(text: str) -> Expr | None:
    """The tree of a CEL text, made once per process; None where the text is beyond this parser."""
    try:
        return _Parser(_tokens(text)).whole()
    except (_Unparsed, RecursionError):
        return None


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    at = 0
    while at < len(text):
        match = _TOKEN.match(text, at)
        if match is None or match.lastgroup is None:
            if _BLANK.match(text, at):
                break
            raise _Unparsed(text[at:])
        tokens.append((match.lastgroup, match.group(match.lastgroup)))
        at = match.end()
    return tokens


class _Parser:
    """Recursive descent over CEL's precedence: ?: < || < && < relations < + - < * / % < unary < member."""

    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens = tokens
        self.at = 0

    def peek(self) -> str | None:
        return self.tokens[self.at][1] if self.at < len(self.tokens) else None

    def take(self, expected: str | None = None) -> tuple[str, str]:
        if self.at >= len(self.tokens) or (expected is not None and self.tokens[self.at][1] != expected):
            raise _Unparsed(f"expected {expected}")
        token = self.tokens[self.at]
        self.at += 1
        return token

    def whole(self) -> Expr:
        tree = self.expression()
        if self.at != len(self.tokens):
            raise _Unparsed("trailing tokens")
        return tree

    def expression(self) -> Expr:
        test = self.junction("||", self.conjunction)
        if self.peek() != "?":
            return test
        self.take()
        then = self.junction("||", self.conjunction)
        self.take(":")
        return Conditional(test, then, self.expression())

    def conjunction(self) -> Expr:
        return self.junction("&&", self.relation)

    def junction(self, operator: str, operand: Any) -> Expr:
        operands = [operand()]
        while self.peek() == operator:
            self.take()
            operands.append(operand())
        return operands[0] if len(operands) == 1 else Junction(operator, tuple(operands))

    def relation(self) -> Expr:
        return self.binary(_RELATIONS, self.addition)

    def addition(self) -> Expr:
        return self.binary(("+", "-"), self.multiplication)

    def multiplication(self) -> Expr:
        return self.binary(("*", "/", "%"), self.unary)

    def binary(self, operators: tuple[str, ...], operand: Any) -> Expr:
        tree = operand()
        while self.peek() in operators:
            operator = self.take()[1]
            tree = Binary(operator, tree, operand())
        return tree

    def unary(self) -> Expr:
        for operator in ("!", "-"):
            count = 0
            while self.peek() == operator:
                self.take()
                count += 1
            if count:
                tree = self.member()
                if operator == "!":  # CEL's parser drops pairs of "!": `!!x` is x itself, null or not
                    return Unary("!", tree) if count % 2 else tree
                for _ in range(count):
                    tree = Unary("-", tree)
                return tree
        return self.member()

    def member(self) -> Expr:
        tree = self.primary()
        while self.peek() in (".", "["):
            if self.take()[1] == "[":
                index = self.expression()
                self.take("]")
                if isinstance(index, Literal) and type(index.value) is str:
                    tree = Select(tree, index.value)
                else:
                    tree = Index(tree, index)
                continue
            kind, name = self.take()
            if kind != "name":
                raise _Unparsed("field name")
            if self.peek() != "(":
                tree = Select(tree, name)
                continue
            self.take("(")
            arguments = self.listed(")")
            counts = _MACROS.get(name, ())
            if len(arguments) - 1 in counts and isinstance(arguments[0], Name):
                tree = Macro(name, tree, arguments[0].name, tuple(arguments[1:]))
            else:
                tree = Call(name, tuple(arguments), tree)
        return tree

    def listed(self, closing: str) -> list[Expr]:
        """Expressions separated by commas up to `closing` (a trailing comma allowed), which is taken."""
        found: list[Expr] = []
        while self.peek() != closing:
            found.append(self.expression())
            if self.peek() != closing:
                self.take(",")
        self.take(closing)
        return found

    def primary(self) -> Expr:
        kind, text = self.take()
        if kind == "number":
            if not _PLAIN_NUMBER.fullmatch(text):
                return Opaque(text)
            return Literal(float(text) if any(c in text for c in ".eE") else int(text))
        if kind == "string":
            return Literal(text[1:-1]) if _PLAIN_STRING.fullmatch(text) else Opaque(text)
        if kind == "name":
            if text in _KEYWORDS:
                return Literal(_KEYWORDS[text])
            if self.peek() == "(":
                self.take()
                return Call(text, tuple(self.listed(")")))
            if self.peek() == "{":
                raise _Unparsed("message construction")
            return Name(text)
        if text == "(":
            tree = self.expression()
            self.take(")")
            return tree
        if text == "[":
            return ListOf(tuple(self.listed("]")))
        if text == "{":
            entries = []
            while self.peek() != "}":
                key = self.expression()
                self.take(":")
                entries.append((key, self.expression()))
                if self.peek() != "}":
                    self.take(",")
            self.take("}")
            return MapOf(tuple(entries))
        raise _Unparsed(text)


# --------------------------------------------------------------------------- what a text reads


class Read(NamedTuple):
    """What is read of one field's value: these keys of it (a map's) or of each of its items (a
    list's); None: all of it. `iterated`: a macro runs over it, which over a map reads every key."""

    keys: frozenset[str] | None = frozenset()
    iterated: bool = False

    def __or__(self, other: Read) -> Read:
        if self.keys is None or other.keys is None:
            return ALL
        return Read(self.keys | other.keys, self.iterated or other.iterated)


ALL = Read(None)
Paths = dict[str, Read]  # a variable's fields read, and what of each

# Comprehensions whose result holds no item of the list: what they read of an item is all that is
# read of it. (filter is not one: its items can be read further, `filter(...)[0].message`.)
_ITEM_MACROS = ("exists", "exists_one", "all", "map")


def paths_read(variable: str, texts: list[str]) -> Paths | None:
    """What of `variable` these texts read: its fields; of a field read only as `field.key` (or
    `field["key"]`), or only compared with null, those keys (a map of signals, say; none for a null
    test, which a map cut to fewer keys answers as the whole one does); of a list read only through
    exists/all/map, the keys of its items that the macro's variable reads (and that it is iterated:
    a map it runs over is read whole). None when a text uses the variable whole, or is not parsed."""
    merged: Paths = {}
    for text in texts:
        variables = _variables_read(text)
        if variables is None:
            return None
        if variable not in variables:
            continue
        paths = variables[variable]
        if paths is None:
            return None
        for name, read in paths.items():
            merged[name] = merged.get(name, Read()) | read
    return merged


@functools.cache
def _variables_read(text: str) -> dict[str, Paths | None] | None:
    """Each variable the text reads (not those its macros bind) and what of it; None: not parsed."""
    tree = parse(text)
    if tree is None:
        return None
    reader = _Reader()
    reader.visit(tree, {})
    return reader.variables


class _Item:
    """What a macro's variable reads of its item: keys, or None for the item whole."""

    def __init__(self) -> None:
        self.keys: set[str] | None = set()


class _Reader:
    def __init__(self) -> None:
        self.variables: dict[str, Paths | None] = {}

    def visit(self, node: Expr, bound: dict[str, _Item]) -> None:
        """Records what `node` reads; `bound`: the variables of the macros around it."""
        if isinstance(node, Name):
            self.whole(node.name, bound)
        elif isinstance(node, Select) and isinstance(node.operand, Name):
            self.field(node.operand.name, node.key, ALL, bound)
        elif isinstance(node, Select) and isinstance(node.operand, Select) and isinstance(node.operand.operand, Name):
            self.field(node.operand.operand.name, node.operand.key, Read(frozenset({node.key})), bound)
        elif isinstance(node, Binary) and node.operator in ("==", "!="):
            for side, other in ((node.left, node.right), (node.right, node.left)):
                if (
                    isinstance(other, Literal)
                    and other.value is None
                    and isinstance(side, Select)
                    and isinstance(side.operand, Name)
                ):
                    self.field(side.operand.name, side.key, Read(), bound)
                else:
                    self.visit(side, bound)
        elif isinstance(node, Macro):
            item = _Item()
            for part in node.body:
                self.visit(part, {**bound, node.variable: item})
            target = node.target
            if node.macro in _ITEM_MACROS and isinstance(target, Select) and isinstance(target.operand, Name):
                keys = None if item.keys is None else frozenset(item.keys)
                self.field(target.operand.name, target.key, Read(keys, iterated=True), bound)
            else:
                self.visit(target, bound)
        else:
            for child in _children(node):
                self.visit(child, bound)

    def whole(self, name: str, bound: dict[str, _Item]) -> None:
        if name in bound:
            bound[name].keys = None
        else:
            self.variables[name] = None

    def field(self, name: str, field: str, read: Read, bound: dict[str, _Item]) -> None:
        """`name.field` is read, and `read` of its value."""
        if name in bound:
            item = bound[name]
            if item.keys is not None:
                item.keys.add(field)
            return
        paths = self.variables.setdefault(name, {})
        if paths is not None:
            paths[field] = paths.get(field, Read()) | read


def _children(node: Expr) -> tuple[Expr, ...]:
    if isinstance(node, Select):
        return (node.operand,)
    if isinstance(node, Index):
        return (node.operand, node.subscript)
    if isinstance(node, Call):
        return node.arguments if node.target is None else (node.target, *node.arguments)
    if isinstance(node, Unary):
        return (node.operand,)
    if isinstance(node, Junction):
        return node.operands
    if isinstance(node, Binary):
        return (node.left, node.right)
    if isinstance(node, Conditional):
        return (node.test, node.then, node.otherwise)
    if isinstance(node, ListOf):
        return node.items
    if isinstance(node, MapOf):
        return tuple(part for entry in node.entries for part in entry)
    return ()  # Literal, Opaque; Name and Macro are read in _Reader.visit
