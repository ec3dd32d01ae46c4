"""What a container runs, from its command, arguments, environment and log rather than its image's name
(diag/parsers/workloads.py): each way vLLM and Ray are recognised, and the look-alikes that are not them."""

import json
from pathlib import Path

import pytest

from diag.parsers import kubernetes
from diag.parsers.logs import scan_log
from diag.parsers.workloads import VLLM_LOG_SIGNAL, ray_node_type, spec_engine_args, vllm_container, vllm_recognition
from diag.snapshot.model import Container, Pod

REAL_VLLM_LOG = Path(__file__).resolve().parents[3] / "fixtures" / "real" / "vllm-cpu" / "healthy" / "server.log"
CUSTOM = "registry.corp.example/ml/llm-serve:2.3"
MODEL = "mistralai/Mistral-7B-Instruct-v0.3"


def container(**fields) -> Container:
    return Container(name=fields.pop("name", "server"), image=fields.pop("image", CUSTOM), **fields)


@pytest.mark.parametrize(
    ("fields", "how"),
    [
        ({"command": ["vllm", "serve", MODEL]}, "command"),
        ({"command": ["python3", "-m", "vllm.entrypoints.openai.api_server"], "args": ["--model", MODEL]}, "command"),
        # KubeRay's own shape of a shell command line: /bin/bash -lc -- "<script>"
        (
            {"command": ["/bin/bash", "-lc", "--"], "args": [f"ulimit -n 65536; exec vllm serve {MODEL} --port 8000"]},
            "command",
        ),
        ({"image": "vllm/vllm-openai:v0.10.1.1", "args": [MODEL, "--max-num-seqs", "64"]}, "image"),
        # the custom image's ENTRYPOINT starts vLLM; the args hold a flag only vLLM's server takes
        ({"args": ["--max-model-len", "16384"]}, "args"),
        ({"args": ["--model", MODEL, "--gpu-memory-utilization=0.85"]}, "args"),
        ({"command": ["/opt/serve/start.sh"], "args": ["--model", MODEL, "--enforce-eager"]}, "args"),
        ({"command": ["sh", "-c", f"/opt/serve/start.sh --model {MODEL} --max-num-seqs 32"]}, "args"),
        # --model alone: vLLM's only beside port 8000
        ({"args": ["--model", MODEL], "ports": {"http": 8000}}, "args"),
        ({"env": {"VLLM_WORKER_MULTIPROC_METHOD": "spawn"}}, "env"),
        ({"env": {"HF_HOME": "/models", "VLLM_USE_V1": "1"}, "ports": {"http": 8000}}, "env"),
    ],
)
def test_vllm_is_recognised_from_what_the_container_runs(fields: dict, how: str) -> None:
    assert vllm_recognition(container(**fields)) == how


@pytest.mark.parametrize(
    "fields",
    [
        {},  # a custom image and nothing else: its name proves nothing
        {"ports": {"http": 8000}},  # port 8000 alone (Triton, trtllm-serve, web apps)
        {"args": ["--model", MODEL]},  # --model without port 8000
        # a client of a vLLM server: VLLM_* names vLLM does not read, its API key, Kubernetes' VLLM_PORT service link
        {
            "env": {
                "VLLM_BASE_URL": "http://llama.llm:8000/v1",
                "VLLM_MODEL": "llama",
                "VLLM_API_KEY": "<from:secretKeyRef>",
            },
            "ports": {"http": 8000},
        },
        {"env": {"VLLM_PORT": "tcp://10.96.0.12:8000"}},
        {"command": ["uvicorn", "app:app", "--host", "0.0.0.0", "--port", "8000"], "ports": {"http": 8000}},
        # other servers, whatever their flags and env say
        {
            "image": "nvcr.io/nvidia/tritonserver:24.08-py3",
            "args": ["tritonserver", "--model-repository=/models", "--http-port=8000"],
            "ports": {"http": 8000},
        },
        {
            "image": "ghcr.io/huggingface/text-generation-inference:2.4.1",
            "command": ["text-generation-launcher"],
            "args": ["--model-id", MODEL, "--max-total-tokens", "16384", "--max-model-len", "8192"],
            "ports": {"http": 8000},
        },
        {
            "command": ["python3", "-m", "sglang.launch_server"],
            "args": ["--model-path", MODEL, "--max-model-len", "8192"],
            "env": {"VLLM_USE_V1": "1"},
        },
        {"command": ["ray", "start", "--head", "--block"], "env": {"VLLM_USE_V1": "1"}},
        # TGI's flags that vLLM shares, with no program in sight
        {"args": ["--model-id", MODEL, "--dtype", "bfloat16", "--quantize", "awq"], "ports": {"http": 8000}},
    ],
)
def test_look_alikes_are_not_vllm(fields: dict) -> None:
    assert vllm_recognition(container(**fields)) is None


