"""Command line: `llmdiag` and `kubectl llmdiag` (the same program under the kubectl plugin name)."""

from __future__ import annotations

import contextlib
import enum
import functools
import gc
import inspect
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from diag.core.errors import EXIT_CANNOT_ANALYZE, UserError

if TYPE_CHECKING:  # the analysis (CEL, YAML, the rules) loads when a command runs, not for --help
    from rich.console import Console

    from diag.analyze import Report
    from diag.bundle.files import Bundle
    from diag.engine.config import Config

# The exit codes, as README.md's table "Exit codes" and docs/runbook.md state them word for word
# (tests/test_cli_exit_codes.py holds the three together).
EXIT_CODES = (
    (0, "healthy: every deciding source was read, and no warning or critical finding on the serving path"),
    (1, "warnings only: a root cause was named, and the worst finding on the serving path is a warning"),
    (2, "critical: at least one critical finding on the serving path"),
    (
        3,
        "inconclusive: no root cause, and a deciding source could not be read (whatever warnings there are); "
        "or could not analyze: an unreadable or empty bundle, a wrong flag or config, an internal error "
        "(one line on stderr)",
    ),
)


def _exit_code_help() -> str:
    """The table for --help: click keeps a paragraph that starts with \\b as it is written."""
    import textwrap

    rows = [
        textwrap.fill(meaning, width=78, initial_indent=f"  {code}  ", subsequent_indent="     ")
        for code, meaning in EXIT_CODES
    ]
    return "\b\nExit codes (--fail-on critical|never or --exit-zero turn 1 and 2 into 0, never 3):\n" + "\n".join(rows)


# Help is click's plain text: typer's rich help loads rich's Markdown and tracebacks, twice the start-up.
app = typer.Typer(
    rich_markup_mode=None,
    # a wide terminal sees each command's summary whole; -h as every command-line tool has it
    context_settings={"max_content_width": 120, "help_option_names": ["-h", "--help"]},
    add_completion=True,  # --install-completion / --show-completion
    no_args_is_help=True,
    help="Name the layer at fault when LLM inference on Kubernetes + Ray + vLLM + NVIDIA GPUs misbehaves.\n\n"
    + _exit_code_help(),
)

KUBECTL_PLUGIN = "kubectl-llmdiag"  # the entry point kubectl runs for `kubectl llmdiag`


def program_name(argv0: str) -> str:
    """How the program names itself in help and errors: `kubectl llmdiag` when kubectl ran it."""
    return "kubectl llmdiag" if Path(argv0).name.startswith(KUBECTL_PLUGIN) else "llmdiag"


PROGRAM = program_name(sys.argv[0] if sys.argv else "llmdiag")


def _print_version(asked: bool) -> None:
    if asked:
        from diag import __version__

        _stdout().print(f"llmdiag {__version__}", markup=False, highlight=False)
        raise typer.Exit(0)


@app.callback()
def _options(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
    no_color: bool = typer.Option(
        False, "--no-color", help="No colour (also: NO_COLOR set, or output that is not a terminal)."
    ),
) -> None:
    """The app's help says what llmdiag does; this callback carries the options every command shares."""
    _colour(no_color)


_consoles: dict[bool, Console] = {}  # stderr? -> its console, made at first use: --help needs none
_plain = False


def _colour(no_color: bool) -> None:
    global _plain
    if no_color or os.environ.get("NO_COLOR"):  # no escape sequence at all, bold included
        _plain = True
        _consoles.clear()


def _stdout() -> Console:
    return _console(False)


def _stderr() -> Console:
    return _console(True)


def _console(err: bool) -> Console:
    console = _consoles.get(err)
    if console is None:
        from rich.console import Console

        console = _consoles[err] = Console(stderr=err, color_system=None) if _plain else Console(stderr=err)
    return console


NoColorOpt = typer.Option(False, "--no-color", help="No colour (also before the command, as kubectl takes it).")


