"""The fix corpus measured (tests/corpus/fix_programs.py and the modules of ``CORPUS``): per
break category, sites found, patched, verified and removed; verified patches checked again on
inputs fix never saw. Used by tests/capture/fix/test_fix.py (heavy tier) and benchmarks/fix_corpus.py."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

import dynscope
from dynscope._capture.fix.source import line_map
from dynscope._capture.fix.verify import compare, counterpart, patched_module, run_compiled, run_eager
from dynscope._lexicon.break_categories import EXPLICIT, LIBRARY_BREAK, OPTIMIZER
from dynscope._torch.registry import is_user_file
from tests.corpus import (
    fix_aliased,
    fix_branches,
    fix_checks,
    fix_counts,
    fix_host,
    fix_masks,
    fix_recurrent,
    fix_shortcuts,
    fix_state,
)
from tests.corpus import fix_programs as fp

#: Breaks PyTorch or the program make on purpose: no source rewrite is asked of them.
_ON_PURPOSE_CATEGORIES = {OPTIMIZER, LIBRARY_BREAK, EXPLICIT}

if TYPE_CHECKING:
    import types

#: The corpus modules: each holds ``PROGRAMS`` (name -> builder) and marks each break site
#: ``# SITE: <rewrite>`` (``none`` where no patch may be verified, ``on purpose`` for torch's own).
CORPUS: list[types.ModuleType] = [fp, fix_host, fix_state, fix_checks, fix_counts, fix_masks, fix_branches,
                                   fix_shortcuts, fix_aliased, fix_recurrent]


@cache
def _lines(filename: str) -> list[str]:
    return Path(filename).read_text(encoding="utf-8").splitlines()


def expected(lineno: int, filename: str = fp.__file__) -> str:
    """The rewrite the corpus marks at a line (``# SITE: ...``)."""
    found = re.search(r"# SITE: (.*)$", _lines(filename)[lineno - 1])
    if not found:
        raise AssertionError(f"{Path(filename).name}:{lineno} carries no SITE marker")
    return found.group(1).strip()


def measure(modules: list[types.ModuleType] | None = None) -> dict[str, Any]:
    """Run fix over every corpus program: per category, sites found in user code, the fixable
    among them (not marked ``none``), patched, verified, removed; every patch's rewrite against the SITE marker; verified patches that
    change an output on a second, unseen input; the sites PyTorch breaks at on purpose apart."""
    per: dict[str, dict[str, int]] = {}
    mismatched, changed, on_purpose = [], [], []
    builds = [b for m in (modules or CORPUS) for b in m.PROGRAMS.values()]
    for build in builds:
        model, inputs = build()
        res = dynscope.fix(model, inputs)
        for p in res.patches:
            row = per.setdefault(p.category, {"found": 0, "patched": 0, "verified": 0, "removed": 0})
            want, first = expected(p.lineno, p.filename), p.rewrite.split(", then ")[0]
            row["found"] += 1
            row["fixable"] = row.get("fixable", 0) + (want != "none")
            row["patched"] += 1
            row["verified"] += p.verified
            row["removed"] += p.verified and p.breaks_after == 0
            if (p.verified or want != "none") and not want.startswith(first):
                mismatched.append((p.site, p.rewrite, want))
            if not p.verified and not p.why_not:
                mismatched.append((p.site, p.rewrite, "an unverified patch that does not say why"))
            if not p.assumes:
                mismatched.append((p.site, p.rewrite, "a patch that names no assumption"))
            if p.verified and _same_on_new_input(build, p) is False:
                changed.append(p.site)
        for u in res.unpatched:
            want = expected(int(u.site.rsplit(":", 1)[1]), _file_of(build, u.site))
            if want == "on purpose":  # torch.optim's own breaks: no change in user code removes them
                on_purpose.append(u.site)
                continue
            row = per.setdefault(u.category, {"found": 0, "patched": 0, "verified": 0, "removed": 0})
            row["found"] += 1
            row["fixable"] = row.get("fixable", 0) + (want != "none")
            row["removed"] += bool(u.gone_with)  # it followed from a patched break: gone with that patch
            row["gone"] = row.get("gone", 0) + bool(u.gone_with)
            if (want != "none") != bool(u.gone_with):
                mismatched.append((u.site, "gone with the verified patches" if u.gone_with else "no patch", want))
    return {"per": per, "mismatched": mismatched, "changed": changed, "on_purpose": on_purpose}


def merged(*results: dict[str, Any]) -> dict[str, Any]:
    """Several ``measure`` results as one: per-category counts added, lists joined."""
    per: dict[str, dict[str, int]] = {}
    for r in results:
        for cat, row in r["per"].items():
            into = per.setdefault(cat, {})
            for key, n in row.items():
                into[key] = into.get(key, 0) + n
    return {"per": per, **{k: [x for r in results for x in r[k]] for k in ("mismatched", "changed", "on_purpose")}}


def measure_held_out(programs: dict[str, Any]) -> dict[str, Any]:
    """fix over programs written apart from its rewrites (tests/corpus/fix_heldout), whose
    break lines are marked ``# BREAK: ...`` (a rewrite could keep outputs) or ``# BREAK
    must-not: ...`` (none can): per category, sites found, patched, verified, removed, and
    among them the fixable ones; verified patches at must-not sites (goal: none), verified
    patches that change an output on unseen inputs (goal: none), sites nobody marked."""
    per: dict[str, dict[str, int]] = {}
    must_not_verified, changed, unmarked, on_purpose, unchecked, raised = [], [], [], [], [], []
    for name, build in programs.items():
        model, inputs = build()
        sites: list[tuple[str, str, int, str, dynscope.Patch | None, bool]]
        try:
            res = dynscope.fix(model, inputs)
        except dynscope.DynscopeError as err:
            # fix refused the program: each of its break sites counts as found and not removed.
            raised.append(f"{name}: {type(err).__name__}: {str(err)[:300]}")
            model, inputs = build()
            rep = dynscope.report(model, inputs)
            sites = [(f"{Path(b.filename).name}:{b.lineno}", b.filename, b.lineno, b.category, None, False)
                     for b in rep.breaks if is_user_file(b.filename)]
        else:
            sites = [(p.site, p.filename, p.lineno, p.category, p, False) for p in res.patches]
            # A site left alone that the verified patches removed too (it followed from their break).
            sites += [(u.site, _file_of(build, u.site), int(u.site.rsplit(":", 1)[1]), u.category, None,
                       bool(u.gone_with)) for u in res.unpatched]
        for site, filename, lineno, category, p, gone in sites:
            if category in _ON_PURPOSE_CATEGORIES:
                on_purpose.append(site)
                continue
            mark = _break_mark(filename, lineno)
            if mark is None:
                unmarked.append(f"{name}: {site}")
            row = per.setdefault(category, dict.fromkeys(("found", "fixable", "patched", "verified", "removed",
                                                          "fixable removed", "gone"), 0))
            row["gone"] += gone
            removed = bool(p is not None and p.verified and p.breaks_after == 0) or gone
            row["found"] += 1
            row["fixable"] += mark != "must-not"
            row["patched"] += p is not None
            row["verified"] += bool(p is not None and p.verified)
            row["removed"] += removed
            row["fixable removed"] += removed and mark != "must-not"
            if p is not None and p.verified and mark == "must-not":
                must_not_verified.append(f"{name}: {site} {p.rewrite}")
            if gone and mark == "must-not":
                must_not_verified.append(f"{name}: {site} gone with the verified patches")
            same = _same_on_new_input(build, p) if p is not None and p.verified else True
            if same is False:
                changed.append(f"{name}: {site}")
            elif same is None:
                unchecked.append(f"{name}: {site}")
    return {"per": per, "must_not_verified": must_not_verified, "changed": changed, "unmarked": unmarked,
            "on_purpose": on_purpose, "unchecked": unchecked, "raised": raised}


def _break_mark(filename: str, lineno: int) -> str | None:
    """"must-not", "fixable", or None for an unmarked line."""
    try:
        line = _lines(filename)[lineno - 1]
    except (OSError, IndexError):
        return None
    found = re.search(r"# BREAK( must-not)?:", line)
    if not found:
        return None
    return "must-not" if found.group(1) else "fixable"


def table(per: dict[str, dict[str, int]]) -> str:
    """Per category: sites found, removed by verified patches (a site gone with another's
    patch among them), proposed (a patch, not verified), left alone (no patch, not gone); and
    the totals."""
    rows = [(cat, r["found"], r["removed"], r["patched"] - r["verified"],
             r["found"] - r["patched"] - r.get("gone", 0)) for cat, r in sorted(per.items())]
    total = [sum(int(r[i]) for r in rows) for i in range(1, 5)]
    out = [f"{'category':44} {'found':>5} {'removed':>7} {'proposed':>8} {'left alone':>10}"]
    out += [f"{cat:44} {f:5} {rm:7} {pr:8} {la:10}" for cat, f, rm, pr, la in rows]
    out.append(f"{'all':44} {total[0]:5} {total[1]:7} {total[2]:8} {total[3]:10}")
    return "\n".join(out)


def _file_of(build: Any, site: str) -> str:
    """The corpus file a site (``NAME.py:LINE``) is in: the builder's own, else the corpus
    module of that name (a helper in another file of the corpus)."""
    name = site.rsplit(":", 1)[0]
    beside = Path(__import__(build.__module__, fromlist=["_"]).__file__ or "").with_name(Path(name).name)
    if beside.exists():
        return str(beside)
    for module in [__import__(build.__module__, fromlist=["_"]), *CORPUS]:
        if Path(module.__file__ or "").name == Path(name).name:
            return module.__file__ or ""
    return str(Path(fp.__file__).with_name(Path(name).name))


def _same_on_new_input(build: Any, p: dynscope.Patch) -> bool | None:
    """The patched program compiled, on inputs of another draw, against the unpatched eager one;
    None when the unpatched program itself raises on that draw (not an input it takes: a
    probability made negative, a size the draw broke), so nothing could be compared."""
    model, inputs = build()

    def moved(a: Any) -> Any:  # a float tensor of another draw (a leaf that requires grad stays one)
        if not (isinstance(a, torch.Tensor) and a.is_floating_point()):
            return a
        return (a.detach() + torch.randn_like(a) * 0.5).requires_grad_(a.requires_grad)

    # As fix takes them: a tuple of arguments, a dict of keyword arguments, or one argument.
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((), {k: moved(v) for k, v in inputs.items()}) if isinstance(inputs, dict)
        else (tuple(moved(a) for a in (inputs if isinstance(inputs, tuple) else (inputs,))), {})]
    new = apply_diff(Path(p.filename).read_text(encoding="utf-8"), p.diff)
    with patched_module(p.filename, new) as module:
        # Found by its code, as fix finds it: the lines of its definitions in the patched text.
        patched, why = counterpart(model, p.filename, module, line_map(diff_spans(p.diff)))
        assert patched is not None, why
        try:
            expected = run_eager(model, calls)
        except Exception:  # noqa: BLE001 - the program's own error on this draw: not an input it takes
            return None
        return compare(expected, run_compiled(patched, calls)).outputs_matched


