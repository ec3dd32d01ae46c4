"""An API server that went on answering after its engine core died, read from the current log."""

from __future__ import annotations

from diag.facts.vllm_engine_death import dead_engine_serving
from diag.model import Container, Pod

DEATH = (
    "(EngineCore_0 pid=245) ERROR 12-01 14:19:47 [core.py:700] EngineCore encountered a fatal error.\n"
    "(APIServer pid=1) ERROR 12-01 14:19:47 [async_llm.py:416] AsyncLLM output_handler failed.\n"
)
FAILED = '(APIServer pid=1) INFO:     10.0.0.7:51244 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error\n'
HEALTH_OK = '(APIServer pid=1) INFO:     10.0.0.1:43002 - "GET /health HTTP/1.1" 200 OK\n'


def _pod(logs: str | None) -> Pod:
    vllm = Container(name="vllm", command=["vllm", "serve"], args=["meta-llama/Llama-3.1-8B-Instruct"], logs=logs)
    return Pod(namespace="llm", name="llama-0", containers=[vllm])


def test_requests_answered_after_the_death_are_counted() -> None:
    facts = dead_engine_serving(_pod(HEALTH_OK + DEATH + FAILED + HEALTH_OK + FAILED))
    assert facts is not None
    assert (facts["found"], facts["answered_after"], facts["failed_after"], facts["health_ok_after"]) == (True, 3, 2, 1)
    assert "AsyncLLM output_handler failed" in facts["death_line"]


def test_a_server_that_shut_down_after_the_death_is_not_serving_on_it() -> None:
    facts = dead_engine_serving(_pod(DEATH + FAILED + "(APIServer pid=1) INFO:     Shutting down\n"))
    assert facts is not None
    assert (facts["found"], facts["shut_down"]) == (False, True)


def test_no_death_is_false_and_no_current_log_is_unknown() -> None:
    assert dead_engine_serving(_pod(HEALTH_OK + FAILED))["found"] is False
    assert dead_engine_serving(_pod(None)) is None
    assert dead_engine_serving(None) is None
