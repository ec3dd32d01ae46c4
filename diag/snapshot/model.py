"""The snapshot model: what every layer knows, joined across layers.

Parsers turn raw bundle files into these objects; `diag.link.join` links them (pod <-> node <-> Ray node
<-> GPU <-> vLLM server); `diag.facts` turns them into the plain dicts that rule conditions read.
A field that the bundle did not provide is None (unknown), never 0 or "" (healthy).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeVar

Layer = Literal["gpu", "kubernetes", "ray", "vllm"]
LAYERS: tuple[Layer, ...] = ("gpu", "kubernetes", "ray", "vllm")  # causal depth, bottom first
SourceState = Literal["ok", "failed", "missing", "skipped"]

_T = TypeVar("_T")
JSON_ONLY = "json only"
# A value made of json.loads' types alone (dict, list, str, int, float, bool, None), as the API sent it or
# read from it; nothing changes it after parsing, so the facts share it instead of copying it.
JsonOnly = Annotated[_T, JSON_ONLY]


@dataclass
class SourceStatus:
    """How one source (a bundle file or a live collector) fared."""

    status: SourceState
    detail: str = ""
    # A "failed" source that still gave part of its data (the complete items of a list cut off part-way,
    # the good samples of a damaged scrape): how many items or samples were used. None: nothing was used.
    recovered: int | None = None


# --------------------------------------------------------------------------- kubernetes


@dataclass(frozen=True)
class XidLine:
    """A kernel line about Xids ("NVRM: Xid (PCI:0000:65:00): 79, pid=..."), from a pod's log or a node's
    event, read when its file was parsed (diag.parsers.logs.xid_line)."""

    text: str
    codes: tuple[int, ...]  # the Xid codes it reports, in order (none: a log line the xid signal took)
    device: str | None  # the PCI address it names, spelt as GPU.pci_address; None: none readable


@dataclass
class Event:
    namespace: str | None
    involved_kind: str
    involved_name: str
    reason: str
    message: str
    type: str  # Normal | Warning
    count: int = 1
    last_seen: str | None = None  # RFC 3339
    source: str | None = None  # reporting component / host
    involved_uid: str | None = None  # the object's uid: tells a pod from an earlier one of the same name
    xid: XidLine | None = None  # the Xids its message reports (a node's kernel line), None: none


@dataclass
class Probe:
    kind: Literal["liveness", "readiness", "startup"]
    handler: Literal["httpGet", "tcpSocket", "exec", "grpc"]
    path: str | None = None
    port: int | str | None = None  # a number, or a named container port
    initial_delay_seconds: int = 0
    period_seconds: int = 10
    timeout_seconds: int = 1
    failure_threshold: int = 3


@dataclass
class Container:
    name: str
    image: str = ""
    command: list[str] = field(default_factory=list)
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # valueFrom entries read as "<from:kind>"
    ports: dict[str, int] = field(default_factory=dict)  # port name (or str(number)) -> containerPort
    requests: dict[str, str] = field(default_factory=dict)
    limits: dict[str, str] = field(default_factory=dict)
    probes: list[Probe] = field(default_factory=list)
    mounts: dict[str, str] = field(default_factory=dict)  # mountPath -> volume name (volumeMounts)
    # status (containerStatuses)
    ready: bool | None = None
    restart_count: int = 0
    state: str | None = None  # running | waiting | terminated
    state_reason: str | None = None  # CrashLoopBackOff, ErrImagePull, ...
    state_message: str | None = None
    last_terminated_reason: str | None = None  # OOMKilled, Error, ...
    last_exit_code: int | None = None
    last_finished_at: str | None = None  # lastState.terminated.finishedAt, RFC 3339
    started_at: str | None = None
    finished_at: str | None = None  # state.terminated.finishedAt (a container that ended), RFC 3339
    logs: str | None = None  # tail of the current container's log
    previous_logs: str | None = None  # kubectl logs --previous
    # known failure lines found in logs (see diag.parsers.logs): signal name -> matching lines
    log_signals: dict[str, list[str]] = field(default_factory=dict)
    logs_scanned: bool = False  # `logs` went through scan_log, with the snapshot's signals, into log_signals
    xid_lines: list[XidLine] = field(default_factory=list)  # log_signals["xid"], read
    # vLLM's engine arguments as its spec shows them, where the spec shows it runs vLLM's server
    # (diag.parsers.workloads.spec_engine_args); None otherwise, or where they cannot be told from it
    engine_args: EngineArgs | None = None


@dataclass(frozen=True)
class ConfigRef:
    """A ConfigMap or Secret a pod's spec names, and where (`env HF_TOKEN of container vllm`)."""

    kind: Literal["ConfigMap", "Secret"]
    name: str
    where: str
    optional: bool = False  # optional: true: the kubelet starts the container without it


