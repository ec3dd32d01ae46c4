"""Where the built-in rules live: rules/ inside the installed wheel, or beside the package in a checkout."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def builtin_rules_dir() -> Path:
    packaged = resources.files("diag") / "rules"
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parent.parent / "rules"
