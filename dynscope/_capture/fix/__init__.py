"""``dynscope.fix()``: source patches that remove graph breaks, each verified in isolation.

The program is reported once (its break sites), each site in the user's own files gets the
rewrites its cause allows (:mod:`.rewrites`), and each rewrite is verified on a copy
(:mod:`.verify`): only a rewrite that removes the break, adds none, and leaves outputs and
gradients equal to the unpatched eager run's is "verified". Breaks inside installed
packages get no edit: the result says whose code it is and what to do instead.
"""

from __future__ import annotations

import difflib
import linecache
import os
import re
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from dynscope._capture.blame import COMPILER
from dynscope._capture.capture import _MISSING, as_report_call, normalise_calls, report, title_of
from dynscope._capture.copies import deep_copy
from dynscope._capture.fix.reorder import logger_reorder_note
from dynscope._capture.fix.rewrites import Rewrite, candidates, combined, unified_diff
from dynscope._capture.fix.source import Source, SourceError, line_map, python_lines
from dynscope._capture.fix.statements import added_lines
from dynscope._capture.fix.verify import (
    PatchedImportError,
    compare,
    copied,
    counterpart,
    defined_in,
    inputs_swapped,
    patched_module,
    random_streams_kept,
    run_compiled,
    run_eager,
)
from dynscope._errors import CaptureError, DynscopeError, InputError
from dynscope._format import location
from dynscope._lexicon.break_categories import GENERATOR, LOGGING, category_named
from dynscope._model.diff import site_key
from dynscope._model.fix import FixResult, Patch, Unpatched
from dynscope._read.break_sites import _defs
from dynscope._torch.registry import is_user_file, library_of
from dynscope._torch.trace import own_work
from dynscope._write import rewrite_file

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from dynscope._capture.fix.verify import Run
    from dynscope._model import GraphBreak, Report

__all__ = ["fix", "fix_calls"]

Calls = list[tuple[tuple[Any, ...], dict[str, Any]]]


def fix(model: Any, inputs: Any = _MISSING, *, calls: Sequence[Any] | None = None, write: bool = False,
        title: str = "") -> FixResult:
    """Propose a source patch for each graph break in your own files, and verify each.

    Args:
        model: the callable to compile: a function or a ``torch.nn.Module`` (as for
            :func:`dynscope.report`).
        inputs: its inputs, as for ``report()`` (a tensor, a tuple of arguments, a dict of
            keyword arguments).
        calls: several calls' inputs instead of ``inputs``.
        write: apply the verified patches to your files, each kept beside as
            ``FILE.py.dynscope-backup``. Defaults to False (nothing of yours is changed).
        title: a name for the result. Defaults to the model's.

    Returns:
        A :class:`~dynscope.FixResult`: ``patches`` (site, category, diff, verified, breaks
        before and after, outputs matched, why not verified), ``unpatched`` (sites left alone
        and why), and, with every verified patch applied together, the break count.

    Raises:
        InputError: the arguments are not usable (as for ``report()``).
    """
    return fix_calls(model, normalise_calls(model, inputs, calls), write=write, title=title or title_of(model))


def fix_calls(model: Any, calls: Calls, *, write: bool = False, title: str = "") -> FixResult:
    """:func:`fix` on calls already normalised (``normalise_calls``: advise's own calls)."""
    with random_streams_kept():
        return _fix(model, calls, write=write, title=title)


def _fix(model: Any, calls: Calls, *, write: bool, title: str) -> FixResult:
    blocked = ""
    try:
        before = _report(model, calls)
    except CaptureError as err:
        if isinstance(err.__cause__, InputError):  # it used what its copy could not hold (a generator)
            raise err.__cause__ from None
        if err.party != COMPILER:  # the program fails without torch.compile too: nothing to compare with
            raise
        # It runs in eager but fails under torch.compile: the sites that ran before the failure
        # get their patches (proposed: no compiled outputs to compare), the failure is said.
        before, blocked = err.report, _blocker(err)
    # The lines of the user's files with break sites that run eagerly: a rewrite that drops a
    # shortcut is verified only where the shortcut was taken.
    eager = run_eager(model, calls, traced=sorted({b.filename for b in before.breaks if is_user_file(b.filename)}))
    patches: list[Patch] = []
    chosen: list[tuple[Patch, Rewrite]] = []
    unpatched: list[Unpatched] = []
    sources: dict[str, Source] = {}  # each file as fix read it: the diffs are of its text, the writes of its bytes
    # A generator/iterator break often only follows from another (a comprehension Dynamo compiles
    # as a frame of its own because a call in it broke): its site is patched last, and only when
    # the other verified patches, applied together, leave it breaking.
    later = [site for site in before.breaks if site.category == GENERATOR]
    followed: set[str] | None = None  # the later sites gone with the others' patches: one rerun finds them all
    stacked: list[tuple[GraphBreak, list[Rewrite]]] = []  # kept outputs but still broke: tried on top of the others
    for site in [*(b for b in before.breaks if b.category != GENERATOR), *later]:
        if site.category == GENERATOR and chosen and followed is None:
            followed = _together(model, calls, eager, chosen, sources, later, write=False)[5]
        if site.category == GENERATOR and followed and site.location in followed:
            unpatched.append(Unpatched(site.location, site.category, _owner(site.filename),
                                       "no patch of its own: it only followed from the breaks the verified patches "
                                       "remove", site.count))
            continue
        inside = next((p for p, rw in chosen if _same(p.filename, site.filename) and rw.first <= site.lineno <= rw.last
                       and site.lineno not in _left_alone_inside(before, p.filename, p.lineno, sources[p.filename].text, rw)), None)
        if inside is not None:  # a later statement of a pattern a verified patch rewrote whole
            unpatched.append(Unpatched(site.location, site.category, _owner(site.filename),
                                       f"no patch of its own: the statement is part of the verified patch at "
                                       f"{inside.site}", site.count, gone_with=(inside.site,)))
            continue
        tried: list[Rewrite] = []
        found = _site(model, calls, before, eager, site, sources, blocked, tried)
        if isinstance(found, Unpatched):
            unpatched.append(found)
            continue
        patch, rewrite = found
        if patch.verified:
            patch = _overlapping(patch, rewrite, chosen, patches, unpatched)
        patches.append(patch)
        if patch.verified:
            chosen.append((patch, rewrite))
        elif _may_stack(patch) and not blocked:
            stacked.append((site, tried))
    if stacked and chosen:
        _stack(model, calls, before, eager, sources, patches, chosen, stacked)
    order = {b.location: i for i, b in enumerate(before.breaks)}  # the sites in the order PyTorch logged them
    patches.sort(key=lambda p: order.get(p.site, len(order)))
    unpatched.sort(key=lambda u: order.get(u.site, len(order)))
    left = {u.site for u in unpatched}
    asked = [site for site in before.breaks if site.location in left]
    after, outputs_after, written, backups, note, gone = _together(model, calls, eager, chosen, sources, asked,
                                                                   write=write)
    if gone:  # sites that only followed from a patched break: gone with the verified patches
        with_them = tuple(sorted({p.site for p, _ in chosen}))
        unpatched = [replace(u, gone_with=with_them) if u.site in gone else u for u in unpatched]
    return FixResult(title=title, patches=tuple(patches), unpatched=tuple(unpatched), breaks_before=before.break_count,
                     breaks_after=after, outputs_matched_after=outputs_after, written=written, backups=backups,
                     note=note, blocked=blocked)


