"""What a pod's containers say about its lifecycle: probes of the vLLM container, crash loops and
their causes, image pulls, volume mounts, and GPU environment variables set without a GPU request."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from diag.facts.common import aged
from diag.parsers import workloads
from diag.parsers.decisive import Decisive, decisive_line
from diag.snapshot.clock import Clock
from diag.snapshot.model import Container, Event, Pod, Probe

# Paths vLLM's OpenAI server answers with 200 once the engine is up (vllm/entrypoints/openai/api_server.py);
# /health is the one that also turns 503 when the engine dies.
VLLM_HEALTH_PATH = "/health"
VLLM_READY_PATHS = ("/health", "/ping", "/v1/models", "/version", "/metrics")
IMAGE_PULL_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
GPU_VISIBILITY_ENV = ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
NO_GPU_VALUES = ("", "void", "none", "-1")  # values that hide every GPU from the container
LAST_LOG_LINES = 3


def vllm_container(pod: Pod) -> Container | None:
    """The container that runs vLLM's server (diag.parsers.workloads: the one join made its server's)."""
    found = workloads.vllm_container(pod)
    return found[0] if found else None


def probe_facts(container: Container, vllm_port: int | None) -> dict:
    """The vLLM container's probes, each with its port resolved and a one-line description. A probe the
    spec does not have is None with its `has_*` false; a port mismatch is None only when vLLM's port is."""
    probes = {p.kind: p for p in container.probes}
    readiness = probes.get("readiness")
    liveness = probes.get("liveness")
    readiness_port = _port_number(readiness, container) if readiness else None
    port_checked = readiness is not None and readiness.handler in ("httpGet", "tcpSocket")
    return {
        "has_liveness": liveness is not None,
        "has_readiness": readiness is not None,
        "has_startup": "startup" in probes,
        "liveness": _probe(liveness, container) if liveness else None,
        "readiness": _probe(readiness, container) if readiness else None,
        "startup": _probe(probes["startup"], container) if "startup" in probes else None,
        "liveness_budget_s": (
            liveness.initial_delay_seconds + liveness.period_seconds * liveness.failure_threshold if liveness else None
        ),
        # a named port the container does not declare resolves to nothing: the probe cannot succeed
        "readiness_port_mismatch": (
            (readiness_port != vllm_port if vllm_port is not None else None) if port_checked else False
        ),
        "readiness_path_unknown": (
            readiness is not None and readiness.handler == "httpGet" and readiness.path not in VLLM_READY_PATHS
        ),
    }


def _probe(probe: Probe, container: Container) -> dict:
    return {
        "handler": probe.handler,
        "path": probe.path,
        "port": probe.port,
        "port_number": _port_number(probe, container),
        "initial_delay_seconds": probe.initial_delay_seconds,
        "period_seconds": probe.period_seconds,
        "failure_threshold": probe.failure_threshold,
        "timeout_seconds": probe.timeout_seconds,
        "text": _probe_text(probe),
    }


def _port_number(probe: Probe, container: Container) -> int | None:
    if isinstance(probe.port, int):
        return probe.port
    if isinstance(probe.port, str):
        return int(probe.port) if probe.port.isdigit() else container.ports.get(probe.port)
    return None


def _probe_text(probe: Probe) -> str:
    target = {
        "httpGet": f"httpGet port {probe.port} path {probe.path or '/'}",
        "tcpSocket": f"tcpSocket port {probe.port}",
        "grpc": f"grpc port {probe.port}",
        "exec": "exec",
    }[probe.handler]
    return (
        f"{target}, initialDelaySeconds={probe.initial_delay_seconds}, periodSeconds={probe.period_seconds}, "
        f"failureThreshold={probe.failure_threshold}, timeoutSeconds={probe.timeout_seconds}"
    )


# --------------------------------------------------------------------------- crashes and start failures


