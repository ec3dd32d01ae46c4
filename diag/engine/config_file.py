"""The schema of .llmdiag.yaml, checked by pydantic: imported only where a configuration file is read,
as pydantic's import would otherwise add to every run's start-up."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import ErrorDetails

from diag.engine.rules import SEVERITIES

__all__ = ["ConfigFile", "Suppression", "ValidationError", "message"]

Severity = Literal["info", "warning", "critical"]


class Suppression(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    rule: str | None = None
    subject: str | None = None
    namespace: str | None = None
    label: dict[str, str] | None = Field(default=None, min_length=1)
    reason: str | None = None

    @model_validator(mode="after")
    def _names_a_rule_or_subject(self) -> Suppression:
        if self.rule is None and self.subject is None:
            raise ValueError("a suppression needs a 'rule' or a 'subject' (namespace and label only narrow one)")
        return self

    def narrows(self) -> bool:
        """True when something besides the rule pattern limits what it matches."""
        return (
            (self.subject is not None and not matches_all(self.subject))
            or self.label is not None
            or (self.namespace is not None and not matches_all(self.namespace))
        )


class ConfigFile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    suppress: list[Suppression] = Field(default_factory=list)
    severity: dict[str, Severity] = Field(default_factory=dict)
    settings: dict[str, Any] = Field(default_factory=dict)
    min_severity: Severity = "info"


def message(error: ErrorDetails) -> str:
    """The first validation error in the words of the one line that names the file and its line."""
    if error["type"] == "extra_forbidden":
        return "unknown key (a misspelling?)"
    if error["type"] == "literal_error":
        return f"{error['input']!r} is not one of {', '.join(SEVERITIES)}"
    if error["type"] == "value_error":
        return str(error["ctx"]["error"])
    return f"{error['msg'].lower()}, found {error['input']!r}"


def matches_all(pattern: str) -> bool:
    return pattern.strip("*") == ""
