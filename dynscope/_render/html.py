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
from collections import Counter
from html import escape
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from dynscope._format import location, ms, percent, plural
from dynscope._model.analysis import structure_hash
from dynscope._render.palette import PALETTE
from dynscope._render.text import (
    PHASE_SOURCES,
    advice_title,
    cache_text,
    call_chain_text,
    compile_parts,
    cost_text,
    end_to_end_lines,
    few,
    fix_first_line,
    gave_up_text,
    grads_text,
    human_bytes,
    in_graphs_text,
    known_text,
    lowering_phase_lines,
    measurement_text,
    pass_label,
    phase_seconds,
    phases_text,
    samples_text,
    saved_text,
    source_label,
    speedup_text,
    timing_notes,
    totals_line,
    trial_cells,
    trial_timed,
    trial_verdict,
    warning_lines,
)
from dynscope._torch.wording import resume_label

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from dynscope._model.types import Graph, Kernel, Lowering, Report, Timing

__all__ = ["BUNDLE_CSP", "CSP", "CSS", "INLINE_SVG_MAX", "NO_PICTURES", "SCRIPT", "render_html", "safe_url"]

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
nav.find{position:sticky;top:0;z-index:5;background:#f3f4f6;border-bottom:1px solid #e5e7eb;padding:6px 24px;font-size:13px}
nav.find input{width:340px;max-width:60%;padding:3px 6px}
.zoom{margin:2px 0}
.zoom button{font-size:12px;min-width:28px;margin-right:4px}
.svgbox g.node.hit polygon,.svgbox g.node.hit ellipse,.svgbox g.node.hit path{stroke:#e11d48;stroke-width:4}
.svgbox g.node.dim{opacity:.3}
.svgbox img{max-width:none}
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
// Zoom, on-demand pictures and node search. The state a test reads goes on <html>.
(function () {
  var root = document.documentElement;
  try {  // the first paint's time, for benchmarks/page_scale.py; a browser without it records none
    new PerformanceObserver(function (list) {
      list.getEntries().forEach(function (e) {
        if (e.name === 'first-contentful-paint') root.setAttribute('data-paint-ms', String(Math.round(e.startTime)));
      });
    }).observe({type: 'paint', buffered: true});
  } catch (e) { /* no paint timing */ }
  // The first frame after the page is parsed (where no paint timing is reported, as in
  // Chromium's --dump-dom): the callback runs as that frame is produced.
  document.addEventListener('DOMContentLoaded', function () {
    requestAnimationFrame(function () { root.setAttribute('data-frame-ms', String(Math.round(performance.now()))); });
  });
  window.addEventListener('load', function () { root.setAttribute('data-load-ms', String(Math.round(performance.now()))); });
  function size(el, z) {
    if (el.tagName.toLowerCase() === 'img') { if (el.naturalWidth) el.style.width = (el.naturalWidth * z) + 'px'; return; }
    ['width', 'height'].forEach(function (a) {
      if (!el.hasAttribute('data-' + a)) el.setAttribute('data-' + a, el.getAttribute(a) || '');
      var m = /^([0-9.]+)([a-z%]*)$/.exec(el.getAttribute('data-' + a));
      if (m) el.setAttribute(a, (parseFloat(m[1]) * z).toFixed(1) + m[2]);
    });
  }
  function zoom(box, f) {
    var pic = box.querySelector('svg, img');
    if (!pic) return;
    var z = f ? parseFloat(box.getAttribute('data-zoom') || '1') * f : 1;
    box.setAttribute('data-zoom', String(z));
    size(pic, z);
  }
  function fit(box) {
    // Shrink the picture to the box's width (never enlarge): the whole of it in view.
    var pic = box.querySelector('svg, img');
    if (!pic) return;
    zoom(box, 0);
    var wide = pic.getBoundingClientRect().width;
    if (wide > box.clientWidth && box.clientWidth > 0) {
      var z = (box.clientWidth - 4) / wide;
      box.setAttribute('data-zoom', String(z));
      size(pic, z);
    }
  }
  function controls(box) {
    var bar = document.createElement('div');
    bar.className = 'zoom';
    [['+', 1.25, 'zoom in'], ['\u2212', 0.8, 'zoom out'], ['reset', 0, 'original size'],
     ['fit', -1, 'fit the width']].forEach(function (c) {
      var btn = document.createElement('button');
      btn.type = 'button'; btn.textContent = c[0]; btn.title = c[2];
      btn.addEventListener('click', function () { if (c[1] < 0) fit(box); else zoom(box, c[1]); });
      bar.appendChild(btn);
    });
    box.parentNode.insertBefore(bar, box);
  }
  function load(btn) {
    var src = btn.getAttribute('data-src') || '';
    if (!/^graph_[0-9]+\\.svg$/.test(src)) return;
    var box = btn.closest('.svgbox');
    var img = document.createElement('img');
    img.addEventListener('load', function () { count('data-pictures-loaded'); });
    img.addEventListener('error', function () { count('data-pictures-failed'); });
    img.src = src; img.alt = 'picture of ' + src;
    box.replaceChildren(img);
    controls(box);
  }
  function count(attr) { root.setAttribute(attr, String(parseInt(root.getAttribute(attr) || '0', 10) + 1)); }
  // Following a link to a graph whose picture is off the page shows the picture.
  function opened() {
    var m = /^#graph-([0-9]+)$/.exec(location.hash);
    var btn = m && document.querySelector('#graph-svg-' + m[1] + ' button.load');
    if (btn) load(btn);
  }
  window.addEventListener('hashchange', opened);
  var hits = [], at = -1;
  function find(q) {
    q = q.trim().toLowerCase();
    hits = []; at = -1;
    var pics = 0, coded = [];
    document.querySelectorAll('.svgbox').forEach(function (box) {
      var n = 0;
      box.querySelectorAll('g.node').forEach(function (g) {
        var text = ((g.getAttribute('data-name') || '') + ' ' + g.textContent).toLowerCase();
        var hit = q !== '' && text.indexOf(q) >= 0;
        g.classList.toggle('hit', hit);
        g.classList.toggle('dim', q !== '' && !hit);
        if (hit) { hits.push(g); n++; }
      });
      if (n) pics++;
    });
    // Graphs whose picture is not on the page: look in their code instead.
    document.querySelectorAll('section[data-picture="off-page"]').forEach(function (s) {
      var code = s.querySelector('pre.graph-code');
      if (q && code && code.textContent.toLowerCase().indexOf(q) >= 0) coded.push(s.getAttribute('data-graph'));
    });
    var out = document.getElementById('find-count');
    out.textContent = !q ? '' : hits.length + ' nodes in ' + pics + ' pictures' +
      (coded.length ? '; in the code of graphs ' + coded.join(', ') + ' (pictures not on the page)' : '') +
      (hits.length ? ' (Enter: next)' : '');
    root.setAttribute('data-find-hits', String(hits.length));
    root.setAttribute('data-find-code', coded.join(','));
  }
  function next() {
    if (!hits.length) return;
    at = (at + 1) % hits.length;
    hits[at].scrollIntoView({block: 'center', inline: 'center'});
  }
  document.addEventListener('DOMContentLoaded', function () {
    document.querySelectorAll('.svgbox').forEach(function (box) { if (box.querySelector('svg')) controls(box); });
    // The program view opens fitted to the page's width: the whole program at a glance.
    var program = document.getElementById('program-view');
    if (program) fit(program);
    document.querySelectorAll('button.load').forEach(function (btn) {
      btn.addEventListener('click', function () { load(btn); });
    });
    var input = document.getElementById('find');
    if (input) {
      input.addEventListener('input', function () { find(input.value); });
      input.addEventListener('keydown', function (e) { if (e.key === 'Enter') next(); });
      // #find=relu on the address searches at once (a link to a search; tests use it too).
      var m = /^#find=(.*)$/.exec(location.hash);
      if (m) { input.value = decodeURIComponent(m[1]); find(input.value); }
    }
    opened();
    root.setAttribute('data-zoom-controls', String(document.querySelectorAll('.zoom').length));
  });
})();
"""


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


#: Only the page's own <style> and <script> blocks, matched by hash; no style attributes,
#: no other scripts, no javascript: URLs, no fetches, no forms, no <base>.
CSP = (
    f"default-src 'none'; style-src {_sha256(CSS)}; script-src {_sha256(SCRIPT)}; img-src data:; "
    "base-uri 'none'; form-action 'none'"
)

#: The bundle's index.html: as CSP, and <img> may also show the picture files the bundle
#: wrote beside the page ('self': from file:// that is the page's own folder's files; an
#: SVG shown by <img> runs no script and fetches nothing).
BUNDLE_CSP = CSP.replace("img-src data:;", "img-src data: 'self';")

#: Pictures longer than this (characters of SVG) are not put in the page: the bundle's page
#: shows them on demand from their graph_<id>.svg file; Report.to_html() leaves them out.
INLINE_SVG_MAX = 250_000

#: Guards listed one by one per compile on the page; the rest are counted by kind.
GUARDS_SHOWN = 100


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
    ranked = rep.breaks_by_cost()
    out = [
        f"<p class=fixfirst><b>{_e(fix_first_line(rep)[:1].upper() + fix_first_line(rep)[1:])}</b></p>",
        _table(
            ["#", "location", "category", "count", "graphs", "recompiles", "eager/call", "reason"],
            (
                [str(i), f"<code>{_e(b.location)}</code>", f"<span class=cat>{_e(b.category)}</span>",
                 str(b.count), known_text(b.graphs_split, str(b.graphs_split)),
                 known_text(b.recompiles_caused, str(b.recompiles_caused)), known_text(b.eager_ms, _e(ms(b.eager_ms))),
                 _e(b.reason)]
                for i, b in enumerate(ranked, 1)
            ),
        ),
    ]
    for i, b in enumerate(ranked, 1):
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
            f"<p><b>Why:</b> {_e(b.reason)}</p>"
            + (f'<pre class="detail">{_e(b.detail)}</pre>' if b.detail else "")
            + (f"<p><b>Called from:</b> <code>{_e(call_chain_text(b))}</code></p>" if len(b.call_chain) > 1 else "")
            + f"<p><b>Cost:</b> {_e(cost_text(rep, b))}</p>"
            + (f"<p>{_e(gave_up_text(b))}</p>" if b.gave_up else "")
            + f"<p><b>Fix:</b> {_e(b.fix)}</p>"
            + (f"<p><b>PyTorch's hints:</b></p><ul>{hints}</ul>" if hints else "")
            + doc
            + (f"<details><summary>What PyTorch said</summary><pre>{_e(b.torch_text)}</pre></details>" if b.torch_text else "")
        )
    return "\n".join(out)


def _recompiles(rep: Report) -> str:
    if not rep.recompiles:
        return "<p>No recompiles.</p>"
    by_id = {r.compile_id: r for r in rep.recompiles}

    def said(ids: Sequence[str]) -> str:
        texts = dict.fromkeys(x for cid in ids for x in (by_id[cid].explained or by_id[cid].reasons))
        return "<ul>" + "".join(f"<li>{_e(x)}</li>" for x in texts) + "</ul>"

    return _table(
        ["recompiles", "function", "cause", "fix", "compiles and failed guards"],
        (
            [str(g.count), _e(resume_label(g.frame)), _e(g.cause), _e(g.fix),
             f"<code>{_e(', '.join(g.compile_ids))}</code>" + said(g.compile_ids)]
            for g in rep.recompile_groups()
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
              f"<code>{_e(g.user_line)}</code>"] for g in mine[:GUARDS_SHOWN]),
        )
        # A big model has thousands of guards (several per parameter): the page lists the
        # first ones and counts the rest by kind, so the guards do not outweigh the page.
        if len(mine) > GUARDS_SHOWN:
            kinds = Counter(g.kind for g in mine[GUARDS_SHOWN:])
            table += (f"<p>{len(mine) - GUARDS_SHOWN} more guards ("
                      + _e(", ".join(f"{k} x{n}" for k, n in kinds.most_common()))
                      + "): all are in report.json and <code>rep.guards</code>.</p>")
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
    return percent(value, 1)


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
        share = outside / low.graph_ms if low.graph_ms else None
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
             f"{percent(low.mapped_share)} of the graph's compute nodes mapped to a kernel"]
    if low.unmapped:
        facts[-1] += f" (not mapped: {_e(few(list(low.unmapped), 8))})"
    if low.measured_ms is not None:
        facts.append(f"{low.measured_ms:.4f} ms per call (timer)")
    if low.profiled_ms is not None:
        facts.append(f"{low.profiled_ms:.4f} ms per call under the profiler")
    saved = low.saved_for_backward
    if saved is not None:
        facts.append(f"saved for backward: {plural(saved.count, 'tensor')}, {_e(human_bytes(saved.bytes))}"
                     + (f" ({saved.symbolic} of symbolic size, counted at size 1)" if saved.symbolic else ""))
    out = [f'<div class="lowering" id="lowering-{g.id}"><h3>Below Dynamo</h3><p>' + "; ".join(facts) + "</p>"]
    out.append(_kernels(g, low) if low.kernels else "<p>No kernels listed.</p>")
    phases, cache = phases_text(phase_seconds([g])), cache_text([g])
    if phases:
        # Whose compile: the user's compile of this graph's frame, or dynscope's timed build.
        whose = PHASE_SOURCES.get(low.source, low.source)
        out.append(f"<p>Compile per phase ({_e(whose)}): {_e(phases)}</p>")
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
                   "its graph's time):</p>")
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
    phase_lines = [(label[0].upper() + label[1:], text) for label, text in lowering_phase_lines(rep)]
    for label, text in (*phase_lines, ("Cache", cache_text(lowered)),
                        ("Saved for backward", saved_text(lowered))):
        if text:
            out.append(f"<p>{label}: {_e(text)}</p>")
    return "".join(out) + "</section>"


def _picture(g: Graph, svg: str | None, files: bool, no_pictures: str = NO_PICTURES) -> tuple[str, str, str]:
    """(what stands in the graph's picture box, the picture's state for the graph table,
    "inline", "off-page" or "none").

    A picture over INLINE_SVG_MAX stays out of the page: with ``files`` (the bundle wrote
    graph_<id>.svg beside the page) a button shows it on demand; without (a single-file
    page) a note says how to get it.
    """
    if svg is None:
        return no_pictures, "no picture", "none"
    if len(svg) <= INLINE_SVG_MAX:
        return svg, "picture on the page", "inline"
    size = human_bytes(len(svg.encode("utf-8", "replace")))
    name = f"graph_{g.id}.svg"
    if files:
        return (
            f'<p>This picture ({size}) is too large to put in the page. <button type="button" class="load" '
            f'data-src="{name}">Show it here</button> or open <a href="{name}">{name}</a>.</p>',
            f'picture on demand ({size}): <a href="{name}">{name}</a>', "off-page",
        )
    return (
        f'<p class="warn">This picture ({size}) is too large for a single-file page and is left out: '
        f"<code>rep.render(folder)</code> writes it to <code>{name}</code> and its index.html shows it on "
        "demand; <code>Graph.to_svg()</code> returns it.</p>",
        f"picture left out ({size})", "off-page",
    )


def _graph(
    g: Graph,
    svg: str | None,
    aot_svgs: Mapping[tuple[int, str], str] | None = None,
    *,
    files: bool = False,
    same: Sequence[int] = (),
    no_pictures: str = NO_PICTURES,
) -> str:
    """One graph's section; ``same`` lists the graphs of its structure (itself included)
    when there are several: the first is drawn, the others point to it."""
    head = (
        f'<h2>Graph {g.id} <small>({_e(g.compile_id)}, {_e(g.frame)}{_ddp_split(g)} in '
        f"{_e(location(g.filename, g.lineno))})</small></h2>"
    )
    if same and same[0] != g.id:
        return (
            f'<section id="graph-{g.id}" data-graph="{g.id}" data-picture="folded">{head}'
            f'<p>The same graph as <a href="#graph-{same[0]}">graph {same[0]}</a> (graphs '
            f"{_ids(same)} are the same graph: same ops, shapes and edges); its picture, ops and code are "
            f"there.</p>{_timing(g)}{_lowering(g, aot_svgs or {})}</section>"
        )
    ops = _table(["graph op", "count"], ([f"<code>{_e(t)}</code>", str(n)] for t, n in g.op_counts))
    inputs = ", ".join(_e(m.describe()) for m in g.inputs)
    box, _, where = _picture(g, svg, files, no_pictures)
    folded = f"<p>Graphs {_ids(same)} are the same graph (same ops, shapes and edges), drawn once here.</p>" if same else ""
    return (
        f'<section id="graph-{g.id}" data-graph="{g.id}" data-picture="{where}">{head}'
        f"<p>{plural(g.op_count, 'graph op')}, {g.node_count} nodes; inputs: {inputs}</p>{folded}"
        f'<div class="svgbox" id="graph-svg-{g.id}">{box}</div>'
        f"{_timing(g)}{_lowering(g, aot_svgs or {})}"
        f"<details><summary>graph ops</summary>{ops}</details>"
        f'<details><summary>code</summary><pre class="graph-code">{_e(g.code)}</pre></details></section>'
    )


def _ids(ids: Sequence[int]) -> str:
    """"3, 5 and 7"."""
    words = [str(i) for i in ids]
    return ", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else "".join(words)


def same_graphs(rep: Report) -> dict[int, list[int]]:
    """Graph id -> the ids of every graph of its structure (``structure_hash``), in order,
    for graphs that share it with another; a graph known only from the trace is never folded."""
    groups: dict[str, list[int]] = {}
    for g in rep.graphs:
        if g.nodes:
            groups.setdefault(structure_hash(g), []).append(g.id)
    return {i: ids for ids in groups.values() if len(ids) > 1 for i in ids}


def _graph_table(rep: Report, svgs: Mapping[int, str], files: bool, same: Mapping[int, list[int]]) -> str:
    """Every graph on one line, with a link to its section (or the section it is folded into)."""
    rows = []
    for g in rep.graphs:
        ids = same.get(g.id, [])
        if ids and ids[0] != g.id:
            status = f"same graph as {ids[0]}"
            link = f'<a href="#graph-{ids[0]}">graph {ids[0]}</a>'
        else:
            status = _picture(g, svgs.get(g.id), files)[1] if svgs else "no picture"
            if ids:
                status += f"; also graphs {_ids([i for i in ids if i != g.id])}"
            link = f'<a href="#graph-{g.id}">graph {g.id}</a>'
        status = ("Inductor failed; " if g.timing is not None and g.timing.failed else "") + status
        rows.append([
            str(g.id), f"{_e(g.frame)}{_ddp_split(g)} <code>{_e(location(g.filename, g.lineno))}</code>", str(g.op_count),
            _e(few([m.describe() for m in g.inputs], 4)), status, link,
        ])
    return _table(["id", "frame", "graph ops", "inputs", "status", "link"], rows, 'class="graph-table"')


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


def _advice(rep: Report) -> str:
    """"What each fix buys": the remedies dynscope.advise tried, best first, with the
    measured before -> after counts; "" when the report holds no trials."""
    if not rep.trials:
        return ""
    timed = trial_timed(rep.trials)
    headers = ["remedy", "code", "target", "graphs", "breaks", "recompiles", "coverage"]
    headers += ["speedup"] if timed else []
    headers += ["helped", "error / note"]
    rows = []
    for t in rep.trials:
        verdict = trial_verdict(t)
        # A remedy that did not help or failed is shown as such, not hidden.
        shown = _e(verdict) if verdict in ("yes", "change your code") else f'<span class="warn">{_e(verdict)}</span>'
        said = "; ".join(x for x in (t.error, t.note) if x)
        rows.append([
            _e(t.remedy), f"<pre>{_e(t.code)}</pre>", _e(", ".join(t.target) or "-"),
            *(_e(c) for c in trial_cells(t, timed=timed)), shown, _e(said),
        ])
    return (
        f'<section id="advice"><h2>{_e(advice_title(rep.trials))}</h2><p>Each remedy was run on its own, '
        "in isolation, on the same inputs; before -> after are the measured counts. A remedy helped when it "
        "removed breaks or recompiles (or raised coverage or speed) with the outputs still equal to eager's."
        f"</p>{_table(headers, rows)}</section>\n"
    )


def _warnings(rep: Report, pictures_note: str = "") -> str:
    """What makes the counts incomplete (or the page lack its pictures), first on the page;
    "" when nothing does."""
    lines = warning_lines(rep) + ([f"No pictures: {pictures_note}"] if pictures_note else [])
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
    picture_files: bool = False,
    pictures_note: str = "",
) -> str:
    """The whole page as a string. Pure: it never looks for or runs Graphviz.

    The caller lays the pictures out (``dynscope._render.svg.report_pictures``; ``Report.to_html``
    and the bundle do) and passes the SVG text; each picture left out is replaced by a
    note saying how to get Graphviz.

    Args:
        rep: the report.
        program_svg: the program picture (``Report.program_svg()``), or None.
        graph_svgs: graph id -> that graph's picture (``Graph.to_svg()``).
        aot_svgs: (graph id, ``AotGraph.kind``) -> the picture of that AOTAutograd graph;
            a lowered graph without one shows no AOT picture.
        picture_files: the page sits beside the graph_<id>.svg files (the bundle): a graph
            picture over INLINE_SVG_MAX characters is shown from its file on demand (and
            only then the page's CSP is BUNDLE_CSP, letting <img> load those files). False
            (a single-file page): such a picture is left out, with a note on how to get it.
        pictures_note: why there are no pictures when Graphviz is installed but failed
            (``dynscope._render.bundle`` passes the error): said in place of each picture and
            under "Read this first". Defaults to "" (the install hint when pictures are missing).

    Graphs of one structure (``structure_hash``) are drawn once; a table of every graph
    with links heads the graphs part, and a search box finds nodes across the pictures.
    """
    title = f"dynscope: {rep.title}" if rep.title else "dynscope report"
    no_pictures = f'<p class="warn">No pictures: {_e(pictures_note)}</p>' if pictures_note else NO_PICTURES
    program = no_pictures if program_svg is None else program_svg
    svgs = graph_svgs or {}
    same = same_graphs(rep)
    # The page loads picture files only when one is off the page: else its CSP loads none.
    files = picture_files and any(len(svg) > INLINE_SVG_MAX for svg in svgs.values())
    graphs = "\n".join(
        _graph(g, svgs.get(g.id), aot_svgs, files=picture_files, same=same.get(g.id, ()), no_pictures=no_pictures)
        for g in rep.graphs
    )
    cov = ""
    if rep.coverage is not None:
        c = rep.coverage
        eager = ", ".join(f"{_e(site)} x{n}" for site, n in c.eager_sites[:10])
        cov = (
            f"<section><h2>Coverage</h2><p>{percent(c.ratio, 1)} of the torch ops run were inside graphs "
            f"(torch ops run: {c.ops_in_graphs} in graphs, {c.ops_eager} eagerly){': ' + eager if eager else ''}</p></section>"
        )
    t = rep.compile_time
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{BUNDLE_CSP if files else CSP}">
<title>{_e(title)}</title><style>{CSS}</style><script>{SCRIPT}</script></head>
<body><header><h1>{_e(title)}</h1><div class="totals">{_e(totals_line(rep))}</div>
<div>torch {_e(rep.torch_version)}; compile {_e(compile_parts(t, 2))}</div>{_compile_detail(rep)}</header>
<nav class="find"><input type="search" id="find" placeholder="Find nodes: name, op or source line" aria-label="Find nodes by name, op or source line"> <span id="find-count"></span></nav>
<main>
{_warnings(rep, pictures_note)}<section><h2>Program</h2><p>Frames in call order; blue boxes are captured graphs, red octagons graph breaks, dashed boxes recompiled variants (with the guard that failed).</p>
<div class="svgbox" id="program-view">{program}</div></section>
<section><h2>Graph breaks ({plural(rep.break_count, "event")} at {plural(len(rep.breaks), "site")})</h2>{_breaks(rep)}</section>
<section><h2>Recompiles ({rep.recompile_count})</h2>{_recompiles(rep)}</section>
{_advice(rep)}{_fallbacks(rep)}{cov}{_end_to_end(rep)}{_program_lowering(rep)}
<section><h2>Guards</h2>{_guards(rep)}</section>
<section id="graphs"><h2>Graphs ({rep.graph_count})</h2>{_legend()}{_graph_table(rep, svgs, picture_files, same)}</section>
{graphs}
</main></body></html>
"""


def _compile_detail(rep: Report) -> str:
    """Under the header's compile figure: the same seconds by phase, and dynscope's own
    measurement builds apart from them; "" when there is neither."""
    out = []
    if rep.compile_time.phases:
        out.append(f"<div>Your program's compile per phase: {_e(phases_text(list(rep.compile_time.phases)))}</div>")
    measured = measurement_text(rep)
    if measured:
        out.append(f"<div>{_e(measured[0].upper() + measured[1:])}</div>")
    return "".join(out)


def _ddp_split(g: Graph) -> str:
    """" [DDP bucket split]" for a piece DDP's optimizer split a compile into (not a break)."""
    return " [DDP bucket split]" if g.split_by == "ddp_bucket" else ""
