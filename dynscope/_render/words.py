"""The phrasebook: what the terminal summary, the HTML page, the cards and the pictures say
alike (totals, costs, timing doubts, compile phases, caches, remedies' verdicts). Pure:
model in, words out; the layout (tables, wrapping, markup) is each renderer's own.

A sentence written once here reads the same in every view of a report: the summary and the
page are tested to agree (tests/render/test_display_truth.py), and they agree by sharing these. The
figures the sentences speak of are computed in dynscope._render.figures; the sections that
put them in tables, in dynscope._render.sections.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynscope._format import (
    ADD_UP_TOLERANCE,
    OVERHEAD_MS,
    clip,
    human_bytes,
    location,
    ms,
    percent,
    plural,
    seconds,
    timer_resolution_ms,
)
from dynscope._render.causes import explained
from dynscope._render.figures import cache_counts, memory_order, phase_seconds

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from dynscope._model import (
        CompileTime,
        Graph,
        GraphBreak,
        GraphMemory,
        Kernel,
        ModeTiming,
        Report,
        SizeFix,
        Timing,
        Trial,
    )


def totals_pieces(rep: Report) -> tuple[tuple[str, bool], ...]:
    """The line of totals in pieces, each marked True where it is bad news (graph breaks or
    recompiles above zero): the terminal colours those, the page shows the words."""
    pieces = [
        (plural(rep.graph_count, "graph") + ", ", False),
        (plural(rep.break_count, "graph break"), rep.break_count > 0),
        (f" at {plural(len(rep.breaks), 'site')}, ", False),
        (plural(rep.recompile_count, "recompile"), rep.recompile_count > 0),
    ]
    if rep.resume_count:
        pieces.append((", " + plural(rep.resume_count, "resume frame"), False))
    if rep.coverage is not None:
        pieces.append((f", coverage {percent(rep.coverage.ratio)}", False))
    pieces.append((f", compile {rep.compile_time.total_s:.2f} s", False))
    return tuple(pieces)


def totals_line(rep: Report) -> str:
    """One line of totals."""
    return "".join(text for text, _ in totals_pieces(rep))


def breaks_title_pieces(rep: Report) -> tuple[tuple[str, bool], ...]:
    """"Graph breaks (5 events at 2 sites)" in pieces, the events marked True (bad news)."""
    return (
        ("Graph breaks (", False),
        (plural(rep.break_count, "event"), rep.break_count > 0),
        (f" at {plural(len(rep.breaks), 'site')})", False),
    )


def speedup_text(t: Timing) -> str:
    """"1.38x", with "~" when noisy, "?" when below resolution or overhead-bound, and
    "numerics_ok=False" when the compiled graph computes something else. A training graph
    shows both figures: "fwd 1.38x, fwd+bwd 1.10x" ("fwd+bwd failed" when backward could
    not be timed)."""
    text = f"{t.speedup:.2f}x"
    if t.below_resolution or t.overhead_bound:
        text += " ?"
    elif t.noisy:
        text += " ~"
    if t.trains:
        train = "failed" if t.train_error else f"{t.train_speedup:.2f}x" + (" ?" if t.train_doubtful else "")
        text = f"fwd {text}, fwd+bwd {train}"
    return text + ("" if t.numerics_ok else " numerics_ok=False")


def grads_text(t: Timing) -> str:
    """How the gradients of a training graph compared with eager: "ok (max err 3.10e-07)",
    "max err 5.00e-01" (numerics_ok=False), "not checked"; "-" for a forward-only graph."""
    if not t.trains:
        return "-"
    if not t.grads_checked:
        return "not checked"
    return f"ok (max err {t.max_grad_err:.2e})" if t.numerics_ok else f"max err {t.max_grad_err:.2e}"


def samples_text(t: Timing | ModeTiming) -> str:
    """"7, IQR 12%": how many samples stand behind the medians and how far they spread."""
    if t.samples == 0:
        return "-"
    return f"{t.samples}, IQR {percent(t.spread)}" if t.samples >= 4 else f"{t.samples}, IQR -"


def timing_notes(t: Timing) -> list[str]:
    """Why a graph's timing is not to be read as a fact, in words; [] when it can be."""
    return [text for text, _ in timing_doubts(t)]


