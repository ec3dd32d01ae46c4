"""REAL services on loopback for the live tests: a Ray head, a Prometheus with backfilled history,
and the vLLM stand-in (tests/standin). tests/live/conftest.py wraps them in fixtures; the Ray bench
starts a head with the same code.

Only processes started here are stopped here, by pid / process group; nothing is killed by name
(`ray stop` would take down every Ray on the machine, so the head runs under `ray start --block`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LOOPBACK = "127.0.0.1"
RAY_NAMESPACE = "llmdiag-live"
RAY_DRIVER = Path(__file__).with_name("ray_driver.py")
STANDIN = REPO / "tests" / "standin" / "vllm_standin.py"
STANDIN_MODULE = "vllm.entrypoints.openai.api_server"  # how the recorded servers were started
VLLM_RECORDINGS = REPO / "fixtures" / "real" / "vllm-cpu"
SERVED_MODEL = "tiny-llama"  # --served-model-name of the recorded servers
DCGM_GPU_UUID = "GPU-0db5a9f0-15de-450f-d9e4-1d3a34348673"  # our H200 (shared/reference/gpu/h200-live)


class ServiceUnavailable(Exception):
    """The binary a service needs is not installed here; the message says which."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def http_get(url: str, timeout_s: float = 5.0, headers: dict[str, str] | None = None) -> tuple[int | None, bytes]:
    """(status, body); status None when nothing answered."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=timeout_s) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, OSError):
        return None, b""


def wait_until(
    what: str,
    ready: Callable[[], bool],
    timeout_s: float,
    proc: subprocess.Popen | None = None,
    log: Path | None = None,
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ready():
            return
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.25)
    tail = log.read_text(errors="replace")[-3000:] if log is not None and log.exists() else ""
    exited = f" (exited with {proc.returncode})" if proc is not None and proc.poll() is not None else ""
    raise RuntimeError(f"{what} not ready after {timeout_s:g}s{exited}\n{tail}")


def stop_process_group(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM the group a fixture started (start_new_session=True), SIGKILL what is left after grace_s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(10)


# --------------------------------------------------------------------------- Ray


@dataclass(frozen=True)
class RayHead:
    dashboard_url: str
    gcs_address: str
    namespace: str
    temp_dir: Path


def _dashboard_json(url: str) -> dict:
    status, body = http_get(url)
    if status != 200:
        return {}
    try:
        answer = json.loads(body)
    except ValueError:
        return {}
    return answer if isinstance(answer, dict) else {}


def _listed(url: str) -> list[dict]:
    return ((_dashboard_json(url).get("data") or {}).get("result") or {}).get("result") or []


def _workload_settled(dashboard: str) -> bool:
    actors = {a.get("name"): a.get("state") for a in _listed(f"{dashboard}/api/v0/actors?detail=1")}
    groups = {
        g.get("name"): (g.get("stats") or {}).get("scheduling_state")
        for g in _listed(f"{dashboard}/api/v0/placement_groups?detail=1")
    }
    demands = (_dashboard_json(f"{dashboard}/api/cluster_status").get("data") or {}).get("clusterStatus") or {}
    load = demands.get("loadMetricsReport") or {}
    return (
        actors.get("gpu1_actor") == "ALIVE"
        and actors.get("gpu4_actor_infeasible") == "PENDING_CREATION"
        and groups.get("pg_infeasible_4gpu") == "INFEASIBLE"
        and bool(load.get("resourceDemand"))
        and bool(load.get("pgDemand"))
    )


def _run_driver(python: Path, head: RayHead, env: dict[str, str]) -> None:
    driver = subprocess.run(
        [str(python), str(RAY_DRIVER), head.gcs_address, head.namespace],
        env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    if driver.returncode != 0:
        raise RuntimeError(
            f"Ray driver failed ({driver.returncode}):\n{driver.stdout[-2000:]}\n{driver.stderr[-3000:]}"
        )


def _leftover_pids(temp_dir: Path) -> list[int]:
    """Processes of our head that escaped its group: their argv names our own temp dir."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if str(temp_dir).encode() in cmdline:
            found.append(int(entry))
    return found


def ray_python() -> Path:
    """The Ray virtualenv's python (.ci/run sets LLMDIAG_RAY_PYTHON); raises ServiceUnavailable."""
    python = Path(os.environ.get("LLMDIAG_RAY_PYTHON", "/opt/llmdiag-ray/bin/python"))
    if not (python.parent / "ray").is_file():
        raise ServiceUnavailable(f"no Ray CLI next to {python} (set LLMDIAG_RAY_PYTHON to a python with ray[default])")
    return python


