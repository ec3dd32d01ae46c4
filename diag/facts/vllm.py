"""Facts for the vllm layer: one subject per vLLM server, its metrics read under old and new names."""

from __future__ import annotations

import re

from diag.core.shell import word
from diag.facts.common import link, plain
from diag.facts.kubernetes_containers import vllm_container
from diag.facts.replica_restarts import WindowEvents, restart_facts
from diag.facts.vllm_engine_death import dead_engine_serving
from diag.facts.vllm_episodes import ScrapeView, episode_facts, per_scrape_total, queue_per_scrape
from diag.link.prometheus_join import history_window
from diag.parsers.logs import gpu_memory_shortfall
from diag.parsers.signals import looked_for
from diag.parsers.vllm_metrics import (
    ITL,
    KV_CACHE_USAGE,
    QUEUE_TIME,
    REQUESTS_RUNNING,
    VllmMetrics,
)
from diag.snapshot.clock import Clock
from diag.snapshot.gpu_resources import pod_gpu_request
from diag.snapshot.indexes import Indexes, indexes
from diag.snapshot.model import (
    GPU,
    EngineArgs,
    Pod,
    PromWindow,
    RayClusterSpec,
    Scrape,
    Service,
    Snapshot,
    VllmServer,
)
from diag.snapshot.quantity import mig_total

# Families the vLLM rules read beyond what the metrics summary already counts as relied on
# (VLLM-106 splits time to first token into queue and prefill with the queue-time histogram).
ALSO_NEEDED = (QUEUE_TIME,)
# vLLM's newer KV-too-small error names the longest context the cache could hold.
_ESTIMATED_MAX_LEN = re.compile(r"estimated maximum model length is (\d+)")
_ENGINE_LABEL = "engine"
# The log signals of a server's failure, causes before the engine's death that follows them.
_FAILURE_SIGNALS = (
    "kv_cache_too_small",
    "no_cache_blocks",
    "cuda_oom",
    "cuda_driver_too_old",
    "model_not_found",
    "gpu_memory_taken",
    "engine_dead",
    "preemption",
)
# Log signals that are not a failure of the server (V0 preemption warnings: VLLM-116).
_NOT_FAILURES = ("preemption",)
# Flags that spread one server over several hosts: its GPUs are then not one pod's.
_MULTI_HOST_FLAGS = ("--nnodes", "--headless")
# Engine-arg fields whose flag the evidence quotes, with vLLM's fixed default where it has one.
_QUOTED_FLAGS = {
    "max_num_seqs": None,
    "max_num_batched_tokens": None,
    "max_model_len": None,
    "gpu_memory_utilization": 0.9,
    "tensor_parallel_size": 1,
    "pipeline_parallel_size": 1,
    "kv_cache_dtype": "auto",
    "enable_chunked_prefill": None,
    "enable_prefix_caching": None,
}


def scopes(snap: Snapshot, settings: dict, clock: Clock) -> dict[str, list[dict]]:
    window = history_window(snap)
    index = indexes(snap)
    events = WindowEvents(snap, settings)
    return {
        "vllm_server": [
            _with_drop_events(
                _server(s, snap, index, settings, clock, window)
                | {"restart": restart_facts(s, window, events) if s.history else None},
                s,
                events,
            )
            for s in snap.vllm_servers
        ]
    }


def _with_drop_events(facts: dict, server: VllmServer, events: WindowEvents) -> dict:
    """Kubernetes events and Ray deaths in the minutes of the server's throughput drop (VLLM-119)."""
    drop = facts.get("throughput_drop")
    if not drop or not drop.get("found"):
        return facts
    pod = server.pod or server.history_pod
    lines = events.between(drop["start"], drop["end"], {pod} if pod else set())
    return facts | {"throughput_drop": drop | {"events": [line for line, _ in lines]}}