def diff_spans(diff: str) -> list[tuple[int, int, int]]:
    """The changes of a unified diff as ``line_map`` takes them: (first old line, last old
    line, lines put in their place), one per run of removed and added lines."""
    spans: list[tuple[int, int, int]] = []
    for hunk in re.finditer(r"@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@\n(.*?)(?=^@@|\Z)", diff, re.S | re.M):
        line = int(hunk.group(1))
        first, removed, added = 0, 0, 0
        for ln in [*hunk.group(2).splitlines(), " "]:
            if ln.startswith("-"):
                first = first or line
                removed += 1
                line += 1
            elif ln.startswith("+"):
                first = first or line
                added += 1
            else:
                if first:
                    spans.append((first, first + removed - 1, added))
                first, removed, added = 0, 0, 0
                line += 1
    return spans


def apply_diff(old: str, diff: str) -> str:
    """A unified diff as fix writes it, applied to ``old``."""
    lines = old.splitlines(keepends=True)
    out: list[str] = []
    i = 0
    for hunk in re.finditer(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@\n(.*?)(?=^@@|\Z)", diff, re.S | re.M):
        start = int(hunk.group(1)) - 1
        out += lines[i:start]
        i = start
        for ln in hunk.group(3).splitlines(keepends=True):
            if ln.startswith("+"):
                out.append(ln[1:])
            elif ln.startswith("-"):
                i += 1
            else:
                out.append(lines[i])
                i += 1
    return "".join(out + lines[i:])
