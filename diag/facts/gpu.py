"""Facts for the gpu layer: one subject per physical GPU seen through NVML or nvidia-smi, and one per
node with GPUs (scope gpu_node) for what cannot be pinned on one GPU: an Xid line whose PCI address no
GPU in the data has, and the device plugin advertising fewer GPUs than the node has."""

from __future__ import annotations

import re
from dataclasses import dataclass

from diag.bundle import layout
from diag.bundle.layout import NVML_FILE, SMI_XML_FILE
from diag.core.shell import word
from diag.facts.common import link, plain
from diag.facts.episodes import Span
from diag.facts.gpu_episodes import GpuHistory, ceilings, foreign_memory, gpu_history
from diag.facts.replica_restarts import Restart, WindowEvents, restarts
from diag.facts.vllm_episodes import symptoms
from diag.link.join import xid_lines_by_node
from diag.link.prometheus_join import history_window
from diag.parsers.logs import xids_in
from diag.parsers.signals import looked_for
from diag.parsers.xid_catalogue import builtin_catalogue
from diag.snapshot.clock import Clock, iso_time
from diag.snapshot.indexes import indexes
from diag.snapshot.model import GPU, GPUProcess, Node, PromWindow, RayNode, Snapshot, VllmServer, XidLine
from diag.snapshot.quantity import GPU_RESOURCE, gpu_count

# Clocks-event reasons that mean something holds the clocks down against the workload (names as in
# diag.parsers.gpu_common). sw_power_cap is not one: a busy GPU reaches its power limit and the driver
# trims its clocks to stay there, as our real H200 load capture shows (97-100 % utilization, about
# 690 of 700 W, sw_power_cap active). gpu_idle, the clock settings and sync_boost are no slowdown at all.
SLOWDOWN_REASONS = ("hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")


def cluster_facts(snap: Snapshot) -> dict:
    return {
        "gpus_seen": len(snap.gpus),
        "gpu_drivers": _drivers_by_node(snap),
        "cuda_driver_too_old": _driver_too_old(snap),
    }


def scopes(snap: Snapshot, settings: dict, clock: Clock) -> dict[str, list[dict]]:
    window = history_window(snap)
    ray = _RayIndex.of(snap)
    ooms = _CudaOoms.of(snap, clock)
    listed = _process_lists_read(snap)
    top = ceilings(snap.gpus)
    served = _ServedEpisodes(snap, settings, clock, window)
    gpus = []
    for g in snap.gpus:
        history = gpu_history(g, settings, clock, window, top.get(g.name))
        gpus.append(_gpu(g, snap, ray, ooms, g.host in listed, history) | served.of(g, history))
    return {"gpu": gpus, "gpu_node": _gpu_nodes(snap)}


