"""Bundle -> Snapshot: send each raw file to its parser and record how every source fared.

A file that cannot be parsed is one line under `sources` ("failed") and the rest goes on. A source
that the layout knows but the bundle lacks is "missing": never read as healthy.
"""

from __future__ import annotations

import functools
import math
import re
import time
from collections.abc import Callable
from pathlib import PurePosixPath

from diag.bundle.files import Bundle
from diag.bundle.identity import GPU_FILE_SUFFIXES, VLLM_FILE, Ambiguous, PodNames
from diag.bundle.layout import KUBE_LISTS
from diag.bundle.prometheus_queries import RENAMED_PAIRS
from diag.core.errors import ParseError, unexpected
from diag.core.stopwatch import Stopwatch, file_kind
from diag.parsers import (
    engine_args,
    gpu_common,
    kubernetes,
    logs,
    nvidia_smi,
    nvml,
    prom_text,
    prometheus_api,
    ray_state,
    ray_status,
    vllm,
    vllm_metrics,
)
from diag.parsers.json_fields import load_json
from diag.parsers.signals import LogSignals, builtin_signals
from diag.snapshot.model import (
    GPU,
    PromResult,
    Scrape,
    Snapshot,
    SourceStatus,
    VllmServer,
)

# The sources every analysis looks for; absent ones are reported "missing".
EXPECTED_SOURCES = (
    "k8s/pods.json",
    "k8s/events.json",
    "k8s/nodes.json",
    "ray/status",
    "ray/actors.json",
    "ray/nodes.json",
    "gpu",
    "vllm",
)

# Files that stand for an expected source under another name (the dashboard's answer for `ray status`).
_SAME_SOURCE = {"ray/status": ("ray/cluster_status",), "ray/nodes.json": ("ray/nodes_summary.json",)}

_K8S_LISTS: dict[str, Callable[[Snapshot, str], None]] = {
    row.path.removeprefix("k8s/"): row.load for row in KUBE_LISTS if row.load is not None
}

_LOG_FILE = re.compile(r"^k8s/logs/(?P<stem>.+?)(?P<previous>\.previous)?\.log$")


class _Degraded(ParseError):
    """A file read in part: `used` of its items or samples were kept, the rest could not be."""

    def __init__(self, message: str, used: int) -> None:
        super().__init__(message)
        self.used = used


