"""What the analysis could not see: the gaps that forbid calling a bundle healthy.

"Healthy" is said only when the sources that decide were read. A layer the bundle speaks of is
relevant; each relevant layer needs its deciding sources:
  kubernetes  every list `llmdiag collect` reads: pods (at least one), nodes, events, services and
              their endpoints, deployments, statefulsets, HPAs, the GPU daemonsets; the KubeRay lists
              where Ray runs
  ray         the cluster status, its nodes, actors and placement groups
  vllm        two /metrics reads of every server that runs, for counter rates (a pending or crashing
              pod has none to give: its own state is the evidence); its engine flags when requests wait (the cap
              that may hold them); the scrapes' times when its counters stood still (a hang or a
              short interval)
  gpu         once any GPU data was collected, the GPUs of every node that runs a serving pod; once
              GPUs were captured outside Kubernetes, the machine of every live Ray node with GPUs
  logs        the log of a serving container that crashed or restarted (the cause is in it)
  history     once Prometheus was queried (any prometheus/ answer of diag.bundle.prometheus_queries in the
              bundle), every one of those answers: a fault that only the history shows is a fault
A source that failed (damaged file, collector error) is a gap whatever its layer: what it would have
shown is unknown. It decides nothing (it is named beside a healthy verdict) where its content could not
change one: a pod's log (a crashed container's is asked for above), another namespace's pods on a node,
a GPU capture where no capture could be read at all (nvidia-smi refused on every node: the GPUs are then
unseen, as in a bundle that holds none). Every gap names what is missing and the command that gets it.
"""

from __future__ import annotations

from dataclasses import dataclass

from diag.bundle import layout
from diag.bundle.layout import BY_PATH, KUBE_LISTS
from diag.bundle.prometheus_queries import RANGE_QUERIES, RATE_HISTORY
from diag.core.shell import word
from diag.engine.rules import Rule, RuleOutcome
from diag.facts.vllm_episodes import queue_per_scrape
from diag.link.prometheus_join import history_window
from diag.snapshot.clock import Clock
from diag.snapshot.gpu_resources import is_gpu_node
from diag.snapshot.model import Container, RayNode, Scrape, Snapshot, VllmServer
from diag.verdict.relevance import serving_pods


@dataclass(frozen=True)
class Gap:
    source: str  # bundle path or collector name
    problem: str  # one line: what is missing or wrong
    remedy: str  # the command (or step) that gets it
    # deciding: a fault could hide in what is missing, so the verdict cannot be healthy; a gap that
    # decides nothing (`_decides_nothing`) is named beside a healthy verdict
    deciding: bool = True
    links: tuple[str, ...] = ()  # the subjects whose data is missing ("node:gpu-2"), when known
    source_layer: str | None = None  # where the source's path does not say it (manifest.json ...)
    # a root finding on one of `links` whose rule explains this rule is why the data is not needed
    # (a known cause of a crash makes its log a repetition)
    moot_if_root_explains: str | None = None

    @property
    def layer(self) -> str | None:
        """The layer whose faults this source would show; None where a fault of any layer could hide
        (a crash log, the whole bundle)."""
        if self.source_layer is not None:
            return self.source_layer
        return layout.layer_of(self.source)


RAY_DASHBOARD = "ray/dashboard"  # failed when the dashboard could not be reached (llmdiag collect)


_ENDPOINT_KINDS = ("endpoints", "endpointslices")  # a gap only where Services were read
_KUBERNETES_SOURCES = {
    row.path: row.kubectl("{ns}")
    for row in KUBE_LISTS
    if not row.kuberay and row.decides and row.kind not in _ENDPOINT_KINDS
}
CRASH_LOOP_RULE = "K8S-213"  # a container in CrashLoopBackOff, its cause not known
_ENDPOINTS = tuple(row.path for row in KUBE_LISTS if row.kind in _ENDPOINT_KINDS)
# Read where Ray runs on Kubernetes; "skipped" (the CRDs are not installed) is an answer too.
_KUBERAY_SOURCES = {row.path: row.kubectl("{ns}") for row in KUBE_LISTS if row.kuberay}
# What Ray's health is decided on; each need is met by any one of its files (the `ray` CLI's output or
# the dashboard's answer), and its gap names the first.
_RAY_SOURCES = {
    layout.files_of(need): layout.SOURCES_BY_PATH[layout.files_of(need)[0]].command
    for need in ("ray/status", "ray/nodes.json", "ray/actors.json", "ray/placement_groups.json")
}
_REMEDY_BY_NAME = {
    "facts/": "llmdiag could not read this content (a bug): report it "
    "with the bundle; the sources above say which files were read",
    "bundle": "check the bundle (what it holds: tar tzvf, ls -lR); raise "
    "settings.bundle_max_* in .llmdiag.yaml only for a bundle you trust",
    "kubernetes": "check the kubeconfig and its context: kubectl config current-context; kubectl get pods {ns}",
}