class _ServedEpisodes:
    """A GPU's history against the vLLM servers it serves: its slowdowns and the servers' symptoms in the
    same minutes, an Xid before a server's restart, memory another process took."""

    def __init__(self, snap: Snapshot, settings: dict, clock: Clock, window: PromWindow | None) -> None:
        self.snap, self.settings, self.clock, self.window = snap, settings, clock, window
        self._symptoms: dict[int, list[tuple[str, Span]]] = {}
        self._restarts_of: dict[int, list[Restart] | None] = {}
        self.events = WindowEvents(snap, settings)

    def _of_server(self, server: VllmServer) -> list[tuple[str, Span]]:
        if id(server) not in self._symptoms:
            self._symptoms[id(server)] = symptoms(server, self.settings, self.clock, self.window)
        return self._symptoms[id(server)]

    def of(self, gpu: GPU, history: GpuHistory) -> dict:
        return self._slowdown(gpu, history) | {
            "xid_restart": self._xid_restart(gpu, history),
            "foreign_memory": self._foreign_memory(gpu),
        }

    def _servers(self, gpu: GPU) -> list[VllmServer]:
        """The servers given this GPU, by the join or by dcgm-exporter's pod label on the GPU's series."""
        ref = gpu.uuid or f"{gpu.host}/{gpu.index}"
        return [
            s
            for s in self.snap.vllm_servers
            if s.history and (ref in s.gpus or (s.history_pod is not None and s.history_pod in gpu.labelled_pods))
        ]

    def _restarts(self, server: VllmServer) -> list[Restart] | None:
        if id(server) not in self._restarts_of:
            self._restarts_of[id(server)] = restarts(server, self.window)
        return self._restarts_of[id(server)]

    def _events(self, server: VllmServer, start: float, end: float) -> list[str]:
        pod = server.pod or server.history_pod
        return [line for line, _ in self.events.between(start, end, {pod} if pod else set())]

    def _xid_restart(self, gpu: GPU, history: GpuHistory) -> dict | None:
        """The first Xid on this GPU that a server given it went away after, within xid_restart_within_s; an
        Xid the GPU caused before one the application did (settings.application_xids, followup_xids)."""
        if not history.xid_starts:
            return None
        servers = self._servers(gpu)
        told = [self._restarts(s) for s in servers]
        if all(r is None for r in told):
            return None
        step = self.window.step if self.window else 15.0
        reports = dict(history.xids)
        theirs = {*self.settings["application_xids"], *self.settings["followup_xids"]}
        for code, at in sorted(history.xid_starts, key=lambda x: (x[0] in theirs, x[1])):
            for server, found in zip(servers, told, strict=True):
                for restart in found or []:
                    after = restart.went_away - at
                    # dcgm-exporter is often scraped less often than vLLM: its sample of the Xid can come later
                    if -max(2 * step, 60.0) <= after <= self.settings["xid_restart_within_s"]:
                        return {"found": True, "xid": code, "xid_at": iso_time(at), "xid_text": reports[code],
                                "server": server.name, "restart": restart.text(), "down_minutes": restart.minutes,
                                "went_away": iso_time(restart.went_away), "back": iso_time(restart.back),
                                "after_s": round(after), "events": self._events(server, at, restart.back)}  # fmt: skip
        return {"found": False}

    def _foreign_memory(self, gpu: GPU) -> dict | None:
        """Memory another process took on this GPU while the vLLM server given it served worse."""
        if not gpu.history.get("dcgm_fb_used"):
            return None
        servers = self._servers(gpu)
        if not servers:
            return None
        shared = self._shared_by_design(gpu)
        if shared:
            return {"found": False, "shared": shared}
        for server in servers:
            for took in foreign_memory(gpu, server, self.settings, self.window):
                start, end = took.span.start, took.span.end + took.span.step
                for text, span in self._of_server(server):
                    # the symptom follows the memory: it begins within the episode
                    if start <= span.start < end:
                        return {"found": True, "server": server.name, "took_mib": round(took.took_mib),
                                "held_mib": round(took.held_mib), "gpu_episode": took.text(self.clock),
                                "symptom": text, "minutes": took.span.minutes, "from": iso_time(start),
                                "until": iso_time(took.span.end),
                                "events": self._events(server, start, end)}  # fmt: skip
        return {"found": False}

    def _shared_by_design(self, gpu: GPU) -> str:
        """Why another process on this GPU is planned: MIG instances, or the device plugin's time-slicing
        or MPS (the node's GPU feature discovery labels)."""
        if gpu.mig_mode == "Enabled":
            return "MIG is enabled: each instance has its own memory"
        node = next((n for n in self.snap.nodes if n.name == gpu.host), None)
        labels = node.labels if node else {}
        strategy = labels.get("nvidia.com/gpu.sharing-strategy", "")
        replicas = labels.get("nvidia.com/gpu.replicas", "1")
        if strategy in ("time-slicing", "mps") or (replicas.isdigit() and int(replicas) > 1):
            return (
                f"node {gpu.host} shares its GPUs by design (nvidia.com/gpu.sharing-strategy={strategy or '?'}, "
                f"nvidia.com/gpu.replicas={replicas})"
            )
        return ""

    def _slowdown(self, gpu: GPU, history: GpuHistory) -> dict:
        if history.slowdowns is None:
            return {"slowdown_episodes": None, "serving_slowdown": None}
        episodes = [s.facts(self.clock) for s in history.slowdowns]
        servers = self._servers(gpu)
        if not servers:
            return {"slowdown_episodes": episodes, "serving_slowdown": None}
        for slowdown, facts in zip(history.slowdowns, episodes, strict=True):
            start, end = slowdown.span.start, slowdown.span.end + slowdown.span.step
            for server in servers:
                for text, span in self._of_server(server):
                    overlap = min(end, span.end + span.step) - max(start, span.start)
                    if overlap > 0:
                        return {"slowdown_episodes": episodes, "serving_slowdown": {
                            "found": True, "kind": slowdown.kind, "gpu_episode": facts["text"],
                            "server": server.name, "symptom": text, "overlap_minutes": round(overlap / 60, 1),
                            "minutes": facts["minutes"], "from": facts["from"], "until": facts["until"],
                            "events": self._events(server, start, end),
                        }}  # fmt: skip
        return {"slowdown_episodes": episodes, "serving_slowdown": {"found": False}}


