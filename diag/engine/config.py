"""The user's configuration (.llmdiag.yaml or --config): silence rules, override severities, tune settings.

    suppress:
      - rule: VLLM-113                 # by id (glob allowed: "GPU-1*")
        reason: known, ticket OPS-42   # free text, for the next reader
      - rule: K8S-113
        namespace: batch-*             # ... only for subjects in these namespaces
      - subject: "pod/llm-serving/canary-*"
      - rule: K8S-*
        label: {team: research}        # pods (and what runs in them) carrying these labels
    severity:
      GPU-104: info
    settings:
      kv_cache_high: 0.95
      history_window_seconds: 2h       # a number of seconds, or 30m / 2h / 1d
    min_severity: warning

A configuration must never hide an incident by accident: the file is checked against a schema and
every mistake is an error naming the file and its line, never a key silently ignored. Unknown keys,
a rule id no rule has, a setting of the wrong type (settings are declared in rules/settings.yaml: the
default's type is the setting's), a suppression that names neither a rule nor a subject, and a
suppression that would match every finding are all refused.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from diag.core.errors import UserError
from diag.core.rules_dir import default_settings
from diag.engine.rules import SEVERITIES, Finding
from diag.snapshot.clock import parse_duration

if TYPE_CHECKING:
    from diag.engine.config_file import Suppression

DEFAULT_CONFIG_NAME = ".llmdiag.yaml"
HISTORY_WINDOW_SETTING = "history_window_seconds"


class ConfigError(UserError):
    """The configuration file is wrong: one line naming it (and the line) and the problem."""


@dataclass
class RuleReference:
    """A rule id (or pattern) the file names, and where, checked once the rules are loaded."""

    pattern: str
    where: str  # "FILE:LINE: suppress[0].rule"
    suppression: Suppression | None = None  # set for a suppression's rule pattern


@dataclass
class Config:
    suppress: list[dict[str, Any]] = field(default_factory=list)
    severity: dict[str, str] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    min_severity: str = "info"
    path: Path | None = None  # the file applied; None when there was none
    rule_references: list[RuleReference] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path | None) -> Config:
        if path is None:
            default = Path.cwd() / DEFAULT_CONFIG_NAME
            if not default.exists():
                return cls()
            path = default
        try:
            text = path.read_text()
        except OSError as e:
            raise ConfigError(f"{path}: cannot read ({e.strerror})") from e
        try:
            root = yaml.compose(text, Loader=yaml.SafeLoader)
            data = yaml.safe_load(text) if root is not None else {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: not valid YAML ({str(e).splitlines()[0]}{_yaml_line(e)})") from e
        if not isinstance(data, dict):
            raise ConfigError(f"{path}:{_line(root)}: expected a mapping at the top level")
        from diag.engine.config_file import ConfigFile, ValidationError, message  # pydantic: only with a file

        try:
            parsed = ConfigFile.model_validate(data)
        except ValidationError as e:
            error = e.errors()[0]
            loc = tuple(error["loc"])
            raise ConfigError(f"{path}:{_line_at(root, loc)}: {_where(loc)}: {message(error)}") from None
        settings = {name: _setting(path, root, name, value) for name, value in parsed.settings.items()}
        references = [
            RuleReference(s.rule, f"{path}:{_line_at(root, ('suppress', i, 'rule'))}: suppress[{i}].rule", s)
            for i, s in enumerate(parsed.suppress)
            if s.rule is not None
        ]
        references += [
            RuleReference(rule, f"{path}:{_line_at(root, ('severity', rule))}: severity.{rule}")
            for rule in parsed.severity
        ]
        for i, s in enumerate(parsed.suppress):
            if s.rule is None and not s.narrows():
                raise ConfigError(f"{path}:{_line_at(root, ('suppress', i))}: suppress[{i}]: {_EVERYTHING}")
        return cls(
            suppress=[s.model_dump(exclude_none=True, exclude={"reason"}) for s in parsed.suppress],
            severity=dict(parsed.severity),
            settings=settings,
            min_severity=parsed.min_severity,
            path=path,
            rule_references=references,
        )

    def check_rules(self, rule_ids: list[str]) -> None:
        """Every rule id or pattern the file names must name a loaded rule; a suppression whose rule
        pattern covers every rule must be narrowed by a subject, namespace or label."""
        for ref in self.rule_references:
            named = fnmatch.filter(rule_ids, ref.pattern)
            if not named:
                raise ConfigError(f"{ref.where}: {ref.pattern!r} names no rule (see `llmdiag rules list`)")
            if ref.suppression is not None and len(named) == len(rule_ids) and not ref.suppression.narrows():
                raise ConfigError(f"{ref.where}: {_EVERYTHING}")

    def suppresses(self, finding: Finding, pod_labels: dict[str, dict[str, str]]) -> bool:
        return any(_matches(entry, finding, pod_labels) for entry in self.suppress)

    def apply(self, findings: list[Finding], pod_labels: dict[str, dict[str, str]]) -> list[Finding]:
        """Severity overrides, suppressions and --min-severity, in that order."""
        kept = []
        floor = SEVERITIES.index(self.min_severity)
        for f in findings:
            f.severity = self.severity.get(f.rule, f.severity)
            if self.suppresses(f, pod_labels):
                continue
            if SEVERITIES.index(f.severity) >= floor:
                kept.append(f)
        return kept


_EVERYTHING = (
    "this suppression matches every finding (it would hide any "
    "incident): name a rule, a subject, a namespace or a label"
)


def _matches(entry: dict[str, Any], f: Finding, pod_labels: dict[str, dict[str, str]]) -> bool:
    """An entry matches when every key it sets matches the finding."""
    if "rule" in entry and not fnmatch.fnmatch(f.rule, str(entry["rule"])):
        return False
    if "subject" in entry and not fnmatch.fnmatch(f.subject, str(entry["subject"])):
        return False
    pods = [link.removeprefix("pod:") for link in f.links if link.startswith("pod:")]
    if "namespace" in entry:
        namespaces = {p.split("/", 1)[0] for p in pods} | _namespace_of_subject(f.subject)
        if not any(fnmatch.fnmatch(ns, str(entry["namespace"])) for ns in namespaces):
            return False
    if "label" in entry:
        wanted = entry["label"]
        if not any(all(pod_labels.get(p, {}).get(k) == str(v) for k, v in wanted.items()) for p in pods):
            return False
    return bool(entry)


# ----------------------------------------------------------------------------- settings


def _setting(path: Path, root: yaml.Node | None, name: str, value: Any) -> Any:
    """A setting's value, checked against the type of its declared default."""
    where = f"{path}:{_line_at(root, ('settings', name))}: settings.{name}"
    declared = default_settings()
    if name not in declared:
        raise ConfigError(f"{where}: no such setting (known: {', '.join(sorted(declared))})")
    if name == HISTORY_WINDOW_SETTING:
        return _window_seconds(where, value)
    default = declared[name]
    if not _same_kind(value, default):
        raise ConfigError(f"{where}: expected {_kind(default)}, found {value!r}")
    return value