@dataclass
class Pod:
    namespace: str
    name: str
    uid: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    owner_kind: str | None = None  # ReplicaSet/StatefulSet/RayCluster/...
    owner_name: str | None = None
    node_name: str | None = None
    phase: str | None = None
    reason: str | None = None  # status.reason, e.g. Evicted
    message: str | None = None
    pod_ip: str | None = None
    conditions: JsonOnly[dict[str, dict]] = field(default_factory=dict)  # type -> {status, reason, message}
    containers: list[Container] = field(default_factory=list)
    init_containers: list[Container] = field(default_factory=list)
    node_selector: dict[str, str] = field(default_factory=dict)
    affinity: JsonOnly[dict] = field(default_factory=dict)  # spec.affinity as in the API
    tolerations: JsonOnly[list[dict]] = field(default_factory=list)
    topology_spread_constraints: JsonOnly[list[dict]] = field(default_factory=list)
    volumes: JsonOnly[list[dict]] = field(default_factory=list)
    resource_claims: JsonOnly[list[dict]] = field(default_factory=list)  # spec.resourceClaims (DRA) as in the API
    # the ConfigMaps and Secrets its spec names (env, envFrom, volumes, projected volumes, imagePullSecrets)
    config_refs: list[ConfigRef] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)  # filled by join
    # cross-layer links, filled by join
    workload_kind: str | None = None  # Deployment/StatefulSet/RayCluster/... (owner of the owner)
    workload_name: str | None = None
    ray_cluster: str | None = None  # label ray.io/cluster
    ray_node_type: str | None = None  # label ray.io/node-type, else a container's `ray start`: head | worker
    ray_group: str | None = None  # label ray.io/group
    ray_node_id: str | None = None
    vllm_server: str | None = None  # name of the VllmServer running in this pod

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class Node:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    taints: JsonOnly[list[dict]] = field(default_factory=list)  # {key, value, effect}
    unschedulable: bool = False
    conditions: JsonOnly[dict[str, dict]] = field(default_factory=dict)  # Ready, MemoryPressure, ...
    capacity: dict[str, str] = field(default_factory=dict)
    allocatable: dict[str, str] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)  # filled by join


@dataclass
class ServicePort:
    port: int
    target_port: int | str | None = None
    name: str | None = None


@dataclass
class Service:
    namespace: str
    name: str
    selector: dict[str, str] = field(default_factory=dict)
    ports: list[ServicePort] = field(default_factory=list)
    type: str = "ClusterIP"
    ready_addresses: list[str] = field(default_factory=list)  # pod names (or IPs) from Endpoints
    not_ready_addresses: list[str] = field(default_factory=list)
    endpoints_seen: bool = False  # an Endpoints / EndpointSlice object for it was in the bundle


@dataclass
class Workload:
    """A Deployment or StatefulSet."""

    kind: str
    namespace: str
    name: str
    replicas: int | None = None
    ready_replicas: int = 0
    available_replicas: int = 0
    selector: dict[str, str] = field(default_factory=dict)
    conditions: JsonOnly[dict[str, dict]] = field(default_factory=dict)
    template_labels: dict[str, str] = field(default_factory=dict)  # of the pods it creates
    template_gpus: int = 0  # nvidia.com/gpu each of its pods asks for
    template_runs_vllm: bool = False  # a container of its pods launches vLLM's server


@dataclass
class HPA:
    namespace: str
    name: str
    target_kind: str = ""
    target_name: str = ""
    min_replicas: int | None = None
    max_replicas: int | None = None
    current_replicas: int | None = None
    desired_replicas: int | None = None
    metrics: JsonOnly[list[dict]] = field(default_factory=list)  # {type: Resource|Pods|Object|External, name}
    conditions: JsonOnly[dict[str, dict]] = field(default_factory=dict)  # AbleToScale, ScalingActive, ScalingLimited


