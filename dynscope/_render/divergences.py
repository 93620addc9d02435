"""The words of a divergence: each :class:`~dynscope._model.ranks.Fact` a merge or the live
watch found, said in one place, and the verdict every rank of a watched job says (its remedy
and why a note lets the job go on, from their kinds)."""

from __future__ import annotations

from pathlib import PurePath
from typing import TYPE_CHECKING

from dynscope._format import plural, rank_ranges
from dynscope._model.cache import BYPASSED, GUARD_MISS, NO_PARTS, NOT_IN_A, SAME_KEY, PartChange
from dynscope._model.watch import BLOCKED, COMPILED_ALONE, NO_COLLECTIVE, RECOMPILED_ALONE
from dynscope._render.cache import CACHE_WORDS, change_what
from dynscope._render.causes import explained

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from dynscope._model.ranks import Divergence, Fact, Value
    from dynscope._model.watch import Verdict

__all__ = ["REMEDY_WORDS", "detail", "fact_text", "goes_on_text", "verdict_text", "who"]


def who(ranks: Sequence[int]) -> str:
    """"rank 1", "ranks 0, 2, 3" or, for many, "ranks 0-4, 6-20, ..., 246-255 (240 ranks)"."""
    rs = sorted(ranks)
    return f"rank {rs[0]}" if len(rs) == 1 else "ranks " + rank_ranges(rs)


def _s(v: Value) -> str:
    if isinstance(v, tuple):  # a recompile's causes
        return "; ".join(explained(c) for c in v)
    return "" if v is None else str(v)


def _why(v: Value) -> str:
    """A recompile's failed guards: its causes said (or PyTorch's words, or the words a file
    saved before facts held causes); "no reason given" where there are none."""
    return _s(v) or "no reason given"


def _n(v: Value) -> int:
    return int(v) if isinstance(v, (int, float)) else 0


def _f(v: Value) -> float:
    """Seconds as a fact holds them (a number; a number's text in a file written by hand)."""
    if isinstance(v, (int, float)):
        return float(v)
    try:
        return float(v) if isinstance(v, str) and v else 0.0
    except ValueError:
        return 0.0


def _pairs(args: Sequence[Value]) -> list[tuple[str, str]]:
    return [(_s(args[k]), _s(args[k + 1])) for k in range(0, len(args) - 1, 2)]


def _graph(args: Sequence[Value]) -> str:
    """"Mlp.forward [DDP bucket split]: linear, relu on f32[8, 512]": args are the graph's
    name, whether DDP split it, how many ops, how many are shown, those, then its inputs.
    (A merged report saved before the count of shown ops marked the inputs' start with "|".)"""
    name, split, count = _s(args[0]), bool(args[1]), _n(args[2])
    if len(args) > 3 and _is_count(args[3]):
        n = _n(args[3])
        ops, inputs = [_s(a) for a in args[4:4 + n]], [_s(a) for a in args[4 + n:]]
    else:
        rest = [_s(a) for a in args[3:]]
        bar = rest.index("|") if "|" in rest else len(rest)
        ops, inputs = rest[:bar], rest[bar + 1:]
    shown = ", ".join(ops) + (f", +{count - len(ops)}" if count > len(ops) else "")
    return f"{name}{' [DDP bucket split]' if split else ''}: {shown or 'no ops'} on {', '.join(inputs) or 'no inputs'}"


def _collective_at(args: Sequence[Value]) -> str:
    """A collective issued at one position (args: name, graph run, compile id, how many in
    all); an empty name: the rank issued nothing there."""
    name, run, cid, total = _s(args[0]), _n(args[1]), _s(args[2]), _n(args[3])
    if not name:
        return f"nothing (it issued {plural(total, 'collective')} in all)"
    return f"{name} (graph run {run}, compile {cid or '?'})"


def _ran(compile_id: Value) -> str:
    """A compile a graph run ran; None: no run there."""
    return "nothing" if compile_id is None else (_s(compile_id) or "?")


def _issue(ranks: Sequence[int]) -> str:
    return "issues" if len(ranks) == 1 else "issue"


def _is_count(value: Value) -> bool:
    """A fact's count of the values after it (an int, not a bool): files saved before it had
    one held a word there."""
    return isinstance(value, int) and not isinstance(value, bool)


def _lookups(args: Sequence[Value]) -> str:
    """A graph's cache lookups, "fx_graph forward hit, fx_graph backward miss": args are how
    many, then each one's cache, AOT graph ("" for the whole compile's) and result. (A merged
    report saved before schema 8 gave (cache and graph, result) pairs, no count.)"""
    if args and _is_count(args[0]):
        n = _n(args[0])
        said = [" ".join(_s(x) for x in args[1 + 3 * k: 4 + 3 * k] if _s(x)) for k in range(n)]
    else:
        said = [f"{w} {st}" for w, st in _pairs(args)]
    return ", ".join(said)


