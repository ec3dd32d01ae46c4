"""`--output html`: one self-contained page for an incident review or a ticket. The answer first (the
verdict, its cause, its fix with copy buttons), then the timeline of each affected server and GPU, the
causal chain with a link from each finding to its evidence, every finding, the history, the gaps that
matter, the sources read and the settings used.

Self-contained: no request at view time (the Content-Security-Policy allows none, and the one script,
the copy buttons, runs by its hash). Every string from the bundle is made `plain` (no control
character) and then HTML-escaped, attributes included; the charts hold none of it (html_charts.py).
"""

from __future__ import annotations

import base64
import hashlib
import html
from collections.abc import Iterable

from diag import __version__
from diag.analyze import Report
from diag.core.rules_dir import builtin_rules_dir, load_settings
from diag.engine.rules import Finding
from diag.report import html_charts, timeline
from diag.report.safe import block, plain
from diag.report.view import rule_names, view
from diag.snapshot.clock import iso_time

# A remediation line that starts with one of these is a command of its own, with its own copy button.
_COMMANDS = (
    "kubectl ",
    "ray ",
    "nvidia-smi",
    "helm ",
    "curl ",
    "llmdiag ",
    "sudo ",
    "journalctl ",
    "dmesg",
    "systemctl ",
    "dcgmi ",
    "oc ",
    "python ",
    "pip ",
)
MAX_CHAIN_CHILDREN = 25  # consequences drawn under one cause; the rest counted
MAX_FINDINGS_LISTED = 300  # a fleet's report lists this many findings, and counts the rest

_SCRIPT = """
document.addEventListener("click", function (ev) {
  var button = ev.target.closest("button[data-copy]");
  if (!button) { return; }
  var source = document.getElementById(button.getAttribute("data-copy"));
  if (!source) { return; }
  var said = function (text) {
    button.textContent = text;
    setTimeout(function () { button.textContent = "Copy"; }, 1500);
  };
  var select = function () {
    var range = document.createRange();
    range.selectNodeContents(source);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    try { said(document.execCommand("copy") ? "Copied" : "Selected"); } catch (e) { said("Selected"); }
  };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(source.textContent).then(function () { said("Copied"); }, select);
  } else {
    select();
  }
});
"""

