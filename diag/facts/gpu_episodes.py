"""What dcgm-exporter's series in Prometheus add to a GPU's facts: Xids, row remapping, throttling.

They extend the facts nvidia-smi and NVML give (the same `xids`, `remapped_rows_*` and
`slowdown_reasons` the GPU rules read), so that one rule covers a fault whichever source saw it.
DCGM_FI_DEV_XID_ERRORS holds the value of the last Xid, not a count: each run of one non-zero value is
one Xid report, dated by when the value appeared.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from diag.facts.episodes import Timeline, Values
from diag.snapshot.clock import Clock
from diag.snapshot.model import GPU, PromWindow

SIGNALS: dict[str, tuple[str, ...]] = {
    "xid": ("dcgm_xid_errors",),
    "fb_used_mib": ("dcgm_fb_used",),
    "util": ("dcgm_gpu_util",),
    "remap_failure": ("dcgm_row_remap_failure",),
    "uncorrectable_rows": ("dcgm_uncorrectable_remapped_rows",),
    "power_violation_ns_per_s": ("dcgm_power_violation_rate_5m",),
    "thermal_violation_ns_per_s": ("dcgm_thermal_violation_rate_5m",),
}
_VIOLATIONS = {"power_violation_ns_per_s": "power", "thermal_violation_ns_per_s": "thermal"}


@dataclass
class GpuHistory:
    read: bool = False  # Prometheus answered with series of this GPU
    xids: list[tuple[int, str]] = field(default_factory=list)  # (code, when)
    remap_failure: bool | None = None
    rows_remapped: bool | None = None  # uncorrectable remapped rows went up within the window
    rows_remapped_text: str = ""
    throttled: list[str] | None = None  # one text per throttling episode while busy; None: not exported
    fb_used_mib: float | None = None  # DCGM_FI_DEV_FB_USED at the newest sample


def gpu_history(gpu: GPU, settings: dict, clock: Clock, window: PromWindow | None) -> GpuHistory:
    timeline = Timeline.of(gpu.history, SIGNALS, window.step if window else 15.0, window.end if window else None)
    if not timeline.rows:
        return GpuHistory()
    found = GpuHistory(read=True, xids=_xids(timeline, clock))
    if timeline.has("fb_used_mib"):
        found.fb_used_mib = _values(timeline, "fb_used_mib")[-1]
    if timeline.has("remap_failure"):
        found.remap_failure = any(v > 0 for v in _values(timeline, "remap_failure"))
    if timeline.has("uncorrectable_rows"):
        rows = _values(timeline, "uncorrectable_rows")
        found.rows_remapped = rows[-1] > rows[0]
        found.rows_remapped_text = (
            f"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS went {rows[0]:g} "
            f"-> {rows[-1]:g} within the window (dcgm-exporter)"
        )
    exported = [name for name in _VIOLATIONS if timeline.has(name)]
    if exported and timeline.has("util"):
        found.throttled = _throttled(timeline, exported, settings, clock)
    return found


def _values(timeline: Timeline, name: str) -> list[float]:
    return [v[name] for _, v in timeline.rows if name in v]


def _xid_is(code: int) -> Callable[[Values], bool | None]:
    return lambda v: None if "xid" not in v else int(v["xid"]) == code


def _xids(timeline: Timeline, clock: Clock) -> list[tuple[int, str]]:
    reports: list[tuple[int, str]] = []
    for code in sorted({int(v) for v in _values(timeline, "xid") if v > 0}):
        for span in timeline.spans(_xid_is(code), 0):
            older = (
                "; set before the window began, so the Xid may be older" if span.start == timeline.rows[0][0] else ""
            )
            reports.append((code, f"DCGM_FI_DEV_XID_ERRORS = {code} (dcgm-exporter) {span.when(clock)}{older}"))
    return reports


def _throttled(timeline: Timeline, exported: list[str], settings: dict, clock: Clock) -> list[str]:
    busy, share = settings["gpu_in_use_pct"], settings["gpu_throttled_share"]
    texts = []
    for name in exported:

        def throttled(v: dict[str, float], name: str = name) -> bool | None:
            if name not in v or "util" not in v:
                return None
            return v[name] / 1e9 >= share and v["util"] >= busy

        for span in timeline.spans(throttled, settings["history_min_minutes"]):
            worst = max(span.values(name)) / 1e9
            texts.append(f"{_VIOLATIONS[name]} throttling {worst:.0%} of the time while {min(span.values('util')):g}-"
                         f"{max(span.values('util')):g} % busy "
                         f"(DCGM_FI_DEV_{_VIOLATIONS[name].upper()}_VIOLATION), {span.when(clock)}")  # fmt: skip
    return texts
