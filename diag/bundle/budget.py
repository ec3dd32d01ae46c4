"""The work budget: what parsing one file (or one Prometheus answer) may cost, counted before it is parsed.

The byte limits (`BundleLimits`, `--max-answer-bytes`) bound what is read, not what reading it costs:
60 MB of `{}` is twenty million objects. Each document is therefore counted first, with `str.count`
(a scan, no parse): its nodes (JSON objects and arrays, XML tags, text lines), its Kubernetes items
(`"metadata"` keys: one per item, two in a workload with a pod template), its Prometheus series
(`"metric"` keys); a Prometheus answer is counted as it streams in (`AnswerWatch`). A document over a
ceiling is not parsed: it is its source's one failed line, and the analysis goes on with the others.
The ceilings are several times what real lists hold (docs/security.md gives the figures);
`WorkBudget` also holds the nodes the whole bundle may spend.

Nesting needs no count of its own: JSON nested deeper than Python's recursion limit is refused by the
JSON reader ("nested too deeply"), and shallower nesting costs its nodes.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import PurePosixPath

# Log files are scanned line by line with a gate in front of the patterns (diag/parsers/log_gate.py):
# their cost follows their bytes, which the byte limits bound already.
_NOT_COUNTED = (".log",)


@dataclass(frozen=True)
class WorkLimits:
    # JSON objects and arrays, XML tags, or text lines in one file; the largest real list we know
    # (pods.json of a 5,559-pod fleet) holds 285,038
    nodes_per_file: int = 2_000_000
    # past the first `free_nodes`, a file must spend this many bytes per node: real lists spend 27
    # (nvidia-smi XML) to 180 (events), `{}, ` spends 3
    min_bytes_per_node: int = 8
    free_nodes: int = 50_000
    # Kubernetes items in one list (`kubectl get` writes them all; llmdiag collect at most 5,000)
    items_per_list: int = 120_000
    # series in one Prometheus answer (one per GPU for the unscoped GPU queries)
    series_per_answer: int = 50_000
    # nodes in the whole bundle: a fleet of 5,559 pods and 4,024 GPUs spends 4.9 million
    nodes_per_bundle: int = 16_000_000
    # CPU seconds parsing one file may take: what the counts let through and still runs long (the
    # slowest file of the L fleet takes under 2)
    cpu_seconds_per_file: float = 30.0


DEFAULT_LIMITS = WorkLimits()


class OverBudget(Exception):
    """One document over a ceiling; its text is the source's line."""


_AGAIN_S = 0.05  # CPU seconds after an overrun before it is raised again


@contextmanager
def cpu_limited(seconds: float, what: str) -> Iterator[None]:
    """OverBudget inside the block once the process has spent `seconds` more of CPU: a parse the counts
    let through that still runs long fails by name instead of holding the analysis. Python code is
    stopped between two of its steps (a call into C, such as json.loads, first returns: the counts
    bound those). Only in the main thread, where signals arrive; elsewhere nothing is watched."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    message = f"over the work budget: {what} took more than {seconds:g} s of CPU; not used"
    fired: list[bool] = []

    def expired(signum: int, frame: object) -> None:
        fired.append(True)
        signal.setitimer(signal.ITIMER_VIRTUAL, _AGAIN_S)  # where this one is swallowed, the next is not
        raise OverBudget(message)

    previous = signal.signal(signal.SIGVTALRM, expired)
    signal.setitimer(signal.ITIMER_VIRTUAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, previous)
    # the handler's exception can land where it is swallowed (a garbage-collector callback, a broad
    # `except` in a reader): it comes again until one stops the block, or the block ends over its budget
    if fired:
        raise OverBudget(message)


def _count(text: str | bytes, needle: str) -> int:
    if isinstance(text, bytes):
        return text.count(needle.encode())
    return text.count(needle)


def _kind(rel: str) -> str:
    suffix = PurePosixPath(rel).suffix
    return {".json": "json", ".xml": "xml"}.get(suffix, "text")


def count_nodes(text: str | bytes, kind: str) -> int:
    if kind == "json":
        return _count(text, "{") + _count(text, "[")
    if kind == "xml":
        return _count(text, "<")
    return _count(text, "\n")


_NODE_WORDS = {"json": "JSON objects and arrays", "xml": "XML tags", "text": "lines"}


def _check_nodes(nodes: int, kind: str, limits: WorkLimits) -> None:
    if nodes > limits.nodes_per_file:
        raise OverBudget(
            f"over the work budget: {nodes:,} {_NODE_WORDS[kind]}, more than {limits.nodes_per_file:,} in one file; "
            "not parsed"
        )


def _check_series(series: int, limits: WorkLimits) -> None:
    if series > limits.series_per_answer:
        raise OverBudget(
            f"over the work budget: {series:,} series, more than {limits.series_per_answer:,} in one answer; not parsed"
        )


def check_document(text: str | bytes, kind: str, limits: WorkLimits = DEFAULT_LIMITS) -> int:
    """The document's node count; OverBudget when it holds more nodes than a real one of its size would."""
    nodes = count_nodes(text, kind)
    what = _NODE_WORDS[kind]
    _check_nodes(nodes, kind, limits)
    if nodes > limits.free_nodes and len(text) < nodes * limits.min_bytes_per_node:
        raise OverBudget(
            f"over the work budget: {nodes:,} {what} in {len(text):,} bytes (one per "
            f"{len(text) / nodes:.1f} bytes; real files spend {limits.min_bytes_per_node} or more); not parsed"
        )
    return nodes