_STYLE = """
:root { --fg: #1a1a1a; --muted: #4d4d4d; --line: #d0d0d0; --crit: #a00018; --warn: #8a4b00; --ok: #1d6b2f;
        --bg-soft: #f5f5f5; --accent: #0b4f8a; }
* { box-sizing: border-box; }
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
       max-width: 1100px; margin: 0 auto; padding: 1.2rem; }
h1 { font-size: 1.5rem; margin: 0 0 .3rem; }
h2 { font-size: 1.2rem; margin: 2rem 0 .6rem; border-bottom: 1px solid var(--line); padding-bottom: .2rem; }
h3 { font-size: 1.02rem; margin: 1.2rem 0 .4rem; }
a { color: var(--accent); }
code, pre { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, monospace; font-size: .86rem; }
pre { background: var(--bg-soft); padding: .6rem .8rem; overflow-x: auto; white-space: pre-wrap;
      border-radius: 4px; margin: .3rem 0; }
.meta { color: var(--muted); font-size: .9rem; margin: 0; padding-left: 1.1rem; }
.verdict { border: 2px solid var(--line); border-left-width: 8px; border-radius: 6px; padding: .8rem 1rem;
           margin: 1rem 0; }
.verdict.fault { border-color: var(--crit); }
.verdict.inconclusive { border-color: var(--warn); }
.verdict.healthy { border-color: var(--ok); }
.verdict .status { font-size: 1.2rem; font-weight: 700; margin: 0 0 .3rem; }
.sev { font-weight: 700; text-transform: uppercase; font-size: .78rem; padding: .05rem .35rem;
       border-radius: 3px; border: 1px solid currentColor; }
.sev.critical { color: var(--crit); } .sev.warning { color: var(--warn); } .sev.info { color: var(--muted); }
.cmd { display: flex; gap: .5rem; align-items: flex-start; margin: .3rem 0; }
.cmd pre { flex: 1; margin: 0; }
button.copy { font: inherit; font-size: .8rem; padding: .25rem .6rem; border: 1px solid var(--accent);
              background: #fff; color: var(--accent); border-radius: 4px; cursor: pointer; }
button.copy:hover, button.copy:focus { background: var(--accent); color: #fff; }
figure { margin: 1rem 0 1.6rem; }
figure svg { width: 100%; height: auto; display: block; }
figcaption { font-weight: 600; margin-bottom: .3rem; }
table { border-collapse: collapse; width: 100%; font-size: .88rem; margin: .4rem 0; }
th, td { border-bottom: 1px solid var(--line); padding: .25rem .4rem; text-align: left; vertical-align: top; }
th { background: var(--bg-soft); }
.legend-swatch { display: inline-block; width: .9rem; height: .9rem; vertical-align: -.1rem;
                 border-radius: 2px; margin-right: .3rem; }
ol.chain, ol.chain ol { list-style: none; margin: 0; padding-left: 1.6rem; }
ol.chain { padding-left: 0; }
ol.chain li { position: relative; margin: .35rem 0; }
ol.chain ol > li::before { content: "\\2192"; position: absolute; left: -1.3rem; color: var(--muted); }
.node { display: inline-block; border: 1px solid var(--line); border-radius: 5px; padding: .3rem .6rem;
        background: #fff; }
.node.root { border: 2px solid var(--crit); }
.node .subject { color: var(--muted); font-size: .85rem; }
.finding { border-top: 1px solid var(--line); padding: .5rem 0; }
.finding:target { background: #fff8e1; }
.finding h3 { margin: .2rem 0; }
.muted { color: var(--muted); }
@media print {
  button.copy { display: none; }
  body { max-width: none; padding: 0; font-size: 11pt; }
  figure, .finding, .verdict { break-inside: avoid; }
  a { color: inherit; text-decoration: none; }
  pre { white-space: pre-wrap; }
}
"""


def render_html(report: Report) -> str:
    html_charts.ensure_available()
    v = view(report)
    anchors = {id(f): f"f-{n}" for n, f in enumerate(report.findings)}
    page = _Page()
    page.add("<h1>llmdiag report</h1>")
    page.add(_header(report))
    page.add(_verdict(report, anchors, page))
    chains = _chains(report, anchors)
    if chains:
        page.add('<section aria-labelledby="chain"><h2 id="chain">Causal chain</h2>')
        page.add('<p class="muted">Root cause first; each arrow reads "explains". Each box links to its evidence.</p>')
        page.add(chains + "</section>")
    page.add(_timelines(report, anchors))
    page.add(_findings(report, anchors, page))
    page.add(_history(report))
    page.add(_gaps(report, page))
    page.add(_sources(v))
    page.add(_settings(report))
    return page.document(_title(report))


class _Page:
    def __init__(self) -> None:
        self.parts: list[str] = []
        self.commands = 0

    def add(self, part: str) -> None:
        if part:
            self.parts.append(part)

    def copyable(self, text: str, label: str) -> str:
        """A block of text with a button that copies it."""
        self.commands += 1
        ident = f"cmd-{self.commands}"
        return (
            f'<div class="cmd"><pre id="{ident}">{_e_block(text)}</pre>'
            f'<button type="button" class="copy" data-copy="{ident}" aria-label="Copy {_e(label)}">Copy</button></div>'
        )

    def document(self, title: str) -> str:
        digest = base64.b64encode(hashlib.sha256(_SCRIPT.encode()).digest()).decode()
        policy = (
            f"default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-{digest}'; "
            "img-src data:; base-uri 'none'; form-action 'none'"
        )
        return "\n".join(
            [
                "<!DOCTYPE html>",
                '<html lang="en">',
                "<head>",
                '<meta charset="utf-8">',
                f'<meta http-equiv="Content-Security-Policy" content="{policy}">',
                '<meta name="viewport" content="width=device-width, initial-scale=1">',
                '<meta name="referrer" content="no-referrer">',
                f"<title>{_e(title)}</title>",
                f"<style>{_STYLE}</style>",
                "</head>",
                "<body>",
                "<main>",
                *self.parts,
                "</main>",
                f"<script>{_SCRIPT}</script>",
                "</body>",
                "</html>",
                "",
            ]
        )


