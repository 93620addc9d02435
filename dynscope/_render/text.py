"""Terminal rendering of a Report. Pure: model in, text out."""

from __future__ import annotations

import re
import textwrap
from pathlib import PurePath
from typing import TYPE_CHECKING

from tabulate import tabulate

from dynscope._errors import InputError
from dynscope._format import (
    ADD_UP_TOLERANCE,
    OVERHEAD_MS,
    clip,
    location,
    ms,
    percent,
    plural,
    timer_resolution_ms,
)
from dynscope._render.color import paint_summary
from dynscope._torch.wording import resume_label

if TYPE_CHECKING:
    from collections.abc import Sequence

    from dynscope._model.types import (
        CompileTime,
        Graph,
        GraphBreak,
        Kernel,
        ModeTiming,
        Report,
        Timing,
        Trial,
    )

# Terminal control sequences: CSI (ESC [ ... final byte, or the one-byte C1 CSI), OSC, DCS,
# SOS, PM and APC strings (up to BEL or ST), other two-byte ESC sequences; then any C0/C1
# control left over (tab and newline excepted) and DEL.
_CONTROL = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -~]?"
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"
)


def strip_controls(text: str) -> str:
    """``text`` without terminal control sequences, for printing data to a terminal.

    A report's strings come from user code and from PyTorch; printed raw, an escape
    sequence in one (a file name, a break reason) could recolour, move the cursor, set the
    window title or hide lines. Newlines and tabs stay; everything else C0/C1 goes.
    """
    return _CONTROL.sub("", text)


def totals_line(rep: Report) -> str:
    """One line of totals."""
    parts = [
        plural(rep.graph_count, "graph"),
        f"{plural(rep.break_count, 'graph break')} at {plural(len(rep.breaks), 'site')}",
        plural(rep.recompile_count, "recompile"),
    ]
    if rep.resume_count:
        parts.append(plural(rep.resume_count, "resume frame"))
    if rep.coverage is not None:
        parts.append(f"coverage {percent(rep.coverage.ratio)}")
    parts.append(f"compile {rep.compile_time.total_s:.2f} s")
    return ", ".join(parts)


def _inputs(graph: Graph, limit: int = 3) -> str:
    """The graph's own inputs first; parameters and buffers only counted."""
    user, params = graph.user_inputs()
    text = ", ".join(m.describe() for m in user[:limit])
    if len(user) > limit:
        text += f", +{len(user) - limit}"
    if params:
        text += f" (+{params} params)" if text else f"{params} params"
    return text


def _frame_label(graph: Graph) -> str:
    name = resume_label(graph.frame) or "?"
    if graph.split_by == "ddp_bucket":  # DDP's optimizer split it: not a graph break
        name += " [DDP bucket split]"
    return f"{name} ({location(graph.filename, graph.lineno)})" if graph.filename else name


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
    return [text for text, _ in _timing_notes(t)]


def _timing_notes(t: Timing) -> list[tuple[str, str]]:
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


def id_ranges(ids: Sequence[int]) -> str:
    """"0, 2, 5-9": graph ids in order, runs of consecutive ids as ranges."""
    runs: list[list[int]] = []
    for i in sorted(set(ids)):
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def graphs_table(rep: Report) -> str:
    """The table of captured graphs."""
    timed = any(g.timing for g in rep.graphs)
    # Forward+backward columns only when a graph was timed for training: an inference
    # report reads as it always did.
    trains = any(g.timing is not None and g.timing.trains for g in rep.graphs)
    headers = ["id", "compile", "frame", "graph ops", "nodes", "inputs"]
    if timed:
        headers += ["eager", "inductor", "speedup", "samples"]
    if trains:
        headers += ["fwd+bwd eager", "fwd+bwd inductor", "grads"]
    rows = []
    for g in rep.graphs:
        row = [g.id, g.compile_id, _frame_label(g), g.op_count, g.node_count or "-", _inputs(g)]
        if timed:
            t = g.timing
            if t is None:
                row += ["-", "-", "-", "-"]
            elif t.failed:
                row += [ms(t.eager_ms), "failed", "-", "-"]
            else:
                row += [ms(t.eager_ms), ms(t.compiled_ms), speedup_text(t), samples_text(t)]
            if trains:
                if t is None or not t.trains:
                    row += ["-", "-", "-"]
                elif t.train_error:
                    row += [ms(t.train_eager_ms), "failed", grads_text(t)]
                else:
                    row += [ms(t.train_eager_ms), ms(t.train_compiled_ms), grads_text(t)]
        rows.append(row)
    return tabulate(rows, headers=headers, tablefmt="simple")


