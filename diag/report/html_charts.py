"""A timeline drawn by matplotlib as inline SVG (docs/decisions.md): its panels on one time axis in UTC,
the episodes its findings date shaded, its marks as numbered lines.

No text of the bundle's is drawn: the chart holds numbers, times and llmdiag's own words (panel titles,
series names, rule ids, mark numbers); the page beside it names the server, the GPU and each mark,
escaped. matplotlib is imported here only, so only `--output html` pays for it.
"""

from __future__ import annotations

import io
import re
from datetime import datetime, timezone

from diag.core.errors import UserError
from diag.report.timeline import Timeline

MISSING = "the HTML report (--output html, serve --html) needs matplotlib: pip install 'llmdiag[html]'"
_MARK_COLOURS = {"Xid": "#b00020", "Ray death": "#6a1b9a", "warning event": "#b35900", "event": "#555555"}
# an episode's shade, and its label's colour (dark enough to read on white): the page's list uses the same
EPISODE_HATCHES = ("", "//", "\\\\", "xx")
EPISODE_COLOURS = (("#e8a33d", "#7a4a00"), ("#5b8fd9", "#1f4e96"), ("#52a36b", "#1e5c32"), ("#b07cc6", "#5b2a72"))
_ID = re.compile(r'\b(id="|url\(#|href="#)([^"\)]+)')


def _pyplot_free():
    """matplotlib's Figure and SVG canvas, without pyplot (no GUI backend is chosen)."""
    try:
        import matplotlib
        from matplotlib import dates
        from matplotlib.backends.backend_svg import FigureCanvasSVG
        from matplotlib.figure import Figure
    except ImportError:
        raise UserError(MISSING) from None
    return matplotlib, dates, Figure, FigureCanvasSVG


def ensure_available() -> None:
    _pyplot_free()


def _utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=timezone.utc)


def timeline_svg(timeline: Timeline, start: float, end: float, prefix: str) -> str:
    """The SVG element of one timeline, its ids prefixed with `prefix` (several charts share a page)."""
    matplotlib, dates, Figure, FigureCanvasSVG = _pyplot_free()
    panels = [p for p in timeline.panels if p.series]
    style = {"svg.fonttype": "none", "svg.hashsalt": prefix, "font.size": 9, "font.family": "sans-serif"}
    with matplotlib.rc_context(style):
        height = 0.85 + 1.45 * len(panels)
        fig = Figure(figsize=(10, height))
        # fixed margins, not a layout engine: every chart of the page has its axis at the same place
        fig.subplots_adjust(left=0.075, right=0.855, top=1 - 0.35 / height, bottom=0.5 / height, hspace=0.45)
        FigureCanvasSVG(fig)
        axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
        for ax, panel in zip(axes, panels, strict=True):
            for series in panel.series:
                x = [_utc(t) for t, _ in series.points]
                y = [v for _, v in series.points]
                if series.from_scrapes:
                    ax.plot(x, y, "o", markersize=4, label=series.label)
                else:
                    ax.plot(x, y, linewidth=1.4, label=series.label)
            ax.set_ylabel(panel.unit, fontsize=8)
            ax.set_title(panel.title, loc="left", fontsize=9, fontweight="bold")
            ax.grid(True, color="#dddddd", linewidth=0.6)
            ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=7, frameon=False)
            if panel.unit == "fraction":
                ax.set_ylim(0, 1.05)
            else:
                ax.set_ylim(bottom=0)
            for k, ep in enumerate(timeline.episodes):
                gid = f"episode-{k}" if ax is axes[0] else None
                shade, dark = EPISODE_COLOURS[k % len(EPISODE_COLOURS)]
                if k == 0:
                    ax.axvspan(_utc(ep.start), _utc(ep.end), color=shade, alpha=0.28, linewidth=0, gid=gid)
                else:  # hatched, so that where two overlap both still show
                    ax.axvspan(_utc(ep.start), _utc(ep.end), facecolor="none", edgecolor=dark, alpha=0.45,
                               hatch=EPISODE_HATCHES[k % len(EPISODE_HATCHES)], linewidth=0, gid=gid)  # fmt: skip
            for mark in timeline.marks:
                colour = _MARK_COLOURS.get(mark.kind, "#555555")
                ax.axvline(_utc(mark.at), color=colour, linewidth=1, linestyle=(0, (3, 2)))
        top = axes[0]
        for k, ep in enumerate(timeline.episodes):  # inside the top panel, at its start, one row each
            top.text(_utc(ep.start), 0.04 + 0.16 * (k % 4), f" {ep.rule}", transform=top.get_xaxis_transform(),
                     fontsize=7, va="bottom", ha="left", color=EPISODE_COLOURS[k % len(EPISODE_COLOURS)][1],
                     parse_math=False, bbox={"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none",
                                             "alpha": 0.8})  # fmt: skip
        for mark in timeline.marks:
            top.text(_utc(mark.at), 0.98, str(mark.number), transform=top.get_xaxis_transform(), fontsize=7,
                     va="top", ha="center", color=_MARK_COLOURS.get(mark.kind, "#555555"), parse_math=False,
                     bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none"})  # fmt: skip
        bottom = axes[-1]
        bottom.set_xlim(_utc(start), _utc(end))
        bottom.xaxis.set_major_locator(dates.AutoDateLocator(tz=timezone.utc, minticks=4, maxticks=10))
        bottom.xaxis.set_major_formatter(
            dates.DateFormatter("%H:%M:%S" if end - start < 600 else "%H:%M", tz=timezone.utc)
        )
        bottom.set_xlabel("UTC", fontsize=8)
        out = io.StringIO()
        fig.savefig(out, format="svg", metadata={"Date": None, "Creator": None})
    svg = out.getvalue()
    svg = svg[svg.index("<svg") :]
    return _ID.sub(lambda m: f"{m.group(1)}{prefix}-{m.group(2)}", svg)