@dataclass
class IngressBackend:
    """One backend an Ingress routes to: a rule's path, or the default backend (host and path None)."""

    service: str
    port_number: int | None = None
    port_name: str | None = None
    host: str | None = None
    path: str | None = None


@dataclass
class Ingress:
    namespace: str
    name: str
    ingress_class: str | None = None  # spec.ingressClassName
    backends: list[IngressBackend] = field(default_factory=list)  # Service backends only (not resource backends)
    tls_secrets: list[str] = field(default_factory=list)  # spec.tls[].secretName


@dataclass(frozen=True)
class ObjectName:
    """An object known by its name only: a ConfigMap or Secret (their data is never read)."""

    namespace: str
    name: str


@dataclass
class Gateway:
    """A Gateway API Gateway (gateway.networking.k8s.io/v1)."""

    namespace: str
    name: str
    gateway_class: str | None = None
    conditions: JsonOnly[dict[str, dict]] = field(default_factory=dict)  # type -> {status, reason, message}
    created: str | None = None  # metadata.creationTimestamp (RFC 3339)


@dataclass(frozen=True)
class RouteRef:
    """A parentRef or backendRef of a route; `namespace` filled with the route's where the ref has none."""

    kind: str  # Gateway, Service, ...
    namespace: str
    name: str
    port: int | None = None  # backendRef port; parentRef port
    section: str | None = None  # parentRef sectionName (a listener)


@dataclass
class RouteParentStatus:
    """status.parents[]: how one parent's controller sees the route."""

    parent: RouteRef
    controller: str | None
    conditions: JsonOnly[dict[str, dict]] = field(default_factory=dict)


@dataclass
class Route:
    """An HTTPRoute or GRPCRoute."""

    kind: str
    namespace: str
    name: str
    parents: list[RouteRef] = field(default_factory=list)
    backends: list[RouteRef] = field(default_factory=list)
    status: list[RouteParentStatus] = field(default_factory=list)


@dataclass
class PodDisruptionBudget:
    """policy/v1: how many of the pods it selects may be evicted at once (node drains go through it)."""

    namespace: str
    name: str
    selector: JsonOnly[dict | None] = None  # spec.selector as in the API; None selects no pod, {} every pod
    min_available: int | str | None = None  # a count or a percentage ("100%")
    max_unavailable: int | str | None = None
    disruptions_allowed: int | None = None  # status; None: the disruption controller has not written it
    current_healthy: int | None = None
    desired_healthy: int | None = None
    expected_pods: int | None = None
    conditions: JsonOnly[dict[str, dict]] = field(default_factory=dict)  # DisruptionAllowed


@dataclass
class NetworkPolicyPort:
    protocol: str = "TCP"
    port: int | str | None = None  # a number or a named container port; None: every port of the protocol
    end_port: int | None = None  # port..end_port, a range


@dataclass
class NetworkPolicyRule:
    """One spec.ingress[] rule: traffic from `peers` to `ports` is admitted."""

    ports: list[NetworkPolicyPort] = field(default_factory=list)  # empty: every port
    peers: JsonOnly[list[dict]] = field(default_factory=list)  # `from` as in the API; empty: every source


@dataclass
class NetworkPolicy:
    namespace: str
    name: str
    pod_selector: JsonOnly[dict] = field(default_factory=dict)  # {} selects every pod of the namespace
    policy_types: list[str] = field(default_factory=list)  # Ingress, Egress
    ingress: list[NetworkPolicyRule] = field(default_factory=list)


@dataclass
class PersistentVolumeClaim:
    namespace: str
    name: str
    access_modes: list[str] = field(default_factory=list)  # spec.accessModes: ReadWriteOnce, ReadWriteMany, ...
    storage_class: str | None = None
    volume_name: str | None = None  # the PersistentVolume it is bound to (the name attach events quote)
    phase: str | None = None  # Pending | Bound | Lost


@dataclass
class RayWorkerGroup:
    name: str
    replicas: int | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None
    ray_start_params: dict[str, str] = field(default_factory=dict)
    gpu_limit_per_pod: int = 0
    pods_total: int = 0  # filled by join
    pods_running: int = 0  # filled by join