def timing_doubts(t: Timing) -> list[tuple[str, str]]:
    """Each of :func:`timing_notes` with the same doubt said of any graph (no figures of
    this one), which the summary says once for all the graphs it holds for."""
    if t.failed:
        return [(f"failed: {t.error}", "")]
    out: list[tuple[str, str]] = []
    if not t.numerics_ok:
        what, grads = ("outputs or gradients", f", max grad err {t.max_grad_err:.2e}") if t.grads_checked else ("outputs", "")
        out.append((
            f"numerics_ok=False: compiled {what} differ from eager (max abs err {t.max_abs_err:.2e}, "
            f"max rel err {t.max_rel_err:.2e}{grads}"
            f"{'; checked with ' + t.numerics_mode if t.numerics_mode else ''}); "
            f"the speedup is of a graph that computes something else", ""
        ))
    if t.numerics_mode == "fallback_random":
        out.append(_same(
            "numerics judged with eager-matching randomness: the graph draws random numbers, so "
            f"{'outputs and gradients were' if t.grads_checked else 'outputs were'} compared on a build with "
            "Inductor's fallback_random under one seed; the times are those of the normal build"
        ))
    if t.train_error:
        out.append((f"forward+backward failed: {t.train_error}; the forward figures stand", ""))
    elif t.train_doubtful and (t.train_eager_ms < t.eager_ms or t.train_compiled_ms < t.compiled_ms):
        out.append((
            f"forward+backward ({ms(t.train_eager_ms)} eager, {ms(t.train_compiled_ms)} compiled) timed faster "
            f"than the forward alone ({ms(t.eager_ms)}, {ms(t.compiled_ms)}): the fwd+bwd "
            f"{t.train_speedup:.2f}x is not a measurement (noise; rerun with more repeats)",
            "forward+backward timed faster than the forward alone: the fwd+bwd speedups are not "
            "measurements (noise; rerun with more repeats)",
        ))
    elif t.train_doubtful:
        out.append((
            f"forward+backward eager {ms(t.train_eager_ms)} and compiled {ms(t.train_compiled_ms)} are below the "
            f"timer resolution or overhead-bound: the fwd+bwd {t.train_speedup:.2f}x is not a measurement",
            "forward+backward eager and compiled are below the timer resolution or overhead-bound: "
            "the fwd+bwd speedups are not measurements",
        ))
    ratio = f"{t.speedup:.2f}x"
    if t.overhead_bound:
        out.append((
            f"eager {ms(t.eager_ms)} and compiled {ms(t.compiled_ms)} are both under {ms(OVERHEAD_MS)}: "
            f"the {ratio} is set by Python and launch overhead, not by the kernels",
            f"eager and compiled both under {ms(OVERHEAD_MS)}: the speedups are set by Python and "
            "launch overhead, not by the kernels",
        ))
    elif t.below_resolution:
        side, value = ("compiled", t.compiled_ms) if t.compiled_ms < t.eager_ms else ("eager", t.eager_ms)
        resolution = f"{ms(timer_resolution_ms(t.device))} on {t.device}"
        out.append((
            f"{side} median {ms(value)} is below the timer resolution ({resolution}): the {ratio} is not a measurement",
            f"a median below the timer resolution ({resolution}): the speedups are not measurements",
        ))
    if t.noisy:
        out.append((
            f"noisy: the samples spread {percent(t.spread)} (IQR / median) over {plural(t.samples, 'sample')}; "
            f"the {ratio} can be off by about that much",
            "noisy: the samples spread widely (IQR / median, in the samples column); each speedup can be "
            "off by about that much",
        ))
    elif 0 < t.samples < 4:
        out.append(_same(f"only {plural(t.samples, 'sample')}: too few to judge the spread"))
    return out


def _same(text: str) -> tuple[str, str]:
    """A note that reads the same for every graph it holds for."""
    return text, text