class _Loader:
    def __init__(self, bundle: Bundle, stopwatch: Stopwatch | None = None, signals: LogSignals | None = None) -> None:
        self.bundle = bundle
        self.stopwatch = stopwatch
        self.signals = signals or builtin_signals()
        self.snap = Snapshot(manifest=bundle.manifest(), signals=self.signals)
        self.endpoints: dict[tuple[str, str], tuple[list[str], list[str]]] = {}
        self.log_files: list[tuple[str, str, bool]] = []  # (stem, text, previous)
        self.scrapes: dict[str, dict[int, str]] = {}  # server -> n -> file
        self.servers: dict[str, VllmServer] = {}
        self.gpus_by_key: dict[tuple[str, int], GPU] = {}  # snap.gpus by (host, index)

    def ok(self, name: str, detail: str = "") -> None:
        self.snap.sources[name] = SourceStatus("ok", detail)

    def failed(self, name: str, detail: str, recovered: int | None = None) -> None:
        self.snap.sources[name] = SourceStatus("failed", f"{name}: {detail}", recovered)

    def run(self, name: str, action: Callable[[], object]) -> None:
        """Run one parse step; a bad file becomes a failed source, never an exception."""
        started = time.perf_counter()
        try:
            action()
        except _Degraded as e:
            self.failed(name, str(e), e.used)
        except ParseError as e:
            self.failed(name, str(e))
        except MemoryError:
            raise
        except Exception as e:  # any bad file (RecursionError, OverflowError, csv.Error ...) fails its source only
            self.failed(name, unexpected(e))
        else:
            self.ok(name)
        finally:
            if self.stopwatch is not None:
                self.stopwatch.add(self.stopwatch.parsers, file_kind(name), time.perf_counter() - started)

    def run_lines(self, rel: str, text: str, use: Callable[[str], object]) -> None:
        """A text that commands end with a line break: one cut off mid-line gives its complete lines,
        and the source stays "failed" (degraded) so that nobody reads it as the whole output."""
        if not text or text.endswith("\n"):
            self.run(rel, lambda: use(text))
            return
        complete = text[: text.rfind("\n") + 1]
        self.run(rel, lambda: use(complete))
        if self.snap.sources[rel].status == "ok":
            lines = complete.count("\n")
            self.failed(
                rel,
                f"cut off mid-line (degraded: its {lines} complete line{' was' if lines == 1 else 's were'} read)",
                lines,
            )

    def k8s_list(self, rel: str, text: str, use: Callable[[str], object]) -> None:
        """A `kubectl get -o json` list; one cut off part-way still gives its complete items, and the
        source stays "failed" so that nobody reads it as the whole list."""
        self.run(rel, lambda: use(text))
        if self.snap.sources[rel].status == "ok":
            return
        try:
            cut = kubernetes.recover_truncated_list(text)
        except MemoryError:
            raise
        except Exception:  # the recovery is a second chance: the first read's failure stands
            cut = None
        if cut is None:
            return
        self.run(rel, lambda: use(cut.text))
        if self.snap.sources[rel].status == "ok":
            self.failed(
                rel,
                f"truncated after {cut.items} complete item{'' if cut.items == 1 else 's'} (those were used)",
                cut.items,
            )

    # ------------------------------------------------------------------ per folder

    def load(self) -> Snapshot:
        try:
            self.bundle.manifest_or_error()
        except ParseError as e:
            self.failed("manifest.json", f"{e} (collection time, scrape times and collector statuses unknown)")
        for rel, why in self.bundle.refused.items():
            self.failed(rel, why)
        for rel, why in self.bundle.skipped.items():
            self.snap.sources[rel] = SourceStatus("skipped", why)
        for rel in sorted(self.bundle.files):
            if rel == "manifest.json" or PurePosixPath(rel).name.startswith("."):
                continue
            top = rel.split("/", 1)[0]
            handler = {
                "k8s": self._k8s,
                "ray": self._ray,
                "gpu": self._gpu,
                "vllm": self._vllm,
                "prometheus": self._prometheus,
            }.get(top)
            if handler is None:
                self.snap.sources[rel] = SourceStatus("skipped", f"{rel}: not part of the bundle layout")
                continue
            handler(rel, self.bundle.text(rel))
        self._finish_vllm()
        self._note_empty_answers()
        for gpu in self.snap.gpus:  # once its files are merged: the first read of each field wins
            gpu.pci_address = gpu_common.pci_address(gpu.pci_bus_id)
        self._attach_logs()
        self._attach_endpoints()
        self._mark_missing()
        self._merge_manifest_statuses()
        self._note_derived()
        return self.snap

    def _k8s(self, rel: str, text: str) -> None:
        name = rel.removeprefix("k8s/")
        if (m := _LOG_FILE.match(rel)) is not None:
            self.log_files.append((m["stem"], text, bool(m["previous"])))
            self.ok(rel)
        elif name in _K8S_LISTS:
            self.k8s_list(rel, text, lambda t: _K8S_LISTS[name](self.snap, t))
        elif name == "endpoints.json":
            self.k8s_list(rel, text, lambda t: self.endpoints.update(kubernetes.parse_endpoints(t)))
        elif name == "endpointslices.json":
            self.k8s_list(rel, text, lambda t: self.endpoints.update(kubernetes.parse_endpointslices(t)))
        else:
            self.snap.sources[rel] = SourceStatus("skipped", f"{rel}: unknown Kubernetes file")

    def _ray(self, rel: str, text: str) -> None:
        name = rel.removeprefix("ray/")
        snap = self.snap
        if name == "status.txt":
            self.run_lines(rel, text, lambda t: setattr(snap, "ray_status", ray_status.parse_ray_status(t)))
        elif name == "cluster_status.json":
            if snap.ray_status is None:  # `ray status` text, when present too, is the richer one
                self.run(rel, lambda: setattr(snap, "ray_status", ray_status.parse_cluster_status_json(text)))
            else:
                self.ok(rel, "ray/status.txt used instead")
        elif name == "actors.json":
            self.run(rel, lambda: snap.ray_actors.extend(ray_state.parse_actors(text)))
        elif name == "placement_groups.json":
            self.run(rel, lambda: snap.placement_groups.extend(ray_state.parse_placement_groups(text)))
        elif name == "nodes.json":
            self.run(rel, lambda: _merge_ray_nodes(snap, ray_state.parse_nodes(text)))
        elif name == "nodes_summary.json":
            self.run(rel, lambda: _merge_ray_nodes(snap, ray_state.parse_nodes_summary(text)))
        elif name == "logical_actors.json":
            self.run(rel, lambda: _merge_actor_gpu_ids(snap, ray_state.parse_logical_actors(text)))
        elif name == "version.json":
            self.run(rel, lambda: _set_ray_version(snap, text))
        else:
            snap.sources[rel] = SourceStatus("skipped", f"{rel}: unknown Ray file")

    def _gpu(self, rel: str, text: str) -> None:
        name = PurePosixPath(rel).name
        parsers = (nvml.parse_nvml_json, nvidia_smi.parse_xml, nvidia_smi.parse_csv)
        found = [
            (suffix, parse) for suffix, parse in zip(GPU_FILE_SUFFIXES, parsers, strict=True) if name.endswith(suffix)
        ]
        if not found:
            self.snap.sources[rel] = SourceStatus("skipped", f"{rel}: unknown GPU file")
            return
        suffix, parse = found[0]
        host = name.removesuffix(suffix)
        use = lambda t: _merge_gpus(self.snap, parse(t, host), self.gpus_by_key)  # noqa: E731
        self.run_lines(rel, text, use) if suffix == ".csv" else self.run(rel, lambda: use(text))

    def _vllm(self, rel: str, text: str) -> None:
        m = VLLM_FILE.match(rel)
        if m is None:
            self.snap.sources[rel] = SourceStatus("skipped", f"{rel}: unknown vLLM file")
            return
        server = self.servers.setdefault(m["server"], VllmServer(name=m["server"]))
        kind = m["kind"]
        if kind.startswith("metrics"):
            self.scrapes.setdefault(m["server"], {})[int(m["n"] or 0)] = rel
        elif kind == "models.json":
            self.run(rel, lambda: _set_models(server, text))
        elif kind == "health.txt":
            self.run(rel, lambda: setattr(server, "health", vllm.parse_health(text)))
        elif text and not text.endswith("\n"):  # cmdline.txt cut off: a flag and its value may be apart
            self.failed(rel, "cut off mid-line: the command line is incomplete, so its flags are not used")
        else:  # cmdline.txt: the server's argv, one element per line
            argv = [line for line in text.splitlines() if line.strip()]
            self.run(rel, lambda: _set_engine_args(server, rel, argv))

    def _finish_vllm(self) -> None:
        manifest_scrapes = self.snap.manifest.get("scrapes")
        times = manifest_scrapes if isinstance(manifest_scrapes, dict) else {}
        for name, files in self.scrapes.items():
            listed = times.get(name)
            stamps = listed if isinstance(listed, list) else []
            for i, n in enumerate(sorted(files)):
                taken_at = (
                    stamps[i]
                    if i < len(stamps) and isinstance(stamps[i], (int, float)) and not isinstance(stamps[i], bool)
                    else None
                )
                self.run(files[n], functools.partial(self._read_scrape, self.servers[name], files[n], taken_at))
        self.snap.vllm_servers.extend(self.servers.values())

    def _read_scrape(self, server: VllmServer, rel: str, taken_at: float | None) -> None:
        """One /metrics text: its good samples are used; bad lines and impossible values (a vLLM gauge
        out of its range, a counter that went down with no restart) leave the source degraded."""
        text = self.bundle.text(rel)
        cut = bool(text) and not text.endswith("\n")  # a /metrics answer ends with a line break
        exposition = prom_text.parse_exposition(text[: text.rfind("\n") + 1] if cut else text)
        if cut:
            exposition.errors.append("cut off mid-line: its last line was not used")
        samples, errors = [], list(exposition.errors)
        for sample in exposition.samples:
            if (why := vllm_metrics.impossible(sample)) is None:
                samples.append(sample)
            else:
                errors.append(f"{why}: not used")
        if not samples:
            raise ParseError(f"no sample could be used: {errors[0] if errors else 'no sample in it'}")
        if not any(math.isfinite(s.value) for s in samples):
            raise ParseError("no sample could be used: every value is NaN or infinite")
        scrape = Scrape(samples, taken_at)
        if server.scrapes and (gone_back := vllm_metrics.counters_gone_back(server.scrapes[-1], scrape)):
            more = f" (and {len(gone_back) - 1} more)" if len(gone_back) > 1 else ""
            errors.append(f"{gone_back[0]}{more}: those increases are unknown")
        server.scrapes.append(scrape)
        if errors:
            raise _Degraded(f"{errors[0]} (degraded: the other {len(samples)} samples were used)", len(samples))

    def _prometheus(self, rel: str, text: str) -> None:
        stem = PurePosixPath(rel).stem

        def parse() -> None:
            result: PromResult = prometheus_api.parse_prom_answer(text, stem)
            self.snap.prometheus.append(result)

        self.run(rel, parse)

    # ------------------------------------------------------------------ after all files

    def _note_empty_answers(self) -> None:
        """Prometheus answered, with nothing: say so (a metric nobody exports under either vLLM name)."""
        series = {r.name: len(r.series) for r in self.snap.prometheus}
        for name, count in series.items():
            if count == 0 and self.snap.sources.get(f"prometheus/{name}.json", SourceStatus("failed")).status == "ok":
                self.ok(f"prometheus/{name}.json", "no series in the window")
        for new, old in RENAMED_PAIRS:
            if series.get(new) == 0 and series.get(old) == 0:
                for name in (new, old):
                    self.ok(f"prometheus/{name}.json", f"no series in the window under either vLLM name ({new}, {old})")

    def _attach_logs(self) -> None:
        """k8s/logs/<stem>.log to its container: <stem> is [<namespace>.]<pod>[.<container>]. A bare pod
        name that two namespaces share names neither pod: its log joins nothing and the sources say so."""
        pods = PodNames(self.snap.pods)
        for stem, text, previous in self.log_files:
            rel = f"k8s/logs/{stem}{'.previous' if previous else ''}.log"
            found = pods.container_of(stem)
            if isinstance(found, Ambiguous):
                self.failed(rel, found.detail)
                continue
            if found is None:
                self.snap.sources[rel] = SourceStatus("skipped", f"{rel}: no such pod in k8s/pods.json")
                continue
            complete = text
            if text and not text.endswith("\n"):
                # cut off mid-line: its failure lines still count, but it cannot stand for the whole log
                complete = text[: text.rfind("\n") + 1]
                self.failed(
                    rel,
                    f"cut off mid-line (its {complete.count(chr(10))} complete lines were read)",
                    complete.count("\n"),
                )
            elif previous:
                found.previous_logs = text
            else:
                found.logs, found.logs_scanned = text, True
            for signal, lines in logs.scan_log(complete, self.signals).items():
                found.log_signals.setdefault(signal, []).extend(lines)
            found.xid_lines = [logs.xid_line(line) for line in found.log_signals.get(logs.XID_LOG_SIGNAL, ())]

    def _attach_endpoints(self) -> None:
        for svc in self.snap.services:
            found = self.endpoints.get((svc.namespace, svc.name))
            if found is not None:
                svc.ready_addresses, svc.not_ready_addresses = found
                svc.endpoints_seen = True

    def _mark_missing(self) -> None:
        """An expected source that is absent is "missing"; "skipped" instead, with the collector's words,
        where the manifest says its collector was skipped (`k8s`: no Kubernetes configuration)."""
        present = self.snap.sources
        recorded = self.snap.manifest.get("sources")
        recorded = recorded if isinstance(recorded, dict) else {}
        for expected in EXPECTED_SOURCES:
            names = (expected, *_SAME_SOURCE.get(expected, ()))
            if not any(name == n or name.startswith((n + "/", n + ".")) for name in present for n in names):
                collector = recorded.get(expected.split("/", 1)[0])
                if isinstance(collector, dict) and collector.get("status") == "skipped":
                    present[expected] = SourceStatus("skipped", str(collector.get("detail", "")))
                else:
                    present[expected] = SourceStatus("missing", "not in the bundle")

    def _merge_manifest_statuses(self) -> None:
        """A collector's own failure (e.g. dashboard unreachable) is in the manifest, not in a file."""
        recorded = self.snap.manifest.get("sources")
        if not isinstance(recorded, dict):
            return
        for name, entry in recorded.items():
            if not isinstance(entry, dict) or entry.get("status") not in ("failed", "skipped"):
                continue
            if self.snap.sources.get(name, SourceStatus("missing")).status in ("missing",):
                self.snap.sources[name] = SourceStatus(entry["status"], str(entry.get("detail", "")))

    def _note_derived(self) -> None:
        """A file made from another layout (kubectl cluster-info dump) says which files it came from, and
        is failed where part of them could not be used."""
        for rel, made in self.bundle.derived.items():
            status = self.snap.sources.get(rel)
            if status is None:
                continue
            if made.problem is not None and status.status == "ok":
                status = SourceStatus("failed", f"{rel}: {made.problem}", status.recovered)
            detail = f"{status.detail} ({made.words})" if status.detail else made.words
            self.snap.sources[rel] = SourceStatus(status.status, detail, status.recovered)