def graph_timing_lines(rep: Report) -> list[str]:
    """One line per doubt about a graph's timing (first mode): failures, numerics, noise."""
    out: list[str] = []
    # One line per doubt: said of several graphs at once when it holds for them all (a
    # model of 14 small graphs gets one "both under 50 us" line, not 13).
    doubts: dict[str, list[tuple[int, str]]] = {}
    same: dict[tuple[str, tuple[object, ...]], list[Graph]] = {}
    for g in rep.graphs:
        if g.timing is not None:
            for i, (text, shared) in enumerate(_timing_notes(g.timing)):
                doubts.setdefault(shared or f"graph {g.id} #{i}", []).append((g.id, text))
            if g.code and not g.timing.failed:
                same.setdefault((g.code, g.inputs), []).append(g)
    for shared, held in doubts.items():
        if len(held) == 1:
            out.append(f"graph {held[0][0]}: {held[0][1]}")
        else:
            out.append(f"{len(held)} graphs ({id_ranges([gid for gid, _ in held])}): {shared}")
    # The same code on the same inputs cannot truly run at two speeds: a spread between
    # them is what the measurement is worth.
    for twins in same.values():
        ratios = [g.timing.speedup for g in twins if g.timing is not None]
        if len(twins) > 1 and min(ratios) > 0 and max(ratios) > min(ratios) * (1 + ADD_UP_TOLERANCE):
            ids = ", ".join(str(g.id) for g in twins)
            shown = ", ".join(f"{r:.2f}x" for r in ratios)
            out.append(
                f"graphs {ids} are the same code on the same inputs yet timed at {shown}: "
                f"the difference is measurement noise, and no one of these figures is firmer than that"
            )
    return out


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


def breaks_section(rep: Report, *, width: int = 100) -> str:
    """The table of distinct breaks, the costliest first, then each site's reason, fix and hints."""
    ranked = rep.breaks_by_cost()
    rows = [
        [i + 1, b.location, b.category, b.count, known_text(b.graphs_split, str(b.graphs_split)),
         known_text(b.recompiles_caused, str(b.recompiles_caused)), known_text(b.eager_ms, ms(b.eager_ms)),
         clip(b.source, 40)]
        for i, b in enumerate(ranked)
    ]
    headers = ["#", "location", "category", "count", "graphs", "recompiles", "eager/call", "code"]
    lines = [tabulate(rows, headers=headers, tablefmt="simple")]
    for i, b in enumerate(ranked):
        lines.append("")
        lines.append(f"[{i + 1}] {location(b.filename, b.lineno, full=True)} in {b.function or '?'}")
        lines.append(f"    {b.source}")
        lines.extend(textwrap.wrap(f"why: {b.reason}", width, initial_indent="    ", subsequent_indent="      "))
        if b.detail:
            lines.extend("      " + ln for ln in b.detail.splitlines())
        if len(b.call_chain) > 1:
            chain = call_chain_text(b)
            lines.extend(textwrap.wrap(f"called from: {chain}", width, initial_indent="    ", subsequent_indent="      ", break_on_hyphens=False))
        lines.append(f"    cost: {cost_text(rep, b)}")
        if b.gave_up:
            lines.extend(textwrap.wrap(gave_up_text(b), width, initial_indent="    ", subsequent_indent="      "))
        lines.extend(textwrap.wrap(f"fix: {b.fix}", width, initial_indent="    ", subsequent_indent="      "))
        for hint in b.hints:
            lines.extend(textwrap.wrap(f"torch hint: {hint}", width, initial_indent="    ", subsequent_indent="      "))
        if b.doc_url:
            lines.append(f"    docs: {b.doc_url}")
    return "\n".join(lines)


def gave_up_text(b: GraphBreak) -> str:
    """Says on how many of a site's events Dynamo gave up on the frame (it then ran eagerly)."""
    of = "its event" if b.count == 1 else f"{b.gave_up} of its {b.count} events"
    return (
        f"gave up: at {of} Dynamo gave up on the frame (\"Failed to handle graph break "
        f"gracefully\"): that function ran eagerly, only the functions it calls compiled"
    )