def gaps(snap: Snapshot, clock: Clock | None = None) -> list[Gap]:
    """`clock`: what counts as current; a serving container that last restarted before the history
    window needs no log of that run (its restart is history, not this incident)."""
    found: list[Gap] = []
    found += _failed_sources(snap)
    if _kubernetes_relevant(snap):
        found += _kubernetes_gaps(snap)
    if _ray_relevant(snap):
        found += _ray_gaps(snap)
    found += _vllm_gaps(snap)
    found += _gpu_gaps(snap)
    found += _ray_gpu_join_gaps(snap)
    found += _log_gaps(snap, clock)
    found += _history_gaps(snap)
    if not any(s.status == "ok" for s in snap.sources.values()):
        found.append(
            Gap(
                "bundle",
                "no source could be read",
                "run `llmdiag collect` against the cluster, or check the bundle's path",
            )
        )
    unique: dict[str, Gap] = {}
    for gap in found:
        unique.setdefault(gap.source, gap)
    return list(unique.values())


def rule_gaps(outcomes: dict[str, RuleOutcome], rules: dict[str, Rule]) -> list[Gap]:
    """A rule that could not be evaluated (a value CEL cannot hold, a bug) decided nothing: a gap."""
    return [
        Gap(
            f"rule {rule_id}",
            f"rule {rule_id} could not be evaluated on this bundle: {outcome.detail}",
            "report it with the bundle (llmdiag rules show " + rule_id + " names what it reads)",
            source_layer=rules[rule_id].layer if rule_id in rules else None,
        )
        for rule_id, outcome in sorted(outcomes.items())
        if outcome.status == "error"
    ]


def _failed_sources(snap: Snapshot) -> list[Gap]:
    subjects = _Subjects.of(snap)
    ns = _namespace_flag(snap)
    logs = _LogFiles.of(snap) if any(n.startswith("k8s/logs/") for n in snap.sources) else None
    gpus_seen = _gpus_read(snap)
    return [
        Gap(
            name,
            status.detail or f"{name}: could not be read",
            (logs.command(name) if logs is not None else None) or _remedy_for(name, ns),
            not _decides_nothing(name, gpus_seen),
            subjects.links_of(name),
        )
        for name, status in sorted(snap.sources.items())
        if status.status == "failed" and not (name == RAY_DASHBOARD and _ray_read_anyway(snap))
    ]


def _history_gaps(snap: Snapshot) -> list[Gap]:
    """Every answer the collector asked for; where the manifest does not say what it asked (a hand-made
    bundle), every query of the table. A collector older than a query never asked it: not a gap."""
    answers = {f"prometheus/{q.stem}.json" for q in RANGE_QUERIES}
    if not any(name in snap.sources for name in answers):
        return []  # Prometheus was not part of this bundle: history is extra, not a deciding source
    recorded = snap.manifest.get("sources")
    asked = {name for name in recorded if name in answers} if isinstance(recorded, dict) else set()
    answers = asked or answers
    return [
        Gap(name, f"{name}: not in the bundle, though Prometheus was queried", _remedy_for("prometheus/"))
        for name in sorted(answers)
        if name not in snap.sources
    ]


def _ray_read_anyway(snap: Snapshot) -> bool:
    """The `ray` CLI in the head pod gave what the unreachable dashboard would have (RAY-106 says it is
    unreachable): nothing is missing."""
    return all(any(_read(snap, n) for n in names) for names in _RAY_SOURCES)


