"""The rule engine: rules are data (rules/*.yaml), conditions and evidence are CEL.

A rule names a scope (pod, node, gpu, vllm_server, ...); its `when` is evaluated once per subject of
that scope with these variables bound:
  <scope>    the subject's facts (see diag.facts)
  cluster    cluster-wide facts
  settings   named thresholds (rules/settings.yaml, overridable in .llmdiag.yaml)
Null in the facts means "not known". A condition that reads a null value cannot be decided: the
subject is counted as "unknown", never as healthy or faulty. CEL's && and || decide around an
undecidable side (`false && <unknown>` is false, `true || <unknown>` is true), so conditions are
written plainly; a null guard (`x != null && ...`) would turn unknown into "checked, silent" and
tests/rules/test_rule_lint.py refuses it. Evidence and remediation are text with `{{ expr }}`
holes, each hole a CEL expression over the same variables.
"""

from __future__ import annotations

import functools
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from diag.core import shell
from diag.core.errors import UserError, unexpected
from diag.core.rules_dir import builtin_rules_dir, load_yaml
from diag.core.stopwatch import Stopwatch
from diag.engine import cel_syntax, precheck
from diag.engine.cel_evaluator import cel
from diag.facts import SCOPES, Facts
from diag.snapshot.model import LAYERS

SEVERITIES = ("info", "warning", "critical")
_HOLE = re.compile(r"\{\{(.+?)\}\}", re.DOTALL)
_ID = re.compile(r"^[A-Z0-9]+-\d{3}$")
# Calling one of CEL's own functions on null fails as "undefined function": an unknown value, not a
# broken rule. Any other undefined name is a typo in the rule.
_CEL_FUNCTIONS = frozenset(
    {"size", "contains", "startsWith", "endsWith", "matches", "exists", "exists_one", "all", "map", "filter"}
)
_UNDEFINED = re.compile(r"Undefined variable or function: '(?P<name>[^']+)'")
_REQUIRED = ("id", "layer", "severity", "title", "scope", "when", "evidence", "remediation")


class RuleError(UserError):
    """A rule file is wrong: one line naming the file, the rule and the problem."""


@dataclass
class Rule:
    id: str
    layer: str
    severity: str
    title: str
    scope: str
    when: str
    evidence: list[str]
    remediation: str
    references: list[str] = field(default_factory=list)
    explains: list[str] = field(default_factory=list)
    requires: list[str] = field(default_factory=list)  # source names (prefixes); all missing -> skipped
    links: str = ""  # CEL list of the subjects a cluster-wide finding is about ("node:gpu-1", "pod:ns/name")
    # The evidence is the cause itself (a refusal quoted from the API server): no fault in a deeper
    # layer could produce it, so unread deeper sources leave its verdict standing.
    certain: bool = False
    description: str = ""
    file: str = ""
    program: Any = field(default=None, repr=False, compare=False)
    check: Callable[[dict[str, Any]], Any] = field(default=precheck.undecided, repr=False, compare=False)


@dataclass
class Finding:
    rule: str
    layer: str
    severity: str
    title: str
    subject: str
    evidence: list[str]
    remediation: str
    references: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    explained_by: str | None = None
    serving: bool = True  # on the serving path (diag.verdict.relevance); False: an "other problem"


@dataclass
class RuleOutcome:
    """What became of one rule in one analysis, for the report's "what was checked"."""

    status: str  # fired | silent | unknown | skipped | error
    detail: str = ""
    subjects: int = 0


@dataclass
class Evaluation:
    findings: list[Finding]
    outcomes: dict[str, RuleOutcome]


# --------------------------------------------------------------------------- loading


_loaded: dict[tuple, list[Rule]] = {}


def load_rules(dirs: list[Path]) -> list[Rule]:
    """Every rule of the folders, compiled; the same files (by name, size and time) are compiled once
    per process."""
    key: tuple[tuple[str, int, int] | str, ...] = tuple(
        (str(p), p.stat().st_mtime_ns, p.stat().st_size) for d in dirs if d.is_dir() for p in sorted(d.glob("*.yaml"))
    )
    key += tuple(str(d) for d in dirs)
    if key not in _loaded:
        _loaded[key] = _compile_rules(dirs)
    return _loaded[key]


