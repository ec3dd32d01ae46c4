"""Container command/args -> EngineArgs. The argv shapes are those of vLLM's docs and examples
(`vllm serve`, the api_server module, `sh -c` scripts in Kubernetes manifests)."""

import pytest

from diag.parsers.engine_args import REDACTED, launches_vllm, parse_engine_args

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def test_vllm_serve_with_defaults_filled_only_where_fixed():
    args = parse_engine_args(["vllm", "serve", MODEL, "--max-num-seqs", "256"], [])
    assert args is not None
    assert (args.model, args.max_num_seqs, args.port, args.gpu_memory_utilization) == (MODEL, 256, 8000, 0.9)
    assert (args.tensor_parallel_size, args.pipeline_parallel_size, args.data_parallel_size) == (1, 1, 1)
    # version-dependent defaults stay unknown
    assert (args.max_num_batched_tokens, args.block_size, args.enable_chunked_prefill, args.enable_prefix_caching) == (
        None,
        None,
        None,
        None,
    )
    assert (args.max_model_len, args.kv_cache_dtype, args.distributed_executor_backend) == (None, None, None)
    assert args.explicit == ["--max-num-seqs"]
    assert args.raw == ["vllm", "serve", MODEL, "--max-num-seqs", "256"]


@pytest.mark.parametrize(
    ("command", "args"),
    [
        (["vllm", "serve", MODEL, "--max-num-seqs=64", "--port", "8080"], []),
        (["vllm"], ["serve", MODEL, "--max-num-seqs", "64", "--port=8080"]),
        (["vllm", "serve"], [MODEL, "--max_num_seqs", "64", "--port", "8080"]),
        ([], ["vllm", "serve", "--model", MODEL, "--max-num-seqs", "64", "--port", "8080"]),
        (
            [
                "python",
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--model",
                MODEL,
                "--max-num-seqs",
                "64",
                "--port",
                "8080",
            ],
            [],
        ),
        (
            ["python3", "-m"],
            ["vllm.entrypoints.openai.api_server", "--model", MODEL, "--max_num_seqs=64", "--port", "8080"],
        ),
        (
            ["/usr/bin/python3"],
            [
                "-u",
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--model=" + MODEL,
                "--max-num-seqs",
                "64",
                "--port",
                "8080",
            ],
        ),
        (
            ["python3.12", "-W", "ignore", "-m", "vllm.entrypoints.cli.main", "serve", MODEL],
            ["--max-num-seqs", "64", "--port", "8080"],
        ),
        (
            ["/usr/bin/env", "python3", "-m", "vllm.entrypoints.openai.api_server"],
            ["--model", MODEL, "--max-num-seqs", "64", "--port", "8080"],
        ),
        (["/bin/sh", "-c", f"vllm serve {MODEL} --max-num-seqs 64 --port 8080"], []),
        (["/bin/sh", "-c"], [f"exec vllm serve {MODEL} --max-num-seqs 64 --port 8080"]),
        (
            ["bash", "-lc"],
            [
                f"pip install -U 'transformers>=4.45' && HF_HOME=/models VLLM_USE_V1=1 exec vllm serve {MODEL} "
                "--max-num-seqs 64 --port 8080 2>&1 | tee /tmp/vllm.log"
            ],
        ),
        (
            [
                "/bin/bash",
                "-ec",
                f"set -x\nnvidia-smi;\npython3 -m vllm.entrypoints.openai.api_server \\\n  --model {MODEL} \\\n"
                "  --max-num-seqs 64 \\\n  --port 8080 > /var/log/vllm.log &\nwait",
            ],
            [],
        ),
    ],
)
def test_every_common_launch_form(command, args):
    parsed = parse_engine_args(command, args)
    assert parsed is not None, (command, args)
    assert launches_vllm(command, args)
    assert (parsed.model, parsed.max_num_seqs, parsed.port) == (MODEL, 64, 8080)
    assert parsed.explicit[-2:] == ["--max-num-seqs", "--port"]


def test_shell_script_raw_is_the_vllm_command_alone():
    parsed = parse_engine_args(
        ["/bin/sh", "-c"], [f"huggingface-cli login --token hf_secret && exec vllm serve {MODEL} --port 8080"]
    )
    assert parsed is not None
    assert parsed.raw == ["vllm", "serve", MODEL, "--port", "8080"]