def with_global_flags(command: Callable) -> Callable:
    """The flags before the command (`--no-color`) taken after it as well, as kubectl takes its global flags."""
    own = list(inspect.signature(command).parameters.values())
    flag = inspect.Parameter("no_color", inspect.Parameter.KEYWORD_ONLY, default=NoColorOpt, annotation=bool)

    @functools.wraps(command)
    def wrapper(**kwargs):
        _colour(kwargs.pop("no_color"))
        return command(**kwargs)

    wrapper.__signature__ = inspect.Signature([*own, flag])  # type: ignore[attr-defined]
    return wrapper


rules_app = typer.Typer(rich_markup_mode=None, no_args_is_help=True, help="The rule catalogue.")
app.add_typer(rules_app, name="rules")


class Output(str, enum.Enum):
    terminal = "terminal"
    json = "json"
    markdown = "markdown"
    html = "html"


class FailOn(str, enum.Enum):
    """Which findings make the exit code non-zero; 3 (could not analyze, inconclusive) always does."""

    warning = "warning"  # the default: 2 critical, 1 warnings only
    critical = "critical"  # warnings only exit 0
    never = "never"  # findings exit 0; only an analysis that could not run or decide exits 3


# ----------------------------------------------------------------------------- shared options

OutputOpt = typer.Option(
    Output.terminal,
    "--output",
    "-o",
    help="terminal, json, markdown or html (all but terminal: stdout holds the report only; html needs the "
    "html extra, pip install 'llmdiag[html]').",
)
VerboseOpt = typer.Option(
    False,
    "--verbose",
    "-v",
    help="The long terminal report: every line of evidence, every reference, each rule that could not be decided "
    "(by default the first screen is the answer, the rest condensed).",
)
QuietOpt = typer.Option(False, "--quiet", "-q", help="Nothing on stderr but errors: no progress, no summary.")
FailOnOpt = typer.Option(
    FailOn.warning,
    "--fail-on",
    help="warning (default): exit 2 on a critical finding, 1 on warnings only; critical: warnings exit 0; "
    "never: findings exit 0. Exit 3 (could not analyze, or inconclusive) is kept whatever this says.",
)
ExitZeroOpt = typer.Option(False, "--exit-zero", help="The same as --fail-on never.")
RulesOpt = typer.Option(None, "--rules", metavar="<folder>", help="Extra folder of rule files (repeatable).")
ConfigOpt = typer.Option(None, "--config", help="Suppressions and overrides (default: ./.llmdiag.yaml).")
MinSeverityOpt = typer.Option(None, "--min-severity", help="Hide findings below info|warning|critical.")
SinceOpt = typer.Option(
    None,
    "--since",
    help="History window, e.g. 30m, 1h30m, 2d: events, container terminations and Ray deaths older than this at "
    "collection time are reported as history, not as current faults (default: setting history_window_seconds, 1h). "
    "In triage it is also the Prometheus window (default 30m).",
)
CollectSinceOpt = typer.Option(None, "--since", help="The Prometheus window, e.g. 30m, 6h, 7d (default 30m).")


def _config(path: Path | None, min_severity: str | None, since: str | None = None) -> Config:
    from diag.engine.config import HISTORY_WINDOW_SETTING, Config
    from diag.snapshot.clock import parse_duration

    config = Config.load(path)
    if min_severity is not None:
        if min_severity not in ("info", "warning", "critical"):
            raise UserError(f"--min-severity: {min_severity!r} is not one of info, warning, critical")
        config.min_severity = min_severity
    if since is not None:
        try:
            config.settings[HISTORY_WINDOW_SETTING] = parse_duration(since)
        except ValueError as e:
            raise UserError(f"--since: {e}") from None
    return config


def exit_code(report_code: int, fail_on: FailOn) -> int:
    """The report's code (0 healthy, 1 warnings, 2 critical, 3 inconclusive) under --fail-on."""
    if report_code == EXIT_CANNOT_ANALYZE:
        return report_code
    if fail_on is FailOn.never or (fail_on is FailOn.critical and report_code == 1):
        return 0
    return report_code