def _compile_rules(dirs: list[Path]) -> list[Rule]:
    rules: dict[str, Rule] = {}
    for directory in dirs:
        if not directory.is_dir():
            raise RuleError(f"{directory}: not a folder of rule files")
        for path in sorted(directory.glob("*.yaml")):
            if path.name == "settings.yaml":
                continue
            # the built-in rules' evidence and fixes are rendered by the tests: their holes compile when
            # first rendered; a user's rules are checked whole at load, before any analysis
            for rule in _rules_in_file(path, check_holes=directory != builtin_rules_dir()):
                if rule.id in rules:
                    raise RuleError(f"{path.name}: rule {rule.id} is already defined in {rules[rule.id].file}")
                rules[rule.id] = rule
    for rule in rules.values():
        unknown = [r for r in rule.explains if r not in rules]
        if unknown:
            raise RuleError(f"{rule.file}: {rule.id} explains unknown rule(s) {', '.join(unknown)}")
    return list(rules.values())


def _rules_in_file(path: Path, check_holes: bool = True) -> list[Rule]:
    try:
        data = load_yaml(path.read_text())
    except yaml.YAMLError as e:
        raise RuleError(f"{path.name}: not valid YAML ({str(e).splitlines()[0]})") from e
    if not isinstance(data, dict) or not isinstance(data.get("rules"), list):
        raise RuleError(f"{path.name}: expected a top-level 'rules:' list")
    return [_rule(path, raw, check_holes) for raw in data["rules"]]


def _rule(path: Path, raw: Any, check_holes: bool = True) -> Rule:
    where = f"{path.name}: {raw.get('id', '?') if isinstance(raw, dict) else '?'}"
    if not isinstance(raw, dict):
        raise RuleError(f"{where}: each rule must be a mapping")
    missing = [k for k in _REQUIRED if k not in raw]
    if missing:
        raise RuleError(f"{where}: missing {', '.join(missing)}")
    if not _ID.match(str(raw["id"])):
        raise RuleError(f"{where}: id must look like LAYER-123")
    if raw["layer"] not in LAYERS:
        raise RuleError(f"{where}: layer must be one of {', '.join(LAYERS)}")
    if raw["severity"] not in SEVERITIES:
        raise RuleError(f"{where}: severity must be one of {', '.join(SEVERITIES)}")
    if raw["scope"] not in SCOPES:
        raise RuleError(f"{where}: scope must be one of {', '.join(SCOPES)}")
    if not isinstance(raw.get("certain", False), bool):
        raise RuleError(f"{where}: certain must be true or false")
    evidence = raw["evidence"] if isinstance(raw["evidence"], list) else [raw["evidence"]]
    rule = Rule(
        id=raw["id"],
        layer=raw["layer"],
        severity=raw["severity"],
        title=str(raw["title"]).strip(),
        scope=raw["scope"],
        when=str(raw["when"]).strip(),
        evidence=[str(e).strip() for e in evidence],
        remediation=str(raw["remediation"]).strip(),
        references=list(raw.get("references", [])),
        explains=list(raw.get("explains", [])),
        requires=list(raw.get("requires", [])),
        links=str(raw.get("links", "")).strip(),
        certain=raw.get("certain", False),
        description=str(raw.get("description", "")).strip(),
        file=path.name,
    )
    try:
        rule.program = compiled(rule.when)
        rule.check = _checked_at_first_use(rule)
        if rule.links:
            compiled(rule.links)
        for text in [*rule.evidence, rule.remediation] if check_holes else []:
            for hole in _HOLE.findall(text):
                compiled(hole.strip())
    except ValueError as e:
        raise RuleError(f"{where}: CEL does not compile ({str(e).splitlines()[0]})") from e
    return rule


def _checked_at_first_use(rule: Rule) -> Callable[[dict[str, Any]], Any]:
    """The Python check of a rule's condition, compiled when a subject first needs it: most runs
    evaluate only some of the rules (CEL has checked the text; what compile_check cannot read it
    leaves to CEL)."""

    def first(variables: dict[str, Any]) -> Any:
        rule.check = precheck.compile_check(rule.when)
        return rule.check(variables)

    return first