def _blocker(err: CaptureError) -> str:
    """What stops the program under torch.compile, in one line: where (the frame whose compile
    failed) and the innermost error."""
    frame = next((f for f in err.report.frames if f.status == "crashed"), None)
    # A resume function Dynamo made after a break is the user's function from that line on.
    name = re.sub(r"^torch_dynamo_resume_in_(.+)_at_\d+$", r"\1", frame.function) if frame else ""
    where = f" compiling {name} from {location(frame.filename, frame.lineno)} on" if frame else ""
    return (f"torch.compile fails{where}: {_root_cause(err)}. The break sites after it never ran under "
            "compile (fix cannot see them); the patches before it are proposed, not verified (no compiled "
            "outputs to compare with eager's): fix the failure, then run fix again")


def _report(model: Any, calls: Calls) -> Report:
    # On copies of the model and the calls: a train step updates the model and optimizer it is
    # given, a BatchNorm its statistics, and every run of fix (before, each patch) must start
    # where the user's program starts, which it leaves alone.
    return report(copied(model), calls=[as_report_call(c) for c in deep_copy(calls)])


def _site(model: Any, calls: Calls, before: Report, eager: Run, site: GraphBreak,
          sources: dict[str, Source], blocked: str = "",
          kept: list[Rewrite] | None = None) -> Unpatched | tuple[Patch, Rewrite]:
    """The site's patch (the first that verifies, else the nearest) and its rewrite, or why none;
    ``kept`` gets each rewrite that kept outputs and gradients but left the program breaking."""
    where = site.location
    owner = _owner(site.filename)
    # A break made on purpose (or the user's own graph_break()) gets no rewrite: its category says why.
    left_alone = category_named(site.category).unpatched
    if left_alone:
        return Unpatched(where, site.category, owner, left_alone, site.count)
    if owner != "your code":
        return Unpatched(where, site.category, owner, (
            f"the break is in {owner}'s code: dynscope does not edit installed packages. Call that code outside "
            f"the compiled region, wrap it in torch.compiler.disable, or look for a {owner} release that fixes it"),
            site.count)
    try:
        source = sources.get(site.filename) or Source.read(site.filename)
        sources[site.filename] = source
    except SourceError as err:
        return Unpatched(where, site.category, owner, f"no patch: {err}", site.count)
    rewrites, why = candidates(source.text, site.lineno, site.category)
    if not rewrites:
        return Unpatched(where, site.category, owner, f"no patch: {why}. {site.fix}".strip(), site.count)
    tried: list[tuple[Patch, Rewrite]] = []
    for rw in rewrites:
        patch, rerun = _verified(model, calls, before, eager, site, source, rw)
        if blocked and rerun.blocked:  # proposed with what the run up to the failure showed
            return patch, rw
        if patch.verified:
            return _follow_after(model, calls, before, eager, site, source, rw, rerun) or (patch, rw)
        followed = (_follow_on(model, calls, before, eager, site, source, rw, patch, rerun)
                    or _follow_within(model, calls, before, eager, site, source, rw, patch, rerun)
                    or _follow_carried(model, calls, before, eager, site, source, rw, patch, rerun))
        if followed is not None:
            return followed
        tried.append((patch, rw))
        if kept is not None and _may_stack(patch) and not (rw.unchecked or rw.taken or rw.skipped or rw.silenced):
            kept.append(rw)
    # The one that came nearest first: the break gone (not moved), outputs and gradients kept,
    # only what it printed, logged or kept differs; then in the order tried.
    tried.sort(key=lambda t: not _nearly(t[0]))
    first, rw = tried[0]
    if len(tried) > 1:  # say what the others found too
        more = "; ".join(f"{p.rewrite}: {p.why_not}" for p, _ in tried[1:])
        first = _with(first, why_not=f"{first.why_not} (also tried {more})")
    return first, rw


def _may_stack(p: Patch) -> bool:
    """Kept outputs and gradients, the program ran, but a break is left (at the site, or moved
    on to a line another patch may rewrite)."""
    return (p.ran and p.outputs_matched is True and p.gradients_matched is not False
            and (bool(p.breaks_after) or (p.program_breaks_after or 0) >= p.program_breaks_before))


