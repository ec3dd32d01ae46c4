"""Bundle -> Snapshot: send each raw file to its parser and record how every source fared.

A file that cannot be parsed is one line under `sources` ("failed") and the rest goes on. A source
that the layout knows but the bundle lacks is "missing": never read as healthy.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from pathlib import PurePosixPath

from diag.bundle import layout
from diag.bundle.budget import OverBudget, WorkBudget, cpu_limited
from diag.bundle.files import Bundle
from diag.bundle.identity import Ambiguous, PodNames
from diag.bundle.prometheus_queries import RENAMED_PAIRS
from diag.bundle.readers import Loading
from diag.core.errors import ParseError, unexpected
from diag.core.stopwatch import Stopwatch
from diag.parsers import gpu_common, kubernetes, logs, prom_text, vllm_metrics
from diag.parsers.signals import LogSignals, builtin_signals
from diag.snapshot.model import Scrape, Snapshot, SourceStatus, VllmServer

_OVER = "over the work budget"  # a list over it is not read again for its complete items


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
        self.state = Loading(self.snap, bundle.parsed)
        self.budget = WorkBudget()

    def ok(self, name: str, detail: str = "") -> None:
        self.snap.sources[name] = SourceStatus("ok", detail)

    def failed(self, name: str, detail: str, recovered: int | None = None) -> None:
        self.snap.sources[name] = SourceStatus("failed", f"{name}: {detail}", recovered)

    def run(self, name: str, action: Callable[[], object], kind: str | None = None) -> None:
        """Run one parse step; a bad file becomes a failed source, never an exception. What the step
        returns, where it is text, is the source's detail. `kind`: the file's row, for --profile."""
        started = time.perf_counter()
        try:
            with cpu_limited(self.budget.limits.cpu_seconds_per_file, "parsing it"):
                detail = action()
        except OverBudget as e:
            self.failed(name, str(e))
        except _Degraded as e:
            self.failed(name, str(e), e.used)
        except ParseError as e:
            self.failed(name, str(e))
        except MemoryError:
            raise
        except Exception as e:  # any bad file (RecursionError, OverflowError, csv.Error ...) fails its source only
            self.failed(name, unexpected(e))
        else:
            self.ok(name, detail if isinstance(detail, str) else "")
        finally:
            if self.stopwatch is not None:
                self.stopwatch.add(self.stopwatch.parsers, kind or name, time.perf_counter() - started)

    def run_lines(self, rel: str, text: str, use: Callable[[str], object], kind: str) -> None:
        """A text that commands end with a line break: one cut off mid-line gives its complete lines,
        and the source stays "failed" (degraded) so that nobody reads it as the whole output."""
        if not text or text.endswith("\n"):
            self.run(rel, lambda: use(text), kind)
            return
        complete = text[: text.rfind("\n") + 1]
        self.run(rel, lambda: use(complete), kind)
        if self.snap.sources[rel].status == "ok":
            lines = complete.count("\n")
            self.failed(
                rel,
                f"cut off mid-line (degraded: its {lines} complete line{' was' if lines == 1 else 's were'} read)",
                lines,
            )

    def k8s_list(self, rel: str, text: str, use: Callable[[str], object], kind: str) -> None:
        """A `kubectl get -o json` list; one cut off part-way still gives its complete items, and the
        source stays "failed" so that nobody reads it as the whole list."""
        self.run(rel, lambda: use(text), kind)
        if self.snap.sources[rel].status == "ok" or self.snap.sources[rel].detail.startswith(f"{rel}: {_OVER}"):
            return
        try:
            cut = kubernetes.recover_truncated_list(text)
        except MemoryError:
            raise
        except Exception:  # the recovery is a second chance: the first read's failure stands
            cut = None
        if cut is None:
            return
        self.run(rel, lambda: use(cut.text), kind)
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
            self._read(rel)
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

    def _read(self, rel: str) -> None:
        """One file, by its row of the layout."""
        row, parts = layout.source_of(rel) or (None, None)
        if row is None or row.read is None or parts is None:
            folder = layout.folder_of(rel)
            why = f"unknown {folder.words} file" if folder is not None else "not part of the bundle layout"
            self.snap.sources[rel] = SourceStatus("skipped", f"{rel}: {why}")
            return
        text = self.bundle.text(rel)
        if (over := self.budget.refuse(rel, text)) is not None:
            self.failed(rel, over)
            return
        use = functools.partial(row.read, self.state, rel, parts)
        if row.framing == "deferred":
            use(text)
        elif row.framing == "list":
            self.k8s_list(rel, text, use, row.path)
        elif row.framing == "lines":
            self.run_lines(rel, text, use, row.path)
        else:
            self.run(rel, lambda: use(text), row.path)

    def _finish_vllm(self) -> None:
        manifest_scrapes = self.snap.manifest.get("scrapes")
        times = manifest_scrapes if isinstance(manifest_scrapes, dict) else {}
        scrape_row = layout.VLLM_SCRAPE_FILE
        for name, files in self.state.scrapes.items():
            listed = times.get(name)
            stamps = listed if isinstance(listed, list) else []
            for i, n in enumerate(sorted(files)):
                taken_at = (
                    stamps[i]
                    if i < len(stamps) and isinstance(stamps[i], (int, float)) and not isinstance(stamps[i], bool)
                    else None
                )
                read = functools.partial(self._read_scrape, self.state.servers[name], files[n], taken_at)
                self.run(files[n], read, scrape_row)
        outside = self.snap.manifest.get("outside")
        urls = outside.get("vllm_urls") if isinstance(outside, dict) else None
        for url in urls if isinstance(urls, list) else []:
            server = self.state.servers.get(layout.server_stem(url)) if isinstance(url, str) else None
            if server is not None:
                server.url = url
        self.snap.vllm_servers.extend(self.state.servers.values())

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
        for stem, text, previous in self.state.log_files:
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
            found = self.state.endpoints.get((svc.namespace, svc.name))
            if found is not None:
                svc.ready_addresses, svc.not_ready_addresses = found
                svc.endpoints_seen = True

    def _mark_missing(self) -> None:
        """An expected source that is absent is "missing"; "skipped" instead, with the collector's words,
        where the manifest says its collector was skipped (`k8s`: no Kubernetes configuration)."""
        present = self.snap.sources
        recorded = self.snap.manifest.get("sources")
        recorded = recorded if isinstance(recorded, dict) else {}
        for expected in layout.EXPECTED:
            names = (expected, *(n for n in layout.files_of(expected) if "<" not in n))
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


def load_bundle(bundle: Bundle, stopwatch: Stopwatch | None = None, signals: LogSignals | None = None) -> Snapshot:
    """`signals`: the log signals to look for (default: the built-in ones)."""
    return _Loader(bundle, stopwatch, signals).load()