_programs: dict[str, cel.Program] = {}


def compiled(expression: str) -> cel.Program:
    """The expression compiled once per process: findings render the same evidence holes many times."""
    program = _programs.get(expression)
    if program is None:
        program = _programs[expression] = cel.compile(expression)
    return program


# --------------------------------------------------------------------------- evaluation


@dataclass
class _Tally:
    fired: int = 0
    unknown: int = 0
    error: str = ""


def evaluate(
    rules: list[Rule], facts: Facts, settings: dict[str, Any], stopwatch: Stopwatch | None = None
) -> Evaluation:
    """Every rule over every subject of its scope.

    Converting a subject's facts into CEL values costs far more than evaluating a condition. The
    conditions Python can answer exactly are answered first (diag/engine/precheck.py); a subject some rule
    is left for is converted once (one cel.Context) and those rules run on it. That context
    holds only the facts its scope's conditions read (see _view); the evidence and remediation of a
    rule that fires are rendered from a second one, made only then, with what they read besides (a
    fleet's driver versions by node, say, which no condition reads).
    """
    findings: list[Finding] = []
    outcomes: dict[str, RuleOutcome] = {}
    source_present = _present_sources(facts.cluster.get("sources", {}))
    by_scope: dict[str, list[Rule]] = {}
    for rule in rules:
        if rule.requires and not any(source_present(r) for r in rule.requires):
            outcomes[rule.id] = RuleOutcome("skipped", f"needs {', '.join(rule.requires)}, not in the bundle")
        else:
            by_scope.setdefault(rule.scope, []).append(rule)
    tallies = {rule.id: _Tally() for scoped in by_scope.values() for rule in scoped}
    for scope, scoped_rules in by_scope.items():
        judged = _Reads.of(scope, facts, settings, [rule.when for rule in scoped_rules])
        shown = _Reads.of(scope, facts, settings, _cel_texts(scoped_rules))
        for subject in facts.scopes.get(scope, []):
            left_to_cel = _prechecked(
                scoped_rules, {scope: subject, "cluster": facts.cluster, "settings": settings}, tallies, stopwatch
            )
            if not left_to_cel:
                continue
            started = time.perf_counter()
            try:
                env = judged.context(scope, subject)
            except Exception as e:  # a value CEL cannot hold (an integer past 64 bits ...)
                for rule in left_to_cel:
                    tallies[
                        rule.id
                    ].error = f"the facts of {subject.get('_subject', scope)} could not be read: {unexpected(e)}"
                continue
            if stopwatch is not None:
                stopwatch.add(stopwatch.rules, f"({scope} facts to CEL)", time.perf_counter() - started)
            shown_env = functools.cache(functools.partial(shown.contexts, scope, subject))  # made once a rule fires
            for rule in left_to_cel:
                started = time.perf_counter()
                _run(rule, subject, env, shown_env, tallies[rule.id], findings)
                if stopwatch is not None:
                    stopwatch.add(stopwatch.rules, rule.id, time.perf_counter() - started)
    for scope, scoped_rules in by_scope.items():
        count = len(facts.scopes.get(scope, []))
        for rule in scoped_rules:
            outcomes[rule.id] = _outcome(tallies[rule.id], count, scope)
    # in the rules' order, whichever file each rule is in; a rule's findings in the order of its subjects
    findings.sort(key=lambda f: f.rule)
    return Evaluation(findings, outcomes)


def _prechecked(
    rules: list[Rule], variables: dict[str, Any], tallies: dict[str, _Tally], stopwatch: Stopwatch | None = None
) -> list[Rule]:
    """The rules whose condition CEL must decide on this subject; the others were answered in Python
    (diag/engine/precheck.py): false, or unknown (counted here). A subject none is left for is never
    converted to CEL values, so a value CEL could not hold is reported only where a condition needs CEL."""
    left: list[Rule] = []
    for rule in rules:
        started = time.perf_counter() if stopwatch is not None else 0.0
        answer = rule.check(variables)
        if stopwatch is not None:
            stopwatch.add(stopwatch.rules, rule.id, time.perf_counter() - started)
        if answer is precheck.UNKNOWN:
            tallies[rule.id].unknown += 1
        elif answer is not False:
            left.append(rule)
    return left


