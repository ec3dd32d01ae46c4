"""Redaction on the shapes the collectors write: kubectl JSON (pods, daemonsets, RayServices, the
last-applied annotation), vLLM and Python logs, kubeconfigs, URLs. JSON must stay valid JSON, and
what is not a secret (engine flags, token counts) must stay readable."""

from __future__ import annotations

import json

import pytest

from diag.collect.redact import (
    ASSIGNMENT,
    BEARER,
    CLI_FLAG,
    ENV_SECRET,
    KUBECONFIG,
    MANAGED_FIELDS,
    REDACTED,
    TOKEN_FORMAT,
    URL_PASSWORD,
    Redactor,
    redact,
    redact_text,
    secret_name,
)
from tests.replay.harness import CLUSTER

HF = "hf_QxTbWvYzAbCdEfGhIjKlMnOpQrStUvWx12"


def _cluster_file(name: str) -> bytes:
    return (CLUSTER / "k8s" / name).read_bytes()


def _items(raw: bytes) -> list[dict]:
    return json.loads(raw)["items"]


def test_pod_env_values_with_secret_names_are_redacted_and_references_kept() -> None:
    redactor = Redactor()
    pods = _items(redactor("k8s/pods.json", _cluster_file("pods.json")))
    env = {e["name"]: e for p in pods for c in p["spec"]["containers"] for e in c.get("env", [])}
    assert env["HF_TOKEN"]["value"] == REDACTED
    assert env["DB_PASSWORD"]["value"] == REDACTED
    assert env["RAY_REDIS_PASSWORD"]["value"] == REDACTED
    assert env["VLLM_LOGGING_LEVEL"]["value"] == "INFO" and env["RAY_PORT"]["value"] == "6379"
    assert env["HUGGING_FACE_HUB_TOKEN"] == {
        "name": "HUGGING_FACE_HUB_TOKEN",
        "valueFrom": {"secretKeyRef": {"key": "token", "name": "hf-token"}},
    }
    assert redactor.applied[ENV_SECRET] == 4  # HF_TOKEN of two vLLM pods, DB_PASSWORD, RAY_REDIS_PASSWORD
    assert all("managedFields" not in p["metadata"] for p in pods)
    assert redactor.applied[MANAGED_FIELDS] == len(pods)


def test_api_key_flags_are_redacted_in_both_forms_and_engine_flags_are_not() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "vllm-0", "namespace": "llm"},
        "spec": {
            "containers": [
                {
                    "name": "vllm",
                    "command": ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--api-key=sk-abc123def456ghi789jkl012"],
                    "args": [
                        "--api-key",
                        "token-abc123",
                        "--max-num-batched-tokens",
                        "8192",
                        "--tokenizer",
                        "Qwen/Qwen2.5-7B-Instruct",
                    ],
                },
                {
                    "name": "sh",
                    "command": ["/bin/sh", "-c"],
                    "args": [
                        "exec python3 -m vllm.entrypoints.openai.api_server --model m --api-key s3cr3t --max-num-seqs 8"
                    ],
                },
            ]
        },
    }
    out = json.loads(redact("k8s/pods.json", json.dumps({"kind": "List", "apiVersion": "v1", "items": [pod]}).encode()))
    vllm, sh = out["items"][0]["spec"]["containers"]
    assert vllm["command"][-1] == f"--api-key={REDACTED}"
    assert vllm["args"] == [
        "--api-key",
        REDACTED,
        "--max-num-batched-tokens",
        "8192",
        "--tokenizer",
        "Qwen/Qwen2.5-7B-Instruct",
    ]
    assert sh["args"] == [
        f"exec python3 -m vllm.entrypoints.openai.api_server --model m --api-key {REDACTED} --max-num-seqs 8"
    ]


