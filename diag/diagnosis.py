"""From findings to a diagnosis: which finding causes which, and the verdict.

A finding A explains a finding B when A's rule lists B's rule under `explains` and the two subjects
are joined (they share a pod, node, Ray node, GPU, vLLM server ... in their links), or A is about the
whole cluster. The verdict is the root cause: among findings nothing explains, the most severe, and
among those the deepest layer (gpu < kubernetes < ray < vllm), since a fault low in the stack
explains the symptoms above it.
"""

from __future__ import annotations

from dataclasses import dataclass

from diag.engine import SEVERITIES, Finding, Rule
from diag.model import LAYERS


@dataclass
class Verdict:
    layer: str | None
    rule: str | None
    summary: str
    finding: Finding | None = None


def link_causes(findings: list[Finding], rules: dict[str, Rule]) -> None:
    """Set `explained_by` on every finding another one explains (deepest cause first)."""
    ordered = sorted(findings, key=_rank)
    for effect in ordered:
        for cause in ordered:
            if cause is effect or effect.rule not in rules[cause.rule].explains:
                continue
            if _related(cause, effect) and cause.explained_by != effect.rule:
                effect.explained_by = cause.rule
                break


def _related(a: Finding, b: Finding) -> bool:
    return a.subject == "cluster" or b.subject == "cluster" or bool(set(a.links) & set(b.links))


def _rank(f: Finding) -> tuple[int, int, str, str]:
    return (-SEVERITIES.index(f.severity), LAYERS.index(f.layer), f.rule, f.subject)


def verdict(findings: list[Finding], checked: int, undecided: int) -> Verdict:
    """`checked`: rules that had their data; `undecided`: rules that could not run on this bundle."""
    roots = sorted((f for f in findings if f.explained_by is None and f.severity != "info"), key=_rank)
    if not roots:
        gap = f"; {undecided} could not be decided from this bundle (see sources)" if undecided else ""
        return Verdict(None, None, f"No fault found: {checked} rules had the data they need and none found a fault{gap}.")
    root = roots[0]
    consequences = sum(1 for f in findings if f.explained_by is not None)
    more = f" It explains {consequences} other finding{'s' if consequences != 1 else ''}." if consequences else ""
    return Verdict(root.layer, root.rule, f"{root.layer} layer: {root.title} ({root.subject}).{more}", root)