def _process_lists_read(snap: Snapshot) -> set[str]:
    """The captures (file stems) whose GPU process lists were read: nvidia-smi -q -x or the NVML
    snapshot. The --query-gpu CSV lists no processes."""
    read = (
        layout.part(rel, "host", SMI_XML_FILE, NVML_FILE)
        for rel, s in snap.sources.items()
        if s.status == "ok" or s.recovered
    )
    return {host for host in read if host is not None}


def _gpu(gpu: GPU, snap: Snapshot, ray: _RayIndex, ooms: _CudaOoms, listed: bool, history: GpuHistory) -> dict:
    unowned = [p for p in gpu.processes if p.pod is None and p.ray_actor_id is None and not p.ray_worker]
    ray_node = ray.node_of(gpu)
    nvidia_smi_seen = not gpu.only_in_prometheus
    if nvidia_smi_seen and not listed and not gpu.serving_pods:
        # Only the CSV: no process list. On a GPU no pod was given, whatever is in use is no serving
        # pod's, and GPU-106 asks it only of a GPU no Ray worker holds: the memory in use is all there is to tell.
        return _gpu_facts(gpu, snap, ray, ray_node, history, None, _csv_used_text(gpu), gpu.memory_used_mib, None)
    return _gpu_facts(
        gpu, snap, ray, ray_node, history,
        [plain(p) for p in unowned] if nvidia_smi_seen else None,
        [_process_text(p) for p in unowned] if nvidia_smi_seen else [_fb_used_text(history)],
        _memory_of(unowned) if nvidia_smi_seen else history.fb_used_mib,
        ooms.naming(unowned, ray_node, gpu) if nvidia_smi_seen else None,
        ",".join(str(p.pid) for p in unowned) if nvidia_smi_seen else "<pid>",
    )  # fmt: skip