def _stack(model: Any, calls: Calls, before: Report, eager: Run, sources: dict[str, Source], patches: list[Patch],
           chosen: list[tuple[Patch, Rewrite]], stacked: list[tuple[GraphBreak, list[Rewrite]]]) -> None:
    """Each site whose rewrites kept outputs but left the program breaking (a count kept a
    tensor, whose next read broke in its turn) tried again applied with the verified patches of
    its file: verified so when its own lines break no more, the program breaks less than with
    those patches alone, and outputs, gradients, what it says and what it keeps are the
    unpatched eager run's. ``patches`` and ``chosen`` are updated in place."""
    alone: dict[str, int | None] = {}  # a file's break count with its verified patches only
    for site, rewrites in stacked:
        others = [(p, r) for p, r in chosen if _same(p.filename, site.filename)]
        source = sources.get(site.filename)
        if not others or source is None:
            continue
        if site.filename not in alone:
            rerun0, _ = _rerun(model, calls, source, [r for _, r in others],
                               combined(source.text, [r for _, r in others]), eager)
            alone[site.filename] = rerun0.rep.break_count if rerun0.rep is not None and not rerun0.blocked else None
        base = alone[site.filename]
        for rw in rewrites[:3]:  # each a rerun of the program: the first three kept
            if base is None or any(not (rw.last < r.first or rw.first > r.last) for _, r in others):
                continue
            found = _on_top(model, calls, before, eager, source, site, rw, others, base)
            if found is not None:
                at = next(i for i, p in enumerate(patches) if p.site == site.location)
                patches[at] = found
                chosen.append((found, rw))
                break


def _on_top(model: Any, calls: Calls, before: Report, eager: Run, source: Source, site: GraphBreak, rw: Rewrite,
            others: list[tuple[Patch, Rewrite]], base: int) -> Patch | None:
    """The site's patch of ``rw``, verified applied with ``others`` (see :func:`_stack`), or None."""
    rewrites = [r for _, r in others] + [rw]
    rerun, ev = _rerun(model, calls, source, rewrites, combined(source.text, rewrites), eager)
    if rerun.rep is None or ev is None or rerun.blocked:
        return None
    # rw's own lines in the combined copy: shifted by the patches above them
    shift = sum(r.new_last - r.last for _, r in others if r.last < rw.first)
    own = sum(b.count for b in rerun.rep.breaks
              if _same(b.filename, rerun.path) and rw.first + shift <= b.lineno <= rw.new_last + shift)
    if (own or rerun.rep.break_count >= base or not ev.outputs_matched or ev.gradients_matched is False
            or ev.said_differs or ev.state_differs):
        return None
    with_them = ", ".join(p.site for p, _ in others)
    patch = _measured(_unmeasured(before, site, source, rw), rerun.rep, ev, 0)
    return _with(patch, verified=True, assumes=f"{_as_tensors(rw.note, ev)}; verified applied with the patch"
                 f"{'es' if len(others) > 1 else ''} at {with_them} (alone, its break moves to a line they rewrite)")


def _nearly(p: Patch) -> bool:
    """Verified but for what the program says or keeps."""
    return (p.breaks_after == 0 and p.program_breaks_after is not None and p.program_breaks_after < p.program_breaks_before
            and p.outputs_matched is True and p.gradients_matched is not False)


def _owner(filename: str) -> str:
    """Whose code a break site is: "your code", an installed package's name, or torch's."""
    package = library_of(filename)
    if package:
        return package
    if is_user_file(filename):
        return "your code"
    return "torch" if f"{Path('torch')}" in Path(filename).parts else "the Python standard library"


def _with(patch: Patch, **changes: Any) -> Patch:
    return replace(patch, **changes)


@dataclass(frozen=True)
class _Rerun:
    rep: Report | None
    path: str
    why: str
    blocked: str = ""  # the patched program failed under torch.compile only: rep is what ran before
    copies: tuple[tuple[str, str], ...] = ()  # (the user's file, its patched copy) for each file patched


def _rerun(model: Any, calls: Calls, source: Source, rewrites: Sequence[Rewrite], text: str,
           eager: Run) -> tuple[_Rerun, Any]:
    """The patched program's report and the comparison of its compiled outputs with eager's."""
    return _rerun_files(model, calls, [(source, rewrites, text)], eager)


def _rerun_files(model: Any, calls: Calls, files: Sequence[tuple[Source, Sequence[Rewrite], str]],
                 eager: Run) -> tuple[_Rerun, Any]:
    """The program with every file of ``files`` patched (its rewrites, its new text) at once:
    the model's classes and the helpers of other files it calls, each its patched copy."""
    patched_files = []
    for source, rewrites, text in files:
        name = Path(source.path).name
        try:
            data = source.to_bytes(text)
        except SourceError as err:
            return _Rerun(None, "", f"no patched copy of {name}: {err}"), None
        patched_files.append((source.path, data, _carried_line_map(source.text, rewrites)))
    with ExitStack() as stack:
        modules = []
        for filename, data, where in patched_files:
            try:
                modules.append((filename, stack.enter_context(patched_module(filename, data)), where))
            except PatchedImportError as err:
                return _Rerun(None, "", f"the patched copy of {Path(filename).name} did not import: {err}"), None
            except Exception as err:  # noqa: BLE001 - the patched copy did not import: not verified, said why
                return _Rerun(None, "", f"the patched copy of {Path(filename).name} did not import: "
                                        f"{type(err).__name__}: {str(err)[:200]}"), None
        return _rerun_patched(model, calls, modules, eager)


