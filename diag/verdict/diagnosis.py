"""From findings to a diagnosis: which finding causes which, and the verdict.

A finding A explains a finding B when A's rule lists B's rule under `explains` and the two are about
joined subjects: they share a pod, node, Ray node, GPU, vLLM server ... in their links. A cluster-wide
finding has links only where its rule says which subjects it is about (`links:`); two cluster-wide
findings are about the same thing. A finding off the serving path (diag.verdict.relevance) never explains one
on it.

The verdict is one of three answers:
  fault         among serving-path findings nothing explains, the most severe, and among those the
                deepest layer (gpu < kubernetes < ray < vllm): a fault low in the stack explains the
                symptoms above it. Said whenever such a root exists, whatever was not read.
  inconclusive  nothing fired, and a source that would decide was missing, empty or damaged
                (diag.verdict.coverage)
  healthy       no fault, and every deciding source was read; a source that decides nothing alone (a
                list that only adds detail, a log of a container that did not crash, the GPUs where no
                capture could be read at all) is named as not read

A source that was not read matters to a fault only if it could change its root cause: some rule that
explains the root (through `explains`, transitively) needs that source (`requires`) and was not
decided on what was read (skipped, unknown, or in error), or the source is about the root's own
subjects. Each such source is a caveat of the verdict, naming those rules and the command that gets
it; the confidence says how far the caveats reach:
  high    no caveat
  medium  caveats, each of a rule in the root's layer or above it
  low     a caveat of a deeper layer, or one whose cause could lie in any layer (a crash log not read)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from diag.bundle import layout
from diag.engine.rules import SEVERITIES, Finding, Rule, RuleOutcome
from diag.snapshot.model import LAYERS
from diag.verdict.coverage import Gap

VerdictStatus = Literal["fault", "healthy", "inconclusive"]
Confidence = Literal["high", "medium", "low"]
_UNDECIDED = ("skipped", "unknown", "error")
# A collector that failed as a whole stands for every file it writes.
_COLLECTOR_PREFIX = {folder.collector: f"{folder.name}/" for folder in layout.FOLDERS}


@dataclass(frozen=True)
class Caveat:
    """A source not read that could change the root cause: the rules that would need it, and how to get it."""

    gap: Gap
    rules: tuple[str, ...]
    deeper: bool  # a rule of a layer below the root's, or a cause in any layer (a crash log)


@dataclass
class Verdict:
    status: VerdictStatus
    layer: str | None
    rule: str | None
    summary: str
    finding: Finding | None = None
    gaps: list[Gap] = field(default_factory=list)
    caveats: list[Caveat] = field(default_factory=list)
    confidence: Confidence | None = None  # set on a fault only


def link_causes(findings: list[Finding], rules: dict[str, Rule]) -> None:
    """Set `explained_by` on every finding another one explains (deepest cause first).

    Each finding looks for its cause among those it is related to only (they share a link, or both
    are cluster-wide), found by link: a fleet's incident fires on thousands of subjects, and trying
    every finding against every other was quadratic."""
    ordered = sorted(findings, key=_rank)
    explains = {rule_id: set(rule.explains) for rule_id, rule in rules.items()}
    by_link: dict[str, list[int]] = {}
    for n, finding in enumerate(ordered):
        for link in set(finding.links):
            by_link.setdefault(link, []).append(n)
    cluster_wide = [n for n, f in enumerate(ordered) if f.subject == "cluster"]
    for position, effect in enumerate(ordered):
        related = {n for link in set(effect.links) for n in by_link.get(link, [])}
        if effect.subject == "cluster":
            related.update(cluster_wide)
        related.discard(position)
        for n in sorted(related):
            cause = ordered[n]
            if effect.rule not in explains[cause.rule] or (effect.serving and not cause.serving):
                continue
            if cause.explained_by != effect.rule:
                effect.explained_by = cause.rule
                break


def _rank(f: Finding) -> tuple[int, int, str, str]:
    return (-SEVERITIES.index(f.severity), LAYERS.index(f.layer), f.rule, f.subject)


def verdict(
    findings: list[Finding],
    checked: int,
    undecided: int,
    gaps: list[Gap] | None = None,
    rules: dict[str, Rule] | None = None,
    outcomes: dict[str, RuleOutcome] | None = None,
) -> Verdict:
    """`checked`: rules that had their data; `undecided`: rules that could not run on this bundle;
    `gaps`: the deciding sources that were not read; `rules`: the catalogue, for what explains a root;
    `outcomes`: what became of each rule (a rule not listed counts as undecided)."""
    gaps = gaps or []
    roots = sorted((f for f in findings if f.serving and f.explained_by is None and f.severity != "info"), key=_rank)
    if roots:
        root = roots[0]
        caveats = caveats_of(root, gaps, rules or {}, outcomes or {})
        consequences = sum(1 for f in findings if f.explained_by is not None)
        more = f" It explains {consequences} other finding{'s' if consequences != 1 else ''}." if consequences else ""
        unread = f" Not read, and could change this: {_source_names([c.gap for c in caveats])}." if caveats else ""
        confidence: Confidence = "high" if not caveats else "low" if any(c.deeper for c in caveats) else "medium"
        return Verdict(
            "fault",
            root.layer,
            root.rule,
            f"{root.layer} layer: {root.title} ({root.subject}).{more}{unread}",
            root,
            gaps,
            caveats,
            confidence,
        )
    deciding = [g for g in gaps if g.deciding]
    if deciding:
        names = _source_names(deciding)
        return Verdict(
            "inconclusive",
            None,
            None,
            f"Inconclusive: no fault found in what was read, but {names} "
            "could not be read, so a fault there cannot be ruled out.",
            gaps=gaps,
        )
    gap = f"; {undecided} could not be decided from this bundle (see sources)" if undecided else ""
    unread = f" Not read: {_source_names(gaps)}." if gaps else ""
    return Verdict(
        "healthy",
        None,
        None,
        f"No fault found: {checked} rules had the data they need and none found a fault{gap}.{unread}",
        gaps=gaps,
    )


def caveats_of(
    root: Finding, gaps: list[Gap], rules: dict[str, Rule], outcomes: dict[str, RuleOutcome]
) -> list[Caveat]:
    """The gaps that could change `root`: a rule that explains it, directly or through others, needs
    the source and was not decided on what was read; or the source is about the root's own subjects."""
    if root.rule in rules and rules[root.rule].certain:
        return []
    explainers = _explainers(root.rule, rules)
    found = []
    for gap in gaps:
        if _moot(gap, root, rules):
            continue
        own = bool(set(gap.links) & set(root.links))
        needing = tuple(
            sorted(
                rule_id
                for rule_id in explainers
                if _needs(rules[rule_id], gap)
                and (own or outcomes.get(rule_id) is None or outcomes[rule_id].status in _UNDECIDED)
            )
        )
        if not needing:
            continue
        below = any(LAYERS.index(rules[r].layer) < LAYERS.index(root.layer) for r in needing)
        found.append(Caveat(gap, needing, below or gap.layer is None))
    return found