def _cache_results(f: Fact) -> str:
    n, graphs = _n(f.args[0]), _n(f.args[1])
    counts = ", ".join(f"{c} {s}" for s, c in _pairs(f.args[2:]))
    return (f"{who(f.ranks)} logged {plural(n, 'cache result')}" + (f" ({counts})" if counts else "")
            + f" over {plural(graphs, 'graph')}")


#: Why ranks missed what others hit, when no key part differs (the miss's ``why``).
_CROSS_RANK_WHY = {
    SAME_KEY: "the same key as theirs, so the entry was not in these ranks' cache: a rank-local cache folder "
              "(TORCHINDUCTOR_CACHE_DIR on a node's own /tmp), or a cache not copied to their machines",
    GUARD_MISS: "the entry was found but its shape guards failed (dynamic shapes)",
    NOT_IN_A: "those ranks made no lookup for this graph",
    NO_PARTS: "the key changed, and PyTorch logged no key parts to compare (AOTAutograd logs them only with its "
              "logger at DEBUG)",
    BYPASSED: "the cache was bypassed on these ranks",
}


def _cache_why(f: Fact) -> str:
    """Which ranks missed a lookup others hit, and the key parts that differ between them."""
    compile_id, cache, why, n = _s(f.args[0]), _s(f.args[1]), _s(f.args[2]), _n(f.args[3])
    rest = f.args[4:]
    changes = [PartChange(*(_s(v) for v in rest[i:i + 5])) for i in range(0, len(rest) - 4, 5)]
    head = f"{who(f.ranks)} missed {compile_id}'s {CACHE_WORDS.get(cache, cache)} where {who(f.others)} hit"
    if not changes:
        return f"{head}: {_CROSS_RANK_WHY.get(why, why)}"
    more = f" (and {plural(n - len(changes), 'more part')}: dynscope cache-diff on two ranks' logs)" \
        if n > len(changes) else ""
    return f"{head}: " + "; ".join(change_what(c) for c in changes) + more


def _waits_in(f: Fact) -> str:
    op, seq, where = _s(f.args[0]) or "?", f.args[1], _s(f.args[2]) or "?"
    nth = f" (its collective #{seq})" if isinstance(seq, int) and not isinstance(seq, bool) else ""
    return f"{who(f.ranks)} {'waits' if len(f.ranks) == 1 else 'wait'} in {op}{nth} at {where}"


def _absent(f: Fact) -> str:
    doing = _s(f.args[1])
    return f"{who(f.ranks)} made no such compile within {_f(f.args[0]):.1f} s" + (f" ({doing})" if doing else "")