def _e(text: object) -> str:
    """Text from anywhere (the bundle included) as HTML text or an attribute's value."""
    return html.escape(plain(str(text)), quote=True)


def _title(report: Report) -> str:
    verdict = report.verdict
    if verdict.status == "fault":
        return f"llmdiag: {verdict.layer} layer at fault ({verdict.rule})"
    return f"llmdiag: {verdict.status}"


def _header(report: Report) -> str:
    ctx = report.context
    rows = [("Bundle", report.origin or "unknown")]
    if ctx is not None:
        cluster = ctx.server or "unknown"
        if ctx.kube_context:
            cluster += f", context {ctx.kube_context}"
        rows.append(("Cluster", cluster))
        if ctx.namespaces:
            rows.append(("Namespaces", "all" if ctx.namespaces == ["*"] else ", ".join(ctx.namespaces)))
        rows.append(
            ("Collected at", f"{ctx.collected_at} ({ctx.collection_time_source})" if ctx.collected_at else "unknown")
        )
    rows.append(("llmdiag", __version__))
    items = "".join(f"<li>{_e(k)}: {_e(v)}</li>" for k, v in rows)
    return f'<ul class="meta">{items}</ul>'


def _verdict(report: Report, anchors: dict[int, str], page: _Page) -> str:
    verdict = report.verdict
    out = [f'<section class="verdict {_e(verdict.status)}" aria-labelledby="verdict">']
    if verdict.status == "fault" and verdict.finding is not None:
        f = verdict.finding
        out.append(
            f'<h2 id="verdict" class="status">Verdict: {_e(verdict.layer)} layer at fault '
            f'<span class="sev {_e(f.severity)}">{_e(f.severity)}</span></h2>'
        )
        out.append(f"<p>{_e(verdict.summary)}</p>")
        out.append(
            f'<p><strong>Cause:</strong> <a href="#{anchors[id(f)]}">{_e(f.rule)} {_e(f.title)}</a>'
            f" on <code>{_e(f.subject)}</code> (confidence {_e(verdict.confidence)}).</p>"
        )
        if dated := timeline.episodes_of(f, anchors[id(f)], None):
            out.append(f'<p><strong>When:</strong> {_e(dated[0].when)} (<a href="#timeline">the timeline</a>).</p>')
        out.append("<h3>Fix</h3>")
        out.append(_fix(f, page))
        if verdict.caveats:
            out.append(
                f'<p>Not read, and could change this verdict: see <a href="#gaps">{len(verdict.caveats)} gap(s)</a>.'
                "</p>"
            )
    elif verdict.status == "inconclusive":
        out.append('<h2 id="verdict" class="status">Verdict: inconclusive</h2>')
        out.append(f"<p>{_e(verdict.summary)}</p>")
        out.append("<h3>Could not read, and how to get it</h3>")
        for gap in verdict.gaps:
            out.append(f"<p>{_e(gap.problem)}</p>{page.copyable(gap.remedy, gap.source)}")
    else:
        out.append('<h2 id="verdict" class="status">Verdict: healthy</h2>')
        out.append(f"<p>{_e(verdict.summary)}</p>")
    out.append("</section>")
    return "\n".join(out)


def _fix(f: Finding, page: _Page) -> str:
    """The remediation as written, then each command in it with its own copy button."""
    commands = [line.strip() for line in block(f.remediation).split("\n") if line.strip().startswith(_COMMANDS)]
    out = [f"<pre>{_e_block(f.remediation)}</pre>"]
    if commands:
        out.append('<p class="muted">The commands:</p>')
        out += [page.copyable(c, c.split("#")[0].strip()) for c in commands]
    return "\n".join(out)


