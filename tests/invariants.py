"""What must hold for every Report the suite makes (issue 18), checked in one place.

``tests/conftest.py`` runs :func:`check` on every report that ``report()``, ``capture()`` and
``load()`` return during the suite (a hook around the three, not a mock: the reports are the
real ones), and, for captures, compares the report with the records PyTorch's trace logger
emitted while the capture was open (:class:`TraceCounts`, a handler of the suite's own on the
same logger); each log ``load_trace()`` reads is compared with its records counted line by
line (:class:`LogCounts`). ``checked`` counts the reports checked; the suite prints it at the end.

The invariants:

1. No share, coverage or "in graphs" figure above 100% (nor below 0).
2. The header's compile time equals the phases it is made of; dynscope's own builds shown
   per phase are part of (never more than) all its measurement builds (Dynamo + backend + the lazy
   backward compile, and the per-phase split when there is one), and the report's total
   equals the sum of its frames.
3. ``break_count`` equals the sum of the sites' counts and the number of break events; the
   events on which Dynamo gave up are counted on their sites. Under a capture, it equals
   the ``dynamo_graph_break_reason`` records PyTorch logged (one event per record).
4. Under a capture, the frames equal the frames PyTorch compiled (``compilation_metrics``
   records).
5. Nothing of dynscope appears in a report: no frame, stack entry, call chain, PyTorch text,
   graph, program picture or summary line names a dynscope file.
6. The "fix ... first" line names a site in the user's code.
7. Every share the summary prints as a percentage lies in 0..100 (spreads and changes aside), and the coverage the summary prints is
   the model's: "100%" only when the ratio is 1, "0%" only when it is 0.
8. (Live reports) A frame is shown where its function is: the file it names defines a function of its name
   at its line (a decorator's wrapper in a torch or library file is shown as the function it
   runs, where that is defined), read with ``ast`` apart from dynscope's own reader.
9. Noise is not a cause: for a timing mode measured noisy, the summary explains no gap of
   that mode (no "the other N ms is ..." nor "the graphs ... add up to").
10. Order: the program line shows each step's graphs later than the step before's (graph
    ids are in compile order, and a graph runs when compiled); in the break table, among
    sites of one eager time per call (and of one owner: the user's or a library's), a site
    never stands above one with more events.
11. A remedy helped only when it removed something or measured better: a helped trial has
    fewer breaks or recompiles than before (the other no higher), a higher speedup, or a
    smaller peak; a trial whose breaks only moved (as many after, at other lines) says where
    they moved and is not helped for breaks.
12. (Live reports) Eager ops are listed at lines that hold code: each coverage site's
    ``file:line`` (for files the report names) is a line of a statement, not a blank line,
    a comment, nor a ``def`` or decorator line (a frame's first line standing in for the
    line that ran the op).
"""

from __future__ import annotations

import functools
import logging
import math
import re
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dynscope

if TYPE_CHECKING:
    from dynscope._model import Report

DYNSCOPE_DIR = str(Path(dynscope.__file__).resolve().parent)
#: Stored reports name files under the repository as "<root>/..." (tests/conftest.py normalise).
_ROOT = str(Path(__file__).resolve().parent.parent)
#: A share printed as a percentage; a spread ("IQR 353%") or a change ("+12%") is not a share.
_PERCENT = re.compile(r"(?<![\w.+±-])(?<!IQR )(?<!spread )(\d+(?:\.\d+)?)%")

#: Reports checked so far in this process (the suite prints it at the end).
checked = 0
#: Of those, the ones compared with PyTorch's own trace records.
compared = 0
#: Seconds spent checking (the suite prints it: the checks run on every report it makes).
seconds = 0.0