def _gpu_facts(
    gpu: GPU,
    snap: Snapshot,
    ray: _RayIndex,
    ray_node: RayNode | None,
    history: GpuHistory,
    unowned: list[dict] | None,
    unowned_text: list[str],
    unowned_mib: float | None,
    oom_from_unowned: list[str] | None,
    unowned_pids: str = "<pid>",
) -> dict:
    nvidia_smi_seen = not gpu.only_in_prometheus
    return plain(gpu, drop=("history",)) | {
        "node_name": gpu.node or gpu.host,
        "memory_used_mib": gpu.memory_used_mib if nvidia_smi_seen else history.fb_used_mib,
        "identity": _identity(gpu),
        "device_id": _device_id(gpu),
        "lost": gpu.open_error is not None,
        # the pods given this GPU that run a vLLM server
        "vllm_pods": [key for key in gpu.serving_pods if (pod := snap.pod(key)) is not None and pod.vllm_server],
        "memory_used_pct": (
            100.0 * gpu.memory_used_mib / gpu.memory_total_mib
            if gpu.memory_used_mib is not None and gpu.memory_total_mib
            else None
        ),
        "ecc_uncorrected_volatile": _ecc_uncorrected(gpu, history),
        "memory_faults": _memory_faults(gpu)
        + _ecc_text(gpu, history)
        + ([history.rows_remapped_text] if history.rows_remapped else [])
        + (["a row remapping failed (DCGM_FI_DEV_ROW_REMAP_FAILURE, dcgm-exporter)"] if history.remap_failure else []),
        "slowdown_reasons": _slowdown_reasons(gpu, history, nvidia_smi_seen),
        "xids": sorted({*gpu.xids, *(code for code, _ in history.xids)}) if nvidia_smi_seen or history.read else None,
        "remapped_rows_failure": _either(gpu.remapped_rows_failure, history.remap_failure),
        "remapped_rows_pending": _either(gpu.remapped_rows_pending, history.rows_remapped or None),
        "history_read": history.read,
        "sm_clock_text": _sm_clock_text(gpu),
        "pcie_link_below_max": _pcie_link_below_max(gpu),
        "pcie_link_text": f"Gen{_known(gpu.pcie_gen_current)} x{_known(gpu.pcie_width_current)}"
        f" of Gen{_known(gpu.pcie_gen_max)} x{_known(gpu.pcie_width_max)}",
        "xid_reports": _xid_reports(gpu) + [_xid_report(code, text) for code, text in history.xids],
        "unowned_processes": unowned,
        "unowned_process_text": unowned_text,
        "unowned_pids": unowned_pids,
        # known from dcgm-exporter alone, the memory in use is all that can be told: no process list
        "unowned_memory_mib": unowned_mib,
        "ray_node_id": ray_node.node_id if ray_node else None,
        "ray_pod": _pod_ref(ray_node.pod) if ray_node else None,
        "ray_gpus_available": ray.gpus_free(ray_node) if ray_node else None,
        "ray_counts_free": _ray_counts_free(gpu, ray_node, ray),
        "oom_from_unowned": oom_from_unowned,
        # what `remediation` runs the commands through: the Ray pod that holds the GPU, or nothing on a bare machine
        "exec_prefix": f"kubectl -n {word(ref['namespace'])} exec {word(ref['name'])} -- "
        if (ref := _pod_ref(ray_node.pod if ray_node else None))
        else "",
        "_subject": f"gpu/{gpu.host}/{gpu.index}",
        "_links": link("gpu", gpu.uuid or f"{gpu.host}/{gpu.index}")
        + link("node", gpu.node)
        + [f"pod:{p}" for p in gpu.serving_pods]
        + link("ray_node", ray_node.node_id if ray_node else None),
    }


def _csv_used_text(gpu: GPU) -> list[str]:
    used = "?" if gpu.memory_used_mib is None else f"{gpu.memory_used_mib:.0f} MiB"
    return [f"{used} in use (nvidia-smi --query-gpu; which processes hold it, nvidia-smi -q -x on the host tells)"]


def _fb_used_text(history: GpuHistory) -> str:
    used = "?" if history.fb_used_mib is None else f"{history.fb_used_mib:.0f} MiB"
    return (
        f"DCGM_FI_DEV_FB_USED = {used} at the newest sample (dcgm-exporter; "
        "which processes hold it, only nvidia-smi on the node tells)"
    )


def _ecc_text(gpu: GPU, history: GpuHistory) -> list[str]:
    if not history.ecc_uncorrected or gpu.ecc_uncorrected_volatile:
        return []  # none, or nvidia-smi's count already says it
    count = f"{history.ecc_uncorrected:g}"
    return [
        f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL = {count} (dcgm-exporter): uncorrectable ECC errors since the driver loaded"
    ]


def _ecc_uncorrected(gpu: GPU, history: GpuHistory) -> float | None:
    """nvidia-smi's count where it was read, else dcgm-exporter's (not in its default counters)."""
    return gpu.ecc_uncorrected_volatile if gpu.ecc_uncorrected_volatile is not None else history.ecc_uncorrected


def _either(seen: bool | None, in_history: bool | None) -> bool | None:
    """True when either source saw it; false only when one read it and neither saw it."""
    if seen or in_history:
        return True
    return False if False in (seen, in_history) else None


def _slowdown_reasons(gpu: GPU, history: GpuHistory, nvidia_smi_seen: bool) -> list[str] | None:
    if not nvidia_smi_seen and history.throttled is None and history.slowdowns is None:
        return None
    return (
        [r for r in gpu.clocks_event_reasons if r in SLOWDOWN_REASONS]
        + (history.throttled or [])
        + history.slowdown_texts
    )


