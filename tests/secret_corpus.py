"""Secrets planted in every place a live collection reads: the pod spec (env, annotations, args),
container logs (the shapes vLLM, HTTP clients and shells print), Ray's state answers (a serialized
runtime env), and the command line (`--prometheus-url`, `--vllm-url`).

Each secret is a distinct string, so a leak is found with a plain byte search; `SURVIVORS` are
values that look random or numeric but are no secret and must reach the bundle unchanged."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from tests.replay.harness import RAY_HEAD, VLLM_POD
from tests.replay.server import ExecAnswer, ReplayCluster

PEM_BODY = (
    "MIIEowIBAAKCAQEA0Plant3dPrivateKeyBodyLine1xQ7vVbN2kLmOp9qRsTuVwXyZa\n"
    "bC4dE6fG8hI0jK2lM4nO6pQ8rS0tU2vW4xY6zA8bC0dE2fG4hI6jK8lM0nO2pQ4rS6t\n"
)
JWT = (
    "eyJhbGciOiJSUzI1NiIsImtpZCI6InBsYW50ZWQifQ"
    ".eyJpc3MiOiJrdWJlcm5ldGVzL3NlcnZpY2VhY2NvdW50Iiwic3ViIjoicGxhbnRlZCJ9"
    ".Q3Jvc3NQbGFudGVkU2lnbmF0dXJlVmFsdWVGb3JUZXN0c09ubHkxMjM0NTY"
)


@dataclass
class Corpus:
    """`secrets`: label -> the value that must not appear anywhere; `survivors`: must appear."""

    secrets: dict[str, str] = field(default_factory=dict)
    survivors: list[str] = field(default_factory=list)

    def plant(self, label: str, value: str) -> str:
        self.secrets[label] = value
        return value


def log_lines(c: Corpus) -> list[str]:
    """Log lines as vLLM, HTTP clients, shells and Python print them, one planted secret or more each."""
    return [
        "(APIServer pid=1) INFO 12-01 14:13:12 [utils.py:326] non-default args: {'model_tag': "
        "'meta-llama/Meta-Llama-3-8B-Instruct', 'port': 8000, 'api_key': ['"
        + c.plant("vllm-args-api-key", "sk-plantAaaBbbCccDddEeeFff0001")
        + "'], 'max_model_len': 8192, 'hf_token': '"
        + c.plant("vllm-args-hf-token", "plantHfTokenArgValue0002xyz")
        + "'}",
        "DEBUG request headers: Authorization: Token " + c.plant("auth-token", "plantTokenScheme0003abcdef"),
        "DEBUG Authorization: Bearer " + c.plant("auth-bearer", "plantBearer0004.abcdefghij"),
        "DEBUG authorization: Basic " + c.plant("auth-basic", "cGxhbnQ6YmFzaWMwMDA1c2VjcmV0"),
        'DEBUG Authorization: Digest username="svc", realm="r", nonce="n1", response="'
        + c.plant("auth-digest", "plant0006digestresponse9f8e7d")
        + '"',
        "DEBUG Authorization: ApiKey " + c.plant("auth-apikey", "plantApiKeyScheme0007zz"),
        "DEBUG Authorization: AWS4-HMAC-SHA256 Credential=AKIAPLANTED000000008/20261201/us-east-1/s3/aws4_request, "
        "SignedHeaders=host;x-amz-date, Signature="
        + c.plant("auth-aws4-signature", "9f0e1d2c3b4a59687766554433221100ffeeddccbbaa00998877665544332211"),
        '{"headers": {"Authorization": "Bearer ' + c.plant("json-log-bearer", "plantJsonBearer0009qq") + '"}}',
        "INFO GET https://hub.example.com/api/models?revision=main&access_token="
        + c.plant("query-access-token", "plantAccessToken0010")
        + "&limit=5 200",
        "INFO downloading https://weights.s3.amazonaws.com/llama/model.safetensors?X-Amz-Algorithm=AWS4-HMAC-SHA256"
        "&X-Amz-Credential="
        + c.plant("amz-credential", "AKIAPLANTED000000011/20261201/us-east-1/s3/aws4_request")
        + "&X-Amz-Date=20261201T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Signature="
        + c.plant("amz-signature", "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f12"),
        "INFO connecting to postgres://llm:" + c.plant("url-password", "plantUrlPass0013") + "@db.example.com:5432/app",
        "INFO cloning https://"
        + c.plant("url-user-token", "ghp_plantUserinfoTokenOnly0014abcdefghijk")
        + "@github.com/org/repo",
        "export S3_CREDS=" + c.plant("creds-var", "plantCredsValue0015"),
        "DB_TOKEN=" + c.plant("token-var", "plantTokenVar0016"),
        "APP_SECRET='" + c.plant("secret-var", "plantSecretVar0017") + "'",
        'ADMIN_PASSWORD="' + c.plant("password-var", "plantPasswordVar0018") + '"',
        "SIGNING_KEY=" + c.plant("key-var", "plantSigningKey0019"),
        "loaded token " + c.plant("hf-token", "hf_PlantedHuggingFaceToken0020abcdXYZ"),
        "service account token " + c.plant("jwt", JWT),
        "aws_access_key_id = " + c.plant("aws-access-key", "AKIAPLANTED000000021"),
        "aws_secret_access_key = " + c.plant("aws-secret-key", "plantAwsSecret0022/abcdefghijKLMNOPqrstu+vw"),
        "-----BEGIN RSA PRIVATE KEY-----",
        *c.plant("pem-private-key", PEM_BODY).splitlines(),
        "-----END RSA PRIVATE KEY-----",
        "INFO using openai key " + c.plant("openai-key", "sk-proj-plantOpenAi0023abcdefghijklmnop"),
        # vLLM before 0.6 printed its arguments as an argparse Namespace
        "INFO 12-01 14:13:12 api_server.py:528] args: Namespace(host=None, port=8000, api_key='"
        + c.plant("vllm-namespace-api-key", "plantNamespaceApiKey0024")
        + "', model='meta-llama/Meta-Llama-3-8B-Instruct', hf_token='"
        + c.plant("vllm-namespace-hf-token", "hf_plantNamespaceHfToken0025abcdefg")
        + "', max_model_len=8192)",
        "(APIServer pid=1) INFO 12-01 14:13:12 [api_server.py:1880] vLLM API server version 0.10.1.1 "
        "started with: vllm serve meta-llama/Meta-Llama-3-8B-Instruct --api-key "
        + c.plant("vllm-cli-api-key", "plantCliApiKey0026abc"),
        'curl -s -H "Authorization: Bearer '
        + c.plant("curl-bearer", "plantCurlBearer0027xyz")
        + '" http://vllm:8000/v1/models',
        "DEBUG sending x-api-key: " + c.plant("x-api-key-header", "plantXApiKeyHeader0028"),
        "ERROR token refresh failed: bearer " + c.plant("lowercase-bearer", "plantLowerBearer0029abc"),
        "INFO using DefaultEndpointsProtocol=https;AccountName=llmweights;AccountKey="
        + c.plant("azure-account-key", "cGxhbnRBenVyZUFjY291bnRLZXkwMDM2YWJjZGVmZ2hpams=")
        + ";EndpointSuffix=core.windows.net",
        "INFO reading gs://weights/llama/config.json?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Signature="
        + c.plant("goog-signature", "5c0ffee0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c"),
        # a service account key file printed as JSON: the key's lines are `\\n` escapes
        '{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\n'
        + c.plant("gcp-private-key", "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQCplantedGcpKey0048")
        + '\\n-----END PRIVATE KEY-----\\n", "client_email": "llm@proj.iam.gserviceaccount.com"}',
        "AWS_SESSION_TOKEN=" + c.plant("aws-session-token", "IQoJb3JpZ2luX2VjEPlantedSessionToken0037abcdefgh"),
        "export GITHUB_TOKEN=" + c.plant("github-token", "ghp_PlantedGithubToken0038abcdefghijklmnopq"),
    ]


def metrics_lines(c: Corpus) -> str:
    """Series whose labels carry a secret, as exporters write them when they turn config into labels."""
    return (
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
        "# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{block_size="16",api_key="'
        + c.plant("metrics-label-api-key", "plantMetricsLabelKey0060")
        + '",gpu_memory_utilization="0.9"} 1.0\n'
        'vllm:lora_requests_info{endpoint="https://hooks.example.com/x?token='
        + c.plant("metrics-label-url-token", "plantMetricsUrlToken0061")
        + '"} 1.0\n'
    )


def plant_cluster(cluster: ReplayCluster, c: Corpus) -> None:
    """Secrets into the vLLM pod (env, annotations, args, logs) and Ray's answers."""
    namespace, name, _ = VLLM_POD
    pod = cluster.find("pods", namespace, name)
    assert pod is not None
    pod["metadata"].setdefault("annotations", {}).update(
        {
            "example.com/api-token": c.plant("annotation-token", "plantAnnotationToken0030"),
            "example.com/db-password": c.plant("annotation-password", "plantAnnotationPass0031"),
            "example.com/notes": "pull with " + c.plant("annotation-jwt", JWT.replace("plant", "note")),
        }
    )
    container = pod["spec"]["containers"][0]
    container["env"] += [
        {"name": "S3_CREDS", "value": c.plant("env-creds", "plantEnvCreds0032")},
        {"name": "WANDB_API_KEY", "value": c.plant("env-api-key", "plantEnvApiKey0033abcdef")},
        {
            "name": "HOOK_URL",
            "value": "https://hooks.example.com/x?token=" + c.plant("env-url-token", "plantEnvUrlToken0034"),
        },
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "GPU-4b794de7-279f-721d-5fe5-8f6fcbfb3cf4"},
    ]
    container.setdefault("envFrom", []).append({"secretRef": {"name": "llm-credentials"}})
    cluster.objects.setdefault("secrets", []).append(_secret_object(namespace, c))
    container["args"] += ["--hf-token=" + c.plant("arg-hf-token", "plantArgHfToken0035")]
    container["args"] += ["--api-key", c.plant("arg-api-key-separate", "plantArgApiKey0047"), "--max-model-len", "8192"]
    for key in [k for k in cluster.logs if k[:2] == (namespace, name)]:
        cluster.logs[key] += "\n".join(log_lines(c)) + "\n"
    _plant_ray(cluster, c)
    c.survivors += [
        "meta-llama/Meta-Llama-3-8B-Instruct",
        "vllm/vllm-openai:v0.6.3",
        "gpu-node-a",
        "GPU-4b794de7-279f-721d-5fe5-8f6fcbfb3cf4",
        "00000000:00:06.0",
        "max_model_len",
        "8192",
        "llm-credentials",
        "hub.example.com",
        "X-Amz-Expires=3600",
    ]