@dataclass
class ServeStatus:
    """A Serve application's status, or one of its deployments', as a RayService reports it
    (status.activeServiceStatus / pendingServiceStatus .applicationStatuses[app].serveDeploymentStatuses)."""

    cluster: str  # active | pending: which of the RayService's clusters runs it
    cluster_name: str | None
    application: str
    deployment: str | None  # None: the application's own status
    status: str | None  # RUNNING, DEPLOYING, DEPLOY_FAILED, UNHEALTHY ... / HEALTHY, UPDATING, UNHEALTHY ...
    message: str | None


@dataclass
class RayClusterSpec:
    """A KubeRay RayCluster, or the RayCluster inside a RayService."""

    kind: str  # RayCluster | RayService
    namespace: str
    name: str
    state: str | None = None  # status.state (ready, suspended, failed ...)
    reason: str | None = None
    conditions: JsonOnly[dict[str, dict]] = field(
        default_factory=dict
    )  # HeadPodReady, RayClusterProvisioned, ReplicaFailure
    head_ray_start_params: dict[str, str] = field(default_factory=dict)
    head_gpu_limit: int = 0
    worker_groups: list[RayWorkerGroup] = field(default_factory=list)
    serve_config: dict | None = None  # RayService serveConfigV2, parsed
    serve_statuses: list[ServeStatus] = field(default_factory=list)  # RayService only
    active_cluster: str | None = None  # RayService: status.activeServiceStatus.rayClusterName
    pending_cluster: str | None = (
        None  # RayService: status.pendingServiceStatus.rayClusterName (the first cluster, or an upgrade)
    )
    condition_times: dict[str, str] = field(default_factory=dict)  # condition type -> lastTransitionTime
    events: list[Event] = field(default_factory=list)


@dataclass
class DaemonSet:
    namespace: str
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    images: list[str] = field(default_factory=list)
    desired: int = 0
    ready: int = 0
    available: int = 0
    unavailable: int = 0
    node_selector: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # of its first container (e.g. MIG_STRATEGY)
    args: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- ray


@dataclass
class RayNode:
    node_id: str
    node_ip: str | None = None
    state: str | None = None  # ALIVE | DEAD
    is_head: bool = False
    node_name: str | None = None  # Ray's node_name (KubeRay sets it to the pod IP or name)
    hostname: str | None = None  # the host's name as its reporter sends it (/nodes?view=summary)
    resources_total: dict[str, float] = field(default_factory=dict)
    resources_available: dict[str, float] | None = None  # None when not collected
    labels: dict[str, str] = field(default_factory=dict)
    ray_version: str | None = None
    state_message: str | None = None
    object_store_used_bytes: float | None = None
    object_store_total_bytes: float | None = None
    gpu_processes: list[dict] = field(default_factory=list)  # {pid, gpu_index, memory_used_mib} from the reporter
    workers: list[dict] | None = None  # {pid, actor_id, gpu_ids} per core worker (/nodes?view=summary); None: not read
    start_time: str | None = None  # ISO 8601 UTC
    end_time: str | None = None  # when it died; None while alive or not reported
    pod: str | None = None  # "namespace/name", filled by join
    gpu_host: str | None = None  # the GPU capture (gpu/<host>.*) of the machine it runs on, filled by join


@dataclass
class RayActor:
    actor_id: str
    class_name: str = ""
    name: str | None = None
    state: str = ""  # DEPENDENCIES_UNREADY | PENDING_CREATION | ALIVE | RESTARTING | DEAD
    node_id: str | None = None
    pid: int | None = None
    namespace: str | None = None
    required_resources: dict[str, float] = field(default_factory=dict)
    placement_group_id: str | None = None
    death_cause: str | None = None  # one readable line
    num_restarts: int | None = None
    gpu_ids: list[str] = field(default_factory=list)  # physical GPU ids Ray assigned (CUDA_VISIBLE_DEVICES)
    end_time: str | None = None  # when it died (ISO 8601 UTC); only /logical/actors reports it


@dataclass
class PlacementGroup:
    placement_group_id: str
    name: str = ""
    state: str = ""  # PENDING | PREPARED | CREATED | REMOVED | RESCHEDULING
    strategy: str | None = None  # PACK | SPREAD | STRICT_PACK | STRICT_SPREAD
    bundles: list[dict[str, float]] = field(default_factory=list)
    scheduling_state: str | None = None  # stats.scheduling_state, e.g. INFEASIBLE
    creator_job_id: str | None = None