@dataclass(frozen=True)
class _Reads:
    """What some CEL texts of one scope read: of the subject, and the views of the cluster and the
    settings they get (both converted again with every subject)."""

    subject_paths: cel_syntax.Paths | None
    cluster: dict[str, Any]
    settings: dict[str, Any]

    @classmethod
    def of(cls, scope: str, facts: Facts, settings: dict[str, Any], texts: list[str]) -> _Reads:
        read_settings = _view(settings, cel_syntax.paths_read("settings", texts))
        cluster_paths = cel_syntax.paths_read("cluster", texts)
        if scope == "cluster":  # the subject is the cluster: its view is made in context()
            return cls(cluster_paths, {}, read_settings)
        return cls(cel_syntax.paths_read(scope, texts), _view(facts.cluster, cluster_paths), read_settings)

    def context(self, scope: str, subject: dict) -> cel.Context:
        return cel.Context(self._values(scope, subject))

    def contexts(self, scope: str, subject: dict) -> tuple[cel.Context, cel.Context]:
        """The context as it is, for prose, and with every string a shell word, for commands."""
        values = self._values(scope, subject)
        return cel.Context(values), cel.Context(shell.quoted_view(values))

    def _values(self, scope: str, subject: dict) -> dict[str, Any]:
        return {"cluster": self.cluster, "settings": self.settings, scope: _view(subject, self.subject_paths)}


def _run(
    rule: Rule,
    subject: dict,
    env: cel.Context,
    shown_env: Callable[[], tuple[cel.Context, cel.Context]],
    tally: _Tally,
    findings: list[Finding],
) -> None:
    """One rule on one subject: a finding when it fires (its evidence rendered from `shown_env`),
    counted as unknown when it reads null."""
    try:
        if rule.program.execute(env) is True:
            findings.append(_finding(rule, subject, *shown_env()))
            tally.fired += 1
    except MemoryError:
        raise
    except Exception as e:  # OverflowError and the like: this rule's one-line failure
        if _reads_unknown(e):
            tally.unknown += 1
        else:
            tally.error = f"{type(e).__name__}: {e}"


def _cel_texts(rules: list[Rule]) -> list[str]:
    """The CEL the rules run: conditions, links and the holes of their evidence and remediation."""
    holes = [
        hole.strip() for rule in rules for text in [*rule.evidence, rule.remediation] for hole in _HOLE.findall(text)
    ]
    return [rule.when for rule in rules] + [rule.links for rule in rules if rule.links] + holes


def _view(facts: dict[str, Any], paths: cel_syntax.Paths | None) -> dict[str, Any]:
    """Only the facts the rules read go into CEL: converting all of a subject's for every subject
    (the whole cluster's, above all) made a fleet's analysis grow with subjects x nodes, and each
    entry of a map costs as much as a field (a pod's forty log signals, most never read). A map a
    macro runs over is given whole: the macro goes through its every key."""
    if paths is None:
        return facts
    view = {}
    for name, read in paths.items():
        if name in facts:
            value, keys = facts[name], read.keys
            if keys is not None and type(value) is dict and not read.iterated:
                value = {k: v for k, v in value.items() if k in keys}
            elif keys is not None and type(value) is list:
                value = [{k: v for k, v in item.items() if k in keys} if type(item) is dict else item for item in value]
            view[name] = value
    return view


def _reads_unknown(error: Exception) -> bool:
    """A null operand (TypeError), or one of CEL's functions called on null."""
    if isinstance(error, TypeError):
        return True
    undefined = _UNDEFINED.search(str(error)) if isinstance(error, RuntimeError) else None
    return undefined is not None and undefined["name"] in _CEL_FUNCTIONS