def cost_text(rep: Report, b: GraphBreak) -> str:
    """What a break site costs: "6 breaks, 4 graphs, 1 recompile, 0.8 ms eager per call";
    figures not known (-1) are left out."""
    parts = [plural(b.count, "break")]
    if b.graphs_split >= 0:
        parts.append(plural(b.graphs_split, "graph"))
    if b.recompiles_caused > 0:
        parts.append(plural(b.recompiles_caused, "recompile"))
    if b.eager_ms >= 0:
        parts.append(f"{ms(b.eager_ms)} eager per call" if b.eager_ms > 0 else "no eager torch ops")
    return ", ".join(parts)


def known_text(value: float, text: str) -> str:
    """``text``, or "?" for a figure that is not known (-1)."""
    return text if value >= 0 else "?"


#: fix_first_line when every break is one PyTorch or a library makes on purpose.
NOTHING_TO_FIX_FIRST = (
    "nothing to fix first in your code: every break here is one PyTorch or a library makes on "
    "purpose (each site's fix says what helps)"
)


def fix_first_line(rep: Report) -> str:
    """The break site whose fix buys most, and what it costs ("" without breaks). Only a site
    the user's own change can fix is named (never torch.optim's breaks on purpose)."""
    ranked = rep.breaks_by_cost()
    if not ranked:
        return ""
    mine = [b for b in ranked if b.actionable]
    if not mine:
        return NOTHING_TO_FIX_FIRST
    return f"fix {mine[0].location} first: {cost_text(rep, mine[0])}"


def gave_up_text(b: GraphBreak) -> str:
    """Says on how many of a site's events Dynamo gave up on the frame (it then ran eagerly)."""
    of = "its event" if b.count == 1 else f"{b.gave_up} of its {b.count} events"
    return (
        f"gave up: at {of} Dynamo gave up on the frame (\"Failed to handle graph break "
        f"gracefully\"): that function ran eagerly, only the functions it calls compiled"
    )


def call_chain_text(b: GraphBreak) -> str:
    """How the program reached a break: "run.py:41 in main -> model.py:28 in Net.forward"."""
    return " -> ".join(f"{location(f.filename, f.lineno)} in {f.function or '?'}" for f in b.call_chain)


# -- advice: what each remedy bought (Report.trials, filled by dynscope.advise) ---------


def _count_change(before: int, after: int) -> str:
    """"2 -> 1", or just "2" when the count did not move."""
    return str(before) if before == after else f"{before} -> {after}"


def _ratio_change(before: float | None, after: float | None, fmt: Callable[[float], str]) -> str:
    """"80% -> 100%" (``fmt`` formats one value); "-" when neither side was measured."""
    if before is None and after is None:
        return "-"
    b = "?" if before is None else fmt(before)
    a = "?" if after is None else fmt(after)
    return b if a == b else f"{b} -> {a}"


def trial_verdict(t: Trial) -> str:
    """"yes", "no", "no, moved from :4 to :5" (the break only moved: :func:`moved_text`),
    "failed" (it raised or changed the outputs) or "change your code" (a code change
    dynscope cannot make for you, shown, not run)."""
    if not t.tried:
        return "change your code"
    if t.error or not t.outputs_match:
        return "failed"
    if t.helped:
        return "yes"
    return f"no, {moved_text(t)}" if t.moved else "no"


def moved_text(t: Trial) -> str:
    """"moved from :4 to :5" for a trial whose break moved within one file (the target
    beside it names the file), "moved from a.py:4 to b.py:9" across files, "+N" for more
    moved breaks; "" when none moved."""
    if not t.moved:
        return ""
    old, new = t.moved[0]
    shown = (f":{old.line} to :{new.line}" if old.file == new.file
             else f"{location(old.file, old.line)} to {location(new.file, new.line)}")
    more = f" (+{len(t.moved) - 1})" if len(t.moved) > 1 else ""
    return f"moved from {shown}{more}"