class TraceCounts(logging.Handler):
    """Counts the records PyTorch's trace logger emits from one thread: graph-break records
    and compiled frames. Attached beside dynscope's own handler, never instead of it."""

    def __init__(self, thread: int) -> None:
        from dynscope._torch.trace import own_depth

        super().__init__(level=logging.DEBUG)
        self.thread = thread
        # dynscope's own timing and memory compiles (report(timing=True) inside the capture)
        # are not the program's: counted by neither side.
        self.depth = own_depth()
        self.breaks = 0
        self.frames = 0
        self.recompiles = 0  # compiles of a frame after its first (frame_compile_id > 0)
        self.graphs = 0  # graphs Dynamo produced (dynamo_output_graph records)

    def emit(self, record: logging.LogRecord) -> None:
        from dynscope._torch.trace import own_depth

        if record.thread != self.thread or own_depth() > self.depth:
            return
        meta = getattr(record, "metadata", None) or {}
        artifact = meta.get("artifact")
        if isinstance(artifact, dict) and artifact.get("name") == "dynamo_graph_break_reason":
            self.breaks += 1
        if "dynamo_output_graph" in meta:
            self.graphs += 1
        if "compilation_metrics" in meta:
            self.frames += 1
            self.recompiles += int((meta.get("frame_compile_id") or 0) > 0)


def trace_logger() -> logging.Logger:
    return logging.getLogger("torch.__trace")


def _fail(rep: Report, what: str) -> None:
    raise AssertionError(f"invariant broken in report {rep.title!r}: {what}")


def _strings(value: Any) -> list[str]:
    """Every string inside a plain-data value (the report's JSON form)."""
    out: list[str] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
            stack.extend(k for k in v if isinstance(k, str))
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    return out


def check(rep: Report, counts: TraceCounts | None = None, *, live: bool = False) -> None:
    """Assert every invariant on ``rep`` (see the module docstring); AssertionError names the
    first broken. ``live``: made by a run in this process (report(), a capture), so its
    files are the ones on disk (a stored report or log may name lines since edited)."""
    global seconds
    start = time.perf_counter()
    try:
        _check(rep, counts, live=live)
    finally:
        seconds += time.perf_counter() - start