@dataclass(frozen=True)
class _Subjects:
    """Nodes and pods by name: a fleet can fail one GPU source per node (nvidia-smi exec refused)."""

    nodes: dict[str, list[str]]
    pods: dict[str, list[str]]

    @classmethod
    def of(cls, snap: Snapshot) -> _Subjects:
        nodes: dict[str, list[str]] = {}
        pods: dict[str, list[str]] = {}
        for node in snap.nodes:
            nodes.setdefault(node.name, []).append(f"node:{node.name}")
        for pod in snap.pods:
            pods.setdefault(pod.name, []).append(f"pod:{pod.key}")
        return cls(nodes, pods)

    def links_of(self, name: str) -> tuple[str, ...]:
        """gpu/<host-or-pod>.* is about that node or pod; vllm/<server>.* about that server."""
        if name.startswith("gpu/"):
            stem = name.removeprefix("gpu/").split(".", 1)[0]
            return tuple(self.nodes.get(stem, []) + self.pods.get(stem, []))
        if name.startswith("vllm/"):
            return (f"vllm:{name.removeprefix('vllm/').split('.', 1)[0]}",)
        return ()


@dataclass(frozen=True)
class _LogFiles:
    """The kubectl command that reads each log file the collector names: k8s/logs/<stem>[.previous].log,
    <stem> being [<namespace>.]<pod>[.<container>]."""

    commands: dict[str, str]

    @classmethod
    def of(cls, snap: Snapshot) -> _LogFiles:
        commands: dict[str, str] = {}
        for pod in snap.pods:
            for container in pod.containers + pod.init_containers:
                command = f"kubectl -n {word(pod.namespace)} logs {word(pod.name)} -c {word(container.name)} --tail=500"
                for stem in (f"{pod.namespace}.{pod.name}", pod.name):
                    for named in (f"{stem}.{container.name}", stem):
                        commands.setdefault(f"k8s/logs/{named}.log", command)
                        commands.setdefault(f"k8s/logs/{named}.previous.log", f"{command} --previous")
        return cls(commands)

    def command(self, name: str) -> str | None:
        found = self.commands.get(name)
        return f"collect it again: {found} > {word(name)}" if found else None


def _remedy_for(name: str, ns: str = "-A") -> str:
    """The command that writes this file again where one is known, else what to do for its kind."""
    if (remedy := layout.remedy(name, ns)) is not None:
        return remedy
    for prefix, remedy in _REMEDY_BY_NAME.items():
        if name.startswith(prefix):
            return remedy.replace("{ns}", ns)
    return f"check the {name} collector's access (llmdiag collect prints why it failed)"


def _read(snap: Snapshot, name: str) -> bool:
    return snap.sources.get(name) is not None and snap.sources[name].status == "ok"


def _skipped(snap: Snapshot, name: str) -> bool:
    return snap.sources.get(name) is not None and snap.sources[name].status == "skipped"


def _kubernetes_relevant(snap: Snapshot) -> bool:
    kubernetes = snap.manifest.get("kubernetes")
    asked_live = isinstance(kubernetes, dict) and bool(kubernetes.get("context"))
    attempted = any(
        (name.startswith("k8s/") or name == "kubernetes") and s.status in ("ok", "failed")
        for name, s in snap.sources.items()
    )
    return asked_live or attempted