def trial_timed(trials: Sequence[Trial]) -> bool:
    """Whether any trial measured a speedup (then tables gain a speedup column)."""
    return any(o is not None and o.speedup is not None for t in trials for o in (t.before, t.after))


def trial_memory(trials: Sequence[Trial]) -> bool:
    """Whether any trial measured memory (then tables gain peak memory and step columns)."""
    return any(o is not None and o.peak is not None for t in trials for o in (t.before, t.after))


def _bytes_change(before: int | None, after: int | None) -> str:
    if after is None:
        return "-"
    if before is None:
        return human_bytes(after)
    return f"{human_bytes(before)} -> {human_bytes(after)}"


def trial_cells(t: Trial, *, timed: bool, memory: bool = False) -> list[str]:
    """Before -> after for graphs, breaks, recompiles, coverage (and speedup when
    ``timed``; the compiled peak and step time when ``memory``); "-" for a trial not run."""
    a = t.after
    if a is None:
        return ["-"] * (4 + timed + 2 * memory)
    b = t.before
    cells = [
        _count_change(b.graphs, a.graphs),
        _count_change(b.breaks, a.breaks),
        _count_change(b.recompiles, a.recompiles),
        _ratio_change(b.coverage, a.coverage, percent),  # the one percent rule: 99.6% never "100%"
    ]
    if timed:
        cells.append(_ratio_change(b.speedup, a.speedup, lambda v: f"{v:.2f}") + ("x" if a.speedup or b.speedup else ""))
    if memory:
        cells.append(_bytes_change(b.peak, a.peak))
        cells.append(_ratio_change(b.step_ms, a.step_ms, ms))
    return cells


#: What the program picture shows, said above it (the program section's note).
PROGRAM_LEGEND = ("Frames in call order; blue boxes are captured graphs, red octagons graph breaks, dashed boxes "
                  "recompiled variants (with the guard that failed).")

ADVICE_TITLE = "What each fix buys"
ADVICE_NONE = "no remedy to try: no break site or recompile here has one dynscope knows how to try."


def advice_title(trials: Sequence[Trial]) -> str:
    """"What each fix buys (3 remedies tried, 1 helped; 1 code change to make by hand)"."""
    tried = [t for t in trials if t.tried]
    helped = sum(1 for t in tried if t.helped)
    remedies = f"{len(tried)} remed{'y' if len(tried) == 1 else 'ies'}"
    text = f"{ADVICE_TITLE} ({remedies} tried, {helped} helped"
    by_hand = len(trials) - len(tried)
    if by_hand:
        text += f"; {plural(by_hand, 'code change')} to make by hand"
    return text + ")"


def compile_parts(t: CompileTime, digits: int = 3) -> str:
    """"17.123 s (dynamo 0.256 s, backend 15.745 s, backward compile 1.122 s)": the user's
    compile and the parts that add up to it (Inductor's share said inside the backend's)."""
    f = f"{{:.{digits}f}}".format
    text = f"{f(t.total_s)} s (dynamo {f(t.dynamo_s)} s, backend {f(t.backend_s)} s"
    if t.inductor_s:
        text += f" of which inductor {f(t.inductor_s)} s"
    if t.backward_s:
        text += f", backward compile {f(t.backward_s)} s"
    return text + ")"


#: The phases of TimingCost in words (report(timing=True)'s own wall time).
COST_LABELS = {
    "capture": "capture",
    "compile": "torch.compile of the program with Inductor, first call",
    "extra builds": "extra Inductor builds",
    "graph runs": "graph runs",
    "kernel profiling": "kernel profiling",
    "program runs": "program runs",
    "memory runs": "memory runs (peaks and saved tensors, eager and compiled)",
}