def _check(rep: Report, counts: TraceCounts | None, *, live: bool) -> None:
    global checked, compared
    from dynscope._render.words import NOTHING_TO_FIX_FIRST, fix_first_line
    from dynscope._torch.registry import is_user_file

    checked += 1
    # 1. shares
    cov = rep.coverage
    if cov is not None and not 0.0 <= cov.ratio <= 1.0:
        _fail(rep, f"coverage {cov.ratio} outside 0..1")
    for t in rep.timing:
        if not 0.0 <= t.in_graphs_share <= 1.0:
            _fail(rep, f"in-graphs share {t.in_graphs_share} of {t.mode} outside 0..1")
    for g in rep.graphs:
        low = g.lowering
        if low is None:
            continue
        if not -1e-9 <= low.mapped_share <= 1.0 + 1e-9:
            _fail(rep, f"graph {g.id}: mapped share {low.mapped_share} outside 0..1")
        for k in low.kernels:
            if k.share is not None and not -1e-9 <= k.share <= 1.0 + 1e-9:
                _fail(rep, f"graph {g.id}: kernel {k.name} share {k.share} outside 0..1")
    # 1b. memory: bytes are bytes; a step holds at least what its forward held; the compiled
    # build saves what AOTAutograd's partitioner listed (same build, sizes known), give or
    # take the graph's inputs: a saved view of an input is listed but costs no new storage,
    # and a layout copy of an input Inductor made (channels_last convolutions on CPU) is a new
    # storage the list counts as the input itself. Never more apart than the inputs' bytes.
    for g in rep.graphs:
        m = g.memory
        if m is None or m.error:
            continue
        if min(m.eager_peak, m.compiled_peak, m.eager_train_peak, m.compiled_train_peak) < 0:
            _fail(rep, f"graph {g.id}: a negative peak: {m!r}")
        if m.trains and (m.eager_train_peak < m.eager_peak or m.compiled_train_peak < m.compiled_peak):
            _fail(rep, f"graph {g.id}: forward+backward peaks below the forward's: {m!r}")
        if m.trains != (m.compiled_saved >= 0) or (not m.trains and (m.eager_train_peak or m.compiled_train_peak)):
            _fail(rep, f"graph {g.id}: saved tensors or a step measured on one side only: {m!r}")
        sft = g.lowering.saved_for_backward if g.lowering is not None else None
        sizes = [t.nbytes for t in g.inputs if t.kind == "tensor"]
        # (Only at static sizes: a dynamic graph's printed shapes need not be the run's.)
        if m.trains and sft is not None and not sft.symbolic and None not in sizes:
            inputs = sum(n for n in sizes if n is not None)
            if abs(m.compiled_saved - sft.bytes) > inputs:
                _fail(rep, f"graph {g.id}: the compiled build saved {m.compiled_saved} B, its partitioner listed "
                           f"{sft.bytes} B, more apart than the graph's inputs ({inputs} B)")
    if rep.memory is not None and not rep.memory.error and min(rep.memory.eager_peak, rep.memory.compiled_peak) < 0:
        _fail(rep, f"a negative program peak: {rep.memory!r}")
    # 2. compile time
    ct = rep.compile_time
    if not math.isclose(ct.total_s, ct.dynamo_s + ct.backend_s + ct.backward_s, rel_tol=1e-6, abs_tol=1e-6):
        _fail(rep, f"compile time {ct.total_s} s is not dynamo {ct.dynamo_s} s + backend {ct.backend_s} s "
                   f"+ backward compile {ct.backward_s} s")
    # The phases shown add up to the header's figure (reports saved before phases have none).
    if ct.phases and not math.isclose(ct.total_s, sum(s for _, s in ct.phases), rel_tol=1e-3, abs_tol=5e-3):
        _fail(rep, f"compile time {ct.total_s} s is not the sum of its phases {ct.phases}")
    # The builds timing ran on (torch.compile's compile of the program, and dynscope's extra
    # builds) took at least the seconds their phases show (Dynamo tracing is not shown below Dynamo).
    built = sum(s for g in rep.graphs if g.lowering is not None and g.lowering.source == "timing"
                for p, s in g.lowering.phases if p != "dynamo")
    cost = rep.timing_cost
    if cost is not None:
        spent = cost.seconds("compile") + cost.seconds("extra builds") + cost.seconds("graph runs") + cost.seconds("memory runs")
        if built > spent + 1e-6:
            _fail(rep, f"the builds shown per phase ({built} s) exceed the compile and builds timing made ({spent} s)")
        if not math.isclose(cost.seconds("extra builds"), ct.measure_s, rel_tol=0.05, abs_tol=0.05):
            _fail(rep, f"timing's extra builds ({cost.seconds('extra builds')} s) are not compile_time.measure_s "
                       f"({ct.measure_s} s)")
        if any(s < 0 for _, s in cost.phases):
            _fail(rep, f"a timing phase with negative seconds: {cost.phases}")
    elif ct.measure_builds and built > ct.measure_s + 1e-6:
        _fail(rep, f"dynscope's builds shown per phase ({built} s) exceed all its measurement builds ({ct.measure_s} s)")
    frames_total = sum(f.compile_time.total_s for f in rep.frames)
    if not math.isclose(ct.total_s, frames_total, rel_tol=1e-6, abs_tol=1e-6):
        _fail(rep, f"compile time {ct.total_s} s is not the sum of its frames {frames_total} s")
    # 3. break events
    if rep.break_count != sum(b.count for b in rep.breaks) or rep.break_count != len(rep.break_events):
        _fail(rep, f"break_count {rep.break_count}, site counts {[b.count for b in rep.breaks]}, events {len(rep.break_events)}")
    if sum(b.gave_up for b in rep.breaks) != sum(e.gave_up for e in rep.break_events):
        _fail(rep, "events that gave up on their frame are not counted on their sites")
    # A report whose trace collector failed says it lacks PyTorch's later records
    # (dynscope._hooks): nothing to compare it with.
    if counts is not None and any("dynscope's trace collector failed" in n for n in rep.notes):
        counts = None
    if counts is not None:
        compared += 1
        if not rep.break_count <= counts.breaks <= rep.break_count + rep.unparsed:
            _fail(rep, f"{rep.break_count} break events (+{rep.unparsed} unparsed) against {counts.breaks} records PyTorch logged")
        # 4. frames
        # (a record that could not be read, a log cut mid-record, is counted in unparsed)
        if not len(rep.frames) <= counts.frames <= len(rep.frames) + rep.unparsed:
            _fail(rep, f"{len(rep.frames)} frames (+{rep.unparsed} unparsed) against {counts.frames} compiles PyTorch logged")
    # 5. nothing of dynscope
    from dynscope._model.plain import to_plain

    texts = _strings(to_plain(rep))
    summary = rep.summary()
    texts.append(summary)
    if len(rep.graphs) <= 60:  # the program picture of a big synthetic report costs seconds
        texts.append(rep.program_dot())
    for text in texts:
        if DYNSCOPE_DIR + "/" in text:
            _fail(rep, f"a dynscope file in the report: {text[:300]!r}")
    for f in rep.frames:
        if f.filename.startswith(DYNSCOPE_DIR):
            _fail(rep, f"dynscope's own code as a frame: {f.function} {f.filename}")
    for b in rep.breaks:
        for sf in (*b.user_stack, *b.call_chain):
            if sf.filename.startswith(DYNSCOPE_DIR):
                _fail(rep, f"dynscope's own frame in a break stack: {sf.filename}:{sf.lineno}")
    # 6. fix first
    line = fix_first_line(rep)
    if line and line != NOTHING_TO_FIX_FIRST:  # that one names no site, on purpose
        named = [b for b in rep.breaks if b.location in line]
        if not named:
            _fail(rep, f"'fix first' names no break site: {line!r}")
        if not any(is_user_file(b.filename.replace("<root>", _ROOT, 1)) for b in named):
            _fail(rep, f"'fix first' names a site outside the user's code: {line!r}")
        if not any(b.actionable for b in named):
            _fail(rep, f"'fix first' names a site PyTorch or a library breaks on purpose: {line!r}")
    if live:
        _check_frame_sites(rep)
        _check_eager_lines(rep)
    _check_noise_and_order(rep, summary)
    _check_trials(rep)
    # 7. percentages in the summary
    for m in _PERCENT.finditer(summary):
        value = float(m.group(1))
        if not 0.0 <= value <= 100.0:
            _fail(rep, f"a percentage outside 0..100 in the summary: {m.group(0)}")
    if cov is not None:
        header = summary.splitlines()[2] if len(summary.splitlines()) > 2 else ""
        shown = re.search(r"coverage (\d+(?:\.\d+)?)%", header)
        if shown:
            value = float(shown.group(1))
            if value == 100.0 and cov.ratio < 1.0:
                _fail(rep, f"coverage {cov.ratio!r} printed as 100%")
            if value == 0.0 and cov.ratio > 0.0:
                _fail(rep, f"coverage {cov.ratio!r} printed as 0%")
            if abs(value - 100 * cov.ratio) > 1.0:
                _fail(rep, f"coverage printed {value}% for a ratio of {cov.ratio!r}")