@contextlib.contextmanager
def _stdout_for_the_report(output: Output) -> Iterator[None]:
    """With --output json or markdown, stdout holds the report and nothing else: while collecting and
    analyzing, whatever a library writes to file descriptor 1 (a warning, a C library's print) goes to
    stderr instead."""
    if output is Output.terminal:
        yield
        return
    sys.stdout.flush()
    try:
        saved = os.dup(1)
        os.dup2(2, 1)
    except OSError:  # no usable descriptors (an embedding host): nothing to guard
        yield
        return
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _progress(quiet: bool) -> Console | None:
    """Progress lines on stderr, only for a person at a terminal."""
    if quiet or not sys.stderr.isatty():  # before rich's Console: its import is not paid for nothing
        return None
    return _stderr() if _stderr().is_terminal else None


def _emit(
    report: Report, output: Output, fail_on: FailOn = FailOn.warning, exit_zero: bool = False, verbose: bool = False
) -> None:
    _write_report(report, output, verbose)
    _exit_for(report, fail_on, exit_zero)


def _check_output(output: Output) -> None:
    """Before minutes of collection or analysis: what the format needs is installed."""
    if output is Output.html:
        from diag.report.html_charts import ensure_available

        ensure_available()


def _write_report(report: Report, output: Output, verbose: bool = False) -> None:
    if output is Output.json:
        from diag.report.json_report import render_json

        sys.stdout.write(render_json(report))
    elif output is Output.markdown:
        from diag.report.markdown import render_markdown

        sys.stdout.write(render_markdown(report))
    elif output is Output.html:
        from diag.report.html_report import render_html

        sys.stdout.write(render_html(report))
    else:
        from diag.report.terminal import print_report

        print_report(report, _stdout(), verbose)


def _exit_for(report: Report, fail_on: FailOn, exit_zero: bool) -> None:
    raise typer.Exit(exit_code(report.exit_code, FailOn.never if exit_zero else fail_on))


# ----------------------------------------------------------------------------- commands


@app.command()
@with_global_flags
def analyze(
    bundle: Path = typer.Argument(..., help="A bundle folder or .tar.gz (layout: docs/bundle-format.md)."),
    output: Output = OutputOpt,
    verbose: bool = VerboseOpt,
    rules: list[Path] | None = RulesOpt,
    config: Path | None = ConfigOpt,
    min_severity: str | None = MinSeverityOpt,
    since: str | None = SinceOpt,
    profile: bool = typer.Option(
        False, "--profile", help="Print where the time went (phases, parsers, rules) on stderr."
    ),
    quiet: bool = QuietOpt,
    fail_on: FailOn = FailOnOpt,
    exit_zero: bool = ExitZeroOpt,
) -> None:
    """Analyze a saved bundle (a customer's, or one `llmdiag collect` wrote)."""
    from diag.analyze import analyze_bundle, settings_with_overrides
    from diag.bundle.files import Bundle, BundleLimits
    from diag.core.rules_dir import builtin_rules_dir
    from diag.core.stopwatch import Stopwatch

    stopwatch = Stopwatch(times_rules=profile)
    settings = _config(config, min_severity, since)
    _check_output(output)
    limits = BundleLimits.from_settings(settings_with_overrides(builtin_rules_dir(), settings))

    def opened() -> Bundle:  # held by analyze_bundle alone, which frees it once parsed
        with stopwatch.phase("read"):
            return Bundle.open(bundle, limits)

    with _stdout_for_the_report(output):
        report = analyze_bundle(opened(), settings, list(rules or []), stopwatch, _held_until_exit)
    with stopwatch.phase("report"):
        _write_report(report, output, verbose)
    if profile and not quiet:
        _stderr().print("\n".join(stopwatch.lines()), markup=False, highlight=False)
    _exit_for(report, fail_on, exit_zero)