def _gpus_of(server: VllmServer, snap: Snapshot) -> list[GPU]:
    """The GPUs the server names (UUID, else host/index), in the snapshot's order."""
    places = indexes(snap).gpu_places
    return [snap.gpus[n] for n in sorted({n for key in set(server.gpus) for n in places.get(key, [])})]


def _server(
    server: VllmServer, snap: Snapshot, index: Indexes, settings: dict, clock: Clock, window: PromWindow | None
) -> dict:
    summary = server.summary
    service = index.services.get(server.service) if server.service else None
    pod = snap.pod(server.pod) if server.pod else None
    gpus = _gpus_of(server, snap)
    args = server.engine_args
    signals = server.log_signals
    gpus_provided, gpus_provided_by = _gpus_provided(server, pod, index)
    missing = _missing(summary)
    seq_cap = _seq_cap(args, server.scrapes, server.history_engines)
    return (
        plain(server, drop=("scrapes", "history", "summary", "history_pod"))
        | episode_facts(server, summary, _scrape_view(server, summary, seq_cap), settings, clock, window)
        | {
            "metrics": plain(summary) if summary else None,
            "has_metrics": summary is not None,
            "health_failing": server.health != "200" if server.health is not None else None,
            "metric_names": _metric_names(summary, server),
            "metrics_missing": missing,
            "metrics_missing_count": len(missing) if missing is not None else None,
            "service_name": service.name if service else None,
            "behind_service": _behind_service(server, snap),
            "service_ready_endpoints": len(service.ready_addresses) if service and service.endpoints_seen else None,
            "service_endpoints": _endpoints_text(service),
            "in_service_endpoints": _in_endpoints(service, pod),
            "gpu_count": len(gpus) if gpus else None,
            "gpu_utilization_pct": max(g.utilization_gpu_pct for g in gpus if g.utilization_gpu_pct is not None)
            if any(g.utilization_gpu_pct is not None for g in gpus)
            else None,
            "gpus_text": _gpus_text(gpus),
            "engine_args_from": _engine_args_origin(server, snap),
            "flags": " ".join(args.raw) if args else None,
            "flags_complete": args.complete
            if args
            else None,  # false: only the arguments of an entrypoint not in sight
            "flag": _flag_texts(args),
            "max_num_seqs": args.max_num_seqs if args else None,
            "stats_disabled": args is not None and "--disable-log-stats" in args.explicit,
            "max_num_seqs_given": args is not None and "--max-num-seqs" in args.explicit,
            "engines": _engines(server.scrapes, server.history_engines),
            "max_num_seqs_total": seq_cap,
            "seq_cap_known": seq_cap is not None,  # known either way: VLLM-114 is the cap-unknown case
            "idle": _idle(summary),
            # null when no log of the server was collected: its failure lines are unknown, not absent
            "log_signals": {name: signals.get(name, []) for name in _signal_names(snap)} if server.logs_read else None,
            "failure_line": next(
                (signals[name][-1] for name in _FAILURE_SIGNALS if name not in _NOT_FAILURES and signals.get(name)),
                None,
            ),
            "dead_engine_serving": dead_engine_serving(pod, looked_for(snap)),
            "gpu_memory_shortfall": next(
                (
                    found
                    for line in reversed(signals.get("gpu_memory_taken", []))
                    if (found := gpu_memory_shortfall(line))
                ),
                None,
            ),
            "other_gpu_processes": _other_gpu_processes(gpus, server.pod),
            "estimated_max_model_len": _estimated_max_model_len(signals.get("kv_cache_too_small", [])),
            "parallel_gpus": _parallel_gpus(args),
            "gpus_provided": gpus_provided,
            "gpus_provided_by": gpus_provided_by,
            "pod_name": pod.name if pod else None,
            "pod_phase": pod.phase if pod else None,
            "pod_state": _pod_state(server, pod),
            "cpu_limit": _cpu_limit(pod),
            "restarts": sum(c.restart_count for c in pod.containers) if pod else None,
            "edit_hint": _edit_hint(server, pod),
            "logs_command": _logs_command(server, pod),
            "_subject": f"vllm/{server.namespace + '/' if server.namespace else ''}{server.name}",
            "_links": link("vllm", server.name)
            + link("pod", server.pod)
            + link("node", server.node)
            + link("ray_node", server.ray_node_id)
            + link("service", server.service)
            + [f"gpu:{g}" for g in server.gpus],
        }
    )


