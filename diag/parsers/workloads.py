"""What a pod's containers run, read from what they run: vLLM's OpenAI server, a Ray head or worker.

An image's name proves little: `registry.corp.example/ml/llm-serve:2.3` may start vLLM from its
ENTRYPOINT with no command in the pod spec. A container runs vLLM, on the first evidence that holds
(`how`, strongest first):

- "command": its command/args start the server (`vllm serve`, `python -m vllm.entrypoints.openai.api_server`,
  also inside `sh -c`);
- "image": no command, and the image is vLLM's own (vllm/vllm-openai), whose entrypoint is the server;
- "args": no launch in sight (the image's entrypoint, or a wrapper script), but the arguments hold a flag
  only vLLM's server takes (--gpu-memory-utilization, --max-model-len, ...), or --model on a container that
  declares port 8000, vLLM's default;
- "env": it sets an environment variable vLLM itself reads (VLLM_WORKER_MULTIPROC_METHOD, VLLM_USE_V1, ...);
- "log": its log holds a line only vLLM prints (the log signal `vllm_process`, found by the loader's one
  scan of the log: start-up lines, vLLM's server or engine files in a traceback);
- "files": a server's own files in the bundle (vllm/<pod>.metrics.txt, ...) or its `vllm:` series in
  Prometheus name the pod, which is no Ray node and has that one container.

Not evidence: the image's name otherwise; port 8000 alone (Triton, trtllm-serve and many web apps
listen there); a VLLM_* name vLLM does not read (VLLM_URL, VLLM_ENDPOINT, VLLM_MODEL: a client's
settings for reaching a server), VLLM_API_KEY (a client sends the key under that name too) and
VLLM_PORT (Kubernetes sets it in every pod of a namespace with a Service named vllm). A command that
starts another server (SGLang, TGI, Triton, TensorRT-LLM, LMDeploy, ...) is that server whatever its
flags or env; a fork that keeps vLLM's flags (Aphrodite) is taken for vLLM when its program is not
in sight. A Ray head or worker runs vLLM, if at all, inside Ray actors: its env and its log (which
carries the actors' lines) do not make the container a server; only a command starting vLLM does.

A Ray node is recognised from its KubeRay labels (diag.parsers.kubernetes) or, without them, from a
`ray start` command (`--head`: head; `--address`, or RAY_ADDRESS set: worker).
"""

from __future__ import annotations

import functools
from pathlib import PurePosixPath

from diag.parsers import engine_args
from diag.snapshot.model import Container, EngineArgs, Pod

VLLM_LOG_SIGNAL = "vllm_process"  # rules/signals/vllm.yaml
VLLM_DEFAULT_PORT = 8000

# Flags of vLLM's server that no other serving engine's command line takes under that name.
_VLLM_ONLY_FLAGS = frozenset(
    {
        "--gpu-memory-utilization",
        "--max-model-len",
        "--max-num-seqs",
        "--max-num-batched-tokens",
        "--enforce-eager",
        "--enable-prefix-caching",
        "--enable-chunked-prefill",
        "--swap-space",
        "--distributed-executor-backend",
        "--max-seq-len-to-capture",
    }
)
# vLLM's, but an app's command line may take it too: evidence only beside port 8000. (--dtype, --quantization,
# --tensor-parallel-size, --served-model-name: TGI and SGLang take them as well.)
_VLLM_COMMON_FLAGS = frozenset({"--model"})
# Environment variables vLLM reads (vllm/envs.py) that only a process running vLLM sets.
_VLLM_ENV = frozenset(
    {
        "VLLM_WORKER_MULTIPROC_METHOD",
        "VLLM_USE_V1",
        "VLLM_ATTENTION_BACKEND",
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN",
        "VLLM_LOGGING_LEVEL",
        "VLLM_CONFIGURE_LOGGING",
        "VLLM_LOGGING_CONFIG_PATH",
        "VLLM_LOGGING_PREFIX",
        "VLLM_LOG_STATS_INTERVAL",
        "VLLM_USE_MODELSCOPE",
        "VLLM_CACHE_ROOT",
        "VLLM_CONFIG_ROOT",
        "VLLM_ENGINE_ITERATION_TIMEOUT_S",
        "VLLM_RPC_TIMEOUT",
        "VLLM_USE_TRITON_FLASH_ATTN",
        "VLLM_FLASH_ATTN_VERSION",
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING",
        "VLLM_NCCL_SO_PATH",
        "VLLM_SKIP_P2P_CHECK",
        "VLLM_DISABLE_COMPILE_CACHE",
        "VLLM_ENABLE_V1_MULTIPROCESSING",
        "VLLM_TRACE_FUNCTION",
        "VLLM_HOST_IP",
        "VLLM_NO_USAGE_STATS",
        "VLLM_DO_NOT_TRACK",
        "VLLM_TORCH_PROFILER_DIR",
        "VLLM_USE_FLASHINFER_SAMPLER",
        "VLLM_PP_LAYER_PARTITION",
        "VLLM_CPU_KVCACHE_SPACE",
        "VLLM_MODEL_REDIRECT_PATH",
        "VLLM_RINGBUFFER_WARNING_INTERVAL",
    }
)