def _e_block(text: str) -> str:
    return html.escape(block(text), quote=True)


def _chains(report: Report, anchors: dict[int, str]) -> str:
    """Each cause with the findings it explains below it, the verdict's root first."""
    children: dict[str, list[Finding]] = {}
    for f in report.findings:
        if f.explained_by:
            children.setdefault(f.explained_by, []).append(f)
    root = report.verdict.finding
    causes = [f for f in report.findings if f.explained_by is None and f.rule in children]
    causes.sort(key=lambda f: f is not root)
    if root is not None and root not in causes:
        causes.insert(0, root)
    trees = []
    drawn: set[str] = set()
    for cause in causes:
        if cause.rule in drawn and cause is not root:
            continue
        trees.append(_node(cause, children, anchors, drawn, root))
    return f'<ol class="chain">{"".join(trees)}</ol>' if trees else ""


def _node(f: Finding, children: dict[str, list[Finding]], anchors: dict[int, str], drawn: set[str], root) -> str:
    cls = "node root" if f is root else "node"
    box = (
        f'<a class="{cls}" href="#{anchors[id(f)]}"><span class="sev {_e(f.severity)}">{_e(f.severity)}</span> '
        f'{_e(f.rule)} {_e(f.title)}<br><span class="subject">{_e(f.subject)}</span></a>'
    )
    if f.rule in drawn:
        return f"<li>{box}</li>"
    drawn.add(f.rule)
    below = children.get(f.rule, [])
    items = [_node(c, children, anchors, drawn, root) for c in below[:MAX_CHAIN_CHILDREN]]
    if len(below) > MAX_CHAIN_CHILDREN:
        items.append(f'<li class="muted">and {len(below) - MAX_CHAIN_CHILDREN} more ({_e(f.rule)} explains them)</li>')
    return f"<li>{box}<ol>{''.join(items)}</ol></li>" if items else f"<li>{box}</li>"


def _timelines(report: Report, anchors: dict[int, str]) -> str:
    found = timeline.build(report, anchors)
    out = ['<section aria-labelledby="timeline"><h2 id="timeline">Timeline</h2>']
    if found is None:
        out.append(
            "<p>No series to draw: the bundle has no Prometheus history and no dated /metrics scrapes of the "
            "affected vLLM servers and GPUs.</p></section>"
        )
        return "\n".join(out)
    out.append(
        '<p class="muted">Times in UTC. Shaded: an episode a finding reports (its rule at its start, in its colour). '
        "Numbered lines: Kubernetes events, Ray deaths and Xid lines, listed under each chart. Lines: "
        "Prometheus' history; dots: the /metrics scrapes at collection.</p>"
    )
    for n, tl in enumerate(found.items, 1):
        prefix = f"tl{n}"
        out.append(f'<figure id="{prefix}" aria-labelledby="{prefix}-caption">')
        out.append(f'<figcaption id="{prefix}-caption">{_e(tl.title)} <code>{_e(tl.subject)}</code></figcaption>')
        svg = html_charts.timeline_svg(tl, found.start, found.end, prefix)
        out.append(svg.replace("<svg ", f'<svg role="img" aria-labelledby="{prefix}-caption" ', 1))
        out.append(_episode_list(tl))
        out.append(_mark_table(tl))
        out.append("</figure>")
    if found.left_out:
        out.append(f"<p>Not drawn ({len(found.left_out)} more with series): {_e(', '.join(found.left_out[:20]))}</p>")
    out.append("</section>")
    return "\n".join(out)


def _episode_list(tl: timeline.Timeline) -> str:
    if not tl.episodes:
        return ""
    items = "".join(
        f'<li><span class="legend-swatch" style="{_swatch(k)}"></span>'
        f'<a href="#{ep.anchor}">{_e(ep.rule)}</a>: {_e(ep.text)}</li>'
        for k, ep in enumerate(tl.episodes)
    )
    return f"<ul>{items}</ul>"