@dataclass
class RayDemand:
    """A line of "Pending Demands" / "Demands" in `ray status`, or a dashboard resource demand."""

    resources: dict[str, float]
    count: int  # the N of "N+ pending"
    kind: Literal["task_or_actor", "placement_group", "request_resources"]
    strategy: str | None = None  # for placement groups
    bundles: int = 1


@dataclass
class RayStatus:
    """`ray status` (text) or the dashboard's /api/cluster_status."""

    timestamp: str | None = None
    active_nodes: list[str] = field(default_factory=list)
    idle_nodes: list[str] = field(default_factory=list)
    pending_nodes: list[str] = field(default_factory=list)
    recent_failures: list[str] = field(default_factory=list)
    usage: dict[str, tuple[float, float]] = field(default_factory=dict)  # resource -> (used, total)
    demands: list[RayDemand] = field(default_factory=list)


# --------------------------------------------------------------------------- gpu


# One subject's history of one query: (unix time, value) in time order, its series combined as the
# query says (diag.bundle.prometheus_queries). Keyed by stem, or "stem/<label value>" for queries kept apart
# by a label. A stem that is absent was not read; an empty list was read and held nothing for it.
History = dict[str, list[tuple[float, float]]]


@dataclass
class GPUProcess:
    pid: int
    name: str | None = None
    used_memory_mib: float | None = None
    # filled by join: who the process belongs to, when known
    pod: str | None = None
    ray_actor_id: str | None = None
    ray_worker: bool = False  # a Ray worker process (a task's or an actor's) of the Ray node on this GPU's host


@dataclass
class GPU:
    host: str  # the file stem: node name or pod name the data came from
    index: int
    uuid: str | None = None
    name: str | None = None
    pci_bus_id: str | None = None
    pci_address: str | None = None  # pci_bus_id as every source spells it ("0000:3b:00"); None: unreadable
    driver_version: str | None = None
    cuda_version: str | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    utilization_gpu_pct: float | None = None
    temperature_c: float | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    clock_sm_mhz: float | None = None
    clock_sm_max_mhz: float | None = None
    clocks_event_reasons: list[str] = field(default_factory=list)  # active ones: sw_power_cap, hw_thermal_slowdown ...
    ecc_uncorrected_volatile: int | None = None
    ecc_uncorrected_aggregate: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    mig_mode: str | None = None  # Enabled | Disabled
    persistence_mode: bool | None = None  # nvidia-smi's Persistence-M / persistence_mode: True when Enabled
    processes: list[GPUProcess] = field(default_factory=list)
    xids: list[int] = field(default_factory=list)  # from logs / events naming this GPU's host
    open_error: str | None = None  # NVML's / nvidia-smi's answer when it could not open the GPU ("GPU is lost")
    host_name: str | None = None  # the capturing machine's own name, where the capture records it (NVML snapshot)
    host_addresses: list[str] = field(default_factory=list)  # that machine's IP addresses, likewise
    # filled by join
    node: str | None = None  # Kubernetes node
    serving_pods: list[str] = field(default_factory=list)  # "ns/name" of pods this GPU is given to
    xid_lines: list[str] = field(default_factory=list)  # kernel Xid lines (pod logs, node events) about this GPU
    history: History = field(
        default_factory=dict
    )  # dcgm-exporter's series from Prometheus, filled by diag.link.prometheus_join
    only_in_prometheus: bool = (
        False  # known from dcgm-exporter's series alone: nvidia-smi's fields are unknown, not empty
    )
    # "ns/name" of the pods dcgm-exporter's pod mapping labels this GPU's series with (its `namespace`
    # and `pod` labels, or `exported_namespace` and `exported_pod` where Prometheus kept the target's)
    labelled_pods: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- vllm


@dataclass
class MetricSample:
    name: str
    labels: dict[str, str]
    value: float
    # the labels as sorted pairs, which key its series, where the parser had them; None: not worked out
    series_key: tuple[tuple[str, str], ...] | None = field(default=None, compare=False, repr=False)


