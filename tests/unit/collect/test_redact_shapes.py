"""Redaction shapes the corpus of tests/secret_corpus.py does not reach through a collection: Ray job
answers, the manifest, headers held in JSON, and ids that look random but are no secret."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from diag.bundle.files import Bundle
from diag.collect.base import SourceResult, Target
from diag.collect.manifest import CollectionRecord, build_manifest, write_manifest
from diag.collect.redact import HIGH_ENTROPY, REDACTED, SECRET_DATA, Redactor, high_entropy, redact, redact_text

# A Ray job as the dashboard's /api/jobs/ lists it (JobDetails): metadata and runtime_env are the user's.
RAY_JOB = {
    "type": "SUBMISSION",
    "job_id": "02000000",
    "submission_id": "raysubmit_XyZ12",
    "status": "RUNNING",
    "entrypoint": "python serve_llm.py --model meta-llama/Meta-Llama-3-8B-Instruct",
    "metadata": {"owner": "ml-team", "callback_token": "plantCallback0060"},
    "runtime_env": {"env_vars": {"WANDB_API_KEY": "plantWandb0061", "OMP_NUM_THREADS": "8"}, "pip": ["vllm==0.6.3"]},
}


def test_ray_job_metadata_and_runtime_env_are_cleaned_and_the_rest_kept() -> None:
    cleaned = json.loads(redact("ray/jobs.json", json.dumps([RAY_JOB]).encode()))[0]
    assert cleaned["metadata"] == {"owner": "ml-team", "callback_token": REDACTED}
    assert cleaned["runtime_env"]["env_vars"] == {"WANDB_API_KEY": REDACTED, "OMP_NUM_THREADS": "8"}
    assert cleaned["entrypoint"] == RAY_JOB["entrypoint"] and cleaned["submission_id"] == "raysubmit_XyZ12"


def test_header_dicts_in_json_lose_their_values_whatever_the_scheme() -> None:
    headers = {"Authorization": "Token abc123", "X-Api-Key": "plantXApiKey0062", "Accept": "application/json"}
    cleaned = json.loads(redact("vllm/x.json", json.dumps({"headers": headers}).encode()))["headers"]
    assert cleaned == {"Authorization": REDACTED, "X-Api-Key": REDACTED, "Accept": "application/json"}


def test_the_manifest_keeps_no_url_credential() -> None:
    target = Target(
        prometheus_url="https://plantPromTok0063@prom.example.com", vllm_urls=["http://u:plantPw0064@10.0.0.5:8000"]
    )
    record = CollectionRecord(
        target, 0.0, 1.0, [SourceResult("vllm", "failed", "http://u:plantPw0064@10.0.0.5:8000 GET /health: timeout")]
    )
    bundle = Bundle()
    write_manifest(bundle, record)
    text = bundle.files["manifest.json"].decode()
    assert "plantPromTok0063" not in text and "plantPw0064" not in text
    assert "prom.example.com" in text and "10.0.0.5:8000" in text
    assert json.loads(text)["settings"] == build_manifest(record)["settings"]


@pytest.mark.parametrize(
    "value",
    [
        "GPU-4b794de7-279f-721d-5fe5-8f6fcbfb3cf4",
        "MIG-9f2a6c1e-5b3d-5e8f-a1c2-3d4e5f6a7b8c",
        "4049cdd66cf25389f34d42bf01000000",  # a Ray actor id
        "00000000:00:06.0",
        "meta-llama/Meta-Llama-3-8B-Instruct",
        "vllm/vllm-openai:v0.6.3",
        "llama-3-8b-7c9d6b5f4-abcde",
        "1733059200",
    ],
)
def test_ids_names_and_numbers_are_not_high_entropy(value: str) -> None:
    assert not high_entropy(value)
    assert redact_text(f"VALUE={value}") == f"VALUE={value}"


def test_a_random_value_under_a_plain_name_is_redacted_in_env() -> None:
    pod = {"spec": {"containers": [{"env": [{"name": "OPAQUE", "value": "Zq8xV2mN7pL4kR9tW3yB6cF1hJ5sD0gA"}]}]}}
    redactor = Redactor()
    cleaned = json.loads(redactor("k8s/pods.json", json.dumps(pod).encode()))
    assert cleaned["spec"]["containers"][0]["env"][0]["value"] == REDACTED
    assert redactor.applied[HIGH_ENTROPY] == 1


@pytest.mark.parametrize(
    "line, kept",
    [
        ('non-default args: {"api_key": ["plantDq0065"], "port": 8000}', '"port": 8000'),
        ("curl -H 'Authorization: Bearer plantCurl0066' http://x/v1/models", "http://x/v1/models"),
        ("GET /v1/models?sig=plantSig0067&limit=5", "&limit=5"),
        ("proxy-authorization: Negotiate plantNeg0068", "proxy-authorization: "),
        ("-----BEGIN OPENSSH PRIVATE KEY-----\nplantOpenssh0069\n", "-----BEGIN OPENSSH PRIVATE KEY-----"),
    ],
)
def test_text_shapes(line: str, kept: str) -> None:
    hits: Counter[str] = Counter()
    cleaned = redact_text(line, hits)
    assert "plant" not in cleaned and kept in cleaned and REDACTED in cleaned
    assert redact_text(cleaned) == cleaned  # a second pass changes nothing


def test_yaml_files_are_cleaned_as_data_and_block_scalars_in_text() -> None:
    manifest = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: tls\n"
        "  annotations:\n    example.com/api-token: plantYamlTok0070\n"
        "data:\n  tls.key: |\n    -----BEGIN EC PRIVATE KEY-----\n"
        "    plantYamlPem0071\n    -----END EC PRIVATE KEY-----\n"
        "  replicas: '3'\n"
    )
    cleaned = redact("k8s/extra.yaml", manifest.encode()).decode()
    assert "plant" not in cleaned and "name: tls" in cleaned and "replicas: '3'" in cleaned
    in_a_log = "config:\n  db_password: >\n    plantFolded0072\n    more0073\n  port: 5432\n"
    assert redact_text(in_a_log) == f"config:\n  db_password: >\n    {REDACTED}\n  port: 5432\n"


def test_a_value_repeated_across_a_list_is_cleaned_and_counted_every_time() -> None:
    """Each distinct string is cleaned once per process (a fleet's 5,000 replicas repeat theirs): every
    copy must still come out cleaned, and every copy counted in the manifest's redactions."""
    pod = {
        "metadata": {
            "name": "vllm-0",
            "annotations": {"note": "curl -H 'Authorization: Bearer plantRepeat0070abcdef'"},
        },
        "spec": {"containers": [{"env": [{"name": "HF_TOKEN", "value": "hf_plantRepeat0071abcdefghijklmnop"}]}]},
    }
    listing = {"apiVersion": "v1", "items": [pod] * 3, "kind": "List"}
    once, thrice = Redactor(), Redactor()
    once("k8s/pods.json", json.dumps({**listing, "items": [pod]}).encode())
    cleaned = json.loads(thrice("k8s/pods.json", json.dumps(listing).encode()))
    assert thrice.applied == Counter({rule: 3 * count for rule, count in once.applied.items()})
    assert sum(once.applied.values()) >= 2
    text = json.dumps(cleaned)
    assert "plantRepeat0070" not in text and "plantRepeat0071" not in text and text.count(REDACTED) >= 6


def test_a_json_file_with_nothing_to_hide_stays_byte_for_byte() -> None:
    """The detectors look at every string and count 0 when they find nothing: that is no redaction,
    and the file keeps the source's own bytes (a 40 MB event list is not written again)."""
    raw = (
        b'{"apiVersion": "v1",\n "items": [{"metadata": {"name": "vllm-0", "uid": '
        b'"a1b2c3d4-0000-4e5f-8a9b-0123456789ab"},\n'
        b'   "message": "Started container vllm", "lastTimestamp": "2026-12-04T13:44:01Z"}], "kind": "List"}\n'
    )
    redactor = Redactor()
    assert redactor("k8s/events.json", raw) is raw
    assert not any(redactor.applied.values())


@pytest.mark.parametrize(
    "fixture",
    ["incident-k8s-pvc-unbound/k8s/pods.json", "healthy-k8s-vllm/k8s/pods.json", "healthy-k8s-vllm/k8s/events.json"],
)
def test_a_document_in_hand_is_written_as_its_text_would_be(fixture: str) -> None:
    """Sink.write_json: a Redactor cleans the parsed list, not the text it writes, to the same bytes
    and counts; with secrets planted in it, and without."""
    from pathlib import Path

    from diag.collect import json_text

    document = json.loads((Path(__file__).resolve().parents[3] / "fixtures" / fixture).read_text())
    planted = json.loads(json.dumps(document))
    planted["items"][0].setdefault("metadata", {}).setdefault("annotations", {})["example.com/api-token"] = (
        "plantAnnotation0070"
    )
    for doc in (document, planted):
        as_text, in_hand = Redactor(), Redactor()
        written = as_text("k8s/pods.json", (json_text.dumps(doc) + "\n").encode())
        assert in_hand.document("k8s/pods.json", doc) == written
        assert in_hand.applied == as_text.applied
    assert b"plantAnnotation0070" not in Redactor().document("k8s/pods.json", planted)


def test_a_flag_after_a_hyphenated_model_name_is_still_a_flag() -> None:
    """`-Llama-3-8B-Instruct` is no flag: it took `--api-key` for its value, and the key was kept."""
    line = "vllm serve meta-llama/Meta-Llama-3-8B-Instruct --api-key plantKey0001abc --port 8000"
    assert redact_text(line) == "vllm serve meta-llama/Meta-Llama-3-8B-Instruct --api-key <redacted> --port 8000"


def test_a_secret_objects_data_is_dropped_wherever_it_is() -> None:
    """A hand-made secrets.json (`kubectl get secrets -o json`) and a Secret in a last-applied annotation."""
    applied = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"k": "plainValue0080"}}
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "hf-token",
            "namespace": "llm",
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": json.dumps(applied)},
        },
        "type": "Opaque",
        "data": {"config": "c29tZXRoaW5nMDA4MQ=="},
    }
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"x": "kept0082"}}
    raw = json.dumps({"apiVersion": "v1", "kind": "List", "items": [secret, configmap]}).encode()
    redactor = Redactor()
    cleaned = redactor("k8s/secrets.json", raw)
    assert b"c29tZXRoaW5nMDA4MQ" not in cleaned and b"plainValue0080" not in cleaned
    doc = json.loads(cleaned)
    assert "data" not in doc["items"][0] and doc["items"][0]["metadata"]["name"] == "hf-token"
    assert doc["items"][1]["data"] == {"x": "kept0082"}  # a ConfigMap's data is no Secret
    assert redactor.applied[SECRET_DATA] == 2