def _known(value: int | None) -> str:
    return "?" if value is None else str(value)


def _identity(gpu: GPU) -> str:
    """ "NVIDIA H200 GPU-4b79... (PCI 00000000:18:00.0)" with what is known; a GPU NVML cannot open has none."""
    parts = [p for p in (gpu.name, gpu.uuid) if p] + ([f"(PCI {gpu.pci_bus_id})"] if gpu.pci_bus_id else [])
    return " ".join(parts) or "no name, UUID or PCI address: the GPU did not answer NVML or nvidia-smi"


def _device_id(gpu: GPU) -> str:
    """What `nvidia-smi -i` takes to name this GPU on any machine: its UUID, else its PCI address. The
    index is never used: a container numbers the GPUs it was given from 0, the host numbers them all."""
    return gpu.uuid or gpu.pci_bus_id or "<the GPU's UUID or PCI address: nvidia-smi -L on the node>"


def _memory_faults(gpu: GPU) -> list[str]:
    """The uncorrectable-memory signs the GPU shows, in words (what GPU-101 quotes)."""
    faults = []
    if gpu.ecc_uncorrected_volatile:
        lifetime = (
            "" if gpu.ecc_uncorrected_aggregate is None else f" ({gpu.ecc_uncorrected_aggregate} over the GPU's life)"
        )
        plural = "s" if gpu.ecc_uncorrected_volatile != 1 else ""
        faults.append(
            f"{gpu.ecc_uncorrected_volatile} uncorrectable ECC error{plural} since the driver loaded{lifetime}"
        )
    if gpu.retired_pages_pending:
        faults.append("pages retired for ECC errors wait for a GPU reset (retired_pages.pending: Yes)")
    if gpu.remapped_rows_pending:
        faults.append("a row remapping waits for a GPU reset (remapped_rows.pending: Yes)")
    if gpu.remapped_rows_failure:
        faults.append("a row remapping failed: no spare rows left (remapped_rows.failure: Yes)")
    return faults


def _sm_clock_text(gpu: GPU) -> str | None:
    if gpu.clock_sm_mhz is None or not gpu.clock_sm_max_mhz:
        return None
    share = 100.0 * gpu.clock_sm_mhz / gpu.clock_sm_max_mhz
    return f"{gpu.clock_sm_mhz:g} of {gpu.clock_sm_max_mhz:g} MHz ({share:.0f} %)"


def _pcie_link_below_max(gpu: GPU) -> bool | None:
    """Does the link run below the generation or width that GPU and host both support? None when unreported."""
    pairs = [(gpu.pcie_gen_current, gpu.pcie_gen_max), (gpu.pcie_width_current, gpu.pcie_width_max)]
    known = [(current, best) for current, best in pairs if current is not None and best is not None]
    if not known:
        return None
    return any(current < best for current, best in known)


def _xid_reports(gpu: GPU) -> list[dict]:
    """One {xid, meaning, text} per Xid seen: each kernel line about this GPU, then codes NVML reported."""
    reports = [_xid_report(code, line) for line in gpu.xid_lines for code in xids_in([line])]
    from_lines = {r["xid"] for r in reports}
    reports += [_xid_report(code, "reported by NVML") for code in gpu.xids if code not in from_lines]
    return reports


def _xid_report(code: int, source: str) -> dict:
    """What the Xid means and what NVIDIA says to do, from its catalogue (rules/data/xid-catalogue.yaml)."""
    entry = builtin_catalogue().entry(code)
    return {
        "xid": code,
        "meaning": entry.meaning,
        "text": f"Xid {code} ({entry.meaning}): {source}",
        "mnemonic": entry.mnemonic,
        "action": entry.immediate,
        "action_text": entry.immediate_text,
        "investigate": entry.investigate,
        "named_by": entry.named_by,
    }


def _process_text(proc: GPUProcess) -> str:
    memory = "memory unknown" if proc.used_memory_mib is None else f"{proc.used_memory_mib:.0f} MiB"
    return f"pid {proc.pid} ({proc.name or 'name unknown'}): {memory}"