# One definition of the kubectl-style targeting flags, shared by `triage` and `collect`:
# name -> (type, typer option). `with_target` adds them to a command and hands it a Target.
_TARGET_OPTIONS: dict[str, tuple[object, object]] = {
    "kubeconfig": (Optional[str], typer.Option(None, "--kubeconfig", help="Path to the kubeconfig file.")),
    "context": (Optional[str], typer.Option(None, "--context", help="The kubeconfig context to use.")),
    "namespace": (Optional[str], typer.Option(None, "--namespace", "-n", help="Namespace (default: the context's).")),
    "all_namespaces": (bool, typer.Option(False, "--all-namespaces", "-A", help="Look in every namespace.")),
    "selector": (Optional[str], typer.Option(None, "--selector", "-l", help="Label selector for the serving pods.")),
    "ray_cluster": (Optional[str], typer.Option(None, "--ray-cluster", help="A RayCluster or RayService by name.")),
    "pod": (Optional[str], typer.Option(None, "--pod", help="One pod by name.")),
    "vllm_urls": (
        Optional[list[str]],
        typer.Option(None, "--vllm-url", help="A vLLM server outside Kubernetes (repeatable)."),
    ),
    "ray_address": (
        Optional[str],
        typer.Option(None, "--ray-address", help="Dashboard URL of a Ray cluster outside Kubernetes."),
    ),
    "prometheus_url": (
        Optional[str],
        typer.Option(None, "--prometheus-url", help="Prometheus to read history from (its base URL)."),
    ),
    "prometheus_service": (
        Optional[str],
        typer.Option(
            None,
            "--prometheus-service",
            metavar="NS/NAME[:PORT]",
            help="A Prometheus Service in the cluster, read through "
            "the API server's service proxy (port default 9090).",
        ),
    ),
    "prometheus_selector": (
        Optional[str],
        typer.Option(
            None,
            "--prometheus-selector",
            help="Label matchers added to every vLLM query, e.g. 'job=\"vllm\"' (comma-separated).",
        ),
    ),
    "prometheus_token": (
        Optional[str],
        typer.Option(None, "--prometheus-token", help="Bearer token for Prometheus (or env LLMDIAG_PROMETHEUS_TOKEN)."),
    ),
    "prometheus_user": (Optional[str], typer.Option(None, "--prometheus-user", help="Basic-auth user for Prometheus.")),
    "prometheus_password": (
        Optional[str],
        typer.Option(None, "--prometheus-password", help="Basic-auth password (or env LLMDIAG_PROMETHEUS_PASSWORD)."),
    ),
    "prometheus_ca_file": (
        Optional[str],
        typer.Option(None, "--prometheus-ca-file", help="CA bundle for Prometheus' TLS."),
    ),
    "prometheus_headers": (
        Optional[list[str]],
        typer.Option(
            None,
            "--prometheus-header",
            help="'Name: value' sent to Prometheus (repeatable), e.g. 'X-Scope-OrgID: team-a'.",
        ),
    ),
    "local_gpu": (
        Optional[bool],
        typer.Option(
            None, "--local-gpu/--no-local-gpu", help="Read this host's GPUs through NVML (default: when NVML loads)."
        ),
    ),
    "gpu_sweep": (
        bool,
        typer.Option(
            False,
            "--gpu-sweep",
            help="Read every Ray node's GPUs (NVML, nvidia-smi, kernel Xid lines) through a short read-only "
            "Ray job on the cluster at --ray-address, deleted when done. The one thing llmdiag runs on a cluster.",
        ),
    ),
    "scrapes": (
        int,
        typer.Option(2, "--scrapes", min=1, help="/metrics reads per busy vLLM server (2+ give counter rates)."),
    ),
    "scrape_interval_s": (
        float,
        typer.Option(
            2.0,
            "--scrape-interval",
            min=0.0,
            help="Seconds between /metrics reads of a server with requests waiting; one with requests running, "
            "none waiting and its KV cache under half full after at most 0.5 s, an idle one once.",
        ),
    ),
    "total_timeout_s": (float, typer.Option(120.0, "--timeout", help="Seconds for the whole collection.")),
    "source_timeout_s": (float, typer.Option(20.0, "--source-timeout", help="Seconds for each source.")),
    "max_answer_bytes": (
        int,
        typer.Option(
            64 * 1024 * 1024,
            "--max-answer-bytes",
            min=1024,
            help="Largest HTTP answer read from any source (default 64 MiB); a larger one fails that source.",
        ),
    ),
    "request_timeout": (
        Optional[str],
        typer.Option(
            None,
            "--request-timeout",
            help="Each request to the API server, as kubectl's flag: "
            "10s, 1m30s (default 30s); the reachability check before "
            "collecting waits at most 5s or this, if shorter.",
        ),
    ),
    "impersonate_user": (
        Optional[str],
        typer.Option(None, "--as", help="Act as this user (Kubernetes impersonation); llmdiag still only reads."),
    ),
    "impersonate_groups": (
        Optional[list[str]],
        typer.Option(None, "--as-group", help="Act as this group (with --as)."),
    ),
}