def _plant_ray(cluster: ReplayCluster, c: Corpus) -> None:
    key = next(k for k in cluster.exec_answers if k[:2] == RAY_HEAD and "actors" in k[2])
    actors = json.loads(cluster.exec_answers[key].stdout)
    runtime_env = {
        "env_vars": {
            "HF_TOKEN": c.plant("ray-env-hf", "hf_PlantedRayRuntimeEnv0040abcdefgh"),
            "DB_CONN": "postgresql://u:" + c.plant("ray-env-conn", "plantRayConnPass0041") + "@db/x",
            "OPAQUE_SETTING": c.plant("ray-env-entropy", "Zq8xV2mN7pL4kR9tW3yB6cF1hJ5sD0gA"),
            "OMP_NUM_THREADS": "8",
            "AWS_SECRET_ACCESS_KEY": c.plant("ray-env-aws-secret", "plantRayAwsSecret0042/abcdefghijKLMNOPqrs"),
            "WANDB_API_KEY": c.plant("ray-env-wandb", "plantRayWandbKey0043abcdef"),
            "HUGGING_FACE_HUB_TOKEN": c.plant("ray-env-hub-token", "hf_PlantedRayHubToken0044abcdefgh"),
            "VLLM_API_KEY": c.plant("ray-env-vllm-key", "plantRayVllmKey0045"),
            "DATABASE_URL": "postgres://u:" + c.plant("ray-env-db-url", "plantRayDbUrlPass0046") + "@db:5432/x",
        },
        "pip": ["vllm==0.6.3"],
    }
    actors[0]["serialized_runtime_env"] = json.dumps(runtime_env)
    cluster.exec_answers[key] = ExecAnswer(stdout=json.dumps(actors, indent=2))
    c.survivors += ["OMP_NUM_THREADS", "vllm==0.6.3"]


def _secret_object(namespace: str, c: Corpus) -> dict:
    """The Secret the vLLM pod reads, as the API server stores it: its data, and the whole manifest in
    the last-applied annotation (kubectl apply writes it); only its name may reach the bundle."""
    data = {"HF_TOKEN": c.plant("secret-object-data", "cGxhbnRTZWNyZXREYXRhMDA2MHh5eg==")}
    applied = {
        "apiVersion": "v1",
        "kind": "Secret",
        "stringData": {"HF_TOKEN": c.plant("secret-applied", "plantApplied0061")},
    }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "llm-credentials",
            "namespace": namespace,
            "uid": "5b0a9c1e-2d7f-5e43-8a61-0c9b3d2e7f14",
            "creationTimestamp": "2026-11-28T09:40:10Z",
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": json.dumps(applied)},
        },
        "type": "Opaque",
        "data": data,
    }
