"""Lists kept warm by watches, for a process that collects again and again (`llmdiag serve`).

The first time a list is asked for (a kind, a namespace, its selectors) it is listed as `kubectl get`
lists it; a watch from that list's resourceVersion then keeps a copy current in a thread of its own
(ADDED, MODIFIED, DELETED; bookmarks move the resourceVersion). The next cycle's list is that copy,
with no request: the API server is asked only for what changed. A watch that ends (the server's
timeoutSeconds) is opened again from where it was; one that fails, or whose resourceVersion expired
(410 Gone), leaves the copy stale, and the next cycle lists afresh and watches again. A copy that no
cycle asks for in IDLE_S (the scope of an alert that passed) is dropped. A kind the API server does not
serve (a CRD not installed: 404) is asked again after ABSENT_S, not every cycle.

A copy is a `kubectl get -o json` List: items in the API server's order (by namespace/name), each
with apiVersion and kind, capped at the same number of items (metadata.continue set when more
exist). Callers must not change the items: the next cycle hands out the same objects. An item's
managedFields (which writer set which field) is kept as an empty list: the redaction drops that key
from every file it writes (and counts it), and at fleet size it is about 40 % of the JSON. The items
past the cap (a fleet's events: 5,000 of 50,000 are handed out) are kept as their JSON text.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from diag.collect.kube import KINDS, KubeError

if TYPE_CHECKING:
    from diag.collect.kube import KubeAccess

WATCH_TIMEOUT_S = 300  # the API server ends each watch after this; it is opened again at once
READ_SLACK_S = 60.0  # past the server's timeout, a silent connection is taken for dead
IDLE_S = 900.0  # a copy no cycle has asked for in this long is dropped and its watch ended
ABSENT_S = 300.0  # a kind the API server does not serve (404: its CRD is not installed) is asked again after this
Key = tuple[str, str | None, str | None, str | None]
T = TypeVar("T")


class WarmLists:
    """Thread-safe; one per process, handed to every collection (`collect_live(..., warm=)`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._copies: dict[Key, _Copy] = {}
        self._stopped = threading.Event()
        self.lists = 0  # lists made (the first of each, and each after a watch failed)
        self._parsed: dict[int, tuple[dict, Any]] = {}  # id(item) -> (the item, what `parsed` made of it)
        self._absent: dict[Key, tuple[float, str]] = {}  # a 404 list: when, and the line of its error

    def list_json(
        self,
        kube: KubeAccess,
        kind: str,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        max_items: int,
    ) -> dict:
        key = (kind, namespace, label_selector, field_selector)
        now = time.monotonic()
        with self._lock:
            copy = self._copies.get(key)
            idle = [k for k, c in self._copies.items() if now - c.used > IDLE_S]
            for k in idle:  # an alert's scope, not asked for again: its watch goes
                self._copies.pop(k).retire()
        if copy is None or not copy.current():
            with self._lock:
                absent = self._absent.get(key)
            if absent is not None and now - absent[0] < ABSENT_S:
                raise KubeError(absent[1], status=404)
            try:
                items, version = kube.list_items(kind, namespace, label_selector, field_selector)
            except KubeError as e:
                if e.status == 404:  # no watch to keep it current: remembered, not asked every cycle
                    with self._lock:
                        self._absent[key] = (now, str(e))
                raise
            copy = _Copy(kube, kind, namespace, label_selector, field_selector, items, version, self._stopped)
            with self._lock:
                old = self._copies.get(key)
                self._copies[key] = copy
                self.lists += 1
            if old is not None:
                old.retire()
            copy.start()
        copy.used = now
        return copy.as_list(max_items)

    def parsed(self, items: list[dict], parse: Callable[[list[dict]], list[T]]) -> list[T]:
        """`parse(items)` (one result per item), each item parsed once for as long as the copies hand out
        that same object: a cycle parses only the items that changed since the last. What the items of
        the last call made is kept, the rest dropped. One caller: the pods of a target (a process
        triages one target on its schedule; an alert's triage in between costs the next scheduled
        one a parse of the pods the alert's scope did not hold)."""
        with self._lock:
            known = self._parsed
        missing = [item for item in items if known.get(id(item), (None,))[0] is not item]
        made = dict(zip(map(id, missing), parse(missing), strict=True)) if missing else {}
        results = [made[id(item)] if id(item) in made else known[id(item)][1] for item in items]
        with self._lock:
            self._parsed = {id(item): (item, result) for item, result in zip(items, results, strict=True)}
        return results

    def stop(self) -> None:
        self._stopped.set()


def _key(item: dict) -> str:
    meta = item.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def _slim(item: dict) -> dict:
    meta = item.get("metadata")
    if isinstance(meta, dict) and meta.get("managedFields"):
        meta["managedFields"] = []
    return item


class _Copy:
    def __init__(
        self,
        kube: KubeAccess,
        kind: str,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        items: list[dict],
        version: str,
        stopped: threading.Event,
    ) -> None:
        self.kube = kube
        self.kind = kind
        self.namespace = namespace
        self.selectors = (label_selector, field_selector)
        self.version = version
        # what a cycle hands out, as parsed JSON; items past the cap as their JSON text (a tenth of the memory)
        self._items: dict[str, dict | bytes] = {_key(i): _slim(i) for i in items}
        self._lock = threading.Lock()
        self._stale = threading.Event()
        self._stopped = stopped
        self.used = time.monotonic()

    def start(self) -> None:
        threading.Thread(target=self._watch, name=f"llmdiag-watch-{self.kind}", daemon=True).start()

    def current(self) -> bool:
        return not self._stale.is_set()

    def retire(self) -> None:
        self._stale.set()

    def as_list(self, max_items: int) -> dict:
        spec = KINDS[self.kind]
        with self._lock:
            keys = sorted(self._items)
            for k in keys[max_items:]:  # past the cap: kept as text, parsed again if it comes under it
                item = self._items[k]
                if isinstance(item, dict):
                    self._items[k] = json.dumps(item, separators=(",", ":")).encode()
            items = [self._parsed(k) for k in keys[:max_items]]
        metadata: dict[str, Any] = {"resourceVersion": ""}
        if len(keys) > max_items:
            metadata["continue"] = "more items than the cap"
        for item in items:
            item.setdefault("apiVersion", spec.group_version)
            item.setdefault("kind", spec.kind)
        return {"apiVersion": "v1", "items": items, "kind": "List", "metadata": metadata}

    def _parsed(self, key: str) -> dict:
        item = self._items[key]
        if isinstance(item, bytes):
            item = self._items[key] = json.loads(item)
        return item

    def _watch(self) -> None:
        while not (self._stale.is_set() or self._stopped.is_set()):
            try:
                ended = self.kube.watch_lines(
                    self.kind, self.namespace, *self.selectors, self.version, WATCH_TIMEOUT_S, READ_SLACK_S, self._apply
                )
            except Exception:  # the copy can no longer be trusted: the next cycle lists afresh
                self._stale.set()
                return
            if not ended:  # an ERROR event (410 Gone: the resourceVersion is too old)
                self._stale.set()
                return
            time.sleep(0.1)

    def _apply(self, line: bytes) -> bool:
        """One watch event; False when the watch must stop."""
        if self._stale.is_set() or self._stopped.is_set():
            return False
        event = json.loads(line)
        kind, item = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            return False
        version = (item.get("metadata") or {}).get("resourceVersion")
        with self._lock:
            if kind in ("ADDED", "MODIFIED"):
                self._items[_key(item)] = _slim(item)
            elif kind == "DELETED":
                self._items.pop(_key(item), None)
            if version:
                self.version = version
        return True