def _memory_of(processes: list[GPUProcess]) -> float | None:
    """MiB the processes hold; None when none of them says (0.0 only when there are none)."""
    known = [p.used_memory_mib for p in processes if p.used_memory_mib is not None]
    return sum(known) if known or not processes else None


# --------------------------------------------------------------------------- per node: what no one GPU owns


def _gpu_nodes(snap: Snapshot) -> list[dict]:
    """One subject per node with GPUs: in the GPU data, in Xid lines, or in the node's capacity."""
    xid_lines = xid_lines_by_node(snap)
    nodes, gpus_by_node = indexes(snap).nodes, indexes(snap).gpus_on_node
    names = set(gpus_by_node) | {n for n, lines in xid_lines.items() if lines}
    names |= {n.name for n in snap.nodes if GPU_RESOURCE in n.capacity}
    return [
        _gpu_node(name, nodes.get(name), snap, gpus_by_node.get(name, []), xid_lines.get(name, []))
        for name in sorted(names)
    ]


def _gpu_node(name: str, node: Node | None, snap: Snapshot, gpus: list[GPU], xid_lines: list[XidLine]) -> dict:
    known = {g.pci_address for g in gpus if g.pci_address is not None}
    unplaced = [line for line in xid_lines if line.device not in known]
    unplaced_reports = [_xid_report(code, line.text) for line in unplaced for code in line.codes]
    capacity, allocatable = _gpu_capacity(node), _gpu_allocatable(node)
    return {
        "name": name,
        "gpus_in_data": len(gpus),
        "gpu_addresses": sorted(known),
        "unplaced_xids": [code for line in unplaced for code in line.codes],
        "unplaced_xid_reports": unplaced_reports,
        # every Xid on the node, placed or not, that no rule of its own names (the catalogue's `named_by`)
        "catalogue_xids": [
            r for r in [r for g in gpus for r in _xid_reports(g)] + unplaced_reports if r["named_by"] is None
        ],
        "lost_gpus": [_lost_text(g) for g in gpus if g.open_error is not None],
        "gpu_capacity": capacity,
        "gpu_allocatable": allocatable,
        "gpus_unadvertised": None if capacity is None or allocatable is None else capacity - allocatable,
        "serving_pods": sorted({p for g in gpus for p in g.serving_pods}),
        "_subject": f"node/{name}",
        "_links": link("node", name) + [f"gpu:{g.uuid or f'{g.host}/{g.index}'}" for g in gpus],
    }


def _lost_text(gpu: GPU) -> str:
    """ "GPU 3 (PCI 0000:DB:00.0): GPU is lost", with whatever names the GPU still had."""
    known = [p for p in (gpu.uuid, gpu.pci_bus_id and f"PCI {gpu.pci_bus_id}") if p]
    return f"GPU {gpu.index}{' (' + ', '.join(known) + ')' if known else ''}: {gpu.open_error}"


def _gpu_capacity(node: Node | None) -> int | None:
    """nvidia.com/gpu in the node's capacity: the GPUs the device plugin found; 0 when it lists none."""
    return None if node is None else gpu_count(node.capacity)


def _gpu_allocatable(node: Node | None) -> int | None:
    """nvidia.com/gpu in the node's allocatable: the device plugin leaves out the GPUs it marked unhealthy."""
    return None if node is None else gpu_count(node.allocatable)


# --------------------------------------------------------------------------- Ray's view of the GPU


