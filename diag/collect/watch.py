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
exist). The copy keeps each item as its JSON text, a fraction of the memory of the parsed objects, made as
each page of the first list is read (bench/serve.md); each cycle parses the items it hands out
(`Item`: a dict that also carries that text). What is made of an item (its Pod, its redacted line) is made once for
as long as the item is unchanged: `per_item` keys on the text. An item's managedFields (which writer
set which field) is kept as an empty list: the redaction drops that key from every file it writes
(and counts it), and at fleet size it is about 40 % of the JSON.
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
        self._made: dict[str, dict[bytes, Any]] = {}  # purpose -> an item's text -> what was made of it
        self._absent: dict[Key, tuple[float, str]] = {}  # a 404 list: when, and the line of its error

    def list_json(
        self,
        kube: KubeAccess,
        kind: str,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        max_items: int,
        raw: bool = False,
    ) -> dict:
        """The copy as a List; `raw`: its items as their JSON text (bytes), for a caller that parses only
        what it has not made anything of yet (`per_item`)."""
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
                # each item as its text as its page is read: a fleet's events are never all parsed at once
                items, version = kube.list_items(
                    kind, namespace, label_selector, field_selector, lambda item: (_key(item), _text(item, kind))
                )
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
        return copy.as_list(max_items, raw)

    def per_item(self, purpose: str, items: list, make: Callable[[list], list[T]]) -> list[T]:
        """`make(items)` (one result per item), an `Item` (or an item's text, `raw`) made once for as long
        as the copies hand it out unchanged; another item every time. What the last call for `purpose` made is
        kept, the rest dropped. One caller a purpose: a process triages one target on its schedule
        (an alert's triage in between costs the next scheduled one the items its scope did not hold).
        The results are kept by text, with no small object per item: a cycle's objects would
        otherwise be left scattered over the memory its parsed lists took (bench/serve.md)."""
        with self._lock:
            known = self._made.get(purpose, {})
        keys = [item if isinstance(item, bytes) else item.raw if isinstance(item, Item) else None for item in items]
        missing = [item for item, key in zip(items, keys, strict=True) if key is None or key not in known]
        made = iter(make(missing) if missing else [])
        results = [known[key] if key is not None and key in known else next(made) for key in keys]
        with self._lock:
            self._made[purpose] = {key: result for key, result in zip(keys, results, strict=True) if key is not None}
        return results

    def stop(self) -> None:
        self._stopped.set()


class Item(dict):
    """An item a copy hands out: its object, and `raw`, the copy's JSON text of it (the same bytes
    for as long as the item is unchanged)."""

    __slots__ = ("raw",)
    raw: bytes


def _key(item: dict) -> str:
    meta = item.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def _text(item: dict, kind: str) -> bytes:
    meta = item.get("metadata")
    if isinstance(meta, dict) and meta.get("managedFields"):
        meta["managedFields"] = []
    spec = KINDS[kind]
    item.setdefault("apiVersion", spec.group_version)
    item.setdefault("kind", spec.kind)
    return json.dumps(item, separators=(",", ":")).encode()


def _handed(raw: bytes) -> Item:
    item = Item(json.loads(raw))
    item.raw = raw
    return item


class _Copy:
    def __init__(
        self,
        kube: KubeAccess,
        kind: str,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        items: list[tuple[str, bytes]],
        version: str,
        stopped: threading.Event,
    ) -> None:
        self.kube = kube
        self.kind = kind
        self.namespace = namespace
        self.selectors = (label_selector, field_selector)
        self.version = version
        self._items: dict[str, bytes] = dict(items)
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

    def as_list(self, max_items: int, raw: bool = False) -> dict:
        with self._lock:
            keys = sorted(self._items)
            raws = [self._items[k] for k in keys[:max_items]]
        metadata: dict[str, Any] = {"resourceVersion": ""}
        if len(keys) > max_items:
            metadata["continue"] = "more items than the cap"
        items = raws if raw else [_handed(text) for text in raws]
        return {"apiVersion": "v1", "items": items, "kind": "List", "metadata": metadata}

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
                self._items[_key(item)] = _text(item, self.kind)
            elif kind == "DELETED":
                self._items.pop(_key(item), None)
            if version:
                self.version = version
        return True
