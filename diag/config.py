"""The user's configuration (.llmdiag.yaml or --config): silence rules, override severities, tune settings.

    suppress:
      - rule: VLLM-113                 # by id (glob allowed: "GPU-1*")
      - rule: K8S-113
        namespace: batch-*             # ... only for subjects in these namespaces
      - subject: "pod/llm-serving/canary-*"
      - label: {team: research}        # pods (and what runs in them) carrying these labels
    severity:
      GPU-104: info
    settings:
      kv_cache_high: 0.95
      history_window_seconds: 2h       # a number of seconds, or 30m / 2h / 1d
    min_severity: warning
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from diag.clock import parse_duration
from diag.engine import SEVERITIES, Finding

from diag.errors import UserError

DEFAULT_CONFIG_NAME = ".llmdiag.yaml"
HISTORY_WINDOW_SETTING = "history_window_seconds"


class ConfigError(UserError):
    """The configuration file is wrong: one line naming it and the problem."""


@dataclass
class Config:
    suppress: list[dict[str, Any]] = field(default_factory=list)
    severity: dict[str, str] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    min_severity: str = "info"

    @classmethod
    def load(cls, path: Path | None) -> "Config":
        if path is None:
            default = Path.cwd() / DEFAULT_CONFIG_NAME
            if not default.exists():
                return cls()
            path = default
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except OSError as e:
            raise ConfigError(f"{path}: cannot read ({e.strerror})") from e
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from e
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a mapping at the top level")
        config = cls(
            suppress=list(data.get("suppress") or []),
            severity=dict(data.get("severity") or {}),
            settings=dict(data.get("settings") or {}),
            min_severity=str(data.get("min_severity", "info")),
        )
        bad = [s for s in [*config.severity.values(), config.min_severity] if s not in SEVERITIES]
        if bad:
            raise ConfigError(f"{path}: unknown severity {bad[0]!r} (use {', '.join(SEVERITIES)})")
        if not all(isinstance(s, dict) for s in config.suppress):
            raise ConfigError(f"{path}: each 'suppress' entry must be a mapping (rule/namespace/subject/label)")
        if HISTORY_WINDOW_SETTING in config.settings:
            config.settings[HISTORY_WINDOW_SETTING] = _window_seconds(path, config.settings[HISTORY_WINDOW_SETTING])
        return config

    def apply(self, findings: list[Finding], pod_labels: dict[str, dict[str, str]]) -> list[Finding]:
        """Severity overrides, suppressions and --min-severity, in that order."""
        kept = []
        floor = SEVERITIES.index(self.min_severity)
        for f in findings:
            f.severity = self.severity.get(f.rule, f.severity)
            if any(_matches(entry, f, pod_labels) for entry in self.suppress):
                continue
            if SEVERITIES.index(f.severity) >= floor:
                kept.append(f)
        return kept


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
        wanted = entry["label"] if isinstance(entry["label"], dict) else {}
        if not any(all(pod_labels.get(p, {}).get(k) == str(v) for k, v in wanted.items()) for p in pods):
            return False
    return bool(entry)


def _window_seconds(path: Path, value: Any) -> float:
    """The history window as seconds: a positive number, or a duration text (30m, 2h, 1d)."""
    try:
        seconds = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else parse_duration(str(value))
    except ValueError as e:
        raise ConfigError(f"{path}: settings.{HISTORY_WINDOW_SETTING}: {e}") from None
    if seconds <= 0:
        raise ConfigError(f"{path}: settings.{HISTORY_WINDOW_SETTING}: must be more than 0, found {value!r}")
    return seconds


def _namespace_of_subject(subject: str) -> set[str]:
    parts = subject.split("/")
    return {parts[1]} if len(parts) >= 3 else set()