# --------------------------------------------------------------------------- metrics


def _signal_names(snap: Snapshot) -> list[str]:
    """Every signal looked for: one no line matched is known absent ([]), not unknown."""
    return looked_for(snap).names()


def _metric_names(summary: VllmMetrics | None, server: VllmServer) -> dict[str, str]:
    """Which name the server exposes for quantities that were renamed, so evidence quotes it."""
    present = set(summary.present) if summary else set()
    if (
        not present
        and server.history.get("vllm_gpu_cache_usage_perc")
        and not server.history.get("vllm_kv_cache_usage_perc")
    ):
        present.add(KV_CACHE_USAGE[1])
    return {
        "kv_cache_usage": next((n for n in KV_CACHE_USAGE if n in present), KV_CACHE_USAGE[0]),
        "itl": next((n for n in ITL if n in present), ITL[0]),
    }


def _missing(summary: VllmMetrics | None) -> list[str] | None:
    if summary is None:
        return None
    extra = [names[0] for names in ALSO_NEEDED if not any(n in summary.present for n in names)]
    return summary.missing + extra


def _scrape_view(server: VllmServer, summary: VllmMetrics | None, seq_cap: int | None) -> ScrapeView:
    return ScrapeView(
        _running_every_scrape(server.scrapes), queue_per_scrape(server.scrapes), seq_cap, _ttft_queue_share(summary)
    )


def _running_every_scrape(scrapes: list[Scrape]) -> bool | None:
    """Requests in the running batch at every scrape (a hang needs them there the whole time)."""
    running = per_scrape_total(scrapes, REQUESTS_RUNNING[0])
    if not running or None in running:
        return None
    return all(value > 0 for value in running if value is not None)


def _engines(scrapes: list[Scrape], from_history: int | None = None) -> int | None:
    """Engine cores one /metrics covers (data parallelism adds `engine` label values); 1 without the label.
    Without a scrape, the engines its Prometheus series name."""
    if not scrapes:
        return from_history
    samples = [s for s in scrapes[-1].samples if s.name == REQUESTS_RUNNING[0]]
    if not samples:
        return None
    return len({s.labels.get(_ENGINE_LABEL) for s in samples})


def _seq_cap(args: EngineArgs | None, scrapes: list[Scrape], engines_in_history: int | None) -> int | None:
    """--max-num-seqs is per engine core; the running gauge is summed over the cores of this /metrics."""
    engines = _engines(scrapes, engines_in_history)
    if args is None or args.max_num_seqs is None or engines is None:
        return None
    return args.max_num_seqs * engines


def _idle(summary: VllmMetrics | None) -> bool | None:
    """Nothing running or waiting, and (with two scrapes) no token processed between them."""
    if summary is None or summary.requests_running is None or summary.requests_waiting is None:
        return None
    moved = [d for d in (summary.prompt_tokens_delta, summary.generation_tokens_delta) if d is not None]
    return summary.requests_running == 0 and summary.requests_waiting == 0 and not any(moved)


def _ttft_queue_share(summary: VllmMetrics | None) -> float | None:
    """How much of the time to first token was spent waiting in the queue (0..1)."""
    if summary is None or summary.ttft_mean_s is None or summary.queue_time_mean_s is None or summary.ttft_mean_s <= 0:
        return None
    return min(1.0, summary.queue_time_mean_s / summary.ttft_mean_s)


# --------------------------------------------------------------------------- logs and flags


def _estimated_max_model_len(lines: list[str]) -> int | None:
    found = [int(m.group(1)) for line in lines if (m := _ESTIMATED_MAX_LEN.search(line))]
    return found[-1] if found else None