def test_positional_model_wins_over_flag_and_booleans_take_no_value():
    assert parse_engine_args(["vllm", "serve", "org/a", "--model", "org/b"], []).model == "org/a"
    assert parse_engine_args(["vllm", "serve", "--model", "org/b", "--port", "8001"], []).model == "org/b"
    parsed = parse_engine_args(
        ["vllm", "serve", "--trust-remote-code", "--enable-prefix-caching", "org/a", "-tp", "2"], []
    )
    assert (parsed.model, parsed.enable_prefix_caching, parsed.tensor_parallel_size) == ("org/a", True, 2)
    # the api_server module has no positional model
    assert parse_engine_args(["python3", "-m", "vllm.entrypoints.openai.api_server", "org/a"], []).model is None


@pytest.mark.parametrize(
    ("flags", "chunked", "prefix"),
    [
        (["--enable-chunked-prefill"], True, None),
        (["--no-enable-chunked-prefill"], False, None),
        (["--no_enable_chunked_prefill", "--enable-prefix-caching"], False, True),
        (["--enable-chunked-prefill", "False"], False, None),  # older vLLM: an optional true/false
        (["--enable-chunked-prefill=true", "--no-enable-prefix-caching"], True, False),
        (["--enable-prefix-caching", "--no-enable-prefix-caching"], None, False),
    ],
)
def test_boolean_flags(flags, chunked, prefix):
    parsed = parse_engine_args(["vllm", "serve", MODEL, *flags], [])
    assert (parsed.model, parsed.enable_chunked_prefill, parsed.enable_prefix_caching) == (MODEL, chunked, prefix)


def test_short_aliases_underscores_and_values():
    parsed = parse_engine_args(
        ["vllm", "serve", MODEL],
        [
            "-tp",
            "4",
            "-pp=2",
            "-dp",
            "2",
            "--gpu_memory_utilization",
            "0.85",
            "--max-model-len",
            "32k",
            "--max_num_batched_tokens=8192",
            "--block-size",
            "32",
            "--kv-cache-dtype",
            "fp8",
            "--distributed-executor-backend",
            "ray",
            "-q",
            "fp8",
            "-O3",
        ],
    )
    assert (parsed.tensor_parallel_size, parsed.pipeline_parallel_size, parsed.data_parallel_size) == (4, 2, 2)
    assert (parsed.gpu_memory_utilization, parsed.max_model_len, parsed.max_num_batched_tokens) == (0.85, 32000, 8192)
    assert (parsed.block_size, parsed.kv_cache_dtype, parsed.distributed_executor_backend) == (32, "fp8", "ray")
    assert parsed.explicit == [
        "--tensor-parallel-size",
        "--pipeline-parallel-size",
        "--data-parallel-size",
        "--gpu-memory-utilization",
        "--max-model-len",
        "--max-num-batched-tokens",
        "--block-size",
        "--kv-cache-dtype",
        "--distributed-executor-backend",
        "--quantization",
        "--compilation-config",
    ]


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("8192", 8192),
        ("32k", 32000),
        ("32K", 32768),
        ("25.6k", 25600),
        ("1M", 2**20),
        ("auto", None),
        ("-1", None),
        ("1.5K", None),
    ],
)
def test_human_readable_token_counts(text, tokens):
    assert parse_engine_args(["vllm", "serve", MODEL, "--max-model-len", text], []).max_model_len == tokens


def test_the_last_of_repeated_flags_wins():
    parsed = parse_engine_args(["vllm", "serve", MODEL, "--port", "8000", "--max-num-seqs", "8", "--port", "9000"], [])
    assert parsed.port == 9000
    assert parsed.explicit == ["--port", "--max-num-seqs"]