def ray_env() -> dict[str, str]:
    """Without this Ray rewrites 127.0.0.1 to the host's address; with it every listener stays on loopback
    and clients (`ray status --address 127.0.0.1:P`) connect there too. The Ray virtualenv comes first on
    PATH, as Ray's own images have it: a job's `python` entrypoint is Ray's python."""
    path = f"{ray_python().parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "PATH": path}


@contextmanager
def running_ray_head(with_workload: bool = True, num_gpus: int = 2, node_ip: str = LOOPBACK) -> Iterator[RayHead]:
    """`ray start --head` on loopback (2 CPUs, `num_gpus` fake GPUs), with ray_driver.py's detached workload.
    `node_ip`: where its GCS listens (any address of 127.0.0.0/8; the dashboard stays on 127.0.0.1)."""
    python = ray_python()
    ray_cli = python.parent / "ray"
    # Ray's unix socket paths live under the temp dir and must stay short (108 bytes).
    temp_dir = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))
    log = temp_dir / "ray-start.log"
    gcs_port, dashboard_port = free_port(), free_port()
    env = ray_env()
    argv = [
        str(ray_cli), "start", "--head", "--block",
        f"--node-ip-address={node_ip}", f"--port={gcs_port}",
        "--num-cpus=2", f"--num-gpus={num_gpus}",
        "--include-dashboard=true", f"--dashboard-host={LOOPBACK}", f"--dashboard-port={dashboard_port}",
        f"--ray-client-server-port={free_port()}", f"--dashboard-agent-listen-port={free_port()}",
        "--disable-usage-stats", f"--temp-dir={temp_dir}",
    ]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    head = RayHead(f"http://{LOOPBACK}:{dashboard_port}", f"{node_ip}:{gcs_port}", RAY_NAMESPACE, temp_dir)
    try:
        wait_until("Ray dashboard", lambda: http_get(f"{head.dashboard_url}/api/version")[0] == 200, 120, proc, log)
        if with_workload:
            _run_driver(python, head, env)
            wait_until(
                "Ray workload (actors, placement group, demands)",
                lambda: _workload_settled(head.dashboard_url),
                90,
                proc,
                log,
            )
        yield head
    finally:
        stop_process_group(proc, grace_s=30)
        for pid in _leftover_pids(temp_dir):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(temp_dir, ignore_errors=True)


# --------------------------------------------------------------------------- vLLM stand-in


@dataclass(frozen=True)
class Recorded:
    """One server of a real recorded bundle (fixtures/real/vllm-cpu/<scenario>/vllm/<name>.*)."""

    scenario: str
    prefix: Path  # .../vllm/<name>

    def file(self, suffix: str) -> Path:
        return self.prefix.with_name(f"{self.prefix.name}.{suffix}")

    def scrapes(self) -> list[bytes]:
        files = [self.file("metrics.txt")]
        while (nxt := self.file(f"metrics.{len(files)}.txt")).is_file():
            files.append(nxt)
        return [f.read_bytes() for f in files]

    def engine_flags(self) -> list[str]:
        """The recorded server's flags after `-m vllm.entrypoints.openai.api_server`, less --host/--port."""
        argv = self.file("cmdline.txt").read_text().splitlines()
        flags = argv[argv.index(STANDIN_MODULE) + 1 :]
        kept: list[str] = []
        skip = False
        for arg in flags:
            if skip:
                skip = False
            elif arg in ("--host", "--port"):
                skip = True
            else:
                kept.append(arg)
        return kept


def recorded(scenario: str) -> Recorded:
    [cmdline] = (VLLM_RECORDINGS / scenario / "vllm").glob("*.cmdline.txt")
    return Recorded(scenario, cmdline.with_name(cmdline.name.removesuffix(".cmdline.txt")))


@dataclass(frozen=True)
class StandIn:
    url: str
    port: int
    pid: int
    argv: list[str]
    recording: Recorded

    @property
    def name(self) -> str:
        """The bundle file stem the collector gives a --vllm-url server."""
        return f"{LOOPBACK}_{self.port}"