def _same_kind(value: Any, default: Any) -> bool:
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, (int, float)):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(default, list):
        return (
            isinstance(value, list) and all(_same_kind(v, default[0]) for v in value)
            if default
            else isinstance(value, list)
        )
    return isinstance(value, type(default))


def _kind(default: Any) -> str:
    if isinstance(default, bool):
        return "true or false"
    if isinstance(default, (int, float)):
        return "a number"
    if isinstance(default, list):
        return f"a list of {_kind(default[0]).removeprefix('a ')}s" if default else "a list"
    return "a text" if isinstance(default, str) else type(default).__name__


def _window_seconds(where: str, value: Any) -> float:
    """The history window as seconds: a positive number, or a duration text (30m, 2h, 1d)."""
    try:
        seconds = (
            float(value)
            if isinstance(value, (int, float)) and not isinstance(value, bool)
            else parse_duration(str(value))
        )
    except ValueError as e:
        raise ConfigError(f"{where}: {e}") from None
    if seconds <= 0:
        raise ConfigError(f"{where}: must be more than 0, found {value!r}")
    return seconds


def _namespace_of_subject(subject: str) -> set[str]:
    parts = subject.split("/")
    return {parts[1]} if len(parts) >= 3 else set()


# ----------------------------------------------------------------------------- where in the file


def _line(node: yaml.Node | None) -> int:
    return node.start_mark.line + 1 if node is not None else 1


def _line_at(root: yaml.Node | None, loc: tuple) -> int:
    """The line of the deepest node `loc` reaches (a mapping key's own line for a key that is wrong)."""
    node = root
    for depth, step in enumerate(loc):
        last = depth == len(loc) - 1
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if key.value == str(step):
                    node = key if last else value
                    break
            else:
                return _line(node)
        elif isinstance(node, yaml.SequenceNode) and isinstance(step, int) and step < len(node.value):
            node = node.value[step]
        else:
            return _line(node)
    return _line(node)


def _where(loc: tuple) -> str:
    text = ""
    for step in loc:
        text += f"[{step}]" if isinstance(step, int) else (f".{step}" if text else str(step))
    return text or "(top level)"


def _yaml_line(e: yaml.YAMLError) -> str:
    mark = getattr(e, "problem_mark", None)
    return f", line {mark.line + 1}" if mark is not None else ""