def test_values_known_only_at_run_time_are_unknown():
    parsed = parse_engine_args(
        ["vllm", "serve", "$(MODEL_ID)"],
        [
            "--tensor-parallel-size",
            "$(NUM_GPUS)",
            "--port",
            "$(PORT)",
            "--gpu-memory-utilization",
            "${GMU}",
            "--max-num-seqs",
            "many",
        ],
    )
    assert parsed.model == "$(MODEL_ID)"
    assert (parsed.tensor_parallel_size, parsed.port, parsed.gpu_memory_utilization, parsed.max_num_seqs) == (
        None,
        None,
        None,
        None,
    )
    assert parsed.pipeline_parallel_size == 1  # not given: vLLM's fixed default
    shell = parse_engine_args(["/bin/sh", "-c", 'vllm serve "$MODEL" --max-model-len "$MAX_LEN" -tp ${TP:-1}'], [])
    assert (shell.model, shell.max_model_len, shell.tensor_parallel_size) == ("$MODEL", None, None)


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ([], []),
        (["python3", "app.py"], ["--model", MODEL]),
        (["nginx", "-g", "daemon off;"], []),
        (["ray", "start", "--head", "--block"], []),
        (["/bin/sh", "-c", "ray start --head --dashboard-host=0.0.0.0 --block"], []),
        (["python3", "-m", "vllm.entrypoints.api_server", "--model", MODEL], []),  # the demo server, not the OpenAI one
        (["vllm", "bench", "serve", "--model", MODEL], []),
        (["bash", "/scripts/start-vllm.sh"], []),
        (["sh", "-c"], []),
        (["python3", "-c", "import vllm"], []),
        ([], ["--model", MODEL, "--port", "8000"]),  # image entrypoint unknown
    ],
)
def test_not_vllm_openai_server(command, args):
    assert parse_engine_args(command, args) is None
    assert not launches_vllm(command, args)


def test_image_entrypoint_when_command_is_empty():
    parsed = parse_engine_args([], ["--model", MODEL, "--max-num-seqs", "32"], image="vllm/vllm-openai:v0.10.1")
    assert (parsed.model, parsed.max_num_seqs) == (MODEL, 32)
    assert parse_engine_args([], [MODEL], image="registry.local:5000/mirror/vllm-openai@sha256:0123abcd").model == MODEL
    assert parse_engine_args([], ["--model", MODEL], image="ghcr.io/ggml-org/llama.cpp:server") is None
    # an explicit command replaces the image's entrypoint
    assert parse_engine_args(["python3", "serve.py"], ["--model", MODEL], image="vllm/vllm-openai:latest") is None


def test_secrets_are_redacted_in_raw():
    parsed = parse_engine_args(
        [
            "vllm",
            "serve",
            MODEL,
            "--api-key",
            "sk-one",
            "sk-two",
            "--hf-token",
            "hf_abc",
            "--api_key=sk-three",
            "--max-num-batched-tokens",
            "8192",
            "--tokenizer",
            "org/tok",
            "--ssl-keyfile",
            "/tls/key.pem",
            "--client-secret=s3cret",
            "--db-password",
            "pw",
            "--port",
            "8000",
        ],
        [],
    )
    assert parsed.raw == [
        "vllm",
        "serve",
        MODEL,
        "--api-key",
        REDACTED,
        REDACTED,
        "--hf-token",
        REDACTED,
        f"--api_key={REDACTED}",
        "--max-num-batched-tokens",
        "8192",
        "--tokenizer",
        "org/tok",
        "--ssl-keyfile",
        "/tls/key.pem",
        f"--client-secret={REDACTED}",
        "--db-password",
        REDACTED,
        "--port",
        "8000",
    ]
    assert not any("sk-" in word or "hf_abc" in word or "s3cret" in word for word in parsed.raw)
    # the secret flags are still read as flags: the model and port are right
    assert (parsed.model, parsed.port, parsed.max_num_batched_tokens) == (MODEL, 8000, 8192)


def test_double_dash_ends_the_options():
    parsed = parse_engine_args(["vllm", "serve", "--port", "8001", "--", MODEL], [])
    assert (parsed.model, parsed.port) == (MODEL, 8001)


def test_unbalanced_quotes_in_a_script_do_not_raise():
    parsed = parse_engine_args(["sh", "-c", f"vllm serve {MODEL} --port 8002 --chat-template 'unclosed"], [])
    assert (parsed.model, parsed.port) == (MODEL, 8002)