def _rerun_patched(model: Any, calls: Calls, modules: Sequence[tuple[str, Any, Callable[[int], int | None]]],
                   eager: Run) -> tuple[_Rerun, Any]:
    patched, path = model, ""
    # The files that define the model's own classes (or function) first: their patched copies
    # replace the model's classes, whose code then calls the other files' patched helpers.
    modules = sorted(modules, key=lambda m: not _defines(model, m[0]))
    # Objects of the patched files' classes among the inputs (a KV cache, a statistics
    # collector) run the patched code too: a file only they reach needs nothing of the model.
    calls, passed, why = inputs_swapped(calls, modules)
    if why:
        return _Rerun(None, modules[0][1].__file__ or "", why), None
    for filename, module, where in modules:
        path = path or module.__file__ or ""
        try:
            new, why = counterpart(patched, filename, module, where)
        except Exception as err:  # noqa: BLE001 - a model that cannot be copied or swapped: not verified, said why
            new, why = None, (f"the model could not be set up with the patched copy of {Path(filename).name}: "
                              f"{type(err).__name__}: {str(err)[:200]}")
        if new is None and filename not in passed:
            return _Rerun(None, path, why), None
        patched = new if new is not None else patched
    try:
        with own_work():  # the patched copy is dynscope's work, not the user's program
            rep = _report(patched, calls)
        got = run_compiled(patched, calls)
    except KeyboardInterrupt:
        raise
    except CaptureError as err:
        if err.party == COMPILER:  # it runs in eager: the report up to the failure still says what changed
            return _Rerun(err.report, path, f"the patched program raised {_root_cause(err)}",
                          _root_cause(err)), None
        return _Rerun(None, path, f"the patched program raised {_root_cause(err)}"), None
    except BaseException as err:  # noqa: BLE001 - the patched program failed (or exited): not verified, said why
        return _Rerun(None, path, f"the patched program raised {_root_cause(err)}"), None
    return _Rerun(rep, path, "", copies=tuple((f, m.__file__ or "") for f, m, _ in modules)), compare(eager, got)


def _defines(model: Any, filename: str) -> bool:
    """Whether ``filename`` defines the model's function or one of its modules' classes."""
    obj = model.__self__ if hasattr(model, "__self__") and isinstance(model.__self__, torch.nn.Module) else model
    if isinstance(obj, torch.nn.Module):
        return any(defined_in(type(m), filename) for m in obj.modules())
    return defined_in(obj, filename)


def _root_cause(err: BaseException) -> str:
    """What a failed rerun says in one line: the innermost exception of the chain (the
    ``RuntimeError`` under Dynamo's ``TorchRuntimeError`` under dynscope's ``CaptureError``),
    its type and first line, and whether the patched program failed in eager too (the rewrite
    itself is wrong, not only its compile)."""
    inner: BaseException = err
    seen = {id(err)}
    while True:
        nxt = inner.__cause__ or inner.__context__
        if nxt is None or id(nxt) in seen:
            break
        seen.add(id(nxt))
        inner = nxt
    said = [ln.strip() for ln in str(inner).strip().splitlines() if ln.strip()]
    # Its first line, and the second when that goes on with what the first left out
    # ("Constraints violated (...)!" / "- You marked ... but your code specialized it").
    line = " ".join(said[:2] if len(said) > 1 and said[1].startswith("- ") else said[:1])
    if isinstance(inner, SystemExit):
        line = f"it called sys.exit({inner.code!r})"
    out = f"{type(inner).__name__}: {line[:400]}" if line else type(inner).__name__
    party = getattr(err, "party", "")  # CaptureError's: "model" raises in eager too
    if party == "model":
        out += " (in eager too, without torch.compile)"
    elif party == "compiler" or (inner is not err and isinstance(err, DynscopeError)):
        out += " (under torch.compile)"
    return out


def _verified(model: Any, calls: Calls, before: Report, eager: Run, site: GraphBreak, source: Source,
              rw: Rewrite) -> tuple[Patch, _Rerun]:
    """The patch of ``rw`` with its evidence, and the rerun it came from."""
    patch = _unmeasured(before, site, source, rw)
    ran = eager.lines
    real = os.path.realpath(site.filename)
    untaken = [line for line in rw.taken if not ran.get((real, line))]
    for line, warning in rw.silenced:  # a report run in eager code only: what the run shows of it
        if not ran.get((real, line)):
            return _with(patch, why_not=(
                f"the report at line {line} was never made in the run: under torch.compile it never is, and nothing "
                "shows that is what you want (run fix with inputs that make it)")), _Rerun(None, "", "")
        if warning:
            return _with(patch, why_not=(
                f"the warning at line {line} was issued in the run: under torch.compile it never is")), _Rerun(None, "", "")
    if untaken:  # nothing a run shows would tell the shortcut from the general path
        return _with(patch, why_not=(
            f"the shortcut at line {untaken[0]} was never taken in the run: dropping it cannot be shown to keep "
            "outputs where it is taken (run fix with inputs that take it)")), _Rerun(None, "", "")
    if rw.skipped is not None and ran.get((real, rw.skipped[0]), 0) <= ran.get((real, rw.skipped[1]), 0):
        return _with(patch, why_not=(
            f"the body at line {rw.skipped[1]} ran every time its test did: running it always cannot be shown to "
            "change nothing when the test is false (run fix with inputs where it is)")), _Rerun(None, "", "")
    rerun, ev = _rerun(model, calls, source, [rw], rw.source, eager)
    if rerun.rep is not None and rerun.blocked:
        return _blocked_patch(patch, rerun.rep, rerun, rw), rerun
    if rerun.rep is None or ev is None:
        # The program did not run: say what the rewrite relied on beside what failed (a
        # deepcopy of a module made .clone(): "the copied value is a tensor").
        raised = rerun.why.startswith("the patched program raised")  # not an import, not a lookup
        said = f"{rerun.why}; the rewrite assumes {rw.note}" if rw.note and raised else rerun.why
        return _with(patch, why_not=said or "the patched program did not run"), rerun
    rep = rerun.rep
    at_site = _at_rewritten_lines(before, rep, site, source.text, rerun.path, rw)
    patch = _measured(patch, rep, ev, at_site)
    # The original file still breaking at the site: the program reached that code through
    # something fix could not swap for its patched copy (an object made elsewhere), so the
    # rewrite was never run there and nothing about it was measured.
    unswapped = sum(b.count for b in rep.breaks if _same(b.filename, site.filename)
                    and rw.first <= b.lineno <= rw.last)
    why = []
    if unswapped:
        why.append(f"the patched code did not run: the program still breaks at the original line {unswapped} "
                   "time(s) (it reaches that code through an object fix could not swap for the patched copy)")
    elif at_site:
        why.append(f"the break is still there ({at_site} at the rewritten lines)")
    elif rep.break_count >= before.break_count:
        moved = [f"{Path(site.filename).name}:{line}" for _, line in _new_sites(before, rep, site.filename, rerun.path, rw)]
        why.append(f"the program still breaks {rep.break_count} times ({before.break_count} before)"
                   + (f": the break moved to {', '.join(moved)}" if moved else ""))
    if not ev.outputs_matched:
        why.append(f"outputs differ from the unpatched eager run (max abs error {ev.max_abs_error:.3g})")
    if ev.gradients_matched is False:
        why.append("gradients differ from the unpatched eager run")
    if ev.said_differs:  # a print or a log line silenced under compile is behaviour too
        why.append(f"what the program prints or logs changes: {ev.said_differs}")
    if ev.state_differs:
        why.append(f"what the model keeps changes: {ev.state_differs}")
    if rw.unchecked:  # what no run shows (a failed check's exception): proposed, said why
        why.append(rw.unchecked)
    return _with(patch, verified=not why, why_not="; ".join(why), assumes=_as_tensors(patch.assumes, ev)), rerun