@contextmanager
def standin_launcher(work: Path) -> Iterator[Callable[..., StandIn]]:
    """Yields start(scenario, health=None, extra_flags=()) -> StandIn; all are stopped at exit.

    The stand-in replays the real recording of `scenario` and runs under the recorded server's own
    command line, `<python> -m vllm.entrypoints.openai.api_server <its flags> --host 127.0.0.1 --port P`
    (the module name resolves to tests/standin/vllm_standin.py through a shim on PYTHONPATH), so
    reading its argv from /proc finds the engine flags the real server had.
    """
    started: list[subprocess.Popen] = []
    shim = work / "shim"
    package = shim.joinpath(*STANDIN_MODULE.split(".")[:-1])
    package.mkdir(parents=True)
    folder = package
    while folder != shim:
        (folder / "__init__.py").touch()
        folder = folder.parent
    (package / "api_server.py").symlink_to(STANDIN)

    def start(
        scenario: str = "kv-cache-small",
        health: int | None = None,
        extra_flags: tuple[str, ...] = (),
        port: int | None = None,
    ) -> StandIn:
        """`port`: the port a stopped stand-in had, for a server that comes back with other answers."""
        recording = recorded(scenario)
        port = port or free_port()
        argv = [sys.executable, "-m", STANDIN_MODULE, *recording.engine_flags(), *extra_flags,
                "--host", LOOPBACK, "--port", str(port)]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(shim), "LLMDIAG_STANDIN_RECORDING": str(recording.prefix)}
        if health is not None:
            env["LLMDIAG_STANDIN_HEALTH"] = str(health)
        log = work / f"standin-{port}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        started.append(proc)
        url = f"http://{LOOPBACK}:{port}"
        wait_until("vLLM stand-in", lambda: http_get(f"{url}/v1/models")[0] == 200, 20, proc, log)
        return StandIn(url, port, proc.pid, argv, recording)

    try:
        yield start
    finally:
        for proc in started:
            stop_process_group(proc, grace_s=5)


# --------------------------------------------------------------------------- Prometheus


@dataclass(frozen=True)
class PromServer:
    url: str
    history_end: float  # the newest backfilled sample (unix seconds)
    history_start: float


@dataclass(frozen=True)
class BasicAuth:
    """Prometheus' own basic auth (--web.config.file), for the tests of --prometheus-user."""

    user: str
    password: str

    def header(self) -> str:
        import base64

        return "Basic " + base64.b64encode(f"{self.user}:{self.password}".encode()).decode()


PROMETHEUS_BASIC_AUTH = BasicAuth("llmdiag", "bcrypt-checked-pw")
HISTORY_S = 30 * 60
HISTORY_STEP_S = 15
VLLM_NAMESPACE = "llm-serving"  # the namespace of the server going into saturation
OTHER_NAMESPACE = "other-team"  # a calm server of another team, on the same Prometheus
VLLM_LABELS = (
    f'engine="0",instance="{LOOPBACK}:8000",job="vllm",model_name="{SERVED_MODEL}",namespace="{VLLM_NAMESPACE}"'
)
OTHER_VLLM_LABELS = (
    f'engine="0",instance="{LOOPBACK}:8001",job="vllm",model_name="{SERVED_MODEL}",namespace="{OTHER_NAMESPACE}"'
)
OTHER_WAITING = 7
DCGM_LABELS = f'UUID="{DCGM_GPU_UUID}",gpu="0",instance="{LOOPBACK}:9400",job="dcgm-exporter"'
TTFT_BUCKETS = ("0.1", "0.25", "0.5", "1.0", "2.5", "5.0", "10.0", "+Inf")


class OpenMetrics:
    """Samples grouped by metric family, as `promtool tsdb create-blocks-from openmetrics` reads them."""

    def __init__(self) -> None:
        self._families: dict[tuple[str, str], list[str]] = {}

    def sample(self, family: str, kind: str, name: str, labels: str, value: float, t: int) -> None:
        # repr: every digit of a Unix time (process_start_time_seconds), where :g would keep six
        self._families.setdefault((family, kind), []).append(f"{name}{{{labels}}} {float(value)!r} {t}")

    def text(self) -> str:
        lines: list[str] = []
        for (family, kind), samples in self._families.items():
            lines.append(f"# TYPE {family} {kind}")
            lines.extend(samples)
        return "\n".join([*lines, "# EOF"]) + "\n"