@dataclass
class Scrape:
    """One /metrics text, parsed."""

    samples: list[MetricSample]
    taken_at: float | None = None  # unix seconds, from the manifest

    def names(self) -> set[str]:
        return {s.name for s in self.samples}


@dataclass
class EngineArgs:
    """vLLM engine arguments from the container command/args (vLLM's defaults where absent).

    A flag given with a value that cannot be read (e.g. "$(TP_SIZE)", expanded only at run time)
    leaves its field None, the fixed-default ones included. With `complete` false the flags were read
    from arguments handed to an entrypoint that is not in sight (a custom image's): a flag not among
    `explicit` may be set there, so its field is None (unknown), never vLLM's default.
    """

    model: str | None = None
    port: int | None = 8000
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = 0.9
    tensor_parallel_size: int | None = 1
    pipeline_parallel_size: int | None = 1
    data_parallel_size: int | None = 1
    max_model_len: int | None = None
    block_size: int | None = None
    enable_chunked_prefill: bool | None = None
    enable_prefix_caching: bool | None = None
    kv_cache_dtype: str | None = None
    distributed_executor_backend: str | None = None
    explicit: list[str] = field(default_factory=list)  # flags given on the command line
    raw: list[str] = field(default_factory=list)  # the argv they were read from (secrets redacted)
    complete: bool = True  # the whole command line was read (see above)


@dataclass
class VllmMetrics:
    """One server's metrics; every value is None where the scrapes did not tell."""

    scrapes: int = 0
    api_generation: Literal["v1", "v0"] | None = None
    kv_cache_usage: float | None = None  # 0..1, latest scrape, the fullest engine
    kv_cache_usage_max: float | None = None  # over all scrapes
    requests_running: float | None = None  # latest, summed over engines
    requests_waiting: float | None = None
    waiting_first: float | None = None
    waiting_max: float | None = None
    waiting_growth: float | None = None  # last - first; None with one scrape
    preemptions_total: float | None = None  # latest
    preemptions_delta: float | None = None  # increase between first and last scrape
    prompt_tokens_delta: float | None = None
    generation_tokens_delta: float | None = None
    interval_seconds: float | None = None  # between first and last scrape, when both times are known
    generation_tokens_per_s: float | None = None
    ttft_mean_s: float | None = None
    ttft_p90_s: float | None = None
    ttft_requests: float | None = (
        None  # first tokens the TTFT and ITL means above are taken over (the window's, or the life's)
    )
    itl_mean_s: float | None = None
    itl_p90_s: float | None = None
    e2e_mean_s: float | None = None
    queue_time_mean_s: float | None = None
    prefill_time_mean_s: float | None = None
    decode_time_mean_s: float | None = None
    num_gpu_blocks: int | None = None  # vllm:cache_config_info labels
    block_size: int | None = None
    gpu_memory_utilization: float | None = None
    present: list[str] = field(default_factory=list)  # metric families seen, sorted
    missing: list[str] = field(default_factory=list)  # relied-on families absent under every name


@dataclass
class VllmServer:
    name: str  # pod name, "<namespace>.<pod>", or the URL's host:port
    namespace: str | None = None
    pod: str | None = None  # "namespace/name" when it runs in a known pod
    url: str | None = None
    health: str | None = None  # "200", "503", "timeout", ... as in <pod>.health.txt
    models: list[str] = field(default_factory=list)
    max_model_len_served: int | None = None  # /v1/models max_model_len
    scrapes: list[Scrape] = field(default_factory=list)
    engine_args: EngineArgs | None = None
    log_signals: dict[str, list[str]] = field(default_factory=dict)  # its container's log lines, by signal
    logs_read: bool = False  # a log of its container was in the bundle (else its log lines are unknown)
    # filled by join
    node: str | None = None
    gpus: list[str] = field(default_factory=list)  # GPU uuids or host/index
    ray_node_id: str | None = None
    service: str | None = None  # "namespace/name" of a Service selecting its pod
    history: History = field(default_factory=dict)  # from Prometheus, filled by diag.link.prometheus_join
    history_engines: int | None = None  # engine cores its Prometheus series name (values of the `engine` label)
    # "namespace/pod" its Prometheus series name (filled by diag.link.prometheus_join): the pod even where
    # the bundle's own files named the server by a bare name that several namespaces have
    history_pod: str | None = None
    summary: VllmMetrics | None = None  # what its scrapes say (diag.parsers.vllm_metrics.summarize), filled by join