def _flag_texts(args: EngineArgs | None) -> dict[str, str]:
    """How each quoted flag reads on the server's command line: its value, its default, or why unknown."""
    texts = {}
    for name, default in _QUOTED_FLAGS.items():
        flag = "--" + name.replace("_", "-")
        value = getattr(args, name) if args else None
        if args is None:
            texts[name] = "unknown (no command line)"
        elif flag in args.explicit:
            texts[name] = (
                str(value).lower()
                if isinstance(value, bool)
                else str(value)
                if value is not None
                else "a value known only at run time"
            )
        elif not args.complete:
            texts[name] = "unknown (not among the arguments; the image's entrypoint may set it)"
        else:
            texts[name] = f"{default} (default)" if default is not None else "not set (vLLM's default)"
    return texts


def _engine_args_origin(server: VllmServer, snap: Snapshot) -> str | None:
    cmdline = f"vllm/{server.name}.cmdline.txt"
    if cmdline in snap.sources and snap.sources[cmdline].status == "ok":
        return cmdline
    if server.pod and server.engine_args:
        if not server.engine_args.complete:
            return f"the container args of pod {server.pod} (the image's entrypoint may add flags)"
        return f"the container command/args of pod {server.pod}"
    return None


def _pod_state(server: VllmServer, pod: Pod | None) -> str:
    """One line: the pod's phase and its vLLM container's state, restarts and last exit; or that no
    pod of the server was read."""
    if pod is None:
        return f"pod {server.pod}: not in k8s/pods.json" if server.pod else "no pod of it in the bundle"
    container = vllm_container(pod)
    parts = [f"pod {pod.key} {pod.phase or 'phase unknown'}"]
    if container is not None:
        state = container.state_reason or container.state or "state unknown"
        parts.append(f"container {container.name} {state}, {container.restart_count} restarts")
        if container.last_terminated_reason or container.last_exit_code is not None:
            parts.append(f"last exit: {container.last_terminated_reason or '?'} (code {container.last_exit_code})")
    return "; ".join(parts)


def _cpu_limit(pod: Pod | None) -> str | None:
    container = vllm_container(pod) if pod else None
    return container.limits.get("cpu") if container else None


def _logs_command(server: VllmServer, pod: Pod | None) -> str:
    """Where this server's own log is read."""
    if pod is not None:
        container = vllm_container(pod)
        name = f" -c {word(container.name)}" if container is not None and len(pod.containers) > 1 else ""
        return f"kubectl -n {word(pod.namespace)} logs {word(pod.name)}{name} --tail=500"
    return f"the log of the process that serves {word(server.name)} (journalctl or its log file on that host)"


def _edit_hint(server: VllmServer, pod: Pod | None) -> str:
    """Where a flag of this server is changed."""
    if pod is not None and pod.workload_kind in ("Deployment", "StatefulSet") and pod.workload_name:
        return (
            f"kubectl -n {word(pod.namespace)} edit {word(pod.workload_kind.lower() + '/' + pod.workload_name)}"
            "   # spec.template.spec.containers[].args"
        )
    if pod is not None and pod.ray_cluster:
        return (
            f"kubectl -n {word(pod.namespace)} edit {word('raycluster/' + pod.ray_cluster)}   "
            "# the vLLM container's args, or the Serve app's engine_kwargs"
        )
    if pod is not None:
        return (
            f"kubectl -n {word(pod.namespace)} get pod {word(pod.name)} "
            "-o yaml   # change the args in whatever created this pod"
        )
    return f"the command line that starts {word(server.name)} (see {word('vllm/' + server.name + '.cmdline.txt')})"


# --------------------------------------------------------------------------- GPUs and Services


def _parallel_gpus(args: EngineArgs | None) -> int | None:
    if args is None or args.tensor_parallel_size is None or args.pipeline_parallel_size is None:
        return None
    return args.tensor_parallel_size * args.pipeline_parallel_size