def program_line(rep: Report) -> str:
    """The program in execution order, one arrow per step: each frame's graphs (a
    recompiled frame lists every variant) or "eager" for a frame Dynamo gave up on, then
    the breaks it hits."""
    from dynscope._render.dot import program_order  # the one ordering, shared with the picture

    graph_ids = {g.compile_id: g.id for g in rep.graphs}
    frames = {f.compile_id: f for f in rep.frames}
    steps = []
    for group, ends in program_order(rep):
        ids = [str(graph_ids[c]) for cids in group for c in cids if c in graph_ids]
        name = resume_label(frames[group[0][0]].function) or "?"
        if ids:
            steps.append(f"graph {' | '.join(ids)} {name}")
        elif any(frames[c].status == "failed" for cids in group for c in cids):
            steps.append(f"eager {name}")  # Dynamo gave up on the frame
        # A frame with nothing to compile and no break is left out: the picture shows it.
        steps.extend(f"BREAK {rep.breaks[i].location}" for i in ends)
    return " -> ".join(["call", *steps])


def call_chain_text(b: GraphBreak) -> str:
    """How the program reached a break: "run.py:41 in main -> model.py:28 in Net.forward"."""
    return " -> ".join(f"{location(f.filename, f.lineno)} in {f.function or '?'}" for f in b.call_chain)


def recompiles_section(rep: Report, *, width: int = 100) -> str:
    """Recompiles grouped by function and cause, each with its fix and what PyTorch said."""
    by_id = {r.compile_id: r for r in rep.recompiles}
    lines = []
    for g in rep.recompile_groups():
        lines.append(f"{plural(g.count, 'recompile')} of {resume_label(g.frame) or '?'}: {g.cause}")
        if g.fix:
            lines.extend(textwrap.wrap(f"fix: {g.fix}", width, initial_indent="    ", subsequent_indent="      "))
        lines.append(f"    compiles: {', '.join(g.compile_ids)}")
        said = dict.fromkeys(x for cid in g.compile_ids for x in (by_id[cid].explained or by_id[cid].reasons))
        for x in list(said)[:3]:
            lines.extend(textwrap.wrap(f"- {x}", width, initial_indent="    ", subsequent_indent="      "))
        if len(said) > 3:
            lines.append(f"    ... {plural(len(said) - 3, 'more failed guard')} (Report.recompiles)")
    return "\n".join(lines)


# -- advice: what each remedy bought (Report.trials, filled by dynscope.advise) ---------


def _count_change(before: int, after: int) -> str:
    """"2 -> 1", or just "2" when the count did not move."""
    return str(before) if before == after else f"{before} -> {after}"


def _ratio_change(before: float | None, after: float | None, fmt: str) -> str:
    """"80% -> 100%" (``fmt`` formats one value); "-" when neither side was measured."""
    if before is None and after is None:
        return "-"
    b = "?" if before is None else format(before, fmt)
    a = "?" if after is None else format(after, fmt)
    return b if a == b else f"{b} -> {a}"


def trial_verdict(t: Trial) -> str:
    """"yes", "no", "failed" (it raised or changed the outputs) or "change your code" (a
    code change dynscope cannot make for you, shown, not run)."""
    if not t.tried:
        return "change your code"
    if t.error or not t.outputs_match:
        return "failed"
    return "yes" if t.helped else "no"


def trial_timed(trials: Sequence[Trial]) -> bool:
    """Whether any trial measured a speedup (then tables gain a speedup column)."""
    return any(o is not None and o.speedup is not None for t in trials for o in (t.before, t.after))


def trial_cells(t: Trial, *, timed: bool) -> list[str]:
    """Before -> after for graphs, breaks, recompiles, coverage (and speedup when
    ``timed``); "-" for a trial not run."""
    a = t.after
    if a is None:
        return ["-"] * (5 if timed else 4)
    b = t.before
    cells = [
        _count_change(b.graphs, a.graphs),
        _count_change(b.breaks, a.breaks),
        _count_change(b.recompiles, a.recompiles),
        _ratio_change(b.coverage, a.coverage, ".0%"),
    ]
    if timed:
        cells.append(_ratio_change(b.speedup, a.speedup, ".2f") + ("x" if a.speedup or b.speedup else ""))
    return cells