def _swatch(k: int) -> str:
    """The list's swatch of the chart's k-th episode: its fill, or its hatch's colour in stripes."""
    shade, dark = html_charts.EPISODE_COLOURS[k % len(html_charts.EPISODE_COLOURS)]
    if k == 0:
        return f"background:{shade};opacity:.45"
    angle = (45, 135, 90)[(k - 1) % 3]
    return f"background:repeating-linear-gradient({angle}deg,{dark} 0 1px,#fff 1px 4px);opacity:.7"


def _mark_table(tl: timeline.Timeline) -> str:
    out = []
    if tl.marks:
        rows = "".join(
            f"<tr><td>{m.number}</td><td>{_e(iso_time(m.at))}</td><td>{_e(m.kind)}</td><td>{_e(m.about)}</td>"
            f"<td>{_e(m.text)}</td></tr>"
            for m in tl.marks
        )
        out.append(
            '<table><thead><tr><th scope="col">#</th><th scope="col">UTC</th><th scope="col">what</th>'
            f'<th scope="col">about</th><th scope="col">said</th></tr></thead><tbody>{rows}</tbody></table>'
        )
        if tl.marks_left_out:
            out.append(f"<p class='muted'>{tl.marks_left_out} older mark(s) not drawn.</p>")
    undated = list(dict.fromkeys(tl.undated))
    if undated:
        out.append("<p>Xid lines with no time of their own (not on the axis):</p>")
        out.append("<ul>" + "".join(f"<li><code>{_e(x)}</code></li>" for x in undated[:20]) + "</ul>")
    return "\n".join(out)


def _findings(report: Report, anchors: dict[int, str], page: _Page) -> str:
    v = view(report)
    ordered: list[Finding] = ([v.root] if v.root else []) + v.consequences
    ordered += [f for fs in v.by_layer.values() for f in fs] + v.other_problems
    out = ['<section aria-labelledby="findings"><h2 id="findings">Findings and their evidence</h2>']
    if not ordered:
        out.append("<p>None.</p>")
    for f in ordered[:MAX_FINDINGS_LISTED]:
        place = "" if f.serving else ' <span class="muted">(not on the serving path)</span>'
        out.append(f'<article class="finding" id="{anchors[id(f)]}">')
        out.append(
            f'<h3><span class="sev {_e(f.severity)}">{_e(f.severity)}</span> {_e(f.rule)} {_e(f.title)}{place}</h3>'
        )
        out.append(f"<p>Subject: <code>{_e(f.subject)}</code></p>")
        if f.explained_by:
            cause = next((c for c in report.findings if c.rule == f.explained_by), None)
            link = f'<a href="#{anchors[id(cause)]}">{_e(f.explained_by)}</a>' if cause else _e(f.explained_by)
            out.append(f"<p>Explained by {link}: its fix is this one's.</p>")
        out.append("<ul>" + "".join(f"<li>{_e(line)}</li>" for line in f.evidence) + "</ul>")
        if f.explained_by is None and f is not v.root:
            out.append(f"<details><summary>Fix</summary>{_fix(f, page)}</details>")
        if f.references:
            links = ", ".join(f'<a href="{_e(r)}">{_e(r)}</a>' for r in f.references if r.startswith("https://"))
            out.append(f"<p class='muted'>References: {links}</p>")
        out.append("</article>")
    if len(ordered) > MAX_FINDINGS_LISTED:
        out.append(f"<p>{len(ordered) - MAX_FINDINGS_LISTED} more findings: the JSON report has them all.</p>")
    out.append("</section>")
    return "\n".join(out)


def _history(report: Report) -> str:
    history = report.history
    if history is None:
        return ""
    if (note := history.note()) is not None:
        return f"<p>Ages: {_e(note)}.</p>"
    if not history.items:
        return ""
    out = [f'<section aria-labelledby="history"><h2 id="history">{_e(history.heading())}</h2><ul>']
    for item in history.items:
        when = f"{item.as_dict()['age']} before collection ({item.when})" if item.when else "time unknown"
        sub = "".join(f"<li>{_e(t)}</li>" for t in item.items[:5])
        out.append(
            f"<li><code>{_e(item.rule)}</code> {_e(item.what)} on <code>{_e(item.subject)}</code>, {_e(when)}"
            + (f"<ul>{sub}</ul>" if sub else "")
            + "</li>"
        )
    out.append("</ul></section>")
    return "\n".join(out)