def with_target(command: Callable) -> Callable:
    """Give `command` the targeting flags; it receives them as one `target: Target` argument."""
    own = [p for p in inspect.signature(command).parameters.values() if p.name != "target"]
    flags = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind)
        for name, (kind, option) in _TARGET_OPTIONS.items()
    ]

    @functools.wraps(command)
    def wrapper(**kwargs):
        from diag.collect.base import Target
        from diag.collect.prometheus_access import prometheus_access

        given = {name: kwargs.pop(name) for name in _TARGET_OPTIONS}
        given["vllm_urls"] = list(given["vllm_urls"] or [])
        given["prometheus_headers"] = list(given["prometheus_headers"] or [])
        given["impersonate_groups"] = list(given["impersonate_groups"] or [])
        given["request_timeout_s"] = _seconds("--request-timeout", given.pop("request_timeout"), "the timeout")
        if given["impersonate_groups"] and not given["impersonate_user"]:
            raise UserError("--as-group needs --as (Kubernetes impersonates groups only with a user)")
        if len(given["impersonate_groups"]) > 1:
            raise UserError("one --as-group at a time (the Kubernetes client sends one Impersonate-Group header)")
        if given["gpu_sweep"] and not given["ray_address"]:
            raise UserError(
                "--gpu-sweep needs --ray-address, the Ray dashboard's URL (in Kubernetes: "
                "kubectl port-forward svc/<raycluster>-head-svc 8265, then --ray-address http://127.0.0.1:8265)"
            )
        target = Target(**given)
        prometheus_access(target)  # a mistake in the --prometheus-* flags is one line before anything runs
        return command(target=target, **kwargs)

    wrapper.__signature__ = inspect.Signature([*own, *flags])  # type: ignore[attr-defined]
    return wrapper


def _seconds(flag: str, text: str | None, what: str) -> float | None:
    """A duration flag (--since, --request-timeout) in seconds; None when not given."""
    from diag.snapshot.clock import parse_duration

    if text is None:
        return None
    try:
        return parse_duration(text, what)
    except ValueError as e:
        raise UserError(f"{flag}: {e}") from None


def _collect_live(target, quiet: bool = False, then: Callable[[], None] | None = None) -> Bundle:
    """The bundle, in memory; `then` runs once it is collected (the analysis holds the only reference)."""
    from diag.collect.runner import collect_live

    _kubernetes_usable(target)
    bundle = collect_live(target, progress=_progress(quiet))
    if then is not None:
        then()
    return bundle


def _kubernetes_usable(target) -> None:
    """Where the cluster is all there is to read (no --vllm-url, --ray-address, --prometheus-url or
    --local-gpu), a kubeconfig or context that cannot be used is one line, as kubectl says it, not a
    report of every source that could not be read."""
    if target.vllm_urls or target.ray_address or target.prometheus_url or target.local_gpu:
        return  # the run reads those; the report names the Kubernetes source as not read, and why
    from diag.collect.kube import kubeconfig_problem

    if (problem := kubeconfig_problem(target.kubeconfig, target.context)) is not None:
        raise UserError(problem)


