"""What dcgm-exporter's series in Prometheus add to a GPU's facts: Xids, row remapping, throttling,
and slowdown episodes: the SM clock held well below what GPUs of its model reach in the window while it
is busy, for heat or for power.

They extend the facts nvidia-smi and NVML give (the same `xids`, `remapped_rows_*` and
`slowdown_reasons` the GPU rules read), so that one rule covers a fault whichever source saw it.
DCGM_FI_DEV_XID_ERRORS holds the value of the last Xid, not a count: each run of one non-zero value is
one Xid report, dated by when the value appeared.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import median

from diag.facts.episodes import Span, Timeline, Values
from diag.snapshot.clock import Clock
from diag.snapshot.model import GPU, PromWindow, VllmServer

SIGNALS: dict[str, tuple[str, ...]] = {
    "xid": ("dcgm_xid_errors",),
    "fb_used_mib": ("dcgm_fb_used",),
    "util": ("dcgm_gpu_util",),
    "remap_failure": ("dcgm_row_remap_failure",),
    "uncorrectable_rows": ("dcgm_uncorrectable_remapped_rows",),
    "power_violation_ns_per_s": ("dcgm_power_violation_rate_5m",),
    "thermal_violation_ns_per_s": ("dcgm_thermal_violation_rate_5m",),
    "sm_clock": ("dcgm_sm_clock",),
    "temp": ("dcgm_gpu_temp",),
    "power": ("dcgm_power_usage",),
    "power_limit": ("dcgm_power_mgmt_limit",),
    "reasons": ("dcgm_clocks_event_reasons", "dcgm_clock_throttle_reasons"),  # DCGM 3.3 renamed the field
    "ecc_dbe": ("dcgm_ecc_dbe_vol_total",),
}
# NVML's clocks-event reason bits (nvmlClocksEventReasons). SW_POWER_CAP (0x4) alone is no fault: a busy
# GPU sits at its power limit by design; only a limit far below what its model draws holds it down.
_SW_POWER_CAP, _HW_SLOWDOWN, _SW_THERMAL, _HW_THERMAL, _HW_POWER_BRAKE = 0x4, 0x8, 0x20, 0x40, 0x80


@dataclass(frozen=True)
class Ceiling:
    """What GPUs of one model reached in the window: the SM clock and power draw a held-down GPU is
    measured against (dcgm-exporter's default counters have neither the maximum clock nor the limit)."""

    sm_clock: float
    power: float | None


@dataclass(frozen=True)
class Slowdown:
    kind: str  # "thermal" or "power"
    span: Span
    ceiling: Ceiling
    because: str  # what told the kind: the clock-event reasons, the temperature, the power draw

    def facts(self, clock: Clock) -> dict:
        clocks, temps, power = (self.span.values(n) for n in ("sm_clock", "temp", "power"))
        util = self.span.values("util")
        text = (
            f"{self.kind} slowdown: SM clock {_range(clocks)} MHz against {self.ceiling.sm_clock:g} MHz "
            f"(the highest of this model in the window) while {_range(util)} % busy"
            + (f", at up to {max(temps):g} C" if temps else "")
            + (f", drawing {_range(power)} W" if power else "")
            + f" ({self.because}; dcgm-exporter), {self.span.exact(clock)}"
        )
        return self.span.facts(clock) | {
            "kind": self.kind,
            "start": self.span.start,
            "end": self.span.end + self.span.step,
            "lowest_sm_clock": min(clocks),
            "sm_clock_max": self.ceiling.sm_clock,
            "hottest": max(temps) if temps else None,
            "text": text,
        }


_VIOLATIONS = {"power_violation_ns_per_s": "power", "thermal_violation_ns_per_s": "thermal"}


@dataclass
class GpuHistory:
    read: bool = False  # Prometheus answered with series of this GPU
    xids: list[tuple[int, str]] = field(default_factory=list)  # (code, when)
    xid_starts: list[tuple[int, float]] = field(default_factory=list)  # (code, the first sample showing it)
    remap_failure: bool | None = None
    rows_remapped: bool | None = None  # uncorrectable remapped rows went up within the window
    rows_remapped_text: str = ""
    throttled: list[str] | None = None  # one text per throttling episode while busy; None: not exported
    fb_used_mib: float | None = None  # DCGM_FI_DEV_FB_USED at the newest sample
    slowdowns: list[Slowdown] | None = None  # None: clocks or utilisation not exported
    slowdown_texts: list[str] = field(default_factory=list)
    ecc_uncorrected: float | None = None  # DCGM_FI_DEV_ECC_DBE_VOL_TOTAL at its highest: since the driver loaded


def _range(values: list[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:g}" if low == high else f"{low:g}-{high:g}"


def ceilings(gpus: list[GPU]) -> dict[str | None, Ceiling]:
    """By model name (modelName): the highest SM clock and power draw any GPU of it showed in the history."""
    clocks: dict[str | None, list[float]] = {}
    power: dict[str | None, list[float]] = {}
    for gpu in gpus:
        clocks.setdefault(gpu.name, []).extend(v for _, v in gpu.history.get("dcgm_sm_clock", []))
        power.setdefault(gpu.name, []).extend(v for _, v in gpu.history.get("dcgm_power_usage", []))
    return {name: Ceiling(max(c), max(power[name], default=None)) for name, c in clocks.items() if c and max(c) > 0}


def gpu_history(
    gpu: GPU, settings: dict, clock: Clock, window: PromWindow | None, ceiling: Ceiling | None = None
) -> GpuHistory:
    timeline = Timeline.of(gpu.history, SIGNALS, window.step if window else 15.0, window.end if window else None)
    if not timeline.rows:
        return GpuHistory()
    reports = _xids(timeline, clock)
    found = GpuHistory(
        read=True, xids=[(c, text) for c, text, _ in reports], xid_starts=[(c, t) for c, _, t in reports]
    )
    if timeline.has("fb_used_mib"):
        found.fb_used_mib = _values(timeline, "fb_used_mib")[-1]
    if timeline.has("ecc_dbe"):
        found.ecc_uncorrected = max(_values(timeline, "ecc_dbe"))
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
    if ceiling is not None and timeline.has("sm_clock") and timeline.has("util"):
        found.slowdowns = _slowdowns(timeline, ceiling, settings)
        found.slowdown_texts = [s.facts(clock)["text"] for s in found.slowdowns]
    return found


def _slowdown_kind(v: Values, ceiling: Ceiling, settings: dict) -> tuple[str, str] | None | bool:
    """(kind, what told it) where the SM clock is held down while busy; False where not; None where the
    clock or utilisation is missing at that sample."""
    if "sm_clock" not in v or "util" not in v:
        return None
    if v["util"] < settings["gpu_in_use_pct"] or v["sm_clock"] > ceiling.sm_clock * settings["gpu_clock_held_share"]:
        return False
    hot = "temp" in v and v["temp"] >= settings["gpu_temperature_high_c"]
    starved = _power_starved(v, ceiling, settings)
    if "reasons" in v:  # the driver says why; trust it
        bits = int(v["reasons"])
        told = f"clock-event reasons 0x{bits:x}"
        if bits & (_SW_THERMAL | _HW_THERMAL) or (bits & _HW_SLOWDOWN and hot):
            return "thermal", told
        if bits & (_HW_POWER_BRAKE | _HW_SLOWDOWN):
            return "power", told
        if bits & _SW_POWER_CAP and starved:
            return "power", f"{told}, {starved}"
        return False  # the power cap at the draw GPUs of its model reach is the cap doing its job
    if hot:
        return "thermal", f"at or above {settings['gpu_temperature_high_c']} C"
    if starved:
        return "power", f"{starved}; clock-event reasons not exported"
    return False


def _power_starved(v: Values, ceiling: Ceiling, settings: dict) -> str:
    """Why the GPU's power draw says power holds it down ("" when it does not): it draws at most
    gpu_power_drop_share of what GPUs of its model draw in the window, at a power limit set that low, or
    with clocks and draw falling together (the power brake, a hardware slowdown). A GPU held at the
    usual limit draws it."""
    if "power" not in v or not ceiling.power or v["power"] > ceiling.power * settings["gpu_power_drop_share"]:
        return ""
    limit = v.get("power_limit")
    if limit and v["power"] >= 0.95 * limit:
        return f"held at a power limit of {limit:g} W, where GPUs of its model draw up to {ceiling.power:g} W"
    return f"drawing {v['power']:g} W where GPUs of its model draw up to {ceiling.power:g} W"


def _slowdowns(timeline: Timeline, ceiling: Ceiling, settings: dict) -> list[Slowdown]:
    found = []
    for kind in ("thermal", "power"):

        def held(v: Values, kind: str = kind) -> bool | None:
            result = _slowdown_kind(v, ceiling, settings)
            return result[0] == kind if isinstance(result, tuple) else result

        for span in timeline.spans(held, settings["history_min_minutes"]):
            found.append(Slowdown(kind, span, ceiling, _because(span, ceiling, settings)))
    return sorted(found, key=lambda s: s.span.start)


def _because(span: Span, ceiling: Ceiling, settings: dict) -> str:
    kind = _slowdown_kind(span.samples[0][1], ceiling, settings)
    return kind[1] if isinstance(kind, tuple) else ""


def _values(timeline: Timeline, name: str) -> list[float]:
    return [v[name] for _, v in timeline.rows if name in v]


def _xid_is(code: int) -> Callable[[Values], bool | None]:
    return lambda v: None if "xid" not in v else int(v["xid"]) == code


def _xids(timeline: Timeline, clock: Clock) -> list[tuple[int, str, float]]:
    reports: list[tuple[int, str, float]] = []
    for code in sorted({int(v) for v in _values(timeline, "xid") if v > 0}):
        for span in timeline.spans(_xid_is(code), 0):
            older = (
                "; set before the window began, so the Xid may be older" if span.start == timeline.rows[0][0] else ""
            )
            text = f"DCGM_FI_DEV_XID_ERRORS = {code} (dcgm-exporter) {span.when(clock)}{older}"
            reports.append((code, text, span.start))
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


@dataclass(frozen=True)
class ForeignMemory:
    """Framebuffer used above what the GPU held while one process of the vLLM server given it answered:
    vLLM allocates its share at start-up and keeps it, so the rest is another process's."""

    span: Span
    held_mib: float  # the median DCGM_FI_DEV_FB_USED while the same process answered, before the rise

    @property
    def took_mib(self) -> float:
        return max(self.span.values("fb_used_mib")) - self.held_mib

    def text(self, clock: Clock) -> str:
        used = self.span.values("fb_used_mib")
        return (f"DCGM_FI_DEV_FB_USED rose from {self.held_mib:,.0f} MiB, what the GPU held while the vLLM "
                f"server's process answered, to {max(used):,.0f} MiB: another process took up to "
                f"{self.took_mib:,.0f} MiB (vLLM's share does not grow once allocated), "
                f"{self.span.exact(clock)}")  # fmt: skip


def foreign_memory(gpu: GPU, server: VllmServer, settings: dict, window: PromWindow | None) -> list[ForeignMemory]:
    """Runs of at least history_min_minutes where the GPU's used memory stood gpu_foreign_memory_min_mib or
    more above what it held, for at least as long before, while the same process of `server` answered
    (`process_start_time_seconds`, where Prometheus has it). A new process starts its own baseline, so
    the memory a server takes when it (re)starts is never another's. Samples at which the server did not
    answer can tell nothing."""
    step = window.step if window else 15.0
    end = window.end if window else None
    signals: dict[str, tuple[str, ...]] = {
        "running": ("vllm_num_requests_running",),
        "started": ("vllm_process_start_time",),
        "up": ("vllm_up",),
    }
    served = Timeline.of(server.history, signals, step, end)
    answering = {t: v.get("started") for t, v in served.rows if "running" in v and v.get("up", 1) >= 1}
    minimum, rise = settings["history_min_minutes"] * 60, settings["gpu_foreign_memory_min_mib"]
    held: dict[float | None, list[float]] = {}
    found: list[ForeignMemory] = []
    run: list[tuple[float, Values]] = []
    base = 0.0
    points = gpu.history.get("dcgm_fb_used", [])
    last_time = points[-1][0] if points else None

    def close() -> None:
        span = Span(list(run), step, run[-1][0] == last_time and (end is None or run[-1][0] >= end - 2 * step))
        if span.minutes >= settings["history_min_minutes"]:
            found.append(ForeignMemory(span, base))
        run.clear()

    for t, used in points:
        if t not in answering:
            if run:
                close()
            continue
        before = held.setdefault(answering[t], [])
        if run and (used < base + rise or t - run[-1][0] > 1.5 * step):
            close()
        if run:
            run.append((t, {"fb_used_mib": used}))
        elif len(before) * step >= minimum and used >= median(before) + rise:
            base = median(before)
            run.append((t, {"fb_used_mib": used}))
        else:
            before.append(used)
    if run:
        close()
    return found