def check_prometheus_answer(text: str | bytes, limits: WorkLimits = DEFAULT_LIMITS) -> int:
    """A Prometheus API answer, before it is parsed: its nodes (every sample is one) and its series."""
    nodes = check_document(text, "json", limits)
    _check_series(_count(text, _SERIES_KEY), limits)
    return nodes


_SERIES_KEY = '"metric"'


class AnswerWatch:
    """A Prometheus answer counted chunk by chunk as it arrives (`read_capped`'s `watch`): OverBudget as
    soon as it holds too many nodes or series, so the rest is never read."""

    def __init__(self, limits: WorkLimits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self.nodes = 0
        self.series = 0
        self.read = 0
        self._tail = b""  # the end of the last chunk, where a key cut in two begins

    def __call__(self, chunk: bytes) -> None:
        key = _SERIES_KEY.encode()
        self.nodes += chunk.count(b"{") + chunk.count(b"[")
        joined = self._tail + chunk
        self.series += joined.count(key)  # the tail is shorter than the key: nothing counted twice
        self._tail = joined[-(len(key) - 1) :]
        self.read += len(chunk)
        if self.nodes > self.limits.nodes_per_file or self.series > self.limits.series_per_answer:
            what = (
                f"{self.limits.series_per_answer:,} series"
                if self.series > self.limits.series_per_answer
                else f"{self.limits.nodes_per_file:,} JSON objects and arrays"
            )
            raise OverBudget(
                f"over the work budget: more than {what} in one answer (stopped reading at "
                f"{self.read / 1e6:.1f} MB); not kept"
            )


def check_kubernetes_list(text: str, limits: WorkLimits = DEFAULT_LIMITS) -> int:
    nodes = check_document(text, "json", limits)
    # every item the parser takes is two objects at least, itself and its metadata (one without fails
    # the list): a list of fewer nodes cannot hold too many items
    if nodes <= 2 * limits.items_per_list:
        return nodes
    items = _count(text, '"metadata"')
    if items > limits.items_per_list:
        raise OverBudget(
            f"over the work budget: {items:,} items (metadata keys), more than {limits.items_per_list:,} "
            "in one list; not parsed"
        )
    return nodes


class WorkBudget:
    """One analysis' budget: each file is checked before it is parsed and its nodes are spent from the
    bundle's."""

    def __init__(self, limits: WorkLimits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self.spent = 0

    def refuse(self, rel: str, text: str) -> str | None:
        """None when `rel` may be parsed, else why not (one line, without the file's name)."""
        if rel.endswith(_NOT_COUNTED):
            return None
        try:
            if rel.startswith("prometheus/") and rel.endswith(".json"):
                nodes = check_prometheus_answer(text, self.limits)
            elif rel.startswith("k8s/") and rel.endswith(".json"):
                nodes = check_kubernetes_list(text, self.limits)
            else:
                nodes = check_document(text, _kind(rel), self.limits)
        except OverBudget as e:
            return str(e)
        if self.spent + nodes > self.limits.nodes_per_bundle:
            return (
                f"over the work budget: the bundle's {self.limits.nodes_per_bundle:,} nodes are spent "
                f"({self.spent:,} by the files before it, {nodes:,} in this one); not parsed"
            )
        self.spent += nodes
        return None