def history_openmetrics(end: int) -> str:
    """30 minutes of a vLLM server going into saturation, and its GPU, as OpenMetrics for promtool.

    Waiting requests climb 0 -> 20, KV cache use 0.30 -> 0.99, preemptions start in the last 10
    minutes (2 per sample), TTFT moves from the 0.5 s bucket to the 5 s bucket; the GPU reports
    Xid 79 in the last 5 minutes, at 100 % utilization and 140000 MiB used. Another team's server,
    in another namespace, has 7 requests waiting and its KV cache half full all along.
    """
    times = list(range(end - HISTORY_S, end + 1, HISTORY_STEP_S))
    n = len(times) - 1
    history = OpenMetrics()
    sample = history.sample

    preemptions = 0
    ttft_fast = ttft_slow = 0
    for i, t in enumerate(times):
        late = i >= n * 2 // 3
        preemptions += 2 if late else 0
        ttft_fast += 0 if late else 3
        ttft_slow += 3 if late else 0
        sample("vllm:num_requests_waiting", "gauge", "vllm:num_requests_waiting", VLLM_LABELS, round(20 * i / n), t)
        sample(
            "vllm:kv_cache_usage_perc",
            "gauge",
            "vllm:kv_cache_usage_perc",
            VLLM_LABELS,
            round(0.30 + 0.69 * i / n, 3),
            t,
        )
        sample("vllm:num_requests_waiting", "gauge", "vllm:num_requests_waiting", OTHER_VLLM_LABELS, OTHER_WAITING, t)
        sample("vllm:kv_cache_usage_perc", "gauge", "vllm:kv_cache_usage_perc", OTHER_VLLM_LABELS, 0.5, t)
        sample("vllm:num_preemptions", "counter", "vllm:num_preemptions_total", VLLM_LABELS, preemptions, t)
        for le in TTFT_BUCKETS:
            count = ttft_fast * (float(le) >= 0.5) + ttft_slow * (float(le) >= 5.0)
            sample("vllm:time_to_first_token_seconds", "histogram", "vllm:time_to_first_token_seconds_bucket",
                   f'{VLLM_LABELS},le="{le}"', count, t)  # fmt: skip
        sample("vllm:time_to_first_token_seconds", "histogram", "vllm:time_to_first_token_seconds_count", VLLM_LABELS,
               ttft_fast + ttft_slow, t)  # fmt: skip
        sample("vllm:time_to_first_token_seconds", "histogram", "vllm:time_to_first_token_seconds_sum", VLLM_LABELS,
               0.4 * ttft_fast + 4.0 * ttft_slow, t)  # fmt: skip
        sample("DCGM_FI_DEV_XID_ERRORS", "gauge", "DCGM_FI_DEV_XID_ERRORS", DCGM_LABELS, 79 if i >= n - 20 else 0, t)
        sample("DCGM_FI_DEV_GPU_UTIL", "gauge", "DCGM_FI_DEV_GPU_UTIL", DCGM_LABELS, 100, t)
        sample("DCGM_FI_DEV_FB_USED", "gauge", "DCGM_FI_DEV_FB_USED", DCGM_LABELS, 140000, t)
    return history.text()


def bcrypt_hash(password: str) -> str:
    """The bcrypt hash Prometheus' web config wants, from libcrypt (Python's crypt module, 3.12's last)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            import crypt
        except ImportError as e:
            raise ServiceUnavailable("no crypt module to make a bcrypt hash for Prometheus' basic auth") from e
    if crypt.METHOD_BLOWFISH not in crypt.methods:
        raise ServiceUnavailable("this libcrypt has no bcrypt for Prometheus' basic auth")
    return crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16))


@contextmanager
def running_prometheus(
    work: Path, history: Callable[[int], str] | None = None, basic_auth: BasicAuth | None = None
) -> Iterator[PromServer]:
    """A real Prometheus on loopback whose TSDB holds `history(end)` (default history_openmetrics), backfilled
    by promtool; with `basic_auth`, Prometheus itself asks for it (--web.config.file)."""
    prometheus_bin, promtool = Path("/usr/bin/prometheus"), Path("/usr/bin/promtool")
    if not (prometheus_bin.is_file() and promtool.is_file()):
        raise ServiceUnavailable("no /usr/bin/prometheus and /usr/bin/promtool (apt-get install prometheus)")
    end = int(time.time()) - 60  # a minute back, so that "now" in the test is after the newest sample
    (work / "history.om").write_text((history or history_openmetrics)(end))
    data = work / "data"
    subprocess.run([str(promtool), "tsdb", "create-blocks-from", "openmetrics", str(work / "history.om"), str(data)],
                   check=True, capture_output=True, timeout=120)  # fmt: skip
    (work / "prometheus.yml").write_text("global:\n  scrape_interval: 15s\n")  # no scrape targets: history only
    port = free_port()
    log = work / "prometheus.log"
    argv = [str(prometheus_bin), f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={data}",
            f"--web.listen-address={LOOPBACK}:{port}"]  # fmt: skip
    ready_headers = {}
    if basic_auth is not None:
        (work / "web.yml").write_text(f"basic_auth_users:\n  {basic_auth.user}: '{bcrypt_hash(basic_auth.password)}'\n")
        argv.append(f"--web.config.file={work / 'web.yml'}")
        ready_headers["Authorization"] = basic_auth.header()
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://{LOOPBACK}:{port}"
    try:
        wait_until("Prometheus", lambda: http_get(f"{url}/-/ready", headers=ready_headers)[0] == 200, 60, proc, log)
        yield PromServer(url, float(end), float(end - HISTORY_S))
    finally:
        stop_process_group(proc, grace_s=10)