def _as_tensors(assumes: str, ev: Any) -> str:
    """``assumes``, and the attributes that now hold 0-dim tensors where Python floats were."""
    if not ev.state_as_tensors:
        return assumes
    names = ", ".join(f"`{k}`" for k in ev.state_as_tensors)
    return (f"{assumes}; {names} now hold{'s' if len(ev.state_as_tensors) == 1 else ''} detached 0-dim tensors where "
            "the unpatched run kept Python floats (the same values, as every run of them showed): code that needs a "
            "Python number from them (json, a numpy array of them on a GPU) calls float()")


def _unmeasured(before: Report, site: GraphBreak, source: Source, rw: Rewrite) -> Patch:
    """The site's patch of ``rw`` before any rerun: what it changes and the program before it."""
    return Patch(
        site=site.location, filename=site.filename, lineno=site.lineno, category=site.category, rewrite=rw.name,
        diff=unified_diff(source.text, rw.source, Path(site.filename).name), added=added_lines(source.text, rw.source),
        verified=False, assumes=rw.note, breaks_before=site.count,
        instead=logger_reorder_note(site.source) if site.category == LOGGING else "",
        program_breaks_before=before.break_count, graphs_before=before.graph_count,
        coverage_before=before.coverage.ratio if before.coverage is not None else None,
    )


def _measured(patch: Patch, rep: Report, ev: Any, at_site: int) -> Patch:
    """``patch`` with what the patched program's rerun showed (``ev``: its outputs against eager's)."""
    return _with(patch, breaks_after=at_site, program_breaks_after=rep.break_count, graphs_after=rep.graph_count,
                 coverage_after=rep.coverage.ratio if rep.coverage is not None else None,
                 outputs_matched=ev.outputs_matched, gradients_matched=ev.gradients_matched,
                 max_abs_error=ev.max_abs_error)


def _blocked_patch(patch: Patch, rep: Report, rerun: _Rerun, rw: Rewrite) -> Patch:
    """A patch of a program that fails under torch.compile: what the run up to the failure
    showed (breaks at the site, in the program so far), never verified."""
    at_site = sum(b.count for b in rep.breaks if _same(b.filename, rerun.path) and rw.first <= b.lineno <= rw.new_last)
    gone = "the break at this site is gone" if not at_site else f"the break is still there ({at_site})"
    return _with(patch, breaks_after=at_site, program_breaks_after=rep.break_count, graphs_after=rep.graph_count,
                 coverage_after=rep.coverage.ratio if rep.coverage is not None else None,
                 why_not=f"the program fails under torch.compile after this site ({rerun.blocked}), so no "
                         f"compiled outputs can be compared; in the run up to the failure {gone}")


def _new_sites(before: Report, after: Report, original: str, path: str,
               rw: Rewrite) -> list[tuple[GraphBreak, int]]:
    """Break sites of the patched file that were no break site before, each with its line in
    the original file. A site is its statement and reason (``site_key``: function, normalised
    code, category), not its line: a break that only moved with the lines the rewrite added
    above it is the same site, and a statement that breaks now, at a line that broke for
    another reason before, is a new one."""
    shift = (rw.new_last - rw.first) - (rw.last - rw.first)
    old = {site_key(b)[1:] for b in before.breaks if _same(b.filename, original)}
    out = []
    for b in after.breaks:
        if not _same(b.filename, path) or rw.first <= b.lineno <= rw.new_last:
            continue
        if site_key(b)[1:] not in old:
            out.append((b, b.lineno if b.lineno < rw.first else b.lineno - shift))
    return out


# How many statements one patch may follow on to (a sampling loop's index kept a tensor, its
# uses, then the next loop of the same shape the first one's break had hidden), and how many
# reruns following on may cost a site.
_FOLLOW_DEPTH = 5
_FOLLOW_RERUNS = 8


