import pytest

from diag.core.errors import ParseError
from diag.parsers.vllm import parse_health, parse_models

# /v1/models as vLLM's OpenAI server answers it: a base model card with max_model_len, and a LoRA
# adapter card (parent = the base model) without one.
MODELS = """{
  "object": "list",
  "data": [
    {"id": "sql-lora", "object": "model", "created": 1733900000, "owned_by": "vllm",
     "root": "/adapters/sql-lora", "parent": "meta-llama/Llama-3.1-8B-Instruct", "max_model_len": null,
     "permission": []},
    {"id": "meta-llama/Llama-3.1-8B-Instruct", "object": "model", "created": 1733900000, "owned_by": "vllm",
     "root": "meta-llama/Llama-3.1-8B-Instruct", "parent": null, "max_model_len": 32768,
     "permission": [{"id": "modelperm-5b1e0a4c", "object": "model_permission", "created": 1733900000,
                     "allow_create_engine": false, "allow_sampling": true, "allow_logprobs": true,
                     "allow_search_indices": false, "allow_view": true, "allow_fine_tuning": false,
                     "organization": "*", "group": null, "is_blocking": false}]}
  ]
}"""


def test_models_and_max_model_len_of_the_base_model():
    assert parse_models(MODELS) == (["sql-lora", "meta-llama/Llama-3.1-8B-Instruct"], 32768)


def test_models_without_max_model_len():
    text = '{"object": "list", "data": [{"id": "facebook/opt-125m", "object": "model", "owned_by": "vllm"}]}'
    assert parse_models(text) == (["facebook/opt-125m"], None)


def test_no_models_served():
    assert parse_models('{"object": "list", "data": []}') == ([], None)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty file, expected the /v1/models answer"),
        ('{"object": "list", "data": [{"id": "m"', "not valid JSON"),
        ("[1, 2]", "/v1/models answer: expected an object, found a list"),
        ('{"object": "list"}', "no `data` list: not an OpenAI /v1/models answer"),
        ('{"object": "list", "data": {"id": "m"}}', "/v1/models answer: data: expected a list, found an object"),
        ('{"object": "list", "data": ["m"]}', "/v1/models answer: data[0]: expected an object, found a string"),
        (
            '{"object": "list", "data": [{"id": 7}]}',
            "/v1/models answer: data[0].id: expected a string, found an integer",
        ),
        ('{"object": "list", "data": [{"object": "model"}]}', "/v1/models answer: data[0].id: missing"),
        (
            '{"object": "list", "data": [{"id": "m", "max_model_len": "4096"}]}',
            "/v1/models answer: data[0].max_model_len: expected an integer, found a string",
        ),
        (
            '{"object": "error", "message": "The model `x` does not exist.", "type": "NotFoundError", "code": 404}',
            "the server answered /v1/models with an error: The model `x` does not exist.",
        ),
        (
            '{"error": {"message": "Unauthorized", "type": "Unauthorized", "param": null, "code": 401}}',
            "the server answered /v1/models with an error: Unauthorized",
        ),
        ('{"detail": "Not Found"}', "the server answered /v1/models with an error: Not Found"),
    ],
)
def test_bad_models_answers(text, message):
    with pytest.raises(ParseError) as raised:
        parse_models(text)
    assert str(raised.value).startswith(message)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("text", "health"),
    [
        ("200", "200"),
        ("200\n", "200"),
        ("503", "503"),
        ("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n", "200"),
        ("HTTP/1.1 503 Service Unavailable", "503"),
        ("HTTP/2 500", "500"),
        ("000", "000"),
        ("timeout", "timeout"),
        ("  Connection   Refused \n", "connection refused"),
        ("\n\nTIMEOUT\n", "timeout"),
    ],
)
def test_health(text, health):
    assert parse_health(text) == health


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty file, expected the HTTP status of GET /health"),
        (" \n\t\n", "empty file, expected the HTTP status of GET /health"),
        ('{"status": "ok"}', "neither an HTTP status nor a word like 'timeout': '{\"status\": \"ok\"}'"),
        ("<html><body>Bad Gateway</body></html>", "neither an HTTP status nor a word like 'timeout'"),
        ("x" * 200, "neither an HTTP status nor a word like 'timeout'"),
        ("2000", "neither an HTTP status nor a word like 'timeout'"),
    ],
)
def test_bad_health(text, message):
    with pytest.raises(ParseError) as raised:
        parse_health(text)
    assert str(raised.value).startswith(message)