def _kubernetes_gaps(snap: Snapshot) -> list[Gap]:
    ns = _namespace_flag(snap)
    found = [
        Gap(name, f"{name}: {_state(snap, name)}", command.format(ns=ns))
        for name, command in _KUBERNETES_SOURCES.items()
        if not _read(snap, name)
    ]
    # a list that decides nothing alone (Ingresses): a gap where the collector says it read it, and it is not
    # here; "skipped" (its CRDs are not installed) is an answer
    recorded = snap.manifest.get("sources")
    found += [
        Gap(row.path, f"{row.path}: {_state(snap, row.path)}", row.kubectl(ns))
        for row in KUBE_LISTS
        if not row.decides
        and isinstance(recorded, dict)
        and row.path in recorded
        and not _read(snap, row.path)
        and not _skipped(snap, row.path)
    ]
    if snap.services and not any(_read(snap, name) for name in _ENDPOINTS):
        found.append(
            Gap(
                _ENDPOINTS[0],
                f"{_ENDPOINTS[0]}: {_state(snap, _ENDPOINTS[0])}",
                BY_PATH[_ENDPOINTS[0]].kubectl(ns),
            )
        )
    if _ray_relevant(snap):
        found += [
            Gap(name, f"{name}: {_state(snap, name)}", command.format(ns=ns))
            for name, command in _KUBERAY_SOURCES.items()
            if not _read(snap, name) and getattr(snap.sources.get(name), "status", None) != "skipped"
        ]
    # no pod is what Deployments and StatefulSets all scaled to zero ask for: not a sign of the wrong namespace
    scaled_to_zero = bool(snap.workloads) and all(w.replicas == 0 for w in snap.workloads)
    if _read(snap, "k8s/pods.json") and not snap.pods and not scaled_to_zero:
        found.append(
            Gap(
                "k8s/pods.json",
                f"no pod matched {_target_words(snap)}",
                "check the namespace (-n), the selector (-l) and the kube context",
            )
        )
    return found


def _ray_relevant(snap: Snapshot) -> bool:
    attempted = any(
        (name.startswith("ray/") or name == "ray") and s.status in ("ok", "failed") for name, s in snap.sources.items()
    )
    return attempted or bool(snap.ray_clusters) or any(p.ray_cluster for p in snap.pods)


def _ray_gaps(snap: Snapshot) -> list[Gap]:
    return [
        Gap(names[0], f"{' / '.join(names)}: {_state(snap, names[0])}", command)
        for names, command in _RAY_SOURCES.items()
        if not any(_read(snap, n) for n in names)
    ]


def _gone_before_collection(server: VllmServer, snap: Snapshot) -> bool:
    """Prometheus' series of a server without a pod in the bundle ended more than Prometheus' lookback
    (5 minutes) before the window did: a pod a rollout replaced, nothing to scrape now."""
    window = history_window(snap)
    if window is None or (server.pod and snap.pod(server.pod) is not None):
        return False
    newest = max((points[-1][0] for points in server.history.values() if points), default=None)
    return newest is not None and newest < window.end - 300


def _vllm_gaps(snap: Snapshot) -> list[Gap]:
    found = []
    for server in snap.vllm_servers:
        link = (f"vllm:{server.name}",)
        if not server.scrapes:
            pod = snap.pod(server.pod) if server.pod else None
            if pod is not None and pod.phase != "Running":
                continue  # nothing to scrape yet: the pod's own state speaks
            if _gone_before_collection(server, snap):
                continue
            if server.url:
                metrics = server.url.rstrip("/") + "/metrics"
                command = f"curl -s {word(metrics)} > {word(f'vllm/{server.name}.metrics.txt')}"
            elif server.pod:  # through the API server's pod proxy: the pod's IP is seldom reachable
                namespace, _, name = server.pod.partition("/")
                port = (server.engine_args.port if server.engine_args else None) or 8000  # vLLM's default
                proxied = f"/api/v1/namespaces/{namespace}/pods/{name}:{port}/proxy/metrics"
                command = f"kubectl get --raw {word(proxied)} > {word(f'vllm/{server.name}.metrics.txt')}"
            else:
                command = f"curl -s {word(f'http://{server.name}:8000/metrics')}"
            found.append(
                Gap(
                    f"vllm/{server.name}.metrics.txt",
                    f"no /metrics read of vLLM server {server.name}",
                    command,
                    links=link,
                )
            )
            continue
        if len(server.scrapes) == 1 and not _idle_at(server.scrapes[0]) and not _rates_in_history(server):
            found.append(
                Gap(
                    f"vllm/{server.name}.metrics.1.txt",
                    f"one /metrics read of vLLM server {server.name}: its counter rates "
                    "(preemptions, tokens) and whether its queue grows are unknown",
                    "llmdiag triage ... --scrapes 3 (or a second curl of "
                    "/metrics a few seconds later, saved as <name>.metrics.1.txt)",
                    links=link,
                )
            )
        summary = server.summary
        if summary is None:  # a snapshot not joined
            continue
        if server.engine_args is None and (summary.waiting_max or 0) > 0:
            found.append(
                Gap(
                    f"vllm/{server.name}.cmdline.txt",
                    f"requests wait at vLLM server {server.name}, and "
                    "its engine flags (--max-num-seqs ...) are unknown",
                    "tr '\\0' '\\n' < /proc/<vllm pid>/cmdline > vllm/<server>.cmdline.txt (or read the pod spec)",
                    links=link,
                )
            )
        if len(server.scrapes) > 1 and summary.interval_seconds is None and summary.generation_tokens_delta == 0:
            found.append(
                Gap(
                    "manifest.json",
                    f"the tokens counters of vLLM server {server.name} stood still between "
                    "scrapes taken at unknown times (a hang, or reads a moment apart)",
                    "llmdiag triage --vllm-url ... --scrapes 3 --scrape-interval "
                    "10 (the manifest records when each scrape was taken)",
                    links=link,
                    source_layer="vllm",
                )
            )
    return found