def measurement_text(rep: Report) -> str:
    """What timing=True cost, phase by phase, said apart from the user's compile; "" when
    timing did not run."""
    cost = rep.timing_cost
    t = rep.compile_time
    if cost is None:  # reports saved before dynscope kept the split
        if not t.measure_builds:
            return ""
        return (
            f"not in that total: dynscope's own measurement builds (timing=True) took {seconds(t.measure_s)} "
            f"over {plural(t.measure_builds, 'Inductor build')}"
        )
    parts = []
    for phase, spent in cost.phases:
        label = COST_LABELS.get(phase, phase)
        if phase == "extra builds":
            label += f" ({plural(t.measure_builds, 'build')}: numerics, backward compiles, graphs rebuilt)"
        parts.append(f"{label} {seconds(spent)}")
    timed_graphs = any(g.timings for g in rep.graphs)
    flag = "timing=True" if timed_graphs or rep.timing else "memory=True"
    text = f"not in that total: {flag} took {seconds(cost.total_s)}: " + ", ".join(parts)
    timed = cost.reused + cost.rebuilt
    if timed:
        what = "graph timing" if flag == "timing=True" else "graph measurement"
        text += f"; {cost.reused} of {plural(timed, what)} ran on torch.compile's own build"
    firsts = [m for m in rep.timing if not m.error]
    if firsts:
        text += "; torch.compile's first call " + ", ".join(f"{seconds(m.first_call_s)} ({m.mode})" for m in firsts)
    return text


def in_graphs_text(m: ModeTiming) -> str:
    """The share of the compiled call inside graphs, never over 100% ("100% capped")."""
    if m.compiled_ms <= 0 or not m.in_graphs_ms:
        return "-"
    return "100% capped" if m.in_graphs_overflows else percent(m.in_graphs_share)


def _outside_graphs(rep: Report) -> str:
    """What runs outside graphs in a compiled call, with this report's counts."""
    parts = ["Python between graphs"]
    if rep.guards:
        parts.append(f"guard checks ({plural(len(rep.guards), 'guard')})")
    if rep.resume_count:
        parts.append(f"entering {plural(rep.resume_count, 'resume function')}")
    if rep.break_count:
        parts.append(f"eager torch ops at {plural(rep.break_count, 'graph break')}")
    return ", ".join(parts)


def end_to_end_lines(rep: Report) -> list[str]:
    """Where the per-graph times do not add up to the end-to-end ones, and why; one line each."""
    out = []
    for m in rep.timing:
        if m.error or m.compiled_ms <= 0:
            continue
        if m.below_resolution:
            out.append(f"{m.mode}: a call takes under {ms(timer_resolution_ms(m.device))}: below the timer resolution")
        if m.noisy:
            # Noise is not a cause: a speedup or a gap measured this unreliably is explained
            # by nothing but the noise (no "the other N ms is Python between graphs").
            out.append(f"{m.mode}: noisy: the samples spread {percent(m.spread)} (IQR / median) over "
                       f"{plural(m.samples, 'sample')}: the times of this mode are not a measurement; "
                       "time again on a quiet machine, or with more repeats (TimingOptions)")
            continue
        eager_sum, _, left_out = rep.graphs_ms(m.mode)
        short = f" ({plural(left_out, 'graph')} not timed)" if left_out else ""
        if m.in_graphs_overflows:
            out.append(
                f"{m.mode}: the graphs' compiled times add up to {ms(m.in_graphs_ms)} per call, more than the "
                f"whole compiled call ({ms(m.compiled_ms)}); each graph timed on its own misses the warm caches "
                f"of the real call, or the samples are noisy: 'in graphs' is capped at 100% and is not a measurement"
            )
        elif m.in_graphs_ms and m.in_graphs_share < 1 - ADD_UP_TOLERANCE:
            rest = m.compiled_ms - m.in_graphs_ms
            backward = " (their backward included)" if any(g.backward_runs for g in rep.graphs) else ""
            out.append(
                f"{m.mode}: of the compiled call's {ms(m.compiled_ms)}, {ms(m.in_graphs_ms)} ran inside "
                f"graphs{backward}{short}; the other {ms(rest)} is {_outside_graphs(rep)}"
            )
        if eager_sum <= 0 or m.eager_ms <= 0:
            continue
        if eager_sum > m.eager_ms * (1 + ADD_UP_TOLERANCE):
            out.append(
                f"{m.mode}: the graphs run eagerly one at a time add up to {ms(eager_sum)} per call, "
                f"{eager_sum / m.eager_ms:.1f}x the eager program ({ms(m.eager_ms)}): "
                + ("threads fought for the cores while the graphs were timed (see 'Read this first'), and "
                   if any(g.timing is not None and g.timing.contention for g in rep.graphs) else "")
                + "each pays its own GraphModule call and cold caches; per-graph speedups are of graphs in isolation"
            )
        elif not left_out and eager_sum < m.eager_ms * (1 - ADD_UP_TOLERANCE):
            out.append(
                f"{m.mode}: the graphs' eager times add up to {ms(eager_sum)} of the eager program's "
                f"{ms(m.eager_ms)}; the other {ms(m.eager_ms - eager_sum)} runs outside any graph "
                f"(Python and the eager code at graph breaks), which compiling does not speed up"
            )
    return out