@app.command()
@with_global_flags
@with_target
def triage(
    target,
    output: Output = OutputOpt,
    verbose: bool = VerboseOpt,
    rules: list[Path] | None = RulesOpt,
    config: Path | None = ConfigOpt,
    min_severity: str | None = MinSeverityOpt,
    since: str | None = SinceOpt,
    quiet: bool = QuietOpt,
    fail_on: FailOn = FailOnOpt,
    exit_zero: bool = ExitZeroOpt,
) -> None:
    """Collect from the live cluster (in memory) and analyze it: the on-call command."""
    import threading

    from diag.analyze import analyze_bundle, compile_rules

    settings = _config(config, min_severity, since)
    _check_output(output)
    target.since_s = _seconds("--since", since, "the window")
    # The rules are compiled while the collection waits on the cluster (and the scrape interval). The
    # client is imported first: importing is CPU, which a thread beside it would only slow down.
    import diag.collect.kube  # noqa: F401

    compiling = threading.Thread(target=compile_rules, args=(list(rules or []),), daemon=True)
    compiling.start()
    with _stdout_for_the_report(output):
        report = analyze_bundle(
            _collect_live(target, quiet, then=compiling.join), settings, list(rules or []), held=_held_until_exit
        )
    _emit(report, output, fail_on, exit_zero, verbose)


@app.command()
@with_global_flags
@with_target
def collect(
    target,
    out: Path | None = typer.Option(None, "--out", help="Where to write the bundle: a folder, or FILE.tar.gz."),
    old_out: Path | None = typer.Option(None, "-o", hidden=True, help="Deprecated: --out."),
    force: bool = typer.Option(
        False, "--force", help="Replace an earlier bundle (an archive, or a folder holding manifest.json) at --out."
    ),
    since: str | None = CollectSinceOpt,
    quiet: bool = QuietOpt,
) -> None:
    """Collect the raw bundle (secrets redacted, files 0600) to attach to a ticket; analyze it later.

    The output path must not be a symbolic link, an archive that exists, nor a folder that holds anything
    but, with --force, an earlier bundle (docs/security.md).

    Exits 3 when no source gave anything (the bundle, holding only manifest.json, is still written:
    it says why each source failed)."""
    from diag.collect.output import check_output_path, save_bundle

    if old_out is not None:
        if out is not None:
            raise UserError("collect: give the path once, with --out")
        _stderr().print(
            f"{PROGRAM}: collect -o is deprecated and goes in the next release: use --out",
            markup=False,
            highlight=False,
        )
        out = old_out
    if out is None:
        raise UserError("collect: missing --out PATH (a folder, or FILE.tar.gz)")
    target.since_s = _seconds("--since", since, "the window")
    check_output_path(out, force)  # before minutes of collection, not after
    bundle = _collect_live(target, quiet)
    written = save_bundle(bundle, out, force)
    gathered = [name for name in bundle.files if name != "manifest.json"]
    if not gathered:
        raise UserError(f"collected nothing ({_why_nothing(bundle)}); wrote only the manifest to {written}")
    if not quiet:
        _stderr().print(f"wrote {len(bundle.files)} files to {written}", markup=False, highlight=False)


def _why_nothing(bundle: Bundle) -> str:
    import json

    try:
        sources = json.loads(bundle.files["manifest.json"]).get("sources", {})
    except (KeyError, ValueError, AttributeError):
        return "no source answered"
    reasons = []
    for name, entry in sources.items():
        if entry.get("status") == "failed":
            said = entry.get("detail") or entry.get("status")
            reasons.append(said if said.startswith(f"{name}: ") else f"{name}: {said}")
    return "; ".join(reasons[:3]) or "no source answered"