def _idle_at(scrape: Scrape) -> bool:
    """Nothing running and nothing waiting: a server with no rate to measure, which live collection
    reads once (diag/collect/vllm.py)."""
    return queue_per_scrape([scrape]) == [{"running": 0, "waiting": 0}]


def _rates_in_history(server: VllmServer) -> bool:
    """Prometheus' history holds what a second read would add (live collection then reads once)."""
    return all(len(server.history.get(stem) or []) >= 2 for stem in RATE_HISTORY)


def _decides_nothing(name: str, gpus_seen: bool) -> bool:
    """A failed source whose content could not change a healthy verdict: a pod's log (a crashed
    container's is asked for by `_log_gaps`), another namespace's pods on a node (its text says they were
    not read), a GPU capture where none was read (the GPUs are then unseen, as in a bundle without any)."""
    if name.startswith(("k8s/logs/", "k8s/node-pods/")):
        return True
    return not gpus_seen and layout.layer_of(name) == "gpu" and name.startswith("gpu/")


def _gpus_read(snap: Snapshot) -> bool:
    """Whether the bundle holds a GPU capture. Where none could be read (nvidia-smi refused on every node),
    the GPUs are unseen as in a bundle without any: each failed capture is named, and decides nothing."""
    return any(name.startswith("gpu/") and status.status == "ok" for name, status in snap.sources.items())


def _gpu_gaps(snap: Snapshot) -> list[Gap]:
    """Once GPUs were collected at all, every GPU node a serving pod runs on must be among them."""
    if not _gpus_read(snap):
        return []
    seen = {g.node or g.host for g in snap.gpus}
    gpu_nodes = {n.name for n in snap.nodes if is_gpu_node(n)}
    wanted = sorted({p.node_name for p in serving_pods(snap) if p.node_name in gpu_nodes} - seen)
    return [
        Gap(
            f"gpu/{node}.xml",
            f"no GPU data of node {node}, where serving pods run",
            f"kubectl debug {word('node/' + node)} --attach --image=busybox --profile=sysadmin -- "
            f"chroot /host nvidia-smi -q -x > {word(f'gpu/{node}.xml')}",
            links=(f"node:{node}",),
        )
        for node in wanted
    ]


def _ray_gpu_join_gaps(snap: Snapshot) -> list[Gap]:
    """Outside Kubernetes (no pod list read) or once GPUs were captured outside it, every live Ray node with
    GPUs and no pod must be joined to its machine's capture: without it, whose memory Ray's workers hold
    on its GPUs is undecided (GPU-106), and a healthy verdict would rest on a GPU never seen."""
    kubernetes_nodes = {n.name for n in snap.nodes}
    captured_outside = any(g.host not in kubernetes_nodes and not g.serving_pods for g in snap.gpus)
    if not captured_outside and _read(snap, "k8s/pods.json"):
        return []
    why = "could not be joined to a GPU capture by its name or address" if captured_outside else "has no GPU data"
    return [
        Gap(
            f"gpu/{node.hostname or node.node_name or node.node_ip or node.node_id}.json",
            f"Ray node {node.node_ip or node.node_id} ({_gpus(node)} GPU) {why}, "
            "so which process holds its GPUs' memory is unknown",
            "on that machine: llmdiag collect --local-gpu --out "
            "gpu-<host>.tar.gz (or nvidia-smi -q -x > gpu/<host>.xml)",
            links=(f"ray_node:{node.node_id}",),
            source_layer="gpu",
            moot_if_root_explains="GPU-106",
        )
        for node in snap.ray_nodes
        if node.pod is None and node.gpu_host is None and node.state != "DEAD" and _gpus(node)
    ]