def vllm_recognition(container: Container, ray_pod: bool = False) -> str | None:
    """How the container shows it runs vLLM's server ("command", "image", "args", "env", "log"; the
    module's docstring), or None. `ray_pod`: the pod is a Ray head or worker (labels or command)."""
    how = _spec_how(container, ray_pod)
    if how is None and not ray_pod and container.log_signals.get(VLLM_LOG_SIGNAL) and not _starts_ray(container):
        return "log"
    return how


def _spec_how(container: Container, ray_pod: bool) -> str | None:
    """`vllm_recognition` from the container's spec alone: "command", "image", "args", "env" or None."""
    env = frozenset(name for name in container.env if name in _VLLM_ENV)
    port_8000 = VLLM_DEFAULT_PORT in container.ports.values()
    return _spec_recognition(tuple(container.command), tuple(container.args), container.image, env, port_8000, ray_pod)


@functools.lru_cache(maxsize=4096)
def _spec_recognition(
    command: tuple[str, ...], args: tuple[str, ...], image: str, env: frozenset[str], port_8000: bool, ray_pod: bool
) -> str | None:
    if engine_args.launches_vllm(list(command), list(args)):
        return "command"
    if not command and image and engine_args.is_vllm_openai_image(image):
        return "image"
    if ray_pod or engine_args.runs_other_server(list(command), list(args)):
        return None
    flags = engine_args.entrypoint_flags(list(command), list(args))
    if flags & _VLLM_ONLY_FLAGS or (flags & _VLLM_COMMON_FLAGS and port_8000):
        return "args"
    return "env" if env else None


def spec_engine_args(container: Container, ray_pod: bool) -> EngineArgs | None:
    """The engine args the container's spec shows, read when its pod is parsed (`Container.engine_args`):
    all of them for a command or vLLM's image, the flags given for "args" (and for "env" when it has
    arguments), None (unknown) otherwise, a container recognised from its log or files among them.
    `ray_pod`: the pod is a Ray head or worker."""
    how = _spec_how(container, ray_pod)
    if how in ("command", "image"):
        return engine_args.parse_engine_args(container.command, container.args, container.image)
    if how in ("args", "env"):
        return engine_args.parse_entrypoint_args(container.command, container.args)
    return None


def vllm_server_port(pod: Pod) -> tuple[Container, int] | None:
    """The container of the vLLM OpenAI server this pod runs and the port it serves on: its --port, else
    the port the container declares (a custom image's entrypoint), else vLLM's default; None when the
    pod runs none."""
    found = vllm_container(pod)
    if found is None:
        return None
    container = found[0]
    engine = container.engine_args
    if engine is not None and engine.port is not None:
        return container, engine.port
    return container, next(iter(container.ports.values()), VLLM_DEFAULT_PORT)


def vllm_container(pod: Pod) -> tuple[Container, str] | None:
    """The container that runs vLLM's server and how it shows it: the first recognised from its spec,
    else the first recognised from its log, else ("files") the only container of a pod that is no Ray
    node and that a server's own files or Prometheus series name (pod.vllm_server, set by join: its
    /metrics answered with vLLM's series)."""
    ray_pod = is_ray_pod(pod)
    found = [(c, how) for c in pod.containers if (how := vllm_recognition(c, ray_pod)) is not None]
    spec_or_log = next((f for f in found if f[1] != "log"), None) or next(iter(found), None)
    if spec_or_log is None and pod.vllm_server is not None and not ray_pod and len(pod.containers) == 1:
        return pod.containers[0], "files"
    return spec_or_log


def is_ray_pod(pod: Pod) -> bool:
    return pod.ray_cluster is not None or pod.ray_node_type is not None


# --------------------------------------------------------------------------- Ray


def ray_node_type(containers: list[Container]) -> str | None:
    """ "head" or "worker" when a container's command starts a Ray node (`ray start`), else None."""
    return next((role for c in containers if (role := _ray_role(c)) is not None), None)


def _starts_ray(container: Container) -> bool:
    return _ray_start_words(tuple(container.command), tuple(container.args)) is not None


def _ray_role(container: Container) -> str | None:
    words = _ray_start_words(tuple(container.command), tuple(container.args))
    if words is None:
        return None
    if "--head" in words:
        return "head"
    if any(w == "--address" or w.startswith("--address=") for w in words) or "RAY_ADDRESS" in container.env:
        return "worker"
    return None


@functools.lru_cache(maxsize=4096)
def _ray_start_words(command: tuple[str, ...], args: tuple[str, ...]) -> tuple[str, ...] | None:
    for words in engine_args.simple_commands([*command, *args]):
        if PurePosixPath(words[0]).name == "ray" and words[1:2] == ["start"]:
            return tuple(words)
    return None