#: Each fact's words, by ``Fact.what``.
_SAID: dict[str, Callable[[Fact], str]] = {
    "captured": lambda f: f"{who(f.ranks)} captured {plural(_n(f.args[0]), 'graph')}",
    "captured_ref": lambda f: f"{who(f.ranks)} captured {_n(f.args[0])}",
    "made_graph": lambda f: f"{who(f.ranks)} made graph {_n(f.args[0])} as {_graph(f.args[1:])}",
    "made_graph_ref": lambda f: f"{who(f.ranks)} as {_graph(f.args)}",
    "node_differs": lambda f: (f"first difference: {_s(f.args[0])} (node {_n(f.args[1])}) gives {_s(f.args[2]) or 'nothing'} "
                               f"on {who(f.ranks)}, {_s(f.args[3]) or 'nothing'} on {who(f.others)}"),
    "input_differs": lambda f: (f"first difference: input {_n(f.args[0])} is {_s(f.args[1])} on {who(f.ranks)}, "
                                f"{_s(f.args[2])} on {who(f.others)}"),
    "broke_at": lambda f: (f"{who(f.ranks)} broke the graph at "
                           + ", ".join(f"{loc} ({reason})" for loc, reason in _pairs(f.args))
                           + f"; {who(f.others)} did not"),
    "recompiled": lambda f: (f"{who(f.ranks)} recompiled "
                             + "; ".join(f"{_s(f.args[k]) or 'a frame'} ({_s(f.args[k + 1])}): {_why(f.args[k + 2])}"
                                         for k in range(0, len(f.args) - 2, 3))
                             + f"; {who(f.others)} did not"),
    "reordered": lambda f: f"{who(f.ranks)} recompiled in another order than {who(f.others)}",
    "guard": lambda f: f"{who(f.ranks)} guard {_s(f.args[0])} on {_s(f.args[2]) or _s(f.args[1])}: {_s(f.args[3])}",
    "more_guards": lambda f: f" (and {plural(_n(f.args[0]), 'more guard')} differ)",
    "issue": lambda f: f"{who(f.ranks)} issue {', '.join(map(_s, f.args)) or 'none'} inside graphs",
    "issue_ref": lambda f: (f"{who(f.ranks)} issue {', '.join(map(_s, f.args)) or 'none'}: "
                            "a different sequence hangs the job"),
    "runs": lambda f: (f"{who(f.ranks)} runs {', '.join(map(_s, f.args[2:])) or 'no collective'} "
                       f"in graph {_n(f.args[0])} ({_s(f.args[1])})"),
    "runs_ref": lambda f: f"{who(f.ranks)} runs {', '.join(map(_s, f.args)) or 'no collective'}",
    "why_runs": lambda f: ": collectives issued in another order wait on each other",
    "cache": lambda f: (f"{who(f.ranks)} {_lookups(f.args[2:]) or 'logged no cache result'} "
                        f"in graph {_n(f.args[0])} ({_s(f.args[1])})"),
    "cache_ref": lambda f: f"{who(f.ranks)} {_lookups(f.args) or 'logged no cache result'}",
    "why_cache": lambda f: ": a rank that misses compiles longer, and the others wait for it in the next collective",
    "cache_results": _cache_results,
    "cache_why": _cache_why,
    "why_cache_results": lambda f: (": the ranks that compiled more looked up (and missed) the caches more, "
                                    "and compile longer while the others wait"),
    "input_as": lambda f: (f"{who(f.ranks)} gave graph {_n(f.args[0])} ({_s(f.args[1])}) input {_n(f.args[2])} "
                           f"as {_s(f.args[3])}, {who(f.others)} as {_s(f.args[4])}"),
    "kernels_differ": lambda f: (f"{who(f.ranks)} compiled graph {_n(f.args[0])} ({_s(f.args[1])}) into kernels of other "
                                 f"output shapes, strides or dtypes than {who(f.others)}"),
    "why_inductor_meta": lambda f: " (Inductor's logged tensor metadata; estimated runtimes left out)",
    "ran_compile": lambda f: (f"{who(f.ranks)} ran compile {_ran(f.args[1])} as graph run {_n(f.args[0]) + 1}, "
                              f"where {who(f.others)} ran {_ran(f.args[2])}"),
    "order_head": lambda f: "ranks issue their collectives in a different order: ",
    "issues_as": lambda f: (f"{who(f.ranks)} {_issue(f.ranks)} {_collective_at(f.args[1:5])} as collective "
                            f"{_n(f.args[0]) + 1}, where {who(f.others)} {_issue(f.others)} {_collective_at(f.args[5:9])}"),
    "why_order": lambda f: ": each waits in a collective the other has not reached, and the job hangs",
    "spent": lambda f: f"rank {f.ranks[0]} spent {_f(f.args[0]):.1f} s compiling",
    "spent_ref": lambda f: f"{who(f.ranks)} {_f(f.args[0]):.1f} s: the others wait that long in the next collective",
    "recompiled_alone": lambda f: f"rank {f.ranks[0]} recompiled {_s(f.args[0])} ({_s(f.args[1])}): {_why(f.args[2])}",
    "compiled_alone": lambda f: (f"rank {f.ranks[0]} {'recompiled' if f.args[0] else 'compiled'} {_s(f.args[1])} "
                                 f"({_s(f.args[2])})"),
    "absent": _absent,
    "waits_in": _waits_in,
    "never_meet": lambda f: ": these collectives never meet, every rank waits",
}

#: Facts said right after the one before, without "; " (a reason, a count in parentheses).
_TAILS = frozenset({"more_guards", "why_runs", "why_cache", "why_cache_results", "why_inductor_meta",
                    "why_order", "never_meet"})
#: Facts the next one follows without "; " (a lead-in).
_HEADS = frozenset({"order_head"})


def fact_text(f: Fact) -> str:
    """One fact in words (an unknown one, from a newer dynscope, by its name and values)."""
    said = _SAID.get(f.what)
    if said is None:
        return f"{f.what} ({who(f.ranks) if f.ranks else 'no rank'}): " + ", ".join(map(_s, f.args))
    return said(f)