def _merge_ray_nodes(snap: Snapshot, nodes: list) -> None:
    """nodes.json and nodes_summary.json describe the same nodes; keep one object per node id."""
    by_id = {n.node_id: n for n in snap.ray_nodes}
    for node in nodes:
        known = by_id.get(node.node_id)
        if known is None:
            snap.ray_nodes.append(node)
            by_id[node.node_id] = node
            continue
        for field_name, value in vars(node).items():
            if value not in (None, [], {}, "") and getattr(known, field_name) in (None, [], {}, ""):
                setattr(known, field_name, value)


def _merge_actor_gpu_ids(snap: Snapshot, logical: list) -> None:
    """/logical/actors knows which GPU slots each actor holds and when it died; the state API does not."""
    by_id = {a.actor_id: a for a in logical}
    for actor in snap.ray_actors:
        known = by_id.get(actor.actor_id)
        if known is not None:
            actor.gpu_ids = actor.gpu_ids or known.gpu_ids
            actor.end_time = actor.end_time or known.end_time


def _set_ray_version(snap: Snapshot, text: str) -> None:
    """/api/version names the head's Ray version; kept in the manifest-like slot rules read."""
    data = load_json(text)
    if not isinstance(data, dict) or not isinstance(data.get("ray_version"), str):
        raise ParseError("no 'ray_version' string: not a Ray dashboard /api/version answer")
    snap.ray_head_version = data["ray_version"]


