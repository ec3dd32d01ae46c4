"""What every live collector shares: the user's target, where raw files go, and how a source fared.

A collector reads one layer and writes raw files, in the bundle layout, through a `Sink`. It never
judges: judgement is the analyzer's, which reads the same bundle whether it came from here or from disk.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from diag.bundle.files import Bundle
from diag.collect import json_text
from diag.collect.redact import Redactor
from diag.snapshot.model import SourceState


@dataclass
class Target:
    """What the user asked to look at (kubectl-style flags)."""

    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = None  # None: the context's namespace
    all_namespaces: bool = False
    selector: str | None = None  # label selector for the pods that matter
    ray_cluster: str | None = None  # RayCluster or RayService name
    pod: str | None = None  # one pod by name
    vllm_urls: list[str] = field(default_factory=list)  # servers outside Kubernetes
    ray_address: str | None = None  # dashboard URL of a cluster outside Kubernetes
    prometheus_url: str | None = None
    prometheus_service: str | None = None  # NAMESPACE/NAME[:PORT], through the API server's service proxy
    prometheus_selector: str | None = None  # extra label matchers for the vLLM queries
    prometheus_token: str | None = field(default=None, repr=False)
    prometheus_user: str | None = None
    prometheus_password: str | None = field(default=None, repr=False)
    prometheus_ca_file: str | None = None
    prometheus_headers: list[str] = field(default_factory=list, repr=False)  # "Name: value"
    since_s: float | None = None  # the Prometheus window (None: the collector's default)
    local_gpu: bool | None = None  # None: on when NVML loads, unless the GPU sweep reads every node
    gpu_sweep: bool = False  # every Ray node's GPUs through a read-only Ray job (diag/collect/ray_sweep.py)
    scrapes: int = 2  # /metrics reads per busy vLLM server, for counter rates (diag/collect/vllm.py)
    # False: a busy server whose rates Prometheus' history holds is read once. True: `scrapes` times all
    # the same, for what is happening now (an alert's triage: a storm younger than the history's judgements)
    scrape_beside_history: bool = False
    scrape_interval_s: float = 2.0
    log_tail_lines: int = 500
    source_timeout_s: float = 20.0
    total_timeout_s: float = 120.0
    max_answer_bytes: int = 64 * 1024 * 1024  # one HTTP answer (list page, log, proxied GET); over it the source fails
    request_timeout_s: float | None = None  # --request-timeout: each request to the API server (None: 30s)
    impersonate_user: str | None = None  # --as
    impersonate_groups: list[str] = field(default_factory=list)  # --as-group


@dataclass
class SourceResult:
    """One line of the report's "sources" table."""

    name: str  # e.g. "k8s/pods.json", "vllm/llama-0", "ray/dashboard"
    status: SourceState
    detail: str = ""


class Sink:
    """Thread-safe writer of raw files into a bundle, with secrets redacted on the way in."""

    def __init__(self, bundle: Bundle, redact: Callable[[str, bytes], bytes] | None = None) -> None:
        self.bundle = bundle
        self._redact = redact
        self._lock = threading.Lock()
        self.scrape_times: dict[str, list[float]] = {}
        self.prometheus: dict[str, object] | None = None  # where and over which window, for the manifest

    def write(self, rel: str, data: bytes | str) -> None:
        raw = data.encode() if isinstance(data, str) else data
        if self._redact is not None:
            raw = self._redact(rel, raw)  # outside the lock: a fleet's pods.json must not hold up a /metrics
        self._add(rel, raw)

    def write_json(self, rel: str, document: Any, parsed: list | None = None) -> None:
        """A JSON document in hand, laid out by json_text: a Redactor cleans it as it is, instead of
        reading back the text it is written as. `parsed`: what the loader's parser makes of the file,
        made from the document's redacted items (`redact_object`); kept where a Redactor writes it."""
        if isinstance(self._redact, Redactor):
            raw = self._redact.document(rel, document)
        else:
            raw, parsed = (json_text.dumps(document) + "\n").encode(), None
            if self._redact is not None:
                raw = self._redact(rel, raw)
        self._add(rel, raw, parsed)

    def _add(self, rel: str, raw: bytes, parsed: list | None = None) -> None:
        with self._lock:
            self.bundle.add(rel, raw, parsed)

    def record_prometheus(self, info: dict[str, object]) -> None:
        with self._lock:
            self.prometheus = info

    def record_scrape(self, server: str, when: float | None = None) -> None:
        with self._lock:
            self.scrape_times.setdefault(server, []).append(when if when is not None else time.time())