@functools.lru_cache(maxsize=256)
def _function_lines(filename: str) -> frozenset[tuple[str, int]] | None:
    """(name, line) of every function's ``def`` and decorator lines in ``filename``, read with
    ``ast``; None when the file cannot be read. Cached: the suite checks thousands of reports."""
    import ast
    import linecache

    text = "".join(linecache.getlines(filename))
    try:
        tree = ast.parse(text) if text else None
    except (SyntaxError, ValueError):
        tree = None
    if tree is None:
        return None
    return frozenset(
        (n.name, line)
        for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        for line in (n.lineno, *(d.lineno for d in n.decorator_list))
    )


def _defines(filename: str, lineno: int, name: str) -> bool | None:
    """Whether ``filename`` defines a function ``name`` (its last dotted part) whose ``def``
    or a decorator is at ``lineno``; None when the file cannot be read."""
    lines = _function_lines(filename)
    return None if lines is None else (name.rsplit(".", 1)[-1], lineno) in lines


def _check_noise_and_order(rep: Report, summary: str) -> None:
    """9 and 10."""
    from dynscope._model.order import program_order

    flat = " ".join(summary.split())
    for m in rep.timing:
        if m.noisy and (f"{m.mode}: of the compiled call" in flat or f"{m.mode}: the graphs" in flat):
            _fail(rep, f"mode {m.mode} is noisy, and the summary still explains its times")
    by_frame = {f.compile_id: f.graph_ids for f in rep.frames}
    last = -1
    for frames, _ in program_order(rep):
        ids = [g for cids in frames for cid in cids for g in by_frame.get(cid, ())]
        if ids:
            if min(ids) < last:
                _fail(rep, f"the program line shows graph {min(ids)} after graph {last}, which was compiled later")
            last = max(last, min(ids))
    ranked = rep.breaks_by_cost()
    for a, b in zip(ranked, ranked[1:], strict=False):
        if (a.actionable, round(max(a.eager_ms, 0.0), 1)) == (b.actionable, round(max(b.eager_ms, 0.0), 1)) and a.count < b.count:
            _fail(rep, f"break {a.location} ({a.count} events) above {b.location} ({b.count}) at one eager time")