@dataclass
class _RayIndex:
    """What each GPU asks of Ray, looked up once per snapshot: a fleet has thousands of GPUs, Ray nodes
    and actors, and a scan of them per GPU grew with their product."""

    in_pod_named: dict[str, RayNode]  # pod name -> the first Ray node running in a pod of that name
    on_host: dict[str, RayNode]  # GPU capture (file stem) -> the Ray node outside Kubernetes on that machine
    with_gpus_on: dict[str, list[RayNode]]  # Kubernetes node -> live Ray nodes with GPUs in pods there
    gpus_of_host: dict[str, list[GPU]]  # the GPUs of each capture (file stem)
    held: dict[str, set[str]]  # Ray node id -> the GPU ids its live actors were given
    sole_node_gpus_free: tuple[str, float] | None  # the only live Ray node, and the GPUs `ray status` counts free

    @classmethod
    def of(cls, snap: Snapshot) -> _RayIndex:
        in_pod_named: dict[str, RayNode] = {}
        on_host = {node.gpu_host: node for node in snap.ray_nodes if node.gpu_host is not None}
        with_gpus_on: dict[str, list[RayNode]] = {}
        for node in snap.ray_nodes:
            pod = snap.pod(node.pod) if node.pod else None
            if pod is None:
                continue
            in_pod_named.setdefault(pod.name, node)
            if node.state != "DEAD" and node.resources_total.get("GPU", 0.0) > 0 and pod.node_name is not None:
                with_gpus_on.setdefault(pod.node_name, []).append(node)
        held: dict[str, set[str]] = {}
        for actor in snap.ray_actors:
            if actor.state == "ALIVE" and actor.node_id is not None:
                held.setdefault(actor.node_id, set()).update(actor.gpu_ids)
        for node in snap.ray_nodes:  # the GPU slots of every worker process, a task's as well as an actor's
            for worker in node.workers or []:
                held.setdefault(node.node_id, set()).update(worker["gpu_ids"])
        alive = [n for n in snap.ray_nodes if n.state != "DEAD"]
        usage = snap.ray_status.usage.get("GPU") if snap.ray_status is not None else None
        sole = (alive[0].node_id, usage[1] - usage[0]) if len(alive) == 1 and usage is not None else None
        return cls(in_pod_named, on_host, with_gpus_on, indexes(snap).gpus_of_host, held, sole)

    def gpus_free(self, node: RayNode) -> float | None:
        """The GPUs Ray counts free on the node: from its own report, else, for the only live node of the
        cluster, from the cluster's usage in `ray status` (or the dashboard's cluster status)."""
        if node.resources_available is not None:
            return node.resources_available.get("GPU", 0.0)
        if self.sole_node_gpus_free is not None and self.sole_node_gpus_free[0] == node.node_id:
            return self.sole_node_gpus_free[1]
        return None

    def node_of(self, gpu: GPU) -> RayNode | None:
        """The Ray node whose raylet hands out this GPU: the one outside Kubernetes on the machine the data
        was captured on, the one in the pod the data was captured in, else the only Ray node with GPUs
        whose pod runs on the GPU's Kubernetes node."""
        if (on_machine := self.on_host.get(gpu.host)) is not None:
            return on_machine
        if (in_capture_pod := self.in_pod_named.get(gpu.host)) is not None:
            return in_capture_pod
        on_node = self.with_gpus_on.get(gpu.node, []) if gpu.node is not None else []
        return on_node[0] if len(on_node) == 1 else None


def _pod_ref(key: str | None) -> dict | None:
    """{"namespace", "name"} of a "namespace/name" pod key, for kubectl commands."""
    if not key:
        return None
    namespace, name = key.split("/", 1)
    return {"namespace": namespace, "name": name}


def _ray_counts_free(gpu: GPU, node: RayNode | None, ray: _RayIndex) -> bool | None:
    """Would Ray place a GPU task on this GPU? None when that cannot be told.

    Ray must report a whole GPU available on the node, and this GPU must not be one it has given out.
    Which ones it gave out is known from the GPU ids of its live actors (the dashboard's logical
    actors), else when the GPUs running a Ray actor's process are exactly as many as Ray holds (a
    vLLM V1 engine runs in a child process of its actor, so its GPU shows no actor pid). Both read
    GPU indexes as Ray numbers them, so only when the data shows exactly the GPUs Ray was given.
    """
    available = ray.gpus_free(node) if node is not None else None
    if node is None or available is None:
        return None
    total = node.resources_total.get("GPU", 0.0)
    if available < 1.0:
        return False
    seen = ray.gpus_of_host.get(gpu.host, [])
    if len(seen) != total:
        return None
    held = ray.held.get(node.node_id, set())
    if held:
        return str(gpu.index) not in held
    running_actors = {g.index for g in seen if any(p.ray_actor_id or p.ray_worker for p in g.processes)}
    if len(running_actors) == total - available:
        return gpu.index not in running_actors
    return None