@app.command()
@with_global_flags
@with_target
def serve(
    target,
    state_dir: Path = typer.Option(..., "--state-dir", help="Where the kept reports live (a folder; made if absent)."),
    every: str = typer.Option("60s", "--every", help="Triage on this period, e.g. 60s, 5m."),
    deadline: str | None = typer.Option(
        None,
        "--deadline",
        help="Each triage's limit: the collection's --timeout and --source-timeout are held under it "
        "(default: four fifths of --every).",
    ),
    listen: str = typer.Option("0.0.0.0:8080", "--listen", help="HOST:PORT to serve on."),
    keep_reports: int = typer.Option(100, "--keep-reports", min=1, help="How many reports to keep."),
    keep_bytes: int = typer.Option(
        64 * 1024 * 1024, "--keep-bytes", min=1024, help="How many bytes the kept reports may take (default 64 MiB)."
    ),
    alert_token_file: Path | None = typer.Option(
        None,
        "--alert-token-file",
        help="The bearer token /alertmanager asks for, in a file (or env LLMDIAG_ALERT_TOKEN); "
        "without one /alertmanager refuses every request.",
    ),
    alert_rate: str = typer.Option(
        "6/10m", "--alert-rate", help="At most N alert triages per window, as N/DURATION (default 6/10m)."
    ),
    notify_url_file: Path | None = typer.Option(
        None,
        "--notify-url-file",
        help="An outgoing webhook's URL, in a file (or env LLMDIAG_NOTIFY_URL): each alert's verdict, and a "
        "change of the scheduled verdict, POSTed as JSON with a Slack-compatible `text`.",
    ),
    external_url: str = typer.Option(
        "", "--external-url", help="This server's URL as the webhook's readers reach it, to link the report."
    ),
    watch: bool = typer.Option(
        True,
        "--watch/--no-watch",
        help="Keep the Kubernetes lists current with watches between cycles, so a cycle asks the API server "
        "for what changed, not for every object again (--no-watch: list every cycle, as triage does).",
    ),
    html: bool = typer.Option(
        False,
        "--html",
        help="Keep each report's HTML page too (/reports/<id>?format=html; needs the html extra, "
        "pip install 'llmdiag[html]').",
    ),
    rules: list[Path] | None = RulesOpt,
    config: Path | None = ConfigOpt,
    min_severity: str | None = MinSeverityOpt,
    since: str | None = SinceOpt,
) -> None:
    """Stay up: triage on a schedule and for each Alertmanager alert, keep the reports, serve /metrics,
    /reports, /alertmanager, /healthz and /readyz (docs/serve.md)."""
    import logging

    from diag.serve import http, notify
    from diag.serve.alerts import parse_rate
    from diag.serve.service import Service, Settings
    from diag.serve.store import Limits, ReportStore

    every_s = _seconds("--every", every, "the period")
    assert every_s is not None
    deadline_s = _seconds("--deadline", deadline, "the deadline") or every_s * 0.8
    if deadline_s > every_s:
        raise UserError("--deadline: longer than --every, a cycle could still run when the next is due")
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"--listen: {listen!r} is not HOST:PORT")
    try:
        alert_limit = parse_rate(alert_rate)
        notify_url = notify.read_url(
            str(notify_url_file) if notify_url_file else None, os.environ.get("LLMDIAG_NOTIFY_URL")
        )
    except (ValueError, OSError) as e:
        raise UserError(f"serve: {e}") from None
    token = _secret(alert_token_file, "LLMDIAG_ALERT_TOKEN", "--alert-token-file")
    if html:
        _check_output(Output.html)
    target.since_s = _seconds("--since", since, "the window")
    settings = Settings(
        every_s=every_s,
        deadline_s=deadline_s,
        target=target,
        config=_config(config, min_severity, since),
        rule_dirs=list(rules or []),
        alert_limit=alert_limit,
        notify_url=notify_url,
        external_url=external_url,
        watch=watch,
        html=html,
    )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    store = ReportStore(state_dir, Limits(keep_reports, keep_bytes))
    service = Service(settings, store)

    def started(address: tuple[str, int]) -> None:
        logging.getLogger("llmdiag.serve").info("serving on http://%s:%s", *address[:2])

    http.run(service, host.strip("[]"), int(port), token, started)


def _secret(path: Path | None, env: str, flag: str) -> str | None:
    """A secret from its file (whitespace around it dropped) or the environment; never from a flag's value."""
    if path is None:
        return os.environ.get(env, "").strip() or None
    try:
        value = path.read_text(encoding="utf-8").strip()
    except OSError as e:
        raise UserError(f"{flag}: cannot read {path}: {e.strerror}") from None
    if not value:
        raise UserError(f"{flag}: {path} is empty")
    return value


@app.command()
def layout() -> None:
    """The files a bundle may hold, and the command that makes each by hand (for a hand-made bundle)."""
    from diag.bundle.layout import render

    sys.stdout.write(render())