def trial_target(t: Trial, width: int = 30) -> str:
    """What the remedy addresses, wrapped at word boundaries to lines of at most ``width``
    characters (three at most, the rest shortened with "..."): the first target and "+N"
    for the others ("-" when it names nothing). The section below the table lists them all."""
    if not t.target:
        return "-"
    more = f", +{len(t.target) - 1}" if len(t.target) > 1 else ""
    return "\n".join(textwrap.wrap(t.target[0] + more, width, max_lines=3, placeholder=" ...", break_on_hyphens=False))


def advice_section(trials: Sequence[Trial], *, width: int = 100, empty: str = "") -> str:
    """"What each fix buys": one row per remedy (the order given: best first), then each
    remedy's code to add, its targets, and why it failed or what else to know. With no
    trials, why none was tried (``empty``, from ``Advice.note``) instead of an empty table."""
    if not trials:
        said = empty or "no remedy to try: no break site or recompile here has one dynscope knows how to try."
        return "\n".join(textwrap.wrap(f"What each fix buys: {said}", width, subsequent_indent="    "))
    timed = trial_timed(trials)
    headers = ["#", "remedy", "target", "graphs", "breaks", "recompiles", "coverage"]
    headers += ["speedup"] if timed else []
    headers += ["helped"]
    rows = [
        [i + 1, clip(t.remedy, 32), trial_target(t), *trial_cells(t, timed=timed), trial_verdict(t)]
        for i, t in enumerate(trials)
    ]
    lines = [tabulate(rows, headers=headers, tablefmt="simple")]
    for i, t in enumerate(trials):
        lines.append("")
        lines.append(f"[{i + 1}] {t.remedy}: {trial_verdict(t)}")
        lines.extend("    " + ln for ln in t.code.splitlines())
        if t.target:
            lines.extend(textwrap.wrap(f"for: {', '.join(t.target)}", width, initial_indent="    ", subsequent_indent="      "))
        if t.error:
            lines.extend(textwrap.wrap(f"error: {t.error}", width, initial_indent="    ", subsequent_indent="      "))
        if t.note:
            lines.extend(textwrap.wrap(f"note: {t.note}", width, initial_indent="    ", subsequent_indent="      "))
    return "\n".join(lines)


def advice_title(trials: Sequence[Trial]) -> str:
    """"What each fix buys (3 remedies tried, 1 helped; 1 code change to make by hand)"."""
    tried = [t for t in trials if t.tried]
    helped = sum(1 for t in tried if t.helped)
    remedies = f"{len(tried)} remed{'y' if len(tried) == 1 else 'ies'}"
    text = f"What each fix buys ({remedies} tried, {helped} helped"
    by_hand = len(trials) - len(tried)
    if by_hand:
        text += f"; {plural(by_hand, 'code change')} to make by hand"
    return text + ")"


def compile_time_section(rep: Report) -> str:
    """Compile time: the user's compile (the header's figure) split by part and by phase, and
    apart from it, dynscope's own measurement builds."""
    t = rep.compile_time
    lines = [f"total {compile_parts(rep.compile_time)} over {plural(len(rep.frames), 'frame compile')}"]
    if t.phases:
        lines += wrap_figures(f"your program's compile (the header's figure) per phase: {phases_text(list(t.phases))}")
    measured = measurement_text(rep)
    if measured:
        lines += wrap_figures(measured)
    return "\n".join(lines)


_FIGURE = re.compile(r"(\d) (s|ms|us|ns)\b")


def wrap_figures(text: str, width: int = 100) -> list[str]:
    """``text`` wrapped as an indented detail line, never between a figure and its unit
    ("3.60" at the end of one line, "s" on the next)."""
    kept = _FIGURE.sub("\\1\x00\\2", text)
    lines = textwrap.wrap(kept, width, initial_indent="    ", subsequent_indent="      ")
    return [line.replace("\x00", " ") for line in lines]


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


def measurement_text(rep: Report) -> str:
    """dynscope's own Inductor builds for timing=True, said apart from the user's compile;
    "" when there were none."""
    t = rep.compile_time
    if not t.measure_builds:
        return ""
    text = (
        f"not in that total: dynscope's own measurement builds (timing=True) took {t.measure_s:.2f} s "
        f"over {plural(t.measure_builds, 'Inductor build')}"
    )
    firsts = [m for m in rep.timing if not m.error]
    if firsts:
        text += ", and torch.compile's first call end to end " + ", ".join(
            f"{m.first_call_s:.2f} s ({m.mode})" for m in firsts
        )
    return text