# --------------------------------------------------------------------------- CUDA out of memory, and whose memory


# PyTorch's out-of-memory message lists every process on the GPU (c10/cuda/CUDACachingAllocator.cpp):
# "... of which 18.12 GiB is free. Process 1434 has 60.51 GiB memory in use. ..."
_PROCESS_IN_OOM = re.compile(r"\bProcess (\d+) has (\d+(?:\.\d+)? [KMGT]?i?B) memory in use")


@dataclass
class _CudaOoms:
    """Today's CUDA out-of-memory deaths: of Ray actors, by Ray node, and of vLLM servers, by GPU."""

    by_ray_node: dict[str, list[tuple[str, str]]]  # Ray node id -> (who, the line)
    by_gpu: dict[str, list[tuple[str, str]]]  # GPU ref -> (who, the line)

    @classmethod
    def of(cls, snap: Snapshot, clock: Clock) -> _CudaOoms:
        pattern = looked_for(snap).patterns.get("cuda_oom")
        by_ray_node: dict[str, list[tuple[str, str]]] = {}
        if pattern is not None:
            for actor in snap.ray_actors:
                cause = actor.death_cause or ""
                if (
                    actor.node_id
                    and actor.state in ("DEAD", "RESTARTING")
                    and pattern.search(cause)
                    and clock.current(actor.end_time)
                ):
                    who = f"Ray actor {actor.name or actor.class_name} ({actor.actor_id[:8]}, {actor.state})"
                    by_ray_node.setdefault(actor.node_id, []).append((who, cause))
        by_gpu: dict[str, list[tuple[str, str]]] = {}
        for server in snap.vllm_servers:
            for line in server.log_signals.get("cuda_oom", []):
                for ref in server.gpus:
                    by_gpu.setdefault(ref, []).append((f"vLLM server {server.name}", line))
        return cls(by_ray_node, by_gpu)

    def naming(self, unowned: list[GPUProcess], ray_node: RayNode | None, gpu: GPU) -> list[str]:
        """The deaths whose own message names a process on this GPU that no Ray worker or serving pod owns."""
        pids = {p.pid for p in unowned}
        seen = self.by_ray_node.get(ray_node.node_id, []) if ray_node else []
        seen = seen + self.by_gpu.get(gpu.uuid or f"{gpu.host}/{gpu.index}", [])
        found = []
        for who, line in seen:
            named = [f"pid {pid} ({memory})" for pid, memory in _PROCESS_IN_OOM.findall(line) if int(pid) in pids]
            if named:
                found.append(f"{who}: CUDA out of memory while {', '.join(named)} held the GPU: {line}")
        return list(dict.fromkeys(found))


# --------------------------------------------------------------------------- driver against the container's CUDA


def _drivers_by_node(snap: Snapshot) -> dict[str, str]:
    """node -> "driver 535.183.01 (CUDA 12.2)": what nvidia-smi / NVML report there, for the evidence."""
    drivers: dict[str, str] = {}
    for gpu in snap.gpus:
        node = gpu.node or gpu.host
        if gpu.driver_version and node not in drivers:
            cuda = f" (CUDA {gpu.cuda_version})" if gpu.cuda_version else ""
            drivers[node] = f"driver {gpu.driver_version}{cuda}"
    return dict(sorted(drivers.items()))


def _driver_too_old(snap: Snapshot) -> dict[str, dict]:
    """Pod key -> the last and the number of the pod's own words that the node's driver is older than
    its CUDA: log lines, and the container runtime's refusal (nvidia-container-cli "unsatisfied
    condition: cuda>=...") in states and events."""
    too_old = looked_for(snap).patterns.get("cuda_driver_too_old")
    found = {}
    for pod in snap.pods:
        lines = [line for c in pod.containers for line in c.log_signals.get("cuda_driver_too_old", [])]
        if too_old is not None:
            messages = [c.state_message for c in pod.containers] + [e.message for e in pod.events]
            lines += [m.strip() for m in messages if m and too_old.search(m)]
        if lines := list(dict.fromkeys(lines)):
            found[pod.key] = {"last": lines[-1], "count": len(lines)}
    return found