# ----------------------------------------------------------------------------- rules


class ListOutput(str, enum.Enum):
    table = "table"
    json = "json"


@rules_app.command("list")
@with_global_flags
def rules_list(
    rules: list[Path] | None = RulesOpt,
    output: ListOutput = typer.Option(
        ListOutput.table,
        "--output",
        "-o",
        help="table, or json: a list of {id, layer, severity, scope, title, requires, explains}.",
    ),
) -> None:
    """Every rule: id, layer, severity, scope, title."""
    if output is ListOutput.json:
        import json

        from diag.engine.catalogue import rule_records

        sys.stdout.write(json.dumps(rule_records(list(rules or [])), indent=2) + "\n")
        return
    from diag.engine.catalogue import rule_table

    _stdout().print(rule_table(list(rules or [])))


@rules_app.command("show")
@with_global_flags
def rules_show(rule_id: str = typer.Argument(..., help="e.g. VLLM-101"), rules: list[Path] | None = RulesOpt) -> None:
    """One rule in full: condition, evidence, fix, references, what it explains."""
    from diag.engine.catalogue import rule_markdown

    _stdout().print(rule_markdown(rule_id, list(rules or [])), markup=False, highlight=False)


@rules_app.command("docs")
@with_global_flags
def rules_docs(rules: list[Path] | None = RulesOpt) -> None:
    """The catalogue as Markdown, generated from the rule files (docs/rules.md is this output)."""
    from diag.engine.catalogue import catalogue_markdown

    sys.stdout.write(catalogue_markdown(list(rules or [])))


# ----------------------------------------------------------------------------- entry point


# What analyses built, left for the process's end to drop (main() then ends with os._exit): freeing a
# fleet's millions of objects one at a time costs CPU for nothing (bench/README.md), and the OS takes the
# heap back at once. None outside main() (tests call the app in their own process).
_held_until_exit: list[object] | None = None


def main() -> None:
    """Run the app; every user-facing failure is one line on stderr and exit code 3."""
    global _held_until_exit
    _held_until_exit = []
    # A reader that stops reading (`| head -1`) ends the process as it ends any Unix tool: by SIGPIPE,
    # not by an exit code that a runbook would read as "warnings only".
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    # A one-shot process: the cyclic collector, enabled again after an analysis, would walk the
    # millions of objects the analysis made to free none of them (bench/README.md has the cost).
    # `serve` stays up with it off too, and collects once after each triage (diag/serve/service.py).
    gc.disable()
    try:
        code = app(prog_name=PROGRAM, standalone_mode=False)
    except typer.Exit as e:  # raised outside click's own handling (e.g. from a callback)
        code = e.exit_code
    except UserError as e:  # BundleError, ConfigError, RuleError and the CLI's own
        _fail(str(e))
    except KeyboardInterrupt:
        _fail("interrupted")
    except typer.Abort:
        _fail("interrupted")
    except typer.TyperException as e:  # usage errors: a missing argument, an unknown option ...
        if not e.format_message():  # no arguments at all: the help was printed
            sys.exit(0)
        _fail(f"{e.format_message()} (see `{PROGRAM} --help`)")
    except Exception as e:  # the last guard: users get one line, never a traceback
        _fail(f"internal error: {type(e).__name__}: {e} (please report this with the bundle)")
    code = code if isinstance(code, int) else 0
    abandoned = "diag.collect.runner" in sys.modules and sys.modules["diag.collect.runner"].collectors_still_running()
    if abandoned or _held_until_exit:
        # Python would wait for abandoned collector threads at exit, and free what analyses built one
        # object at a time: the report is out, do not hold it back.
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except OSError:  # a reader that went away (`| head`): nothing more can reach it
                pass
        os._exit(code)
    sys.exit(code)


def _fail(message: str) -> None:
    from diag.collect.redact import redact_text  # a collection's failure may quote a URL with its password

    message = redact_text(message)
    _stderr().print(f"{PROGRAM}: {message}", markup=False, highlight=False, soft_wrap=True)
    sys.exit(EXIT_CANNOT_ANALYZE)


if __name__ == "__main__":
    main()
