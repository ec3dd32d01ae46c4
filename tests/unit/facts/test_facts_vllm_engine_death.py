"""An API server that went on answering after its engine core died, read from the current log."""

from __future__ import annotations

import re

import pytest

from diag.facts import vllm_engine_death
from diag.facts.vllm_engine_death import dead_engine_serving
from diag.parsers.logs import scan_log
from diag.parsers.signals import LogSignals, builtin_signals
from diag.snapshot.model import Container, Pod

DEATH = (
    "(EngineCore_0 pid=245) ERROR 12-01 14:19:47 [core.py:700] EngineCore encountered a fatal error.\n"
    "(APIServer pid=1) ERROR 12-01 14:19:47 [async_llm.py:416] AsyncLLM output_handler failed.\n"
)
FAILED = '(APIServer pid=1) INFO:     10.0.0.7:51244 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error\n'
HEALTH_OK = '(APIServer pid=1) INFO:     10.0.0.1:43002 - "GET /health HTTP/1.1" 200 OK\n'


SIGNALS = builtin_signals()
SHUTDOWN_REQUESTED = (
    "(APIServer pid=1) INFO 12-02 18:17:15 [launcher.py:254] [shutdown] API server: shutdown triggered\n"
)


def _pod(logs: str | None) -> Pod:
    vllm = Container(name="vllm", command=["vllm", "serve"], args=["meta-llama/Llama-3.1-8B-Instruct"], logs=logs)
    return Pod(namespace="llm", name="llama-0", containers=[vllm])


def _scanned_pod(logs: str, signals: LogSignals = SIGNALS) -> Pod:
    """The pod as the loader leaves it: its log scanned for the signals."""
    pod = _pod(logs)
    pod.containers[0].log_signals, pod.containers[0].logs_scanned = scan_log(logs, signals), True
    return pod


def test_requests_answered_after_the_death_are_counted() -> None:
    facts = dead_engine_serving(_pod(HEALTH_OK + DEATH + FAILED + HEALTH_OK + FAILED), SIGNALS)
    assert facts is not None
    assert (facts["found"], facts["answered_after"], facts["failed_after"], facts["health_ok_after"]) == (True, 3, 2, 1)
    assert "AsyncLLM output_handler failed" in facts["death_line"]


def test_a_server_that_shut_down_after_the_death_is_not_serving_on_it() -> None:
    facts = dead_engine_serving(_pod(DEATH + FAILED + "(APIServer pid=1) INFO:     Shutting down\n"), SIGNALS)
    assert facts is not None
    assert (facts["found"], facts["shut_down"]) == (False, True)


def test_no_death_is_false_and_no_current_log_is_unknown() -> None:
    assert dead_engine_serving(_pod(HEALTH_OK + FAILED), SIGNALS)["found"] is False
    assert dead_engine_serving(_pod(None), SIGNALS) is None
    assert dead_engine_serving(None, SIGNALS) is None


# A death the signals' scan does not report: after a shutdown request, or behind an escape code it strips.
LOGS = {
    "death": HEALTH_OK + DEATH + FAILED,
    "no death": HEALTH_OK + FAILED,
    "death after a shutdown request": SHUTDOWN_REQUESTED + DEATH + FAILED,
    "death split by an escape code": "ERROR \x1b[31mEngineDead\x1b[0mError\n" + FAILED,
    "death behind an escape code": "\x1b[EngineDeadError\n" + FAILED,
    "empty": "",
}


@pytest.mark.parametrize("logs", LOGS.values(), ids=LOGS.keys())
def test_a_scanned_log_reads_as_one_searched_again(logs: str) -> None:
    """Where the loader's scan already shows no death, the log is not searched again; the answer is
    the one the search gives, whatever the log holds."""
    assert dead_engine_serving(_scanned_pod(logs), SIGNALS) == dead_engine_serving(_pod(logs), SIGNALS)


def test_signals_that_change_the_death_pattern_leave_the_log_to_its_own_search() -> None:
    narrowed = LogSignals(
        {**SIGNALS.patterns, "engine_dead": re.compile("no such line")}, SIGNALS.layers, SIGNALS.descriptions
    )
    facts = dead_engine_serving(_scanned_pod(HEALTH_OK + DEATH + FAILED, narrowed), narrowed)
    assert facts is not None and facts["found"] is True


def test_a_scanned_log_without_a_death_is_not_searched_again(monkeypatch: pytest.MonkeyPatch) -> None:
    def searched() -> None:
        raise AssertionError("the log was searched again")

    monkeypatch.setattr(vllm_engine_death, "_death_gate", searched)
    assert dead_engine_serving(_scanned_pod(HEALTH_OK + FAILED), SIGNALS)["found"] is False