def detail(d: Divergence) -> str:
    """What differs, in words (``Divergence.detail``); a divergence saved as words keeps them."""
    if not d.facts:
        return d.said
    out: list[str] = []
    glue = ""
    for f in d.facts:
        out.append(("" if f.what in _TAILS else glue) + fact_text(f))
        glue = "" if f.what in _HEADS else "; "
    return "".join(out)


#: What to do, per remedy (``Verdict.remedy``: one of the kinds a compile decides, LIVE_KINDS, or BLOCKED).
REMEDY_WORDS: dict[str, str] = {
    "recompiles": (
        "make the value that changed the same on every rank: pad every batch to one size or drop "
        "the short last batch (drop_last=True, or DistributedSampler with drop_last=True); mark the "
        "varying dimension dynamic before the first call (torch._dynamo.mark_dynamic(x, 0)); with "
        "automatic dynamic shapes, torch._dynamo.config.enable_compiler_collectives = True lets the "
        "ranks decide together"
    ),
    "break_sites": (
        "make the branch rank-independent: no `if rank == 0:` print, logging or collective inside "
        "compiled code; do rank-0 work after the step, or guard it with torch.compiler.is_compiling()"
    ),
    "tensor_metadata": (
        "build every rank's inputs the same way: one dtype (one autocast and precision setting on "
        "every rank), .contiguous(), the same shapes"
    ),
    "graph_structure": (
        "run the same code on the same shapes and dtypes on every rank: one precision setting "
        "(dtype, autocast) everywhere, inputs padded to a fixed size, no rank-dependent Python "
        "branches in compiled code"
    ),
    "graph_count": (
        "compile the same functions on every rank: a frame only some ranks compile comes from a "
        "rank-dependent branch or a graph break on those ranks only"
    ),
    "guards": (
        "a value is specialised differently per rank: make it the same on every rank, pass it as a "
        "tensor, or mark it dynamic"
    ),
    "collectives": (
        "issue the same collectives in the same order on every rank: no collective under a "
        "rank-dependent branch; make the graphs identical (above)"
    ),
    "collective_schedule": (
        "keep Inductor's communication reordering options the same on every rank, and the graphs identical"
    ),
    BLOCKED: (
        "issue the same collectives in the same order on every rank: the same number of steps and "
        "batches on every rank (DistributedSampler with drop_last=True; leave a loop on every rank "
        "together), no collective under a rank-dependent branch"
    ),
}

#: Why a note lets the job go on (``Verdict.why``).
_GOES_ON: dict[str, str] = {
    RECOMPILED_ALONE: ("a recompile of a function every rank runs, without a collective of its own: the "
                       "other ranks wait for it in their next collective, then the job goes on"),
    COMPILED_ALONE: "a function only some ranks run, without a collective inside: the job goes on",
    NO_COLLECTIVE: "the ranks compiled it differently, but its graphs issue no collective: the job goes on",
}


def goes_on_text(v: Verdict) -> str:
    """Why a note lets the job go on, in words, with the hooks it runs inside ("" for a verdict
    that stops)."""
    if not v.why:
        return ""
    why = _GOES_ON.get(v.why, v.why)
    return why + (f"; it runs inside {v.hooks}, whose collectives every rank issues alike" if v.hooks else "")


def verdict_text(v: Verdict, *, saved: str = "") -> str:
    """The words every rank of a watched job says (``Verdict.message``): which ranks, where,
    what differs, the line, the remedy."""
    odd = list(v.ranks)
    # On a tie (2 ranks, one each way) no rank is the odd one, unless it compiled alone.
    named = odd and len(odd) < v.world_size and (not v.answered or 2 * len(odd) < v.world_size)
    whom = f"{who(odd)} of {plural(v.world_size, 'rank')}" if named else f"the {plural(v.world_size, 'rank')}"
    when = ("while every rank waited in a collective the others never reach" if v.blocked else
            "before the compiled code ran")
    compile_id = f", compile {v.compile_id}" if v.compile_id else ""
    head = f"{whom} diverged at {v.frame or 'a frame'} ({v.where or '?'}){compile_id}, found by rank {v.found_by} {when}"
    lines = [head]
    lines += [f"  {d.kind} ({who(list(d.ranks))}): {detail(d)}" for d in v.divergences]
    if v.line:
        lines.append(f"  your line: {v.line}")
    lines.append(f"  remedy: {REMEDY_WORDS.get(v.remedy, v.remedy)}")  # a kind from a newer dynscope: named
    if not v.stops and v.why:
        lines.append(f"  not stopped: {goes_on_text(v)}")
    if saved:
        lines.append(f"  this rank's report so far: {saved} (merge the folder: dynscope merge {PurePath(saved).parent})")
    return "\n".join(lines)