def oom_killed(pod: Pod, clock: Clock) -> list[dict]:
    """Containers the kernel killed for their memory limit (lastState.terminated.reason OOMKilled), now:
    the kill is within the window (or of unknown age), or the container is still in its restart loop.
    One killed long ago and running since is history."""
    return [
        {
            "container": c.name,
            "memory_limit": c.limits.get("memory"),
            "memory_request": c.requests.get("memory"),
            "restarts": c.restart_count,
            "exit_code": c.last_exit_code,
            "state_reason": c.state_reason,
        }
        for c in pod.containers
        if c.last_terminated_reason == "OOMKilled"
        and (c.state_reason == "CrashLoopBackOff" or c.restart_count > 0)
        and (c.state_reason == "CrashLoopBackOff" or clock.current(c.last_finished_at))
    ]


def aged_terminations(pod: Pod, clock: Clock) -> list[dict]:
    """Containers' last failed terminations past the window, for the report's history."""
    return [
        item
        for c in pod.containers
        if c.last_terminated_reason not in (None, "Completed")
        for item in aged(
            f"{c.name}: terminated {c.last_terminated_reason} (exit code {c.last_exit_code})", c.last_finished_at, clock
        )
    ]


def image_pull_errors(pod: Pod, events: list[Event]) -> list[dict]:
    failures = [e.message for e in events if e.reason == "Failed" and e.message.startswith("Failed to pull image")]
    return [
        {
            "container": c.name,
            "image": c.image,
            "reason": c.state_reason,
            "message": failures[-1] if failures else c.state_message,
        }
        for c in pod.containers + pod.init_containers
        if c.state_reason in IMAGE_PULL_REASONS
    ]


# A container the kubelet could not create or start: its waiting reason, and the kubelet's words for why
CANNOT_START_REASONS = (
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "ContainerCannotRun",
    "PreStartHookError",
    "PostStartHookError",
)


def cannot_start(pod: Pod, events: list[Event]) -> list[dict]:
    """Containers, init containers included, that the kubelet cannot create or start (a Secret or
    ConfigMap key that does not exist, a command not found in the image, a hook that fails), each with
    the kubelet's words: the waiting state's message, else the pod's newest Failed event's."""
    failed = max((e for e in events if e.reason == "Failed"), key=lambda e: e.last_seen or "", default=None)
    found = []
    for c, init in [(c, False) for c in pod.containers] + [(c, True) for c in pod.init_containers]:
        if c.state != "waiting" or c.state_reason not in CANNOT_START_REASONS:
            continue
        message = c.state_message or (failed.message.removeprefix("Error: ") if failed else None)
        found.append({"container": c.name, "init": init, "reason": c.state_reason, "message": message})
    return found


def failed_mounts(events: list[Event]) -> list[str]:
    return [e.message for e in events if e.reason in ("FailedMount", "FailedAttachVolume")]


def crash_loops(pod: Pod, cause_signals: Sequence[str]) -> list[dict]:
    """Crash-looping containers, init containers included, not OOMKilled (K8S-210 names that), each with
    the known failure lines its current or previous log holds: the last line of each of `cause_signals`
    (the catalogue's signals that name why a container exits, diag.parsers.signals) it matched, else the
    decisive line of its log (diag.parsers.decisive) with the layer it points at. A rule that names such
    a cause explains the crash loop."""
    crashes = []
    for c in pod.containers + pod.init_containers:  # an init container that crash-loops keeps the pod from starting
        if c.state_reason != "CrashLoopBackOff" or c.last_terminated_reason == "OOMKilled":
            continue
        known = [c.log_signals[s][-1] for s in cause_signals if c.log_signals.get(s)]
        line = None if known else _decisive(_crashed_run_log(c))
        crashes.append(
            {
                "container": c.name,
                "restarts": c.restart_count,
                "exit_code": c.last_exit_code,
                "last_reason": c.last_terminated_reason,
                "last_lines": _last_lines(c.previous_logs or c.logs),
                "known_causes": known,
                "decisive": f"{line.line} ({line.layer or _program_layer(pod, c)} layer)" if line else None,
            }
        )
    return crashes


