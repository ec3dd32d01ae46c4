"""vLLM's OpenAI-compatible server: its /v1/models answer and the status of GET /health."""

from __future__ import annotations

import re

from diag.core.errors import ParseError
from diag.parsers.json_fields import Fields, load_json

_STATUS_LINE = re.compile(r"^HTTP/\d(?:\.\d)?\s+(\d{3})(?:\s|$)")  # "HTTP/1.1 503 Service Unavailable"
_STATUS_CODE = re.compile(r"^\d{3}$")  # curl -w '%{http_code}' writes "000" when nothing answered
_OUTCOME_WORDS = re.compile(r"^[a-z][a-z0-9 _.,:;()'/-]*$")  # "timeout", "connection refused"
_MAX_OUTCOME_CHARS = 120


def parse_models(text: str) -> tuple[list[str], int | None]:
    """Model ids, and the max_model_len vLLM adds to the served model's card (None if absent).

    LoRA adapters are listed as models too; their cards carry no max_model_len, so the value comes
    from a base model's card (no `parent`) where one has it.
    """
    if not text.strip():
        raise ParseError("empty file, expected the /v1/models answer")
    answer = Fields(load_json(text), "/v1/models answer")
    error = _error_message(answer)
    if error is not None:
        raise ParseError(f"the server answered /v1/models with an error: {error}")
    if "data" not in answer:
        raise ParseError("no `data` list: not an OpenAI /v1/models answer")
    cards = answer.children("data")
    ids: list[str] = []
    for card in cards:
        model_id = card.text("id")
        if not model_id:
            raise ParseError(f"{card.place('id')}: missing")
        ids.append(model_id)
    base_models = [card for card in cards if card.text("parent") is None]
    lengths = (card.integer("max_model_len") for card in [*base_models, *cards])
    return ids, next((length for length in lengths if length is not None), None)


def _error_message(answer: Fields) -> str | None:
    """The message of vLLM's error answers, on one line: {"object": "error", "message": ...} (older),
    {"error": {"message": ...}} (newer), or FastAPI's {"detail": "Not Found"}."""
    if answer.text("object") == "error":
        message: object = answer.text("message")
    elif "error" in answer:
        error = answer.data["error"]
        message = Fields(error, "/v1/models answer", "error").text("message") if isinstance(error, dict) else error
    elif isinstance(answer.data.get("detail"), str) and "data" not in answer:
        message = answer.data["detail"]
    else:
        return None
    return " ".join(str(message or "no message").split())[:200]


def parse_health(text: str) -> str:
    """<pod>.health.txt: an HTTP status ("200", "HTTP/1.1 503 Service Unavailable") as its code, or
    what happened instead ("timeout", "Connection refused") as lower-case words."""
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if not first:
        raise ParseError("empty file, expected the HTTP status of GET /health")
    status_line = _STATUS_LINE.match(first)
    if status_line is not None:
        return status_line.group(1)
    if _STATUS_CODE.match(first):
        return first
    outcome = " ".join(first.lower().split())
    if len(outcome) <= _MAX_OUTCOME_CHARS and _OUTCOME_WORDS.match(outcome):
        return outcome
    raise ParseError(f"neither an HTTP status nor a word like 'timeout': {first[:60]!r}")
