"""What an analysis looked at, for the report's reader: which cluster, namespaces and selectors (from
the collection's manifest.json), when, and over which history window. Unknown is None."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from diag.snapshot.clock import Clock, iso


@dataclass(frozen=True)
class AnalysisContext:
    server: str | None = None
    kube_context: str | None = None
    namespaces: list[str] | None = None  # ["*"]: every namespace; None: not recorded (a bundle without manifest)
    selectors: dict[str, Any] = field(default_factory=dict)
    collected_at: str | None = None
    collection_time_source: str = "none"  # manifest.json collected_at, the newest timestamp in the bundle, or none
    history_window_s: float | None = None

    @classmethod
    def of(cls, manifest: object, clock: Clock) -> AnalysisContext:
        manifest = manifest if isinstance(manifest, dict) else {}
        kubernetes = _mapping(manifest.get("kubernetes"))
        namespaces = kubernetes.get("namespaces")
        return cls(
            server=_text(kubernetes.get("server")),
            kube_context=_text(kubernetes.get("context")),
            namespaces=[str(n) for n in namespaces] if isinstance(namespaces, list) else None,
            selectors={
                k: v for k, v in _mapping(manifest.get("selectors")).items() if isinstance(v, (str, type(None)))
            },
            collected_at=iso(clock.now) if clock.now is not None else None,
            collection_time_source=clock.source,
            history_window_s=clock.window_s,
        )


def _mapping(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
