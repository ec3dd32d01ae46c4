"""Log signals: the log lines that name a cause, kept as data in rules/signals/*.yaml.

A signal is a name the rules read (`pod.log_signals.<name>`, `vllm_server.log_signals.<name>`) and the
patterns that recognise its lines, each with where its wording comes from and an example line it must
match. A signal names why a container exits (a crash loop's "known failure line") unless it says
`crash_cause: false` (a symptom such as the engine's death, a traceback frame, a warning). A pattern
from a new incident thread is a few lines of YAML, in the built-in folder or in a
`signals/` folder beside the rule files given with `--rules`; a file that is wrong is one line naming
the file and the signal.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from diag.core.errors import UserError
from diag.core.rules_dir import builtin_rules_dir, load_yaml
from diag.parsers.log_gate import LineGate
from diag.snapshot.model import LAYERS

if TYPE_CHECKING:
    from diag.snapshot.model import Snapshot

SIGNALS_FOLDER = "signals"
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_SIGNAL_KEYS = {"layer", "description", "patterns", "crash_cause"}
_PATTERN_KEYS = {"regex", "source", "example"}


class SignalError(UserError):
    """A signal file is wrong: one line naming the file, the signal and the problem."""


@dataclass(frozen=True)
class LogSignals:
    patterns: dict[str, re.Pattern[str]]  # name -> one pattern for all its regexes
    layers: dict[str, str]
    descriptions: dict[str, str]
    crash_causes: tuple[str, ...] = ()  # the signals whose lines name why a container exits, in file order
    gate: LineGate = field(default=LineGate(None), compare=False)  # the lines worth running the patterns on

    def names(self) -> list[str]:
        return list(self.patterns)


_loaded: dict[tuple, LogSignals] = {}


def load_signals(rule_dirs: list[Path]) -> LogSignals:
    """The signals of every `signals/` folder beside the rule files of `rule_dirs`, in order; a later
    file may add patterns to a signal an earlier one named."""
    files = [p for d in rule_dirs for p in sorted((d / SIGNALS_FOLDER).glob("*.yaml")) if (d / SIGNALS_FOLDER).is_dir()]
    key = tuple((str(p), p.stat().st_mtime_ns) for p in files)
    if key not in _loaded:
        regexes: dict[str, list[str]] = {}
        layers: dict[str, str] = {}
        descriptions: dict[str, str] = {}
        crash_cause: dict[str, bool] = {}
        files_of: dict[str, set[str]] = {}
        for path in files:
            for name, spec in _read(path).items():
                where = f"{path}: signal {name}"
                layer, description, patterns = _checked(spec, where)
                if name in layers and layers[name] != layer:
                    raise SignalError(f"{where}: layer {layer} differs from {layers[name]} given before")
                layers[name], descriptions[name] = layer, descriptions.get(name) or description
                crash_cause[name] = spec.get(
                    "crash_cause", crash_cause.get(name, True)
                )  # a file that says nothing keeps it
                regexes.setdefault(name, []).extend(patterns)
                files_of.setdefault(name, set()).add(str(path))
        joined = {
            name: _joined(f"{', '.join(sorted(files_of[name]))}: signal {name}", rs) for name, rs in regexes.items()
        }
        _loaded[key] = LogSignals(
            joined,
            layers,
            descriptions,
            tuple(name for name in regexes if crash_cause[name]),
            LineGate.of(joined.values()),
        )
    return _loaded[key]


@functools.cache
def builtin_signals() -> LogSignals:
    return load_signals([builtin_rules_dir()])


def looked_for(snap: Snapshot) -> LogSignals:
    """The signals the snapshot's logs were read with (the built-in ones for a snapshot built in code)."""
    return snap.signals or builtin_signals()


def _read(path: Path) -> dict[str, Any]:
    try:
        data = load_yaml(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise SignalError(f"{path}: not readable YAML ({' '.join(str(e).split())[:200]})") from None
    signals = data.get("signals") if isinstance(data, dict) else None
    if not isinstance(signals, dict):
        raise SignalError(f"{path}: expected a top-level `signals:` mapping of name -> signal")
    for name in signals:
        if not isinstance(name, str) or not _NAME.match(name):
            raise SignalError(f"{path}: signal name {name!r} is not lower_snake_case")
    return signals


def _checked(spec: Any, where: str) -> tuple[str, str, list[str]]:
    if not isinstance(spec, dict):
        raise SignalError(f"{where}: expected a mapping with layer, description and patterns")
    if unknown := sorted(set(spec) - _SIGNAL_KEYS):
        raise SignalError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(_SIGNAL_KEYS))})")
    layer, description, patterns = spec.get("layer"), spec.get("description"), spec.get("patterns")
    if layer not in LAYERS:
        raise SignalError(f"{where}: layer must be one of {', '.join(LAYERS)}, not {layer!r}")
    if not isinstance(description, str) or not description.strip():
        raise SignalError(f"{where}: needs a one-line description")
    if not isinstance(patterns, list) or not patterns:
        raise SignalError(f"{where}: needs a list of patterns")
    if not isinstance(spec.get("crash_cause", True), bool):
        raise SignalError(f"{where}: crash_cause must be true or false, not {spec['crash_cause']!r}")
    return layer, description, [_regex(p, f"{where}, pattern {i + 1}") for i, p in enumerate(patterns)]


def _joined(where: str, regexes: list[str]) -> re.Pattern[str]:
    """One pattern for all of a signal's regexes. A regex that compiles alone may not compile inside the
    others' alternation (a global flag, `(?i)`, is only allowed at the start)."""
    try:
        return re.compile("|".join(f"(?:{r})" for r in regexes))
    except re.error as e:
        raise SignalError(
            f"{where}: its regexes do not compile joined together ({e}); write flags scoped, (?i:...), not global"
        ) from None


def _regex(pattern: Any, where: str) -> str:
    if not isinstance(pattern, dict) or not isinstance(pattern.get("regex"), str):
        raise SignalError(f"{where}: expected a mapping with a `regex` string")
    if unknown := sorted(set(pattern) - _PATTERN_KEYS):
        raise SignalError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(_PATTERN_KEYS))})")
    if not isinstance(pattern.get("source"), str) or not pattern["source"].strip():
        raise SignalError(f"{where}: needs a `source`: where this wording comes from (a file of the project, a thread)")
    try:
        compiled = re.compile(pattern["regex"])
    except re.error as e:
        raise SignalError(f"{where}: the regex does not compile ({e})") from None
    example = pattern.get("example")
    if example is not None and not (isinstance(example, str) and compiled.search(example)):
        raise SignalError(f"{where}: its example does not match its regex")
    return pattern["regex"]