def in_graphs_text(m: ModeTiming) -> str:
    """The share of the compiled call inside graphs, never over 100% ("100% capped")."""
    if m.compiled_ms <= 0 or not m.in_graphs_ms:
        return "-"
    return "100% capped" if m.in_graphs_overflows else percent(m.in_graphs_share)


def timing_section(rep: Report) -> str:
    """End-to-end timing per mode."""
    rows = []
    for m in rep.timing:
        if m.error:
            rows.append([m.mode, m.device, "-", "-", "-", "-", "-", f"failed: {clip(m.error, 40)}"])
            continue
        rows.append([
            m.mode, m.device, ms(m.eager_ms), ms(m.compiled_ms),
            f"{m.speedup:.2f}x" + (" ?" if m.below_resolution else " ~" if m.noisy else ""),
            samples_text(m), f"{m.first_call_s:.2f} s", in_graphs_text(m),
        ])
    return tabulate(
        rows,
        headers=["mode", "device", "eager", "compiled", "speedup", "samples", "first call", "in graphs"],
        tablefmt="simple",
    )


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
            out.append(f"{m.mode}: noisy: the samples spread {percent(m.spread)} (IQR / median) over {plural(m.samples, 'sample')}")
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
                f"{eager_sum / m.eager_ms:.1f}x the eager program ({ms(m.eager_ms)}): each pays its own "
                f"GraphModule call and cold caches; per-graph speedups are of graphs in isolation"
            )
        elif not left_out and eager_sum < m.eager_ms * (1 - ADD_UP_TOLERANCE):
            out.append(
                f"{m.mode}: the graphs' eager times add up to {ms(eager_sum)} of the eager program's "
                f"{ms(m.eager_ms)}; the other {ms(m.eager_ms - eager_sum)} runs outside any graph "
                f"(Python and the eager code at graph breaks), which compiling does not speed up"
            )
    return out


def guards_line(rep: Report) -> str:
    """One line: how many guards, on how many compiles, of which kinds (most first)."""
    kinds: dict[str, int] = {}
    for g in rep.guards:
        kinds[g.kind] = kinds.get(g.kind, 0) + 1
    top = sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ", ".join(f"{k} {n}" for k, n in top[:5]) + (", ..." if len(top) > 5 else "")
    compiles = len({g.compile_id for g in rep.guards})
    return f"{plural(len(rep.guards), 'guard')} on {plural(compiles, 'compile')}: {shown}"


def warning_lines(rep: Report) -> list[str]:
    """What makes the counts incomplete or the report unusual, one line each."""
    out = []
    if rep.unparsed:
        out.append(
            f"{plural(rep.unparsed, 'PyTorch trace message')} dynscope could not read: "
            f"counts may be short (check() fails until this is 0 or allow_unparsed=True)"
        )
    out.extend(rep.notes)
    return out


def _flagged(notes: list[str], width: int = 100) -> list[str]:
    """Each note as "    ! ...", wrapped to ``width``."""
    return [
        line for n in notes for line in textwrap.wrap(n, width, initial_indent="    ! ", subsequent_indent="      ")
    ]


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
#: The caches (the first word of a Lowering.cache key) in words, in the order shown.
CACHE_LABELS = {"fx_graph": "FX graph cache", "aot_autograd": "AOTAutograd cache"}
_CACHE_RESULTS = ("hit", "miss", "bypass")


def kernel_label(name: str, n: int = 36) -> str:
    """A kernel's name short enough for a table: library calls lose their
    ``extern_kernels.`` prefix (the kind column says it), long names are clipped."""
    return clip(name.removeprefix("extern_kernels."), n)


def pass_label(kernel: Kernel) -> str:
    """"fwd", "bwd" or "inf": the AOT graph the kernel runs in."""
    return {"forward": "fwd", "backward": "bwd", "inference": "inf"}.get(kernel.graph, kernel.graph)


def few(items: tuple[str, ...] | list[str], n: int = 3) -> str:
    """The first ``n`` items joined, "+k" for the rest; "-" when there are none."""
    if not items:
        return "-"
    return ", ".join(items[:n]) + (f", +{len(items) - n}" if len(items) > n else "")


def source_label(line: str) -> str:
    """"file.py:LINE" from a kernel's "path/file.py:LINE" (the base name, as elsewhere)."""
    path, sep, lineno = line.rpartition(":")
    return f"{PurePath(path).name}:{lineno}" if sep and lineno.isdigit() else line