def _gpus(node: RayNode) -> int:
    return int(node.resources_total.get("GPU", 0) or 0)


def _log_gaps(snap: Snapshot, clock: Clock | None) -> list[Gap]:
    """A serving container that crashed says why in its log: without it the cause could be in any layer."""
    found = []
    for pod in serving_pods(snap):
        for container in pod.containers:
            if (missing := _missing_log(container, clock)) is not None:
                flag = " --previous" if missing.endswith(".previous.log") else ""
                found.append(
                    Gap(
                        f"k8s/logs/{pod.namespace}.{pod.name}.{container.name}{missing}",
                        f"container {container.name} of pod {pod.key} "
                        f"{_crash_words(container)}, and its log was not collected",
                        f"kubectl -n {word(pod.namespace)} logs {word(pod.name)} "
                        f"-c {word(container.name)}{flag} --tail=200",
                        links=(f"pod:{pod.key}",),
                        moot_if_root_explains=CRASH_LOOP_RULE,
                    )
                )
    return found


def _missing_log(container: Container, clock: Clock | None = None) -> str | None:
    crashing = container.state_reason in ("CrashLoopBackOff", "Error") or (
        container.state == "terminated" and container.last_exit_code not in (None, 0)
    )
    restarted = (
        container.restart_count > 0
        and container.last_terminated_reason != "OOMKilled"
        and (clock is None or clock.current(container.last_finished_at))
    )
    if crashing and not _has_text(container.logs) and not _has_text(container.previous_logs):
        return ".log"
    if restarted and not crashing and not _has_text(container.previous_logs):
        return ".previous.log"
    return None


def _has_text(log: str | None) -> bool:
    return log is not None and log.strip() != ""


def _crash_words(container: Container) -> str:
    state = container.state_reason or container.state or "restarted"
    return f"is {state} after {container.restart_count} restarts (last exit code {container.last_exit_code})"


def _state(snap: Snapshot, name: str) -> str:
    status = snap.sources.get(name)
    if status is None or status.status == "missing":
        return "not in the bundle"
    return status.detail or status.status


def _namespace_flag(snap: Snapshot) -> str:
    """The namespaces to collect again: those the manifest says were collected; without a manifest
    that says, those the bundle's pods, workloads, Services and pod events are in (-A for several,
    as kubectl lists one namespace or all, and for none known: every namespace is a command that runs)."""
    namespaces = (
        (snap.manifest.get("kubernetes") or {}).get("namespaces")
        if isinstance(snap.manifest.get("kubernetes"), dict)
        else None
    )
    if not isinstance(namespaces, list) or not namespaces:
        namespaces = sorted(_namespaces_seen(snap))
    if namespaces == ["*"] or len(namespaces) > 1:
        return "-A"
    if len(namespaces) == 1:
        return f"-n {word(namespaces[0])}"
    return "-A"


def _namespaces_seen(snap: Snapshot) -> set[str]:
    # events about nodes carry the namespace "default", which says nothing of what was collected
    pod_events = (e.namespace for e in snap.events if e.involved_kind == "Pod")
    objects = (o.namespace for kind in (snap.pods, snap.workloads, snap.services) for o in kind)
    return {namespace for namespace in (*pod_events, *objects) if namespace}


def _target_words(snap: Snapshot) -> str:
    given, selected = snap.manifest.get("kubernetes"), snap.manifest.get("selectors")
    kubernetes = given if isinstance(given, dict) else {}
    selectors = selected if isinstance(selected, dict) else {}
    namespaces = kubernetes.get("namespaces") or []
    words = [f"namespace {', '.join(map(str, namespaces))}" if namespaces else "the namespace"]
    for key, label in (("label", "selector"), ("pod", "pod"), ("ray_cluster", "Ray cluster")):
        if selectors.get(key):
            words.append(f"{label} {selectors[key]}")
    context = kubernetes.get("context")
    return " and ".join(words) + (f" (context {context})" if context else "")
