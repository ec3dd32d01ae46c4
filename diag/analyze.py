"""The one analysis path: bundle -> snapshot -> facts -> findings -> diagnosis -> Report."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from diag.bundle.files import Bundle
from diag.bundle.load import load_bundle
from diag.core.errors import EXIT_CANNOT_ANALYZE
from diag.core.rules_dir import builtin_rules_dir, load_settings
from diag.core.stopwatch import Stopwatch
from diag.engine.config import Config, ConfigError
from diag.engine.rules import Finding, Rule, RuleOutcome, evaluate, load_rules
from diag.facts import build_facts
from diag.link.join import join
from diag.link.prometheus_join import history_window
from diag.parsers.signals import load_signals
from diag.snapshot.clock import Clock
from diag.snapshot.model import PromWindow, Snapshot, SourceStatus
from diag.verdict.context import AnalysisContext
from diag.verdict.coverage import gaps, rule_gaps
from diag.verdict.diagnosis import Verdict, link_causes, verdict
from diag.verdict.history import History, find_history
from diag.verdict.relevance import in_question, on_serving_path, serving_links

# Exit codes, as Nagios-style checks use them, so runbooks can branch on them.
EXIT_HEALTHY, EXIT_WARNING, EXIT_CRITICAL = 0, 1, 2


@dataclass
class Report:
    verdict: Verdict
    findings: list[Finding]
    sources: dict[str, SourceStatus]
    outcomes: dict[str, RuleOutcome] = field(default_factory=dict)
    origin: str = ""
    history: History | None = None  # faults past the history window; None where not computed
    prometheus_window: PromWindow | None = None  # the range of Prometheus history read, when there was one
    config_file: str | None = None  # the configuration applied (.llmdiag.yaml or --config); None when none
    suppressed: int = 0  # findings the configuration's suppressions hid
    context: AnalysisContext | None = None  # what was looked at, when, over which history window
    snapshot: Snapshot | None = None  # what the bundle held, joined: the series the HTML report draws
    settings: dict = field(default_factory=dict)  # the thresholds the rules ran with (defaults and overrides)

    @property
    def exit_code(self) -> int:
        """3 when the verdict is inconclusive (whatever warnings it carries), else the worst
        serving-path finding (2 critical, 1 warning), else 0: the table of README.md, "Exit codes"."""
        if self.verdict.status == "inconclusive":
            return EXIT_CANNOT_ANALYZE
        severities = {f.severity for f in self.findings if f.serving}
        if "critical" in severities:
            return EXIT_CRITICAL
        if "warning" in severities:
            return EXIT_WARNING
        return EXIT_HEALTHY


def settings_with_overrides(rules_dir: Path, config: Config) -> dict:
    declared = load_settings(rules_dir)
    values = {name: spec.get("default") for name, spec in declared.items()}
    unknown = sorted(set(config.settings) - set(values))
    if unknown:
        raise ConfigError(
            f"unknown setting(s) {', '.join(unknown)} (the settings: `llmdiag rules docs`, section Settings)"
        )
    values.update(config.settings)
    return values


@contextmanager
def _without_cycle_collection() -> Iterator[None]:
    """An analysis makes millions of objects and drops few: the cyclic collector's passes over them were
    a quarter of a fleet's analysis, at the same peak memory (bench/README.md).
    Reference counting still frees what is dropped; cycles wait until the analysis ends."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def compile_rules(extra_rule_dirs: list[Path] | None = None) -> None:
    """Load and compile the rules and log signals that `analyze_bundle` will use (each is kept per
    process), so that `triage` can do it while it waits for the cluster. An error is left for
    `analyze_bundle` to raise."""
    dirs = [builtin_rules_dir(), *(extra_rule_dirs or [])]
    try:
        load_rules(dirs)
        load_signals(dirs)
    except Exception:
        return


def analyze_bundle(
    bundle: Bundle,
    config: Config | None = None,
    extra_rule_dirs: list[Path] | None = None,
    stopwatch: Stopwatch | None = None,
    held: list[object] | None = None,
) -> Report:
    """The analysis of `bundle`. Its bytes are not held past the parse: a bundle only this call holds
    (`analyze_bundle(Bundle.open(path))`) is freed then, and the analysis peaks lower by its size.
    `held`: a list to leave what the analysis built in, for a process that ends without freeing it."""
    config = config or Config()
    watch = stopwatch or Stopwatch()
    with _without_cycle_collection():
        with watch.phase("rules (load and compile)"):
            rules_dir = builtin_rules_dir()
            rules = load_rules([rules_dir, *(extra_rule_dirs or [])])
            signals = load_signals([rules_dir, *(extra_rule_dirs or [])])
            settings = settings_with_overrides(rules_dir, config)
            config.check_rules([r.id for r in rules])
        with watch.phase("parse"):
            loaded = load_bundle(bundle, watch, signals)
        origin = bundle.origin
        del bundle
        return _analyze(loaded, origin, rules, settings, config, watch, held)


def _analyze(
    loaded: Snapshot,
    origin: str,
    rules: list[Rule],
    settings: dict,
    config: Config,
    watch: Stopwatch,
    held: list[object] | None,
) -> Report:
    with watch.phase("join"):
        snap = join(loaded)
    with watch.phase("facts"):
        clock = Clock.of(snap, settings["history_window_seconds"])
        facts = build_facts(snap, clock, settings)
    with watch.phase("rules (evaluate)"):
        result = evaluate(rules, facts, settings, watch if watch.times_rules else None)
        pod_labels = {p.key: p.labels for p in snap.pods}
        suppressed = sum(1 for f in result.findings if config.suppresses(f, pod_labels))
        findings = config.apply(result.findings, pod_labels)
    with watch.phase("history"):
        history = find_history(
            snap, clock, facts, findings, rules, settings, lambda found: config.apply(found, pod_labels)
        )
    with watch.phase("diagnosis"):
        serving = serving_links(snap)
        for finding in findings:
            finding.serving = on_serving_path(finding, serving)
        asked = snap.pods_listed_in()
        findings = [f for f in findings if in_question(f, asked)]
        by_id = {r.id: r for r in rules}
        link_causes(findings, by_id)
        checked = sum(1 for o in result.outcomes.values() if o.status in ("fired", "silent"))
        undecided = sum(1 for o in result.outcomes.values() if o.status in ("unknown", "skipped"))
        diagnosis = verdict(
            findings, checked, undecided, gaps(snap, clock) + rule_gaps(result.outcomes, by_id), by_id, result.outcomes
        )
    if held is not None:
        held.append((loaded, snap, facts, result))
    return Report(
        diagnosis,
        findings,
        snap.sources,
        result.outcomes,
        origin=origin,
        history=history,
        prometheus_window=history_window(snap),
        config_file=str(config.path) if config.path is not None else None,
        suppressed=suppressed,
        context=AnalysisContext.of(snap.manifest, clock),
        snapshot=snap,
        settings=settings,
    )