def unnamed_crashes(pod: Pod, cause_signals: Sequence[str], clock: Clock) -> dict[str, dict] | None:
    """The crashed containers (init containers included) whose logs no crash-cause signal matched, each
    with the decisive line of its crashed run's log (diag.parsers.decisive), by the layer that line
    points at (the first container for each): what names the cause when no rule knows its wording.
    Only crashed containers' logs are read, and only their tails; a crash past the history window, in a
    container running since, is history. None when such a container left no log in the bundle and none
    other had a decisive line."""
    found: list[dict[str, Any]] = []
    unread = False
    for c, init in [(c, False) for c in pod.containers] + [(c, True) for c in pod.init_containers]:
        if not _crashed(c, clock) or any(c.log_signals.get(s) for s in cause_signals):
            continue
        text = _crashed_run_log(c)
        if text is None:
            unread = True
            continue
        line = _decisive(text)
        if line is None:
            continue
        layer = line.layer or _program_layer(pod, c)
        found.append(
            {
                "container": c.name,
                "init": init,
                "restarts": c.restart_count,
                "exit_code": c.last_exit_code,
                "line": line.line,
                "kind": line.kind,
                "exception": line.exception,
                "family": line.family,
                "family_description": line.family_description,
                "fix": line.fix,
                "layer": layer,
                "placed_by": {
                    "family": f"its family ({line.family})",
                    "frames": "where its traceback's frames come from",
                }.get(line.placed_by or "", f"the program that logged it ({_program(pod, c)})"),
                "log": "previous" if c.previous_logs is not None else "current",
            }
        )
    if unread and not found:
        return None
    by_layer: dict[str, dict] = {}
    for crash in found:
        by_layer.setdefault(crash["layer"], crash)
    return by_layer


def _crashed(c: Container, clock: Clock) -> bool:
    """Exited on its own and restarted, or waits to: not OOMKilled (K8S-210) nor completed. A restart
    past the window, in a container running since, is history."""
    if c.last_terminated_reason in ("OOMKilled", "Completed"):
        return False
    return c.state_reason == "CrashLoopBackOff" or (
        c.restart_count > 0 and c.last_terminated_reason is not None and clock.current(c.last_finished_at)
    )


def _crashed_run_log(c: Container) -> str | None:
    """The log of the run that crashed: the one before the last restart when the bundle has it."""
    return c.previous_logs if c.previous_logs is not None else c.logs


@functools.lru_cache(maxsize=64)
def _decisive(text: str | None) -> Decisive | None:
    # crash_loops and unnamed_crashes read the same crashed logs, one in each half of a pod's facts
    return decisive_line(text)


def _program(pod: Pod, c: Container) -> str:
    if vllm_container(pod) is c:
        return "vLLM"
    return "a Ray node" if workloads.is_ray_pod(pod) else f"container {c.name}"


def _program_layer(pod: Pod, c: Container) -> str:
    """Where a line no frame or family places points: the program that wrote it."""
    if vllm_container(pod) is c:
        return "vllm"
    return "ray" if workloads.is_ray_pod(pod) else "kubernetes"


def _last_lines(text: str | None) -> str | None:
    """The log's last lines as one evidence line, " | " between them."""
    if text is None:
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(lines[-LAST_LOG_LINES:])


# --------------------------------------------------------------------------- GPUs outside the device plugin


def gpu_env_without_request(pod: Pod) -> list[str]:
    """`container: VAR=value` for each GPU-visibility variable set in a pod that requests no GPU device.
    Such a container bypasses the device plugin: it sees every GPU of the node (the NVIDIA runtime
    honours the variable) while the scheduler counts those GPUs as free, or it sees none at all."""
    return [
        f"{c.name}: {name}={c.env[name]}"
        for c in pod.containers
        for name in GPU_VISIBILITY_ENV
        if name in c.env and c.env[name].strip().lower() not in NO_GPU_VALUES
    ]