def _outcome(tally: _Tally, subjects: int, scope: str) -> RuleOutcome:
    if tally.error:
        return RuleOutcome("error", tally.error, subjects)
    undecided = f"; {tally.unknown} could not be decided" if tally.unknown else ""
    if tally.fired:
        return RuleOutcome("fired", f"{tally.fired} of {subjects}{undecided}", subjects)
    if not subjects:  # what it needs was read (else `requires` skipped it) and holds nothing to check
        return RuleOutcome("silent", f"nothing to check: no {scope.replace('_', ' ')} in the bundle")
    if tally.unknown:
        decided = subjects - tally.unknown
        return RuleOutcome(
            "unknown",
            f"{tally.unknown} of {subjects} could not be decided (the "
            f"values it needs were not reported); {decided} silent",
            subjects,
        )
    return RuleOutcome("silent", f"{subjects} checked", subjects)


def _present_sources(sources: dict[str, str]) -> Callable[[str], bool]:
    """Whether some source read (wholly or in part) is named `prefix` or starts with it: asked once per
    prefix, as a fleet's bundle has thousands of sources and the rules share a few dozen prefixes."""
    read = [name for name, status in sources.items() if status in ("ok", "partial")]
    return functools.cache(lambda prefix: any(name.startswith(prefix) for name in read))


def _finding(rule: Rule, subject: dict, env: cel.Context, shell_env: cel.Context) -> Finding:
    return Finding(
        rule=rule.id,
        layer=rule.layer,
        severity=rule.severity,
        title=rule.title,
        subject=subject.get("_subject", rule.scope),
        evidence=[line for text in rule.evidence if (line := render(text, env).strip())],
        remediation=render(rule.remediation, env, shell_env),
        references=rule.references,
        links=list(subject.get("_links", [])) + _rule_links(rule, env),
    )


def _rule_links(rule: Rule, env: cel.Context) -> list[str]:
    if not rule.links:
        return []
    try:
        value = compiled(rule.links).execute(env)
    except (TypeError, KeyError, ValueError, RuntimeError):
        return []
    return [str(v) for v in value] if isinstance(value, list) else []


# A list in evidence shows this many items, then how many more: a pending pod in a fleet would list
# every one of a thousand nodes, one line of the report for each screenful.
LISTED_ITEMS = 10


def render(template: str, env: dict | cel.Context, shell_env: dict | cel.Context | None = None) -> str:
    """Fill each {{ expr }} with the value of the CEL expression; "?" where it cannot be known. On a
    command line (diag/core/shell.py) the holes read `shell_env`, where every string is a shell word."""

    def filler(values: dict | cel.Context) -> Callable[[re.Match], str]:
        def fill(match: re.Match) -> str:
            try:
                return shell.escaped(_text(compiled(match.group(1).strip()).execute(values)))
            except (TypeError, KeyError, ValueError, RuntimeError):
                return "?"

        return fill

    if shell_env is None or "{{" not in template:
        return _HOLE.sub(filler(env), template)
    prose, command = filler(env), filler(shell_env)

    def command_line(line: str) -> str:
        out: list[str] = []
        last = 0
        for match in _HOLE.finditer(line):
            out.append(line[last : match.start()])
            state = shell.quote_state("".join(out))
            out.append(command(match) if state == "plain" else shell.inside(state, prose(match)))
            last = match.end()
        return "".join(out) + line[last:]

    return "\n".join(
        command_line(line) if shell.COMMAND_LINE.match(line) else _HOLE.sub(prose, line)
        for line in template.split("\n")
    )


def _text(value: Any) -> str:
    if value is None:
        return "?"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "?"  # no count or measure is infinite: unknown, as null is
        return f"{value:.3f}".rstrip("0").rstrip(".") if value != int(value) else str(int(value))
    if isinstance(value, list):
        shown = ", ".join(_text(v) for v in value[:LISTED_ITEMS])
        return shown if len(value) <= LISTED_ITEMS else f"{shown} and {len(value) - LISTED_ITEMS} more"
    if isinstance(value, dict):  # CEL's maps come back in no set order: sorted, the report is the same each time
        return ", ".join(f"{k}={_text(v)}" for k, v in sorted(value.items(), key=lambda item: str(item[0])))
    return str(value)
