"""Whether a vLLM API server went on answering after its engine core died, read from the current log.

vLLM's V1 API server is a separate process from the engine core. When the core dies the server stops
itself unless VLLM_KEEP_ALIVE_ON_ENGINE_DEATH is set, but V1's /health did not check the core before
vllm#21728 (vllm#19881: a no-op; #24897 made it 503), and a server that keeps its port keeps
its pod Ready behind a TCP or /health probe: every request after the death fails with 500. The current
container's log shows it: the death, then access-log lines answered after it, and no shutdown.
Matching is done here in Python, once per log, not in a rule over every line.
"""

from __future__ import annotations

import functools
import re

from diag.facts.kubernetes_containers import vllm_container
from diag.parsers.log_gate import LineGate
from diag.parsers.logs import scan_rules_out
from diag.parsers.signals import LogSignals, builtin_signals
from diag.snapshot.model import Container, Pod

# uvicorn's access log: `INFO:     10.0.0.1:5123 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error`
_ACCESS = re.compile(r'"(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[\d.]+" (?P<status>\d{3})')
# uvicorn's and vLLM's lines when the API server stops (launcher.py, uvicorn's server.py)
_SHUTDOWN = re.compile(
    r"Shutting down|Application shutdown complete|Finished server process|Shutting down FastAPI HTTP server"
)


def dead_engine_serving(pod: Pod | None, signals: LogSignals) -> dict | None:
    """{found, death_line, answered_after, failed_after, health_ok_after, last_answer}; None when the
    current log of the server's container was not collected (unknown, not "no death"). `signals`:
    those the snapshot's logs were scanned with."""
    container = vllm_container(pod) if pod else None
    if container is None or container.logs is None:
        return None
    death = builtin_signals().patterns["engine_dead"]
    if _scan_found_no_death(container, signals) or not _death_gate().may_match(container.logs):
        return _absent()
    lines = container.logs.splitlines()
    last_death = max((n for n, line in enumerate(lines) if death.search(line)), default=None)
    if last_death is None:
        return _absent()
    answered, failed, health_ok, last_answer = 0, 0, 0, None
    for line in lines[last_death + 1 :]:
        if _SHUTDOWN.search(line):
            return _absent() | {"death_line": lines[last_death].strip(), "shut_down": True}
        if (m := _ACCESS.search(line)) is None:
            continue
        answered += 1
        last_answer = line.strip()
        failed += m["status"].startswith("5")
        health_ok += m["path"].startswith("/health") and m["status"] == "200"
    return {
        "found": answered > 0,
        "death_line": lines[last_death].strip(),
        "shut_down": False,
        "answered_after": answered,
        "failed_after": failed,
        "health_ok_after": health_ok,
        "last_answer": last_answer,
    }


def _scan_found_no_death(container: Container, signals: LogSignals) -> bool:
    """The loader's scan of the log, with the built-in death pattern, already shows there is no death
    in it: its literals are not searched for again (six passes over each of a fleet's logs)."""
    return (
        container.logs_scanned
        and signals.patterns.get("engine_dead") == builtin_signals().patterns["engine_dead"]
        and scan_rules_out(container.logs or "", container.log_signals, signals, "engine_dead")
    )


@functools.cache
def _death_gate() -> LineGate:
    return LineGate.of([builtin_signals().patterns["engine_dead"]])


def _absent() -> dict:
    return {
        "found": False,
        "death_line": None,
        "shut_down": False,
        "answered_after": 0,
        "failed_after": 0,
        "health_ok_after": 0,
        "last_answer": None,
    }