def _follow_on(model: Any, calls: Calls, before: Report, eager: Run, site: GraphBreak, source: Source, rw: Rewrite,
               patch: Patch, rerun: _Rerun, budget: list[int] | None = None) -> tuple[Patch, Rewrite] | None:
    """A rewrite that removed its break and kept outputs, but moved the break to the next
    statement (``.item()`` kept a tensor, and the ``if`` on it now breaks): the rewrite of that
    statement too, verified as one patch of both. When that one too kept outputs but a break
    shows up further on that the first break had hidden (Dynamo compiled nothing of the loop
    after it: BLIP's second hard-negative loop), it is followed in turn, up to
    ``_FOLLOW_DEPTH`` statements and ``_FOLLOW_RERUNS`` reruns; only the whole chain, every
    break it moved gone, is verified."""
    budget = [_FOLLOW_DEPTH, _FOLLOW_RERUNS] if budget is None else budget
    if rerun.rep is None or patch.breaks_after or not patch.outputs_matched or patch.gradients_matched is False:
        return None
    moved = _new_sites(before, rerun.rep, site.filename, rerun.path, rw)
    if not moved or budget[0] <= 0:
        return None
    budget[0] -= 1
    nxt, _ = moved[0]
    second, _ = candidates(rw.source, nxt.lineno, nxt.category)
    for rw2 in (r for r in second if not r.taken and not r.skipped):  # their evidence: lines of the original run
        if budget[1] <= 0:
            return None
        budget[1] -= 1
        both = _spanning(source.text, rw2.source, _then(rw.name, rw2.name), _joined(rw.note, rw2.note),
                         _joined(rw.unchecked, rw2.unchecked))
        # A report the second guards is checked on the original run's lines: its line in the file
        # before the first rewrite (0 where the first rewrite wrote it: never seen run).
        shift = rw.new_last - rw.last
        both = replace(both, silenced=rw.silenced + tuple(
            (line if line < rw.first else line - shift if line > rw.new_last else 0, warning)
            for line, warning in rw2.silenced))
        followed, rerun2 = _verified(model, calls, before, eager, site, source, both)
        if followed.verified:
            return followed, both
        # The second's own lines break for another reason (a where over values that select by a mask).
        deeper = (_follow_within(model, calls, before, eager, site, source, both, followed, rerun2)
                  or _follow_on(model, calls, before, eager, site, source, both, followed, rerun2, budget))
        if deeper is not None:
            return deeper
    budget[0] += 1  # this statement's depth back for a sibling the caller tries next
    return None


def _follow_after(model: Any, calls: Calls, before: Report, eager: Run, site: GraphBreak, source: Source,
                  rw: Rewrite, rerun: _Rerun) -> tuple[Patch, Rewrite] | None:
    """A verified rewrite after which another site of the file breaks for another reason
    (Switch's loop over the routed experts: once the list is every index, the body's f-string
    no longer breaks, and the masked write behind it does): that site's rewrite for its new
    reason, on the patched text, with this one, verified as one patch of both, and kept only
    when the other site's break is gone too. The other site is then part of this patch."""
    if rerun.rep is None:
        return None
    shift = rw.new_last - rw.last
    before_at = {b.lineno: b for b in before.breaks if _same(b.filename, site.filename) and b is not site}
    for b in rerun.rep.breaks:
        line = b.lineno - shift if b.lineno > rw.new_last else b.lineno if b.lineno < rw.first else 0
        other = before_at.get(line)
        if not _same(b.filename, rerun.path) or other is None or other.category == b.category:
            continue
        offered = [r for r in candidates(rw.source, b.lineno, b.category)[0] if not r.taken and not r.skipped]
        for rw2 in offered[:3]:
            both = _spanning(source.text, rw2.source, _then(rw.name, rw2.name), _joined(rw.note, rw2.note),
                             _joined(rw.unchecked, rw2.unchecked))
            followed, rerun2 = _verified(model, calls, before, eager, site, source, both)
            # the other site's statement, as rw2 rewrote it, must break no more
            still = rerun2.rep is None or any(_same(x.filename, rerun2.path) and rw2.first <= x.lineno <= rw2.new_last
                                              for x in rerun2.rep.breaks)
            if followed.verified and not still:
                return followed, both
        return None  # one other site looked at: the first whose reason changed
    return None


def _follow_within(model: Any, calls: Calls, before: Report, eager: Run, site: GraphBreak, source: Source,
                   rw: Rewrite, patch: Patch, rerun: _Rerun) -> tuple[Patch, Rewrite] | None:
    """A rewrite that kept outputs but whose own new lines break for another reason (an update
    made under torch.where whose value still selects by a mask, ``rates[b] = torch.where(_pred,
    clicks[in_bin].mean(), rates[b])``): every line of the rewrite that a rewrite of that
    reason applies to, rewritten by it too (the last first, so the lines above keep their
    numbers; a break in a loop hides the lines after it, so all are tried), verified as one
    patch. The rewrites offered at the line found breaking are tried in turn, at most three."""
    if rerun.rep is None or not patch.breaks_after or not patch.outputs_matched or patch.gradients_matched is False:
        return None
    inside = sorted({(b.lineno, b.category) for b in rerun.rep.breaks if _same(b.filename, rerun.path)
                     and rw.first <= b.lineno <= rw.new_last and b.category != site.category})
    if len(inside) != 1:
        return None
    line, category = inside[0]
    offered, _ = candidates(rw.source, line, category)
    # (a rewrite that silences a report is not followed within: its lines are the first rewrite's)
    for pick in [r.name for r in offered if not r.taken and not r.skipped and not r.silenced][:3]:
        text, used, unchecked = rw.source, "", rw.unchecked
        for at in range(rw.new_last, rw.first - 1, -1):
            found = [r for r in candidates(text, at, category)[0] if r.name == pick]
            if found and found[0].first == at:
                text, used, unchecked = found[0].source, found[0].note, _joined(unchecked, found[0].unchecked)
        if not used:
            continue
        both = _spanning(source.text, text, _then(rw.name, pick), _joined(rw.note, used), unchecked)
        followed, _ = _verified(model, calls, before, eager, site, source, both)
        if followed.verified:
            return followed, both
    return None