def test_a_ray_pod_is_vllm_only_by_a_command_that_starts_it() -> None:
    env_only = container(
        env={"VLLM_ATTENTION_BACKEND": "FLASHINFER"},
        log_signals={VLLM_LOG_SIGNAL: ["vLLM API server version 0.10.1.1"]},
    )
    assert vllm_recognition(env_only, ray_pod=True) is None
    assert vllm_recognition(container(command=["vllm", "serve", MODEL]), ray_pod=True) == "command"


def test_the_log_recognises_what_the_spec_does_not() -> None:
    line = "(APIServer pid=1) INFO 12-01 14:13:12 [api_server.py:1805] vLLM API server version 0.10.1.1"
    logged = container(log_signals=scan_log(line + "\n"))
    assert vllm_recognition(logged) == "log"
    assert spec_engine_args(logged, ray_pod=False) is None  # unknown, never guessed
    sidecar = container(name="sidecar", image="busybox:1.36", log_signals=scan_log(line + "\n"))
    spec = container(env={"VLLM_USE_V1": "1"})
    found = vllm_container(Pod(namespace="llm", name="p", containers=[sidecar, spec]))
    assert found is not None and (found[0].name, found[1]) == ("server", "env")  # the spec outranks a log


def test_arguments_to_an_unseen_entrypoint_give_only_the_flags_given() -> None:
    args = spec_engine_args(container(args=["--max-model-len", "16k", "--tensor-parallel-size", "2"]), ray_pod=False)
    assert args is not None and not args.complete
    assert (args.max_model_len, args.tensor_parallel_size) == (16000, 2)
    # what the entrypoint may set is unknown, not vLLM's default
    assert (args.port, args.gpu_memory_utilization, args.pipeline_parallel_size, args.model) == (None, None, None, None)
    assert args.explicit == ["--max-model-len", "--tensor-parallel-size"]
    assert spec_engine_args(container(env={"VLLM_USE_V1": "1"}), ray_pod=False) is None
    full = spec_engine_args(container(command=["vllm", "serve", MODEL]), ray_pod=False)
    assert full is not None and full.complete and full.port == 8000
    # a Ray pod runs vLLM, if at all, in its actors: its arguments are no server's
    assert spec_engine_args(container(args=["--max-model-len", "16k"]), ray_pod=True) is None


def _pod_running(*containers: dict, labels: dict | None = None) -> dict:
    return {
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "llm", "labels": labels or {}},
        "spec": {"containers": list(containers)},
    }


def test_a_parsed_pod_carries_the_engine_args_of_the_container_that_runs_vllm() -> None:
    server = {"name": "server", "image": CUSTOM, "command": ["vllm", "serve", MODEL, "--max-num-seqs", "64"]}
    sidecar = {"name": "sidecar", "image": "busybox:1.36", "args": ["--max-model-len", "16k"]}
    (pod,) = kubernetes.parse_pods(json.dumps(_pod_running(server, sidecar)))
    engine = pod.containers[0].engine_args
    assert engine is not None and (engine.model, engine.max_num_seqs) == (MODEL, 64)
    # the sidecar's flags read as vLLM's: it is recognised too, and its own flags are its own
    assert pod.containers[1].engine_args is not None and pod.containers[1].engine_args.max_model_len == 16000
    (ray_pod,) = kubernetes.parse_pods(json.dumps(_pod_running(sidecar, labels={"ray.io/cluster": "rc"})))
    assert ray_pod.containers[0].engine_args is None