def _explainers(rule_id: str, rules: dict[str, Rule]) -> set[str]:
    """Every rule that explains `rule_id`, directly or through a chain of `explains`."""
    explained_by: dict[str, set[str]] = {}
    for rule in rules.values():
        for effect in rule.explains:
            explained_by.setdefault(effect, set()).add(rule.id)
    found: set[str] = set()
    todo = [rule_id]
    while todo:
        for cause in explained_by.get(todo.pop(), ()):
            if cause not in found and cause != rule_id:
                found.add(cause)
                todo.append(cause)
    return found


def _needs(rule: Rule, gap: Gap) -> bool:
    """Whether `rule` reads what `gap` is missing: a file among its `requires`, or any file of a
    collector that failed whole; a gap no file names (a rule in error, the whole bundle, a bug in
    reading) stands for its layer, or for every layer when it has none."""
    source = gap.source
    prefixes = rule.requires
    if source.startswith("rule "):
        return source == f"rule {rule.id}"
    if source in _COLLECTOR_PREFIX:
        return any(p.startswith(_COLLECTOR_PREFIX[source]) for p in prefixes) or (
            not prefixes and rule.layer == gap.layer
        )
    if "/" in source and not source.startswith("facts/"):
        return any(source == p.rstrip("/") or source.startswith(p) for p in prefixes)
    return gap.layer is None or rule.layer == gap.layer


def _moot(gap: Gap, root: Finding, rules: dict[str, Rule]) -> bool:
    """The root makes the source unneeded: the root is why it is missing (a GPU node that is down cannot
    answer nvidia-smi), or the root is a known cause of what the source would explain (the crash
    whose log is missing)."""
    if not set(gap.links) & set(root.links):
        return False
    if gap.moot_if_root_explains is None:
        return True
    return root.rule in rules and gap.moot_if_root_explains in rules[root.rule].explains


def _source_names(gaps: list[Gap]) -> str:
    return ", ".join(g.source for g in gaps[:4]) + (f" and {len(gaps) - 4} more" if len(gaps) > 4 else "")