def _follow_carried(model: Any, calls: Calls, before: Report, eager: Run, site: GraphBreak, source: Source,
                    rw: Rewrite, patch: Patch, rerun: _Rerun) -> tuple[Patch, Rewrite] | None:
    """A rewrite that removed its break and kept outputs, whose lines carry other sites as they
    were, still breaking (LoFTR's negative term between the positive term's selection and the mean
    that reduces it): those sites' rewrites too, on the patched text, top down, verified as one
    patch of all: their spans overlap this one's, so none could be applied beside it."""
    if rerun.rep is None or not patch.breaks_after or not patch.outputs_matched or patch.gradients_matched is False:
        return None
    others = {site_key(b)[1:]: b for b in before.breaks if _same(b.filename, site.filename)
              and rw.first <= b.lineno <= rw.last and b.lineno != site.lineno}
    still = [site_key(b)[1:] for b in rerun.rep.breaks if _same(b.filename, rerun.path)
             and rw.first <= b.lineno <= rw.new_last]
    if not still or any(k not in others or k == site_key(site)[1:] for k in still):
        return None  # a break at the rewritten lines that is no other site's, carried over
    old = python_lines(source.text)
    text, name, note, unchecked = rw.source, rw.name, rw.note, rw.unchecked
    for other in sorted({others[k] for k in still}, key=lambda b: b.lineno):
        now = [i + 1 for i, ln in enumerate(python_lines(text)) if ln == old[other.lineno - 1]]
        if len(now) != 1:
            continue  # rewritten with a site above it (its run reached this line)
        offered = [r for r in candidates(text, now[0], other.category)[0]
                   if not r.taken and not r.skipped and not r.silenced]
        if not offered:
            return None
        text, name = offered[0].source, _then(name, offered[0].name)
        note, unchecked = _joined(note, offered[0].note), _joined(unchecked, offered[0].unchecked)
    every = _spanning(source.text, text, name, note, unchecked)
    followed, _ = _verified(model, calls, before, eager, site, source, every)
    return (followed, every) if followed.verified else None


def _joined(a: str, b: str) -> str:
    """Two rewrites' notes (their unchecked behaviour), each said once: a chain that applies one
    rewrite at several statements says its assumption once."""
    return "; ".join(dict.fromkeys(w for part in (a, b) for w in part.split("; ") if w))


def _then(first: str, second: str) -> str:
    """A chain of rewrites' name: each named once, in the order first applied."""
    return ", then ".join(dict.fromkeys([*first.split(", then "), second]))


def _spanning(old: str, new: str, name: str, note: str, unchecked: str = "") -> Rewrite:
    """One rewrite from ``old`` to ``new`` over the lines between their common head and tail."""
    a, b = python_lines(old), python_lines(new)
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    return Rewrite(name, new, head + 1, len(a) - tail, len(b) - tail, note, tuple(b[head: len(b) - tail]),
                   unchecked=unchecked)


def _same(a: str, b: str) -> bool:
    return Path(a).name == Path(b).name and Path(a).resolve().parent == Path(b).resolve().parent


def _forget(filename: str) -> None:
    """Drop what this process remembers of a file fix wrote (its lines, its functions): a
    report taken after ``fix(write=True)`` reads the patched text, so its break sites carry
    the statements that are there now (``dynscope diff`` follows them by their code)."""
    linecache.checkcache(filename)
    _defs.cache_clear()


def _together(model: Any, calls: Calls, eager: Run, chosen: list[tuple[Patch, Rewrite]], sources: dict[str, Source],
              asked: Sequence[GraphBreak] = (), *,
              write: bool) -> tuple[int | None, bool | None, tuple[str, ...], tuple[str, ...], str, set[str]]:
    """Every verified patch applied together, in every file they touch (the model's, its
    helpers' in other files of the project): the break count and outputs, and, with ``write``,
    the files written when the patches together still verify (fewer breaks, outputs equal) and
    each file is as fix read it; and which of the ``asked`` break sites (their locations) no
    longer break when they verify together (a break that only followed from a patched one)."""
    by_file: dict[str, list[tuple[Patch, Rewrite]]] = {}
    for patch, rw in chosen:
        kept = by_file.setdefault(patch.filename, [])
        if all(rw.last < r.first or rw.first > r.last for _, r in kept):  # one statement, one rewrite
            kept.append((patch, rw))
    texts = {f: combined(sources[f].text, [rw for _, rw in items]) for f, items in by_file.items()}
    gone: set[str] = set()
    after: int | None = None
    matched: bool | None = None
    why = ""
    if texts:
        rerun, ev = _rerun_files(model, calls, [(sources[f], [rw for _, rw in by_file[f]], text)
                                                for f, text in texts.items()], eager)
        if rerun.rep is not None and ev is not None:
            after = rerun.rep.break_count
            matched = ev.outputs_matched and not ev.said_differs and not ev.state_differs
            if matched and ev.gradients_matched is not False:
                gone = _gone(rerun, by_file, asked)
        why = rerun.why
    written: list[str] = []
    backups: list[str] = []
    before_count = next(iter(chosen))[0].program_breaks_before if chosen else 0
    note = ""
    if write and texts and not (after is not None and after < before_count and matched is True):
        note = ("nothing written: the verified patches did not verify together "
                + (f"({why})" if after is None and why
                   else f"({after} break events after, {before_count} before; outputs equal: {matched})"))
    if write and not note:
        for filename, text in texts.items():
            source = sources[filename]
            try:
                # Only the patched lines change: the file's other bytes, its mode, owner and
                # links stay (a symlink is written through, a hard link stays shared).
                backup = rewrite_file(Path(filename), source.to_bytes(text), expected=source.raw,
                                      backup=".dynscope-backup")
            except (DynscopeError, SourceError) as err:
                note = f"nothing written: {err}"
                break
            written.append(filename)
            backups.append(str(backup))
            _forget(filename)
    return after, matched, tuple(written), tuple(backups), note, gone


