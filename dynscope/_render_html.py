"""One self-contained HTML page for a report. Pure: model in, text out.

Inline CSS and SVG, no external fetches, works from file://. Every string that comes from
user code or torch is escaped, links from data are https or nothing, and a
Content-Security-Policy lets only dynscope's own inline style and script run (by their
sha256 hashes, no 'unsafe-inline'), so even a string that slipped through could not run
a script or a ``javascript:`` link.
"""

from __future__ import annotations

import base64
import hashlib
from html import escape
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from dynscope._format import location, plural
from dynscope._palette import PALETTE
from dynscope._render_text import (
    cache_text,
    end_to_end_lines,
    few,
    grads_text,
    human_bytes,
    in_graphs_text,
    pass_label,
    phase_seconds,
    phases_text,
    samples_text,
    saved_text,
    source_label,
    speedup_text,
    timing_notes,
    totals_line,
    warning_lines,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from dynscope._model import Graph, Kernel, Lowering, Report, Timing

__all__ = ["CSP", "CSS", "NO_PICTURES", "SCRIPT", "render_html", "safe_url"]

CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#1f2937;color:#fff;padding:16px 24px}
header h1{margin:0 0 6px;font-size:20px}
main{padding:8px 24px 40px;max-width:1400px}
section{background:#fff;border:1px solid #e5e7eb;border-radius:8px;padding:12px 16px;margin:16px 0}
h2{font-size:17px;margin:4px 0 10px}
table{border-collapse:collapse;font-size:13px;width:100%}
th,td{border-bottom:1px solid #eee;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f3f4f6}
code,pre{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
pre{background:#f6f8fa;padding:8px;overflow:auto;max-height:420px}
.excerpt .hit{background:#fde2e2;font-weight:bold}
.cat{display:inline-block;border-radius:10px;padding:1px 8px;background:#fee2e2;font-size:12px}
.svgbox{overflow:auto;border:1px solid #eee;max-height:900px}
.svgbox svg{max-width:none}
.legend span{display:inline-block;margin-right:10px;font-size:12px}
.legend i{display:inline-block;width:12px;height:12px;border:1px solid #999;margin-right:4px;vertical-align:middle}
.warn{color:#92400e}
.warnings{border-color:#f59e0b;background:#fffbeb}
.totals{font-size:14px}
details summary{cursor:pointer}
pre.code{max-height:600px}
pre.code span:target{background:#fde68a}
td.num{text-align:right;white-space:nowrap}
.lowering h3{font-size:15px;margin:14px 0 6px}
.lowering h4{font-size:13px;margin:10px 0 4px}
""" + "".join(f".legend i.c{i}{{background:{colour}}}\n" for i, colour in enumerate(PALETTE.values()))

# Records problems the page itself can see (script errors, blocked fetches) so a headless
# browser test can read them back from the DOM.
SCRIPT = """
window.__dynscope = {errors: [], blocked: []};
window.addEventListener('error', function (e) { window.__dynscope.errors.push(String(e.message)); });
document.addEventListener('securitypolicyviolation', function (e) { window.__dynscope.blocked.push(e.blockedURI); });
window.addEventListener('load', function () {
  function shown(id) {
    var el = document.getElementById(id);
    if (!el) return 'missing';
    var svg = el.querySelector('svg');
    if (!svg) return 'no-svg';
    var r = svg.getBoundingClientRect();
    return (r.width > 10 && r.height > 10) ? 'visible' : 'hidden';
  }
  var b = document.body;
  b.setAttribute('data-program', shown('program-view'));
  b.setAttribute('data-first-graph', shown('graph-svg-0'));
  var k = document.querySelector('table.kernels');
  var kr = k ? k.getBoundingClientRect() : null;
  b.setAttribute('data-kernels', !k ? 'missing' : (kr.width > 10 && kr.height > 10) ? 'visible' : 'hidden');
  b.setAttribute('data-errors', String(window.__dynscope.errors.length));
  b.setAttribute('data-blocked', String(window.__dynscope.blocked.length));
  b.setAttribute('data-ready', 'yes');
});
"""


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


#: Only the page's own <style> and <script> blocks, matched by hash; no style attributes,
#: no other scripts, no javascript: URLs, no fetches, no forms, no <base>.
CSP = (
    f"default-src 'none'; style-src {_sha256(CSS)}; script-src {_sha256(SCRIPT)}; img-src data:; "
    "base-uri 'none'; form-action 'none'"
)


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]], attrs: str = "") -> str:
    """An HTML table; cells are HTML already (callers escape what they put in); ``attrs``
    (dynscope's own, never data) go on the <table> tag."""
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table{' ' + attrs if attrs else ''}><tr>{head}</tr>{body}</table>"


def safe_url(url: str) -> str:
    """``url`` when it is an https link, else "" (links from data are https or nothing).

    Anything else (``javascript:``, ``data:``, ``file:``, relative paths, text with
    spaces or control characters) is dropped, so a hostile report cannot put a script
    or a local file behind a link.
    """
    url = url.strip()
    if not url or any(c.isspace() or not c.isprintable() for c in url):
        return ""
    try:
        parts = urlsplit(url)
    except ValueError:
        return ""
    return url if parts.scheme.lower() == "https" and parts.netloc else ""


#: What stands where a picture would be when the caller laid none out.
NO_PICTURES = (
    '<p class="warn">Pictures need Graphviz\'s <code>dot</code> program (Debian/Ubuntu: '
    '<code>apt-get install graphviz</code>; macOS: <code>brew install graphviz</code>).</p>'
)


def _breaks(rep: Report) -> str:
    if not rep.breaks:
        return "<p>No graph breaks.</p>"
    out = [
        _table(
            ["#", "location", "category", "count", "reason"],
            (
                [str(i), f"<code>{_e(b.location)}</code>", f"<span class=cat>{_e(b.category)}</span>",
                 str(b.count), _e(b.reason)]
                for i, b in enumerate(rep.breaks, 1)
            ),
        )
    ]
    for i, b in enumerate(rep.breaks, 1):
        lines = []
        for n, text in b.excerpt or ((b.lineno, b.source),):
            cls = ' class="hit"' if n == b.lineno else ""
            lines.append(f"<span{cls}>{n:5d}  {_e(text)}</span>")
        hints = "".join(f"<li>{_e(h)}</li>" for h in b.hints)
        url = safe_url(b.doc_url)
        doc = (
            f'<p><a href="{_e(url)}" rel="noopener noreferrer">PyTorch documentation for {_e(b.gb_id or b.gb_type)}</a></p>'
            if url else ""
        )
        out.append(
            f'<h3 id="break-{i}">[{i}] {_e(location(b.filename, b.lineno, full=True))} in {_e(b.function or "?")}</h3>'
            f'<pre class="excerpt">' + "\n".join(lines) + "</pre>"
            f"<p><b>Why:</b> {_e(b.reason)}</p><p><b>Fix:</b> {_e(b.fix)}</p>"
            + (f"<p><b>PyTorch's hints:</b></p><ul>{hints}</ul>" if hints else "")
            + doc
        )
    return "\n".join(out)


def _recompiles(rep: Report) -> str:
    if not rep.recompiles:
        return "<p>No recompiles.</p>"
    return _table(
        ["compile", "function", "failed guard"],
        (
            [f"<code>{_e(r.compile_id)}</code>", _e(r.frame),
             "<ul>" + "".join(f"<li>{_e(x)}</li>" for x in (r.explained or r.reasons)) + "</ul>"]
            for r in rep.recompiles
        ),
    )


def _fallbacks(rep: Report) -> str:
    failed = [f for f in rep.frames if f.status == "failed"]
    if not failed:
        return ""
    table = _table(
        ["compile", "function", "where", "why"],
        (
            [f"<code>{_e(f.compile_id)}</code>", _e(f.function),
             f"<code>{_e(location(f.filename, f.lineno))}</code>", _e(f.fail_summary)]
            for f in failed
        ),
    )
    return (
        "<section><h2>Frames that fell back to eager</h2><p>Dynamo gave up on these functions; "
        f"they run eagerly, and only what they call is compiled.</p>{table}</section>"
    )


def _guards(rep: Report) -> str:
    if not rep.guards:
        return "<p>No guards recorded.</p>"
    out = []
    for cid in dict.fromkeys(g.compile_id for g in rep.guards):
        mine = [g for g in rep.guards if g.compile_id == cid]
        table = _table(
            ["kind", "source", "check", "from code"],
            ([_e(g.kind), f"<code>{_e(g.source)}</code>", f"<code>{_e(g.detail)}</code>",
              f"<code>{_e(g.user_line)}</code>"] for g in mine),
        )
        out.append(f"<details><summary>{_e(cid)}: {len(mine)} guards</summary>{table}</details>")
    return "\n".join(out)


def _timing(g: Graph) -> str:
    if not g.timings:
        return ""

    # Forward+backward columns only for a training graph: an inference graph reads as before.
    trains = any(t.trains for t in g.timings)

    def train_cells(t: Timing) -> list[str]:
        if not trains:
            return []
        if not t.trains:
            return ["", "", "-"]
        compiled = "failed" if t.train_error else f"{t.train_compiled_ms:.4f}"
        eager = f"{t.train_eager_ms:.4f}" if t.train_eager_ms > 0 else ""
        return [eager, compiled, _e(grads_text(t))]

    def row(t: Timing) -> list[str]:
        notes = "".join(f"<li>{_e(n)}</li>" for n in timing_notes(t))
        notes = f'<ul class="warn">{notes}</ul>' if notes else ""
        if t.failed:
            return [_e(t.mode), _e(t.device), "", "", "failed", "", "", "", *train_cells(t), notes]
        return [_e(t.mode), _e(t.device), f"{t.eager_ms:.4f}", f"{t.compiled_ms:.4f}",
                _e(speedup_text(t)), _e(samples_text(t)), f"{t.compile_s:.2f}", f"{t.max_abs_err:.2e}",
                *train_cells(t), notes]

    extra = ["fwd+bwd eager ms", "fwd+bwd compiled ms", "grads"] if trains else []
    return _table(
        ["mode", "device", "eager ms", "compiled ms", "speedup", "samples", "compile s", "max abs err", *extra,
         "notes"],
        (row(t) for t in g.timings),
    )


# -- below Dynamo -------------------------------------------------------------------------


def _side(kernel: Kernel) -> str:
    """"fwd" or "bwd": which output code of its graph the kernel is called in."""
    return "bwd" if kernel.graph == "backward" else "fwd"


def code_anchor(graph_id: int, side: str, line: int) -> str:
    """The id of line ``line`` of graph ``graph_id``'s output code, side "fwd" or "bwd"."""
    return f"g{graph_id}-{side}-L{line}"


def _code_lines(low: Lowering, side: str) -> int:
    return len((low.backward_code if side == "bwd" else low.code).splitlines())


def _kernel_name(graph_id: int, low: Lowering, k: Kernel) -> str:
    """The kernel's name, linked to the line of the output code that calls it when known."""
    name = f"<code>{_e(k.name)}</code>"
    side = _side(k)
    if 0 < k.code_line <= _code_lines(low, side):
        return f'<a href="#{code_anchor(graph_id, side, k.code_line)}">{name}</a>'
    return name


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _code_block(graph_id: int, side: str, code: str) -> str:
    """Output code, one span per line with an id to link to; folded."""
    lines = code.splitlines()
    body = "\n".join(
        f'<span id="{code_anchor(graph_id, side, n)}">{n:4d}  {_e(text)}</span>' for n, text in enumerate(lines, 1)
    )
    what = "backward" if side == "bwd" else "forward"
    return (
        f"<details><summary>Inductor output code, {what} ({plural(len(lines), 'line')})</summary>"
        f'<pre class="code" id="code-{graph_id}-{side}">{body}</pre></details>'
    )


def _sources(k: Kernel) -> str:
    """A kernel's source lines as base names; the full paths in the tooltip."""
    if not k.source_lines:
        return "-"
    return f'<span title="{_e(chr(10).join(k.source_lines))}">{_e(few([source_label(s) for s in k.source_lines], 4))}</span>'


def _kernels(g: Graph, low: Lowering) -> str:
    rows = [
        [_kernel_name(g.id, low, k), _e(k.kind), _e(pass_label(k)), f'{k.calls}', _ms(k.time_ms), _pct(k.share),
         _e(few(k.aten_ops, 6)), _e(few(k.nodes, 6)), _sources(k)]
        for k in low.kernels_by_time()
    ]
    outside = low.outside_kernels_ms
    if outside is not None:
        share = outside / low.profiled_ms if low.profiled_ms else None
        rows.append(["<i>outside kernels</i>", "-", "-", "-", _ms(outside), _pct(share),
                     "wrapper code, allocation, launches", "-", "-"])
    return _table(
        ["kernel", "kind", "pass", "calls", "ms", "share", "fused ATen ops", "Dynamo nodes", "source lines"],
        rows, f'class="kernels" id="kernels-{g.id}"',
    )


def _lowering(g: Graph, aot_svgs: Mapping[tuple[int, str], str]) -> str:
    """What Inductor made of one graph: kernels, saved tensors, phases, pictures, code."""
    low = g.lowering
    if low is None:
        return ""
    how = "dynscope's timed build" if low.source == "timing" else "the compile PyTorch logged"
    facts = [f"Inductor ({_e(low.mode)}, {how}): {plural(len(low.kernels), 'kernel')}",
             f"{low.mapped_share:.0%} of the graph's compute nodes mapped to a kernel"]
    if low.unmapped:
        facts[-1] += f" (not mapped: {_e(few(list(low.unmapped), 8))})"
    if low.profiled_ms is not None:
        facts.append(f"{low.profiled_ms:.4f} ms per run under the profiler")
    saved = low.saved_for_backward
    if saved is not None:
        facts.append(f"saved for backward: {plural(saved.count, 'tensor')}, {_e(human_bytes(saved.bytes))}"
                     + (f" ({saved.symbolic} of symbolic size, counted at size 1)" if saved.symbolic else ""))
    out = [f'<div class="lowering" id="lowering-{g.id}"><h3>Below Dynamo</h3><p>' + "; ".join(facts) + "</p>"]
    out.append(_kernels(g, low) if low.kernels else "<p>No kernels listed.</p>")
    phases, cache = phases_text(phase_seconds([g])), cache_text([g])
    if phases:
        out.append(f"<p>Compile per phase: {_e(phases)}</p>")
    if cache:
        out.append(f"<p>Cache: {_e(cache)}</p>")
    if low.notes:
        out.append('<ul class="warn">' + "".join(f"<li>{_e(n)}</li>" for n in low.notes) + "</ul>")
    for aot in (low.forward, low.backward):
        svg = aot_svgs.get((g.id, aot.kind)) if aot is not None else None
        if aot is not None and svg is not None:
            out.append(
                f"<h4>AOTAutograd {_e(aot.kind)} graph ({aot.op_count} ATen ops)</h4>"
                f'<div class="svgbox" id="aot-svg-{g.id}-{_e(aot.kind)}">{svg}</div>'
            )
    if low.code:
        out.append(_code_block(g.id, "fwd", low.code))
    if low.backward_code:
        out.append(_code_block(g.id, "bwd", low.backward_code))
    return "".join(out) + "</div>"


def _program_lowering(rep: Report) -> str:
    """The program's part below Dynamo: its costliest kernels, compile per phase, caches."""
    lowered = [g for g in rep.graphs if g.lowering is not None]
    if not lowered:
        return ""
    out = [f"<section id=\"below-dynamo\"><h2>Below Dynamo ({plural(len(lowered), 'lowered graph')})</h2>"]
    top = rep.top_kernels(10)
    if top:
        out.append("<p>The kernels that cost the program most (time over each graph's runs; share of "
                   "its graph's profiled time):</p>")
        out.append(_table(
            ["graph", "kernel", "kind", "pass", "ms", "share", "fused ATen ops", "source lines"],
            (
                [f'<a href="#graph-{g.id}">{g.id}</a>', _kernel_name(g.id, g.lowering, k) if g.lowering else "",
                 _e(k.kind), _e(pass_label(k)), _ms(cost), _pct(k.share), _e(few(k.aten_ops)),
                 _e(few([source_label(s) for s in k.source_lines], 2))]
                for g, k, cost in top
            ),
            'class="top-kernels"',
        ))
    else:
        out.append("<p>Kernels not timed (<code>dynscope.report(..., timing=True)</code> times them).</p>")
    for label, text in (("Compile per phase", phases_text(phase_seconds(lowered))), ("Cache", cache_text(lowered)),
                        ("Saved for backward", saved_text(lowered))):
        if text:
            out.append(f"<p>{label}: {_e(text)}</p>")
    return "".join(out) + "</section>"


def _graph(g: Graph, svg: str | None, aot_svgs: Mapping[tuple[int, str], str] | None = None) -> str:
    ops = _table(["op", "count"], ([f"<code>{_e(t)}</code>", str(n)] for t, n in g.op_counts))
    inputs = ", ".join(_e(m.describe()) for m in g.inputs)
    return (
        f'<section id="graph-{g.id}"><h2>Graph {g.id} <small>({_e(g.compile_id)}, {_e(g.frame)} in '
        f"{_e(location(g.filename, g.lineno))})</small></h2>"
        f"<p>{g.op_count} ops, {g.node_count} nodes; inputs: {inputs}</p>"
        f'<div class="svgbox" id="graph-svg-{g.id}">{NO_PICTURES if svg is None else svg}</div>'
        f"{_timing(g)}{_lowering(g, aot_svgs or {})}"
        f"<details><summary>ops</summary>{ops}</details>"
        f"<details><summary>code</summary><pre>{_e(g.code)}</pre></details></section>"
    )


def _legend() -> str:
    return '<p class="legend">' + "".join(
        f'<span><i class="c{i}"></i>{_e(name)}</span>' for i, name in enumerate(PALETTE)
    ) + "</p>"


def _end_to_end(rep: Report) -> str:
    if not rep.timing:
        return ""
    table = _table(
        ["mode", "device", "eager ms", "compiled ms", "speedup", "samples", "first call s", "in graphs", "error"],
        (
            [_e(m.mode), _e(m.device), f"{m.eager_ms:.3f}", f"{m.compiled_ms:.3f}",
             f"{m.speedup:.2f}x" + (" (noisy)" if m.noisy else ""), _e(samples_text(m)),
             f"{m.first_call_s:.2f}", _e(in_graphs_text(m)), _e(m.error)]
            for m in rep.timing
        ),
    )
    lines = "".join(f"<li>{_e(n)}</li>" for n in end_to_end_lines(rep))
    notes = f'<ul class="warn">{lines}</ul>' if lines else ""
    return f"<section><h2>Timing, end to end</h2>{table}{notes}</section>"


def _warnings(rep: Report) -> str:
    """What makes the counts incomplete, first on the page; "" when nothing does."""
    lines = warning_lines(rep)
    if not lines:
        return ""
    items = "".join(f"<li>{_e(w)}</li>" for w in lines)
    return f'<section class="warnings"><h2>Read this first</h2><ul>{items}</ul></section>\n'


def render_html(
    rep: Report,
    *,
    program_svg: str | None = None,
    graph_svgs: Mapping[int, str] | None = None,
    aot_svgs: Mapping[tuple[int, str], str] | None = None,
) -> str:
    """The whole page as a string. Pure: it never looks for or runs Graphviz.

    The caller lays the pictures out (``dynscope._svg.report_pictures``; ``Report.to_html``
    and the bundle do) and passes the SVG text; each picture left out is replaced by a
    note saying how to get Graphviz.

    Args:
        rep: the report.
        program_svg: the program picture (``Report.program_svg()``), or None.
        graph_svgs: graph id -> that graph's picture (``Graph.to_svg()``).
        aot_svgs: (graph id, ``AotGraph.kind``) -> the picture of that AOTAutograd graph;
            a lowered graph without one shows no AOT picture.
    """
    title = f"dynscope: {rep.title}" if rep.title else "dynscope report"
    program = NO_PICTURES if program_svg is None else program_svg
    svgs = graph_svgs or {}
    graphs = "\n".join(_graph(g, svgs.get(g.id), aot_svgs) for g in rep.graphs)
    cov = ""
    if rep.coverage is not None:
        c = rep.coverage
        eager = ", ".join(f"{_e(site)} x{n}" for site, n in c.eager_sites[:10])
        cov = (
            f"<section><h2>Coverage</h2><p>{c.ratio:.1%} of torch ops ran inside graphs "
            f"({c.ops_in_graphs} in graphs, {c.ops_eager} eager){': ' + eager if eager else ''}</p></section>"
        )
    t = rep.compile_time
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<title>{_e(title)}</title><style>{CSS}</style><script>{SCRIPT}</script></head>
<body><header><h1>{_e(title)}</h1><div class="totals">{_e(totals_line(rep))}</div>
<div>torch {_e(rep.torch_version)}; compile {t.total_s:.2f} s (dynamo {t.dynamo_s:.2f} s, backend {t.backend_s:.2f} s)</div></header>
<main>
{_warnings(rep)}<section><h2>Program</h2><p>Frames in call order; blue boxes are captured graphs, red octagons graph breaks, dashed boxes recompiled variants (with the guard that failed).</p>
<div class="svgbox" id="program-view">{program}</div></section>
<section><h2>Graph breaks ({plural(rep.break_count, "event")} at {plural(len(rep.breaks), "site")})</h2>{_breaks(rep)}</section>
<section><h2>Recompiles ({rep.recompile_count})</h2>{_recompiles(rep)}</section>
{_fallbacks(rep)}{cov}{_end_to_end(rep)}{_program_lowering(rep)}
<section><h2>Guards</h2>{_guards(rep)}</section>
<section><h2>Graphs ({rep.graph_count})</h2>{_legend()}</section>
{graphs}
</main></body></html>
"""