def _gaps(report: Report, page: _Page) -> str:
    verdict = report.verdict
    if not verdict.caveats and not (verdict.status != "inconclusive" and verdict.gaps):
        return ""
    out = ['<section aria-labelledby="gaps"><h2 id="gaps">Gaps that matter</h2>']
    if verdict.caveats:
        out.append(f"<p>Not read, and could change the verdict (confidence {_e(verdict.confidence)}):</p>")
        for c in verdict.caveats:
            out.append(f"<p>{_e(c.gap.problem)} ({_e(rule_names(c.rules))} would read it)</p>")
            out.append(page.copyable(c.gap.remedy, c.gap.source))
    others = [g for g in verdict.gaps if all(g is not c.gap for c in verdict.caveats)]
    if others and verdict.status != "inconclusive":
        out.append("<p>Also not read:</p><ul>")
        out += [f"<li>{_e(g.problem)}: <code>{_e(g.remedy)}</code></li>" for g in others]
        out.append("</ul>")
    out.append("</section>")
    return "\n".join(out)


def _sources(v) -> str:
    out = ['<section aria-labelledby="sources"><h2 id="sources">Sources read</h2><ul>']
    out.append(
        f"<li>read: {len(v.sources_ok)}<details><summary>which</summary>{_code_list(v.sources_ok)}</details></li>"
    )
    if v.history_window:
        out.append(f"<li>{_e(v.history_window)}</li>")
    if v.sources_missing:
        out.append(f"<li>missing: {', '.join(f'<code>{_e(s)}</code>' for s in v.sources_missing)}</li>")
    out += [f"<li>{_e(status)}: {_e(detail)}</li>" for status, detail in v.sources_failed]
    out.append(f"<li>{v.rules_checked} rules had the data they need; {v.rules_fired} fired.</li>")
    out.append("</ul></section>")
    return "\n".join(out)


def _code_list(names: Iterable[str]) -> str:
    return "<ul>" + "".join(f"<li><code>{_e(n)}</code></li>" for n in names) + "</ul>"


def _settings(report: Report) -> str:
    out = ['<section aria-labelledby="settings"><h2 id="settings">Settings used</h2>']
    if report.config_file:
        out.append(
            f"<p>Config <code>{_e(report.config_file)}</code> applied, {report.suppressed} finding(s) suppressed.</p>"
        )
    else:
        out.append("<p>No configuration file: the built-in settings.</p>")
    if report.context is not None and report.context.history_window_s is not None:
        out.append(f"<p>History window: {report.context.history_window_s:g} s.</p>")
    if report.settings:
        declared = load_settings(builtin_rules_dir())
        rows = []
        for name, value in sorted(report.settings.items()):
            default = declared.get(name, {}).get("default")
            changed = "" if value == default else f" (default {_e(default)})"
            rows.append(f"<tr><td><code>{_e(name)}</code></td><td>{_e(value)}{changed}</td></tr>")
        out.append(
            '<details><summary>Thresholds</summary><table><thead><tr><th scope="col">setting</th>'
            f'<th scope="col">value</th></tr></thead><tbody>{"".join(rows)}</tbody></table></details>'
        )
    manifest = report.snapshot.manifest if report.snapshot is not None else {}
    collection = manifest.get("settings") if isinstance(manifest, dict) else None
    if isinstance(collection, dict) and collection:
        cells = "".join(
            f"<tr><td><code>{_e(k)}</code></td><td>{_e(v)}</td></tr>" for k, v in sorted(collection.items())
        )
        out.append(
            '<details><summary>Collection (manifest.json)</summary><table><thead><tr><th scope="col">setting</th>'
            f'<th scope="col">value</th></tr></thead><tbody>{cells}</tbody></table></details>'
        )
    out.append("</section>")
    return "\n".join(out)