def _gpus_provided(server: VllmServer, pod: Pod | None, index: Indexes) -> tuple[int | None, str]:
    """GPUs one replica of this server can have: its pod's, or its Ray cluster's where Ray places the workers."""
    if pod is None:
        return None, "unknown: the server runs in no pod of the bundle"
    args = server.engine_args
    if args is not None and any(flag in args.explicit for flag in _MULTI_HOST_FLAGS):
        return None, "unknown: the server spans several hosts (--nnodes/--headless)"
    cluster = index.ray_clusters.get((pod.namespace, pod.ray_cluster or ""))
    if cluster is not None:
        total = _ray_cluster_gpus(cluster)
        return (
            total,
            f"RayCluster {cluster.namespace}/{cluster.name} spec: {total} nvidia.com/gpu over head and workers",
        )
    if pod.ray_cluster or (args is not None and args.distributed_executor_backend == "ray"):
        return None, "unknown: Ray places the workers and the bundle has no RayCluster spec"
    if pod.resource_claims:
        return None, f"unknown: pod {pod.key} gets its devices through DRA ResourceClaims, counted by no resource limit"
    count = pod_gpu_request(pod)
    slices = sum(mig_total(c.limits, c.requests) for c in pod.containers)  # each MIG slice is one CUDA device
    if slices:
        return count + slices, f"pod {pod.key}: nvidia.com/gpu {count}, MIG slices {slices}"
    return count, f"pod {pod.key}: nvidia.com/gpu {count}"


def _ray_cluster_gpus(cluster: RayClusterSpec) -> int:
    return cluster.head_gpu_limit + sum((g.replicas or 0) * g.gpu_limit_per_pod for g in cluster.worker_groups)


def _other_gpu_processes(gpus: list[GPU], pod: str | None) -> list[str] | None:
    """Processes on the server's GPUs that are not its own pod's, from nvidia-smi/NVML; None without that data."""
    if not gpus:
        return None
    return [
        f"GPU {g.index} of {g.node or g.host}: pid {p.pid} ({p.name or 'name unknown'}, "
        f"{'memory unknown' if p.used_memory_mib is None else f'{p.used_memory_mib:.0f} MiB'}"
        f"{', pod ' + p.pod if p.pod else ''})"
        for g in gpus
        for p in g.processes
        if pod is None or p.pod != pod
    ]


def _gpus_text(gpus: list[GPU]) -> str | None:
    """ "8 GPUs of gpu-h100-2 (NVIDIA H100 80GB HBM3)": the GPUs a server is joined to, in one line."""
    if not gpus:
        return None
    hosts = ", ".join(sorted({g.host for g in gpus}))
    models = ", ".join(sorted({g.name or "unknown model" for g in gpus}))
    return f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''} of {hosts} ({models})"


def _behind_service(server: VllmServer, snap: Snapshot) -> bool | None:
    """Whether a Service selects this server's pod: no only where services.json was read and the server's
    pod is known (or pods.json was read and the server is in none of its pods, so it runs outside the cluster)."""
    if server.service is not None:
        return True
    if not _read(snap, "k8s/services.json"):
        return None
    if server.pod is not None or _read(snap, "k8s/pods.json"):
        return False
    return None


def _read(snap: Snapshot, source: str) -> bool:
    return source in snap.sources and snap.sources[source].status == "ok"


def _endpoints_text(service: Service | None) -> str | None:
    if service is None or not service.endpoints_seen:
        return None
    ready = ", ".join(service.ready_addresses) or "none"
    not_ready = ", ".join(service.not_ready_addresses) or "none"
    return f"ready: {ready}; not ready: {not_ready}"


def _in_endpoints(service: Service | None, pod: Pod | None) -> bool | None:
    if service is None or not service.endpoints_seen or pod is None:
        return None
    return pod.name in service.ready_addresses or (pod.pod_ip is not None and pod.pod_ip in service.ready_addresses)