def warning_lines(rep: Report) -> list[str]:
    """What makes the counts incomplete or the report unusual, one line each."""
    out = []
    if rep.unparsed:
        # Which kinds of message, when known (reports saved before the split carry the total only).
        kinds = ", ".join(f"{n} {kind}" for kind, n in rep.unparsed_kinds)
        out.append(
            f"{plural(rep.unparsed, 'PyTorch trace message')} dynscope could not read"
            f"{f' ({kinds})' if kinds else ''}: "
            f"counts may be short (check() fails until this is 0 or allow_unparsed=True)"
        )
    out.extend(rep.notes)
    return out


# -- below Dynamo: Inductor's kernels, compile phases, caches ---------------------------

#: Compile phases (Lowering.phases keys, in pipeline order) in words.
PHASE_LABELS = {
    "dynamo": "Dynamo tracing",
    "backend": "other backend work",
    "aot_autograd": "AOTAutograd",
    "inductor": "Inductor",
    "lowering": "Inductor lowering and scheduling",
    "codegen": "code generation",
    "compile": "C++/Triton compile",
}
#: The caches (the first of a Lowering.cache lookup's fields) in words, in the order shown.
CACHE_LABELS = {"fx_graph": "FX graph cache", "aot_autograd": "AOTAutograd cache"}
_CACHE_RESULTS = ("hit", "miss", "bypass")


def kernel_label(name: str, n: int = 36) -> str:
    """A kernel's name short enough for a table: library calls lose their
    ``extern_kernels.`` prefix (the kind column says it), long names are clipped."""
    return clip(name.removeprefix("extern_kernels."), n)


def pass_label(kernel: Kernel) -> str:
    """"fwd", "bwd" or "inf": the AOT graph the kernel runs in."""
    return {"forward": "fwd", "backward": "bwd", "inference": "inf"}.get(kernel.graph, kernel.graph)


def owner_text(b: GraphBreak) -> str:
    """Whose code a break site is, for a site in an installed library ("" for the user's own)."""
    if not b.library:
        return ""
    return (f"whose: {b.library}'s code, not yours: its line is not yours to edit; what you control is how "
            f"you call {b.library} (your inputs, torch.compile's options and Dynamo's config: dynscope advise "
            "tries those), or the break can be reported to its maintainers")


def runs_text(graph: Graph, calls: int) -> str:
    """"8 (4 per call)", "1"; "-" when not counted."""
    if graph.runs <= 0:
        return "-"
    # Per call where a graph ran more often than the program was called (a hot graph).
    if not calls or graph.runs <= calls:
        return str(graph.runs)
    return f"{graph.runs} ({graph.runs / calls:g} per call)"


def inputs_text(graph: Graph, limit: int | None = 3) -> str:
    """A graph's own inputs, the first ``limit`` of them ("+k" for the rest; None: all), its
    parameters and buffers only counted: ``f32[4, 8] (+6 params)``, ``6 params``; "" when it
    has no inputs. The same for a graph from ``report()`` and one read from a trace
    (``Graph.user_inputs``), in the summary and on the page alike."""
    user, params = graph.user_inputs()
    shown = user if limit is None else user[:limit]
    text = ", ".join(m.describe() for m in shown)
    if len(user) > len(shown):
        text += f", +{len(user) - len(shown)}"
    if params:
        text += f" (+{params} params)" if text else f"{params} params"
    return text