def human_bytes(n: int) -> str:
    """"768 B", "12.0 KiB", "3.5 MiB", "1.2 GiB"."""
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit}"


def _share(value: float | None) -> str:
    return percent(value)


def phase_seconds(graphs: list[Graph] | tuple[Graph, ...], *, source: str | None = None) -> list[tuple[str, float]]:
    """Compile seconds per phase summed over the graphs' lowerings (only those of ``source``,
    "trace" or "timing", when given), in pipeline order (phases no graph reports are left
    out; unknown ones come last, in the order met)."""
    total: dict[str, float] = {}
    for g in graphs:
        if g.lowering is not None and source in (None, g.lowering.source):
            for phase, s in g.lowering.phases:
                # Reports saved before dynscope kept compile times apart added the capture's
                # Dynamo seconds to a timed build's phases; dynscope's build runs no Dynamo.
                if not (phase == "dynamo" and g.lowering.source == "timing"):
                    total[phase] = total.get(phase, 0.0) + s
    known = [p for p in PHASE_LABELS if p in total]
    return [(p, total[p]) for p in known + [p for p in total if p not in PHASE_LABELS]]


#: What a lowering's phases are of, by its source, in words.
PHASE_SOURCES = {
    "trace": "your compile",
    "timing": "dynscope's timed build (not your compile)",
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
    if built:
        out.append(("dynscope's builds shown here, per phase (not in the compile time)", phases_text(built)))
    return [(label, text) for label, text in out if text]


def phases_text(phases: list[tuple[str, float]]) -> str:
    """"Dynamo tracing 0.25 s, AOTAutograd 0.25 s, ... (total 7.4 s)"; "" when none."""
    if not phases:
        return ""
    parts = ", ".join(f"{PHASE_LABELS.get(p, p)} {s:.2f} s" for p, s in phases)
    return f"{parts} (total {sum(s for _, s in phases):.2f} s)"


def cache_counts(graphs: list[Graph] | tuple[Graph, ...]) -> list[tuple[str, dict[str, int]]]:
    """Per cache (its words), how many lookups hit, missed or were bypassed."""
    counts: dict[str, dict[str, int]] = {}
    for g in graphs:
        if g.lowering is not None:
            for key, result in g.lowering.cache:
                cache = key.split(" ", 1)[0]
                per = counts.setdefault(CACHE_LABELS.get(cache, cache), {})
                per[result] = per.get(result, 0) + 1
    order = list(CACHE_LABELS.values())
    return sorted(counts.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order))


def cache_text(graphs: list[Graph] | tuple[Graph, ...]) -> str:
    """"FX graph cache: 2 hit, 1 miss; AOTAutograd cache: 3 bypass"; "" when none recorded."""
    parts = []
    for cache, per in cache_counts(graphs):
        results = sorted(per, key=lambda r: _CACHE_RESULTS.index(r) if r in _CACHE_RESULTS else len(_CACHE_RESULTS))
        parts.append(f"{cache}: " + ", ".join(f"{per[r]} {r}" for r in results))
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


def kernels_table(graph: Graph) -> str:
    """Every kernel of ``graph``'s lowering, slowest first, then a row for the profiled
    time spent outside kernels (wrapper code, allocation, launches).

    Raises:
        InputError: the graph has no lowering (it did not go through Inductor).
    """
    low = graph.lowering
    if low is None:
        raise InputError(
            f"graph {graph.id} has no lowering: only graphs compiled by Inductor have kernels; "
            "use dynscope.report(..., timing=True) or inner='inductor'"
        )
    rows: list[list[object]] = []
    for k in low.kernels_by_time():
        rows.append([
            kernel_label(k.name, 48), k.kind, pass_label(k), k.calls,
            ms(k.time_ms) if k.time_ms is not None else "-", _share(k.share),
            few(k.aten_ops), few(k.nodes), few([source_label(s) for s in k.source_lines], 2),
        ])
    outside = low.outside_kernels_ms
    if outside is not None:
        share = outside / low.graph_ms if low.graph_ms else None
        rows.append(["(outside kernels)", "-", "-", "-", ms(outside), _share(share),
                     "wrapper code, allocation", "-", "-"])
    headers = ["kernel", "kind", "pass", "calls", "time", "share", "fused ops", "nodes", "source"]
    return tabulate(rows, headers=headers, tablefmt="simple")


