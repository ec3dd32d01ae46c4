"""Where the built-in rules live (rules/ inside the installed wheel, or beside the package in a
checkout), how their YAML files are read, and the settings (thresholds) they declare."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml


def builtin_rules_dir() -> Path:
    packaged = resources.files("diag") / "rules"
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[2] / "rules"


def load_yaml(text: str) -> Any:
    """libyaml's loader where PyYAML was built with it: the pure-Python one is most of an analysis' time
    on a small bundle (the rules and signals are read by every run)."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def load_settings(rules_dir: Path) -> dict[str, dict]:
    """The settings a rules folder declares (settings.yaml): name -> {default, description, ...}."""
    path = rules_dir / "settings.yaml"
    data = load_yaml(path.read_text()) if path.exists() else {}
    return dict((data or {}).get("settings", {}))


def default_settings() -> dict[str, Any]:
    return {name: spec.get("default") for name, spec in load_settings(builtin_rules_dir()).items()}