#: What a lowering's phases are of, by its source, in words.
PHASE_SOURCES = {
    "trace": "your compile",
    "timing": "the build dynscope measured on (not your compile)",
}


def lowering_phase_lines(rep: Report) -> list[tuple[str, str]]:
    """(label, text) of the compile-phase lines below Dynamo, each labelled with whose
    compile it is: the user's (the same figures as the header and "Compile time": all frames)
    when the lowerings are of the user's compile, and dynscope's timed builds apart."""
    out = []
    lowered = [g for g in rep.graphs if g.lowering is not None]
    if any(g.lowering is not None and g.lowering.source == "trace" for g in lowered):
        user = list(rep.compile_time.phases) or phase_seconds(lowered, source="trace")
        out.append(("your program's compile per phase (the header's figure)", phases_text(user)))
    built = phase_seconds(lowered, source="timing")
    if built and rep.timing_cost is not None:
        # The lowerings are of each graph's first-mode build: torch.compile's own compile of
        # the program (timing=True times each graph on it), or dynscope's build of a graph
        # that compile did not make. Other modes and the extra builds are in the cost line.
        label = "the builds dynscope measured on (first mode), per phase (not in the compile time above"
        if rep.compile_time.measure_builds:
            label += f"; {plural(rep.compile_time.measure_builds, 'extra build')} apart, in timing=True's cost"
        out.append((label + ")", phases_text(built)))
    elif built:  # a report saved before timing ran on torch.compile's builds: all dynscope's own
        label = "dynscope's first-mode builds shown here, per phase (not in the compile time"
        whole = rep.compile_time.measure_s
        shown = sum(s for _, s in built)
        if rep.compile_time.measure_builds and whole > shown:
            label += (
                f"; {seconds(whole)} for all {plural(rep.compile_time.measure_builds, 'measurement build')}, "
                "the rest forward+backward, numerics and other modes' builds"
            )
        out.append((label + ")", phases_text(built)))
    return [(label, text) for label, text in out if text]


def phases_text(phases: list[tuple[str, float]]) -> str:
    """"Dynamo tracing 0.25 s, AOTAutograd 0.25 s, ... (total 7.4 s)"; "" when none."""
    if not phases:
        return ""
    parts = ", ".join(f"{PHASE_LABELS.get(p, p)} {seconds(s)}" for p, s in phases)
    return f"{parts} (total {seconds(sum(s for _, s in phases))})"


def cache_text(graphs: list[Graph] | tuple[Graph, ...]) -> str:
    """"FX graph cache: 2 hit, 1 miss; AOTAutograd cache: 3 bypass"; "" when none recorded."""
    parts = []
    for cache, per in cache_counts(graphs):
        results = sorted(per, key=lambda r: _CACHE_RESULTS.index(r) if r in _CACHE_RESULTS else len(_CACHE_RESULTS))
        parts.append(f"{CACHE_LABELS.get(cache, cache)}: " + ", ".join(f"{per[r]} {r}" for r in results))
    return "; ".join(parts)


def saved_text(graphs: list[Graph] | tuple[Graph, ...]) -> str:
    """"2 tensors, 768 B over 3 training graphs"; "" when no graph trains."""
    saved = [g.lowering.saved_for_backward for g in graphs if g.lowering and g.lowering.saved_for_backward]
    if not saved:
        return ""
    count, size = sum(s.count for s in saved), sum(s.bytes for s in saved)
    symbolic = sum(s.symbolic for s in saved)
    text = f"{plural(count, 'tensor')}, {human_bytes(size)} over {plural(len(saved), 'training graph')}"
    if symbolic:
        text += f" ({symbolic} of symbolic size, counted at size 1)"
    return text


# -- where sizes came from (Frame.shapes, Recompile.failures) ------------------------------