def test_the_last_applied_annotation_is_cleaned_as_the_json_it_holds() -> None:
    (deployment, _) = _items(redact("k8s/deployments.json", _cluster_file("deployments.json")))
    annotation = deployment["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
    applied = json.loads(annotation)  # still JSON inside the string
    (container,) = applied["spec"]["template"]["spec"]["containers"]
    assert container["env"] == [{"name": "HF_TOKEN", "value": REDACTED}]
    assert container["args"][container["args"].index("--api-key") + 1] == REDACTED
    assert HF not in json.dumps(deployment)


def test_daemonset_and_rayservice_secrets() -> None:
    daemonsets = _items(redact("k8s/daemonsets.json", _cluster_file("daemonsets.json")))
    plugin = next(d for d in daemonsets if d["metadata"]["name"] == "nvidia-device-plugin-daemonset")
    env = {e["name"]: e["value"] for e in plugin["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env == {"FAIL_ON_INIT_ERROR": "false", "MIG_STRATEGY": "single", "NGC_API_KEY": REDACTED}
    (service,) = _items(redact("k8s/rayservices.json", _cluster_file("rayservices.json")))
    serve_config = service["spec"]["serveConfigV2"]
    assert f"HF_TOKEN: {REDACTED}\n" in serve_config and "num_gpus: 1" in serve_config  # the YAML stays YAML
    head_env = service["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0]["env"]
    assert head_env == [{"name": "RAY_REDIS_PASSWORD", "value": REDACTED}]


def test_logs_lose_api_keys_bearer_tokens_and_url_passwords() -> None:
    redactor = Redactor()
    vllm = redactor(
        "k8s/logs/x.log", (CLUSTER / "k8s" / "logs" / "llama-3-8b-7c9d6b5f4-abcde.log").read_bytes()
    ).decode()
    assert f"api_key='{REDACTED}'" in vllm and "max_num_batched_tokens=None" in vllm and "max_num_seqs=64" in vllm
    embedder = redactor(
        "k8s/logs/y.log", (CLUSTER / "k8s" / "logs" / "embedder-5f6d7c8b9-k2m4n.log").read_bytes()
    ).decode()
    assert f"Authorization: Bearer {REDACTED}\\r\\n" in embedder
    assert f"postgresql://embedder:{REDACTED}@pg.llm.svc:5432/embeddings" in embedder
    assert 'password authentication failed for user "embedder"' in embedder  # the diagnosis stays
    assert {ASSIGNMENT, BEARER, URL_PASSWORD} <= set(redactor.applied)


@pytest.mark.parametrize(
    "line, kept",
    [
        (f"HF_TOKEN={HF} python -m vllm.entrypoints.openai.api_server", "HF_TOKEN="),
        (f"Downloading with token {HF}", "Downloading with token "),
        ("key sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123 loaded", "key "),
        ("github ghp_0123456789abcdefghijABCDEFGHIJ012345 ok", "github "),
        ("aws AKIAIOSFODNN7EXAMPLE id", "aws "),
    ],
)
def test_well_known_token_formats_anywhere_in_text(line: str, kept: str) -> None:
    out = redact_text(line)
    assert REDACTED in out and out.startswith(kept)
    secret = line.removeprefix(kept).split()[0].split("=")[-1]
    assert secret not in out


def test_a_service_account_jwt_is_redacted() -> None:
    jwt = (
        "eyJhbGciOiJSUzI1NiIsImtpZCI6InJlcGxheSJ9."
        "eyJpc3MiOiJrdWJlcm5ldGVzL3NlcnZpY2VhY2NvdW50In0.c2lnbmF0dXJlLWJ5dGVzLWhlcmU"
    )
    hits = Redactor()
    out = hits("k8s/logs/a.log", f"mounted token {jwt}\n".encode()).decode()
    assert out == f"mounted token {REDACTED}\n" and hits.applied[TOKEN_FORMAT] == 1


def test_kubeconfig_credentials_in_yaml_and_json() -> None:
    kubeconfig = (
        "apiVersion: v1\nkind: Config\nusers:\n- name: admin\n  user:\n"
        "    client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUM=\n"
        "    client-key-data: LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQpNSUlF\n"
        "- name: sa\n  user:\n    token: abc.def.ghi\n"
    )
    hits = Redactor()
    out = hits("k8s/logs/config.log", kubeconfig.encode()).decode()
    assert "LS0t" not in out and "abc.def.ghi" not in out
    assert f"    client-key-data: {REDACTED}\n" in out and "- name: admin\n" in out
    assert hits.applied[KUBECONFIG] == 3
    as_json = json.dumps({"users": [{"name": "sa", "user": {"token": "abc.def.ghi", "client-key-data": "LS0t"}}]})
    cleaned = json.loads(redact("k8s/x.json", as_json.encode()))
    assert cleaned["users"][0]["user"] == {"token": REDACTED, "client-key-data": REDACTED}


def test_nothing_secret_means_the_bytes_are_unchanged() -> None:
    nodes = _cluster_file("nodes.json").replace(b'"managedFields"', b'"managedFieldz"')
    assert redact("k8s/nodes.json", nodes) == nodes
    metrics = b'vllm:prompt_tokens_total{model_name="meta-llama/Meta-Llama-3-8B-Instruct"} 51210.0\n'
    assert redact("vllm/x.metrics.txt", metrics) == metrics
    ray_status = b"Usage:\n 0.0/2.0 CPU\n 0.0/2.0 GPU\n"
    assert redact("ray/status.txt", ray_status) == ray_status


def test_a_json_file_that_is_not_json_is_cleaned_as_text() -> None:
    broken = f'{{"items": [{{"env": [{{"name": "HF_TOKEN", "value": "{HF}"'.encode()  # truncated
    out = redact("k8s/pods.json", broken)
    assert HF.encode() not in out and out.startswith(b'{"items"')


def test_bytes_that_are_not_utf8_survive() -> None:
    raw = b"\xff\xfe binary \x00 Authorization: Bearer abcdefghijkl123456\n"
    out = redact("k8s/logs/bin.log", raw)
    assert out.startswith(b"\xff\xfe binary \x00") and b"abcdefghijkl123456" not in out


@pytest.mark.parametrize(
    "name, secret",
    [
        ("HF_TOKEN", True),
        ("HUGGING_FACE_HUB_TOKEN", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("--api-key", True),
        ("apiKey", True),
        ("DB_PASSWORD", True),
        ("TOKENIZERS_PARALLELISM", False),
        ("--max-num-batched-tokens", False),
        ("--tokenizer", False),
        ("NVIDIA_VISIBLE_DEVICES", False),
        ("--kv-cache-dtype", False),
    ],
)
def test_secret_names_are_whole_words(name: str, secret: bool) -> None:
    assert secret_name(name) is secret


def test_flag_values_that_are_flags_are_not_swallowed() -> None:
    out = redact_text("vllm serve m --api-key --max-num-seqs 4")
    assert out == "vllm serve m --api-key --max-num-seqs 4"
    assert CLI_FLAG not in Redactor().applied


def test_an_argv_file_loses_the_value_on_the_line_after_the_flag() -> None:
    argv = (
        "python3\n-m\nvllm.entrypoints.openai.api_server\n--api-key\ntoken-abc123\n--max-num-seqs\n4\n--hf-token=hf_x\n"
    )
    out = redact("vllm/127.0.0.1_8000.cmdline.txt", argv.encode()).decode()
    assert out.splitlines() == [
        "python3", "-m", "vllm.entrypoints.openai.api_server", "--api-key", REDACTED, "--max-num-seqs", "4",
        f"--hf-token={REDACTED}",
    ]  # fmt: skip