@pytest.mark.parametrize(
    "line",
    [
        "INFO 12-01 14:13:01 api_server.py:528] vLLM API server version 0.6.3.post1",
        "(APIServer pid=1) INFO 11-30 08:05:30 [api_server.py:1880] Starting vLLM API server 0 on http://0.0.0.0:8000",
        '  File "/opt/nim/llm/.venv/lib/python3.12/site-packages/vllm/'
        'engine/multiprocessing/engine.py", line 125, in from_engine_args',
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 691, in run_engine_core',
    ],
)
def test_vllm_own_lines_are_the_log_signal(line: str) -> None:
    assert scan_log(line + "\n").get(VLLM_LOG_SIGNAL) == [line.strip()]


def test_the_signal_finds_a_real_vllm_log_and_not_triton_or_a_client() -> None:
    assert scan_log(REAL_VLLM_LOG.read_text()).get(VLLM_LOG_SIGNAL)
    others = (
        "I1130 08:03:41.519037 1 http_server.cc:4623] Started HTTPService at 0.0.0.0:8000\n"
        'INFO:     10.244.2.77:53122 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
        "INFO:rag_api.llm:calling vLLM at http://llama-70b.llm.svc.cluster.local:8000/v1 (model llama-70b)\n"
    )
    assert VLLM_LOG_SIGNAL not in scan_log(others)


@pytest.mark.parametrize(
    ("fields", "role"),
    [
        (
            {
                "command": ["/bin/bash", "-lc", "--"],
                "args": ["ulimit -n 65536; ray start --head --dashboard-host=0.0.0.0 --block"],
            },
            "head",
        ),
        (
            {
                "command": ["/bin/bash", "-c", "--"],
                "args": ["ray start --num-cpus=$MY_CPU_REQUEST --address=$RAY_HEAD_SERVICE_HOST:6379 --block"],
            },
            "worker",
        ),
        ({"command": ["ray", "start", "--block"], "env": {"RAY_ADDRESS": "ray-head.ray:6379"}}, "worker"),
        ({"command": ["ray", "status"]}, None),
        ({"command": ["python", "job.py"], "env": {"RAY_ADDRESS": "http://ray-head.ray:8265"}}, None),  # a Ray client
        ({"ports": {"gcs": 6379, "dashboard": 8265, "client": 10001}}, None),  # ports without `ray start`
    ],
)
def test_ray_nodes_are_recognised_from_ray_start(fields: dict, role: str | None) -> None:
    assert ray_node_type([container(**fields)]) == role


def _pod_json(labels: dict, command: list[str], args: list[str]) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "PodList",
            "items": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "ray-head-7d9f8c6b5-x2k4q", "namespace": "ray", "labels": labels},
                    "spec": {
                        "containers": [
                            {
                                "name": "ray-head",
                                "image": "registry.corp.example/ml/ray-llm:2.40",
                                "command": command,
                                "args": args,
                            }
                        ]
                    },
                    "status": {"phase": "Running"},
                }
            ],
        }
    )


def test_the_pod_parser_reads_a_ray_node_kuberay_did_not_make() -> None:
    (pod,) = kubernetes.parse_pods(
        _pod_json({"app": "ray-head"}, ["/bin/bash", "-c", "--"], ["ray start --head --port=6379 --block"])
    )
    assert (pod.ray_node_type, pod.ray_cluster) == ("head", None)  # no cluster name is made up
    (labelled,) = kubernetes.parse_pods(
        _pod_json({"ray.io/node-type": "worker", "ray.io/cluster": "llm"}, ["ray", "start", "--head"], [])
    )
    assert labelled.ray_node_type == "worker"  # KubeRay's label is what KubeRay made it


def test_a_pod_its_server_files_name_is_vllm_by_its_only_container() -> None:
    """A server known from its own files or Prometheus series (join sets pod.vllm_server) runs in the
    pod's one container, unless the pod is a Ray node (vLLM runs in its actors) or has several."""
    plain = container()
    assert vllm_container(Pod(namespace="llm", name="p", containers=[plain])) is None
    named = Pod(namespace="llm", name="p", containers=[plain], vllm_server="p")
    assert vllm_container(named) == (plain, "files")
    ray = Pod(namespace="llm", name="p", containers=[plain], vllm_server="p", ray_cluster="llm", ray_node_type="worker")
    assert vllm_container(ray) is None
    two = Pod(
        namespace="llm",
        name="p",
        containers=[plain, container(name="proxy", image="envoyproxy/envoy:v1.31.2")],
        vllm_server="p",
    )
    assert vllm_container(two) is None