# --------------------------------------------------------------------------- prometheus


@dataclass
class PromSeries:
    metric: dict[str, str]
    values: list[tuple[float, float]]  # (unix time, value); an instant query has one


@dataclass(frozen=True)
class PromWindow:
    """The range a query_range answer covers, as llmdiag collect recorded it."""

    start: float  # unix seconds
    end: float
    step: float  # seconds between samples


@dataclass
class PromResult:
    name: str  # file stem
    query: str | None
    result_type: str  # vector | matrix | scalar | string
    series: list[PromSeries] = field(default_factory=list)
    window: PromWindow | None = None


# --------------------------------------------------------------------------- snapshot


@dataclass
class Snapshot:
    pods: list[Pod] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    services: list[Service] = field(default_factory=list)
    workloads: list[Workload] = field(default_factory=list)
    hpas: list[HPA] = field(default_factory=list)
    ingresses: list[Ingress] = field(default_factory=list)
    pdbs: list[PodDisruptionBudget] = field(default_factory=list)
    network_policies: list[NetworkPolicy] = field(default_factory=list)
    pvcs: list[PersistentVolumeClaim] = field(default_factory=list)
    gateways: list[Gateway] = field(default_factory=list)
    routes: list[Route] = field(default_factory=list)  # HTTPRoutes and GRPCRoutes
    configmaps: list[ObjectName] = field(default_factory=list)
    secrets: list[ObjectName] = field(default_factory=list)  # names only: llmdiag never reads a Secret's data
    ray_clusters: list[RayClusterSpec] = field(default_factory=list)
    daemonsets: list[DaemonSet] = field(default_factory=list)
    ray_status: RayStatus | None = None
    ray_head_version: str | None = None  # the dashboard's /api/version
    kernel_xid_lines: dict[str, list[XidLine]] = field(default_factory=dict)  # GPU capture's host -> its Xid lines
    ray_nodes: list[RayNode] = field(default_factory=list)
    ray_actors: list[RayActor] = field(default_factory=list)
    placement_groups: list[PlacementGroup] = field(default_factory=list)
    gpus: list[GPU] = field(default_factory=list)
    vllm_servers: list[VllmServer] = field(default_factory=list)
    prometheus: list[PromResult] = field(default_factory=list)
    manifest: dict = field(default_factory=dict)
    # the log signals looked for (a diag.parsers.signals.LogSignals; the model sits below the parsers, so
    # it is not typed here); None: the built-in ones
    signals: Any = None
    sources: dict[str, SourceStatus] = field(default_factory=dict)
    # the pods of every namespace bound to a node (k8s/node-pods/<node>.json), by node: what holds the
    # node's GPUs. Never the namespace's own workloads, which are `pods` alone.
    node_pods: dict[str, list[Pod]] = field(default_factory=dict)

    _pods_by_key: dict[str, Pod] = field(default_factory=dict, init=False, repr=False, compare=False)
    _pods_indexed: tuple[list[Pod] | None, int] = field(default=(None, 0), init=False, repr=False, compare=False)
    # diag.snapshot.indexes' cache: the lists they were built from, and the indexes
    _indexes: Any = field(default=None, init=False, repr=False, compare=False)

    def pods_listed_in(self) -> list[str] | None:
        """The namespaces whose pods the bundle holds, as the manifest records them; None for every
        namespace, or where no manifest says (a hand-made bundle: its lists are taken as they are)."""
        kubernetes = self.manifest.get("kubernetes")
        namespaces = kubernetes.get("namespaces") if isinstance(kubernetes, dict) else None
        if not isinstance(namespaces, list) or not namespaces or "*" in namespaces:
            return None
        return sorted(n for n in namespaces if isinstance(n, str))

    def pod(self, key: str) -> Pod | None:
        # An index, rebuilt when the list was replaced or grew: joins ask this once per GPU, Ray node
        # and vLLM server, and a scan each time made large bundles quadratic.
        indexed, count = self._pods_indexed
        if indexed is not self.pods or count != len(self.pods):
            self._pods_by_key = {}
            for p in self.pods:
                self._pods_by_key.setdefault(p.key, p)
            self._pods_indexed = (self.pods, len(self.pods))
        return self._pods_by_key.get(key)