def _overlapping(patch: Patch, rewrite: Rewrite, chosen: list[tuple[Patch, Rewrite]], patches: list[Patch],
                 unpatched: list[Unpatched]) -> Patch:
    """A verified patch whose lines overlap a verified patch chosen before it (a recurrence's,
    from ``__init__`` to ``forward``, around a statement patched on its own): two such cannot be
    written together. Where it spans the other's lines whole and its program breaks no more
    than with the other (it rewrote that statement too), it takes the other's place, the other's
    site part of it (as a later site inside a verified patch is); else it is not verified, said why."""
    for i, (p, rw) in enumerate(chosen):
        if not (_same(p.filename, patch.filename) and rw.first <= rewrite.last and rewrite.first <= rw.last):
            continue
        if (rewrite.first <= rw.first and rw.last <= rewrite.last
                and (patch.program_breaks_after or 0) <= (p.program_breaks_after or 0)):
            del chosen[i]
            patches.remove(p)
            unpatched.append(Unpatched(p.site, p.category, _owner(p.filename),
                                       f"no patch of its own: the statement is part of the verified patch at "
                                       f"{patch.site}", p.breaks_before, gone_with=(patch.site,)))
            return patch
        return _with(patch, verified=False, why_not=(
            f"its lines overlap those of the verified patch at {p.site}: the two cannot be written together (write that "
            "one, then run fix again)"))
    return patch


def _carried_line_map(old: str, rewrites: Sequence[Rewrite]) -> Callable[[int], int | None]:
    """Old line -> its line in the patched text, as ``line_map`` says, and for a line inside a
    rewritten region that the rewrite carried over as it was (a class whose statement was
    rewritten with a helper put before it: its methods' ``def`` lines), where it is now; None
    for a line the rewrite changed."""
    coarse = line_map([(rw.first, rw.last, rw.new_last - rw.first + 1) for rw in rewrites])
    carried: dict[int, int] = {}
    for rw in rewrites:
        start = (coarse(rw.first - 1) or 0) + 1 if rw.first > 1 else 1  # where the region starts now
        carried.update({line: start + at for line, at in _carried_lines(old, rw).items()})

    def where(line: int) -> int | None:
        now = coarse(line)
        return now if now is not None else carried.get(line)

    return where


def _carried_lines(old: str, rw: Rewrite) -> dict[int, int]:
    """The lines of the rewrite's region it carried over as they were: old line -> its place
    in the region's new lines (0 for the first)."""
    same = difflib.SequenceMatcher(a=python_lines(old)[rw.first - 1: rw.last], b=list(rw.replacement), autojunk=False)
    return {rw.first + a + k: b + k for a, b, size in same.get_matching_blocks() for k in range(size)}


def _left_alone_inside(before: Report, filename: str, lineno: int, old: str, rw: Rewrite,
                       carried: dict[int, int] | None = None) -> dict[int, str]:
    """The other sites inside the rewrite's region that it carried over as they were and that no
    rewrite knows (a helper between ``__init__`` and the ``forward`` a recurrence's rewrite
    spans): old line -> category. Their breaks are theirs, left alone, not the patch's.
    ``carried``: the rewrite's :func:`_carried_lines`, where the caller has them already."""
    carried = _carried_lines(old, rw) if carried is None else carried
    return {b.lineno: b.category for b in before.breaks
            if _same(b.filename, filename) and b.lineno != lineno and b.lineno in carried
            and not candidates(old, b.lineno, b.category)[0]}


def _at_rewritten_lines(before: Report, after: Report, site: GraphBreak, old: str, path: str, rw: Rewrite) -> int:
    """Break events of the patched run at the rewrite's lines, less those of the other sites it
    carried over as they were and that no rewrite knows (:func:`_left_alone_inside`): the same
    statement breaking for the same reason, where the region now holds it."""
    carried = _carried_lines(old, rw)  # one match of the region's lines, for both
    alone = _left_alone_inside(before, site.filename, site.lineno, old, rw, carried)
    theirs = {(rw.first + carried[line], category) for line, category in alone.items()}
    return sum(b.count for b in after.breaks if _same(b.filename, path) and rw.first <= b.lineno <= rw.new_last
               and (b.lineno, b.category) not in theirs)


def _gone(rerun: _Rerun, by_file: dict[str, list[tuple[Patch, Rewrite]]], asked: Sequence[GraphBreak]) -> set[str]:
    """The locations of the asked sites with no break in the patched run: each line mapped to
    its place in its file's patched copy (a file no patch touched runs as it is)."""
    if rerun.rep is None:
        return set()
    copies = dict(rerun.copies)
    still = {(os.path.realpath(b.filename), b.lineno) for b in rerun.rep.breaks}
    out = set()
    for site in asked:
        rewrites = [rw for _, rw in by_file.get(site.filename, [])]
        now = line_map([(rw.first, rw.last, rw.new_last - rw.first + 1) for rw in rewrites])(site.lineno)
        if now is None:
            continue  # inside a patched statement: that patch's own site
        where = copies.get(site.filename, site.filename) if rewrites else site.filename
        if (os.path.realpath(where), now) not in still:
            out.add(site.location)
    return out