def size_fix_line(fix: SizeFix) -> str:
    """One size a compile fixed or guarded, and the line that did it:
    "x.size(0) fixed to 5 at model.py:41 `for i in range(x.size(0)):` (compile 0/1)"."""
    what = f"{fix.size} fixed to {fix.value}" if fix.kind == "fixed" else f"{fix.value} guarded"
    where = f" at {location(fix.filename, fix.lineno)}" if fix.filename else ""
    code = f" `{fix.code}`" if fix.code else ""
    via = f", inside {fix.via}" if fix.via else ""
    return f"{what}{where}{code} (compile {fix.compile_id}{via})"


#: What "-" in the failed-guard table means.
UNSAID = ("-: PyTorch's message does not say; what the call brought is known only for the inputs of the "
          "function you passed (dynscope checks those itself), not inside a frame it calls (a library's)")


def failure_rows(rep: Report, compile_ids: Iterable[str]) -> list[list[str]]:
    """[compile, earlier entry, failed guard in words, compiled for, called with, found by]
    of every failed guard of the given recompiles ("-" where the words do not say; found by
    "PyTorch" for the failure it logged, "dynscope" for those report() found checking the
    entry's guards on the call's inputs)."""
    ids = set(compile_ids)
    return [
        [r.compile_id, f.entry, (explained(f.cause) if f.cause is not None else "") or f.guard, f.then or "-", f.now or "-",
         "PyTorch" if f.source == "pytorch" else "dynscope"]
        for r in rep.recompiles if r.compile_id in ids for f in r.failures
    ]


# -- memory (Graph.memory, Report.memory) ---------------------------------------------------

#: How each method measured a peak, in words.
MEMORY_METHODS = {
    "profiler": "CPU, from torch.profiler's allocation events",
    "cuda": "CUDA, torch.cuda.max_memory_allocated",
}

def memory_cell(m: GraphMemory | None) -> str:
    """"7.5 MiB -> 5.5 MiB" (forward+backward for a training graph); "-" when not measured."""
    if m is None or m.error:
        return "-"
    eager, compiled = m.peak
    return f"{human_bytes(eager)} -> {human_bytes(compiled)}"


def memory_methods(rep: Report) -> str:
    """"CPU, from torch.profiler's allocation events": how the report's peaks were measured."""
    methods = sorted({g.memory.method for g in rep.graphs if g.memory is not None and g.memory.method})
    if rep.memory is not None and rep.memory.method and rep.memory.method not in methods:
        methods.append(rep.memory.method)
    return "; ".join(MEMORY_METHODS.get(m, m) for m in methods)


def program_memory_line(rep: Report) -> str:
    """"whole call: eager 8.0 MiB, compiled 5.5 MiB (0.69x)"; "" when not measured."""
    m = rep.memory
    if m is None:
        return ""
    if m.error:
        return f"whole call ({m.mode}): {m.error}"
    return f"whole call ({m.mode}): eager {human_bytes(m.eager_peak)}, compiled {human_bytes(m.compiled_peak)} ({m.ratio:.2f}x)"


def memory_notes(rep: Report) -> list[str]:
    """Why a graph's memory was not measured, and what the saved figures mean; one line each."""
    out = [f"graph {g.id}: {g.memory.error}" for g in memory_order(rep) if g.memory is not None and g.memory.error]
    grew = [g for g in memory_order(rep) if g.memory is not None and not g.memory.error and g.memory.ratio > 1.0]
    if grew:
        g = grew[0]
        assert g.memory is not None
        out.append(
            f"graph {g.id} grew most: compiled needs {human_bytes(g.memory.growth)} more at its peak than eager "
            f"({g.memory.ratio:.2f}x); dynscope.advise(rep, memory=True) tries the memory remedies"
        )
    return out


#: Said of a frame whose compile failed and raised into the program (Frame.status "crashed").
CRASH_WORDS = (
    "PyTorch's compiler failed on this function and the error reached your program (it runs eagerly, and "
    "under a plain torch.compile it fails the same way). Work around it with torch.compiler.disable on the "
    "function, or torch._dynamo.config.suppress_errors = True to fall back to eager."
)