def _merge_gpus(snap: Snapshot, gpus: list, by_key: dict[tuple[str, int], GPU]) -> None:
    """<host>.nvml.json, .xml and .csv of one host describe the same GPUs; the first read wins per field.
    `by_key`: the GPUs of snap.gpus by (host, index), kept up to date here."""
    for gpu in gpus:
        known = by_key.get((gpu.host, gpu.index))
        if known is None:
            snap.gpus.append(gpu)
            by_key[(gpu.host, gpu.index)] = gpu
            continue
        known_fields = vars(known)
        for field_name, value in vars(gpu).items():
            if not _blank(value) and _blank(known_fields[field_name]):
                known_fields[field_name] = value


def _blank(value: object) -> bool:
    """None, or an empty list, map or string: a field the file did not fill (a 0 or False is a value)."""
    return value is None or (not value and type(value) in (list, dict, str))


def _set_models(server: VllmServer, text: str) -> None:
    server.models, server.max_model_len_served = vllm.parse_models(text)


def _set_engine_args(server: VllmServer, rel: str, argv: list[str]) -> None:
    parsed = engine_args.parse_engine_args(argv, [])
    if parsed is None:
        raise ParseError("the command line does not run vLLM's OpenAI server")
    server.engine_args = parsed


def load_bundle(bundle: Bundle, stopwatch: Stopwatch | None = None, signals: LogSignals | None = None) -> Snapshot:
    """`signals`: the log signals to look for (default: the built-in ones)."""
    return _Loader(bundle, stopwatch, signals).load()