def below_dynamo_section(rep: Report) -> list[str]:
    """The summary's lines on Inductor's work: top kernels of the program, compile time
    per phase with cache results, saved-for-backward bytes; [] when no graph was lowered."""
    lowered = [g for g in rep.graphs if g.lowering is not None]
    if not lowered:
        return []
    count = sum(len(g.lowering.kernels) for g in lowered if g.lowering is not None)
    out = [f"Below Dynamo ({plural(count, 'kernel')} in {plural(len(lowered), 'lowered graph')})"]
    top = rep.top_kernels(5)
    if top:
        rows = [
            [g.id, kernel_label(k.name), k.kind, pass_label(k), ms(cost), _share(k.share),
             few(k.aten_ops), few([source_label(s) for s in k.source_lines], 2)]
            for g, k, cost in top
        ]
        out.append(tabulate(
            rows, headers=["graph", "kernel", "kind", "pass", "time", "share", "fused ops", "source"],
            tablefmt="simple",
        ))
        out.append("    time: over the graph's runs; share: of its graph's time")
    else:
        out.append("    kernels not timed (dynscope.report(..., timing=True) times them)")
    # Each phases line says whose compile it is: the user's (the header's figure, all frames)
    # or dynscope's timed builds (not in it).
    lines = [
        *lowering_phase_lines(rep),
        ("cache", cache_text(lowered)),
        ("saved for backward", saved_text(lowered)),
    ]
    for label, text in lines:
        if text:
            out += wrap_figures(f"{label}: {text}")
    out += _flagged([f"graph {g.id}: {n}" for g in lowered if g.lowering is not None for n in g.lowering.notes])
    return [*out, ""]


def render_summary(rep: Report, *, color: bool = False) -> str:
    """The whole terminal summary. Deterministic for a given report.

    Args:
        rep: the report.
        color: add ANSI colour (dynscope._render.color.paint_summary); the text is otherwise the same.
    """
    title = f"dynscope report: {rep.title}" if rep.title else "dynscope report"
    out = [title, "=" * len(title), totals_line(rep)]
    if rep.breaks:
        out.append(fix_first_line(rep))
    out.append("")
    warnings = warning_lines(rep)
    if warnings:
        out += ["Read this first", *(f"    ! {w}" for w in warnings), ""]
    out += [f"Graphs ({rep.graph_count})", graphs_table(rep) if rep.graphs else "(none captured)"]
    out += [*_flagged(graph_timing_lines(rep)), ""]
    if rep.breaks or rep.recompiles:
        out += ["Program (in execution order)"]
        out += textwrap.wrap(program_line(rep), 100, initial_indent="    ", subsequent_indent="      ", break_on_hyphens=False)
        out += [""]
    if rep.breaks:
        out += [
            f"Graph breaks ({plural(rep.break_count, 'event')} at {plural(len(rep.breaks), 'site')})",
            breaks_section(rep),
            "",
        ]
    else:
        out += ["Graph breaks: none", ""]
    if rep.recompiles:
        out += [f"Recompiles ({rep.recompile_count})", recompiles_section(rep), ""]
    if rep.trials:
        out += [advice_title(rep.trials), advice_section(rep.trials), ""]
    failed = [f for f in rep.frames if f.status == "failed"]
    if failed:
        out.append("Frames that fell back to eager")
        for f in failed:
            out.append(f"    {f.compile_id} {f.function} ({location(f.filename, f.lineno)}): {clip(f.fail_summary, 80)}")
        out.append("")
    if rep.guards:
        out += ["Guards", "    " + guards_line(rep), ""]
    if rep.coverage is not None:
        c = rep.coverage
        out.append(
            f"Coverage: {percent(c.ratio, 1)} of the torch ops run were in graphs "
            f"(torch ops run: {c.ops_in_graphs} in graphs, {c.ops_eager} eagerly)"
        )
        for site, n in c.eager_sites[:5]:
            out.append(f"    eager: {site} x{n}")
        if c.ops_dynamo:
            out.append(f"    not counted: {c.ops_dynamo} ops Dynamo ran to build graph arguments (its runtime, not your code)")
        out.append("")
    if rep.timing:
        out += ["Timing (end to end)", timing_section(rep), *_flagged(end_to_end_lines(rep)), ""]
    out += below_dynamo_section(rep)
    out += ["Compile time", compile_time_section(rep)]
    text = "\n".join(out).rstrip() + "\n"
    return paint_summary(text) if color else text