def _check_trials(rep: Report) -> None:
    """11."""
    for t in rep.trials:
        if not t.helped or t.after is None:
            continue
        b, a = t.before, t.after
        fewer = (a.breaks < b.breaks and a.recompiles <= b.recompiles) or (a.recompiles < b.recompiles and a.breaks <= b.breaks)
        faster = a.speedup is not None and b.speedup is not None and a.speedup > b.speedup
        smaller = a.peak is not None and b.peak is not None and a.peak < b.peak
        if not (fewer or faster or smaller):
            _fail(rep, f"trial {t.remedy} is helped with nothing removed or measured better: {b} -> {a}")
        if a.breaks == b.breaks and b.sites and a.sites and set(a.sites) != set(b.sites) and not t.moved:
            _fail(rep, f"trial {t.remedy}: its breaks moved ({b.sites} -> {a.sites}) and it does not say so")


_CODE_LINE = re.compile(r"^(?P<file>[^\s:]+\.py):(?P<line>\d+)(?: |$)")


def _check_eager_lines(rep: Report) -> None:
    """12."""
    import linecache

    if rep.coverage is None:
        return
    files: dict[str, str] = {}
    for path in [f.filename for f in rep.frames] + [b.filename for b in rep.breaks] + [
            c.filename for b in rep.breaks for c in (*b.call_chain, *b.user_stack)]:
        if path:
            files.setdefault(Path(path).name, path)
    for label, _ in rep.coverage.eager_sites:
        m = _CODE_LINE.match(label)
        if m is None or m["file"] not in files:
            continue
        rest = label[m.end():]
        frame_form = rest and not rest.startswith(("(", "aten::"))  # "model.py:12 Net.forward aten::x": a frame, no line
        text = linecache.getline(files[m["file"]], int(m["line"])).strip()
        if frame_form or not text:
            continue
        if text.startswith(("#", "def ", "async def ", "@", "class ")):
            _fail(rep, f"eager ops listed at {m['file']}:{m['line']}, which runs none: {text!r} ({label!r})")


def _check_frame_sites(rep: Report) -> None:
    """8. Each frame with a readable source is where its function is."""
    from dynscope._lexicon.wording import is_resume_name

    for f in rep.frames:
        if not f.function or not f.filename or not f.lineno or is_resume_name(f.function) or f.function.startswith("<"):
            continue
        if _defines(f.filename.replace("<root>", _ROOT, 1), f.lineno, f.function) is False:
            _fail(rep, f"frame {f.compile_id} {f.function} shown at {f.filename}:{f.lineno}, "
                       "which defines no function of that name there")


class LogCounts:
    """The records of a TORCH_TRACE log counted line by line, apart from dynscope's reader:
    a record's first line names its kind (``{"compilation_metrics": ...`` or
    ``{"artifact": {"name": "dynamo_graph_break_reason"...``)."""

    def __init__(self, path: Path) -> None:
        import gzip

        opened = gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")
        self.breaks = self.frames = 0
        with opened as f:
            for line in f:
                if line.startswith(b"\t"):
                    continue
                head = line[:400]
                self.breaks += b'] {"artifact": {"name": "dynamo_graph_break_reason"' in head
                self.frames += b'] {"compilation_metrics": ' in head


def counting(capture: Any) -> TraceCounts:
    """Attach a :class:`TraceCounts` for the thread that opens ``capture``."""
    handler = TraceCounts(threading.get_ident())
    trace_logger().addHandler(handler)
    capture._dynscope_test_counts = handler
    return handler


def stop_counting(capture: Any) -> None:
    handler = getattr(capture, "_dynscope_test_counts", None)
    if handler is not None:
        trace_logger().removeHandler(handler)
