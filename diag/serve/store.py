"""The kept reports: a bounded history on disk (count and bytes), read back whole after a restart.

Each report is three files in the state folder: `<id>.json` (the JSON report), `<id>.md` (the Markdown
report) and `<id>.meta.json` (what the metrics and the listing need: trigger, times, verdict, finding
counts, source states, the alerts it answers); with `serve --html`, a fourth, `<id>.html`. The meta file
is written last, each file through a temporary name and a rename, so a report without its meta was cut
off mid-write and is removed at start. Ids sort by time, so the oldest go first when a bound is passed;
the newest report is kept even when it alone is over the byte bound (it is the one the metrics show).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ID_PATTERN = re.compile(r"[0-9]{8}T[0-9]{9}Z-(?:schedule|alert)(?:-[0-9]+)?")
SUFFIXES = (".json", ".md", ".meta.json")
OPTIONAL = (".html",)
FORMATS = {"json": ".json", "md": ".md", "html": ".html"}


@dataclass(frozen=True)
class Limits:
    reports: int = 100
    bytes: int = 64 * 1024 * 1024


@dataclass(frozen=True)
class Kept:
    """One kept report: its meta (as written) and its size on disk."""

    meta: dict[str, Any]
    size: int

    @property
    def id(self) -> str:
        return str(self.meta["id"])


def new_id(trigger: str, at: float) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(at))
    return f"{stamp}{int(at * 1000) % 1000:03d}Z-{trigger}"


class ReportStore:
    """Thread-safe; `add` evicts the oldest past either bound."""

    def __init__(self, folder: Path, limits: Limits) -> None:
        self.folder = folder
        self.limits = limits
        self._lock = threading.Lock()
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._kept: dict[str, Kept] = self._load()
        self._evict()

    def _load(self) -> dict[str, Kept]:
        kept: dict[str, Kept] = {}
        stems: set[str] = set()
        for path in self.folder.iterdir():
            stem = next(
                (path.name.removesuffix(s) for s in reversed(SUFFIXES + OPTIONAL) if path.name.endswith(s)), None
            )
            if stem is not None and ID_PATTERN.fullmatch(stem):
                stems.add(stem)
            elif path.name.startswith(".tmp-"):
                path.unlink(missing_ok=True)
        for stem in sorted(stems):
            try:
                meta = json.loads((self.folder / f"{stem}.meta.json").read_text())
                size = sum((self.folder / f"{stem}{s}").stat().st_size for s in SUFFIXES)
                size += sum(p.stat().st_size for s in OPTIONAL if (p := self.folder / f"{stem}{s}").is_file())
            except (OSError, ValueError):
                self._remove(stem)
                continue
            if isinstance(meta, dict) and meta.get("id") == stem:
                kept[stem] = Kept(meta, size)
            else:
                self._remove(stem)
        return kept

    def add(self, meta: dict[str, Any], report_json: str, markdown: str, html: str | None = None) -> Kept:
        """Keep a report; `meta["id"]` is made unique here if another report has it."""
        with self._lock:
            base, n = meta["id"], 1
            while meta["id"] in self._kept:
                meta = {**meta, "id": f"{base}-{n}"}
                n += 1
            stem = meta["id"]
            self._write(f"{stem}.json", report_json.encode())
            self._write(f"{stem}.md", markdown.encode())
            if html is not None:
                self._write(f"{stem}.html", html.encode())
            meta_bytes = json.dumps(meta, sort_keys=True).encode()
            size = len(report_json.encode()) + len(markdown.encode()) + len((html or "").encode()) + len(meta_bytes)
            self._write(f"{stem}.meta.json", meta_bytes)
            kept = self._kept[stem] = Kept(meta, size)
            self._evict()
            return kept

    def _write(self, name: str, data: bytes) -> None:
        temporary = self.folder / f".tmp-{name}"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, self.folder / name)

    def _evict(self) -> None:
        ordered = sorted(self._kept)
        total = sum(k.size for k in self._kept.values())
        while len(ordered) > 1 and (len(ordered) > self.limits.reports or total > self.limits.bytes):
            oldest = ordered.pop(0)
            total -= self._kept.pop(oldest).size
            self._remove(oldest)

    def _remove(self, stem: str) -> None:
        for suffix in SUFFIXES + OPTIONAL:
            (self.folder / f"{stem}{suffix}").unlink(missing_ok=True)

    def listing(self) -> list[dict[str, Any]]:
        """Every kept report's meta, newest first."""
        with self._lock:
            return [self._kept[k].meta for k in sorted(self._kept, reverse=True)]

    def latest(self, trigger: str) -> dict[str, Any] | None:
        with self._lock:
            return next(
                (
                    self._kept[k].meta
                    for k in sorted(self._kept, reverse=True)
                    if self._kept[k].meta["trigger"] == trigger
                ),
                None,
            )

    def body(self, report_id: str, form: str) -> bytes | None:
        """The report in `form` (a key of FORMATS); None when no such report is kept in that form."""
        if not ID_PATTERN.fullmatch(report_id):
            return None
        with self._lock:
            if report_id not in self._kept:
                return None
            try:
                return (self.folder / f"{report_id}{FORMATS[form]}").read_bytes()
            except OSError:
                return None

    def totals(self) -> tuple[int, int]:
        """(reports kept, their bytes on disk)."""
        with self._lock:
            return len(self._kept), sum(k.size for k in self._kept.values())
