"""Where each size came from: PyTorch's shape records and per-entry guard failures, in words.

Read from the structured trace (torch 2.11 .. 2.14, torch/fx/experimental/symbolic_shapes.py
and torch/_dynamo/guards.py), in process or from a TORCH_TRACE log; no torch import:

- ``create_symbol`` ``{"symbol": "s77", "val": "5", "source": "L['x'].size()[0]", ...}``: a
  size made dynamic (a symbol), the value it was created at;
- ``symbolic_shape_specialization`` ``{"symbol", "sources", "value", "reason",
  "user_stack"}``: a dynamic size the program fixed to one value (``range(x.size(0))``,
  ``if x.shape[1] == 8:``), with the user line that did it;
- ``guard_added_fast`` ``{"expr": "Eq(s77, 5)", "user_stack"}``: a shape guard, with the line
  that added it (``s77 < 1024`` from ``torch.arange(x.size(0))``...);
- ``recompile_reasons`` payload: one "F/C: <guard>" block per earlier cache entry of the
  frame, the first guard of that entry that failed on the new call.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from dynscope._format import location
from dynscope._model import GuardFailure, RecompileFix, SizeFix
from dynscope._model.causes import (
    BRANCHED_ON,
    GUARD,
    RESUME_VALUE,
    SIZE,
    SIZE_FIXED_BY_CODE,
    VALUE,
    VALUE_FIXED_BY_CODE,
)
from dynscope._torch.registry import is_user_file

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from dynscope._torch.records import CreatedSymbol

_LOCAL = re.compile(r"L\['(?P<name>[^']+)'\]")
_KWARG = re.compile(r"L\['kwargs'\]\['(?P<key>[^']+)'\]")
_SIZE = re.compile(r"\.(?P<what>size|stride)\(\)\[(?P<i>\d+)\]")
_SYMBOL = re.compile(r"\b[su]\d+\b")
_ENTRY = re.compile(r"^(?P<entry>\d+/\d+):\s*(?P<guard>.*)$", re.S)


def source_words(source: str) -> str:
    """A guard source as the user writes it: ``L['x'].size()[0]`` -> ``x.size(0)``,
    ``L['kwargs']['pos']`` -> ``pos``, ``L['self']._modules['attn']`` -> ``self.attn``."""
    s = _KWARG.sub(lambda m: m["key"], source.strip())
    s = re.sub(r"\._(?:modules|parameters|buffers)\['([^']+)'\]", r".\1", s)
    s = _LOCAL.sub(lambda m: m["name"], s)
    return _SIZE.sub(lambda m: f".{m['what']}({m['i']})", s)


_RELATIONS = {"Eq": "==", "Ne": "!="}


def _split_top(text: str) -> list[str]:
    """``text`` split at its commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts


def expr_words(expr: str, symbols: Mapping[str, str]) -> str:
    """A sympy guard with its symbols named by their sources: ``Eq(s77, 5)`` ->
    ``x.size(0) == 5``; ``s77 < 1024`` -> ``x.size(0) < 1024``; ``Ne(Max(1, s0), 12)`` ->
    ``Max(1, x.size(0)) != 12``."""
    expr = expr.strip()
    for name, op in _RELATIONS.items():
        if expr.startswith(name + "(") and expr.endswith(")"):
            parts = _split_top(expr[len(name) + 1:-1])
            if len(parts) == 2:
                expr = f"{parts[0]} {op} {parts[1]}"
            break
    return _SYMBOL.sub(lambda m: symbols.get(m.group(0), m.group(0)), expr)


@dataclass(frozen=True)
class _Site:
    filename: str
    lineno: int
    function: str
    code: str
    via: str = ""  # the torch function it happened inside, where the line called into torch


def _user_site(stack: Any) -> _Site:
    """The user's line of a record's ``user_stack``: its innermost frame outside torch. A size
    fixed inside a torch op Dynamo traced through (nn.Linear's ``F.linear`` pins the input's
    last size) is the user's line that called it (``h = self.proj(x)``), with the torch
    function named as ``via``."""
    frames = [f for f in stack if isinstance(f, dict)] if isinstance(stack, list) else []
    if not frames:
        return _Site("", 0, "", "")
    users = [i for i, f in enumerate(frames) if isinstance(f.get("filename"), str) and is_user_file(f["filename"])]
    last = frames[users[-1]] if users else frames[-1]
    inner = frames[users[-1] + 1] if users and users[-1] + 1 < len(frames) else None
    via = ""
    if inner is not None:
        via = f"{inner.get('name') or '?'} ({location(str(inner.get('filename') or ''), int(inner.get('line') or 0))})"
    filename = last.get("filename", "")
    return _Site(
        filename=filename if isinstance(filename, str) else "",
        lineno=int(last.get("line") or 0),
        function=str(last.get("name") or ""),
        code=str(last.get("loc") or "").strip(),
        via=via,
    )


def symbol_sources(created: Iterable[CreatedSymbol | None]) -> dict[str, str]:
    """symbol -> the input size it stands for, in words (``s77`` -> ``x.size(0)``), of one
    compile, from its ``create_symbol`` records."""
    out: dict[str, str] = {}
    for made in created:
        if made is not None and made.source is not None:
            out.setdefault(made.symbol, source_words(made.source))
    return out


@dataclass
class ShapeRecords:
    """One compile's shape records, by kind, each in the order PyTorch logged it."""

    created: list[CreatedSymbol | None] = field(default_factory=list)  # create_symbol
    fixed: list[Mapping[str, Any]] = field(default_factory=list)  # symbolic_shape_specialization bodies
    guarded: list[Mapping[str, Any]] = field(default_factory=list)  # guard_added_fast bodies


def size_fixes(compile_id: str, shapes: ShapeRecords) -> tuple[tuple[SizeFix, ...], tuple[str, ...]]:
    """(the sizes one compile fixed or guarded, with the user line of each; its input sizes
    that stayed dynamic), from that compile's shape records.

    A size fixed to a value (``symbolic_shape_specialization``) is one ``SizeFix`` of kind
    "fixed"; the ``Eq`` guard PyTorch adds for the same fix is not listed again. Other shape
    guards are kind "guarded", once per distinct guard and line.
    """
    symbols = symbol_sources(shapes.created)
    fixes: list[SizeFix] = []
    # PyTorch may log a fix's Eq guard before the fix itself: know every fixed symbol first.
    fixed_symbols = {str(body.get("symbol") or "") for body in shapes.fixed}
    seen: set[tuple[str, str, int]] = set()
    for body in shapes.fixed:
        symbol = str(body.get("symbol") or "")
        sources = body.get("sources") or []
        words = source_words(str(sources[0])) if sources else symbols.get(symbol, symbol)
        site = _user_site(body.get("user_stack"))
        key = (words, site.filename, site.lineno)
        if key in seen:
            continue
        seen.add(key)
        fixes.append(SizeFix(
            compile_id=compile_id, size=words, kind="fixed", value=str(body.get("value", "")),
            reason=str(body.get("reason") or ""), filename=site.filename, lineno=site.lineno,
            function=site.function, code=site.code, via=site.via,
        ))
    for body in shapes.guarded:
        expr = str(body.get("expr") or "")
        site = _user_site(body.get("user_stack"))
        said = expr_words(expr, symbols)
        named = _SYMBOL.findall(expr)
        if expr.startswith("Eq(") and any(s in fixed_symbols for s in named):
            continue  # the guard of a fix already listed
        key = (said, site.filename, site.lineno)
        if key in seen or not named:
            continue
        seen.add(key)
        fixes.append(SizeFix(
            compile_id=compile_id, size=", ".join(dict.fromkeys(symbols.get(s, s) for s in named)),
            kind="guarded", value=said, reason="", filename=site.filename, lineno=site.lineno,
            function=site.function, code=site.code, via=site.via,
        ))
    dynamic = tuple(dict.fromkeys(words for symbol, words in symbols.items() if symbol not in fixed_symbols))
    return tuple(fixes), dynamic


_THEN_NOW = (
    re.compile(r"expected (?P<then>\S+?),? actual (?P<now>\S+)"),
    re.compile(r"expected requires_grad=(?P<then>\S+)"),
)


def entry_failures(payload: str, explain: Any) -> tuple[GuardFailure, ...]:
    """The failed guard of each earlier cache entry, from a ``recompile_reasons`` payload
    (a JSON list of "F/C: <guard>" blocks, or one block as text), with what the guard held
    when that entry was compiled and what the new call brought, where PyTorch's words say.

    ``explain``: the cause of a guard (guard_text.reason_cause).
    """
    try:
        data = json.loads(payload)
    except ValueError:
        data = None
    blocks = [str(item) for item in data] if isinstance(data, list) else re.split(r"\n(?=\d+/\d+:)", payload)
    out: list[GuardFailure] = []
    for block in blocks:
        m = _ENTRY.match(block.strip())
        if not m:
            continue
        entry, rest = m["entry"], m["guard"]
        # One guard a block (PyTorch joins several with "; " only under recompiles_verbose, and
        # its own notes hold "; " too).
        for guard in [rest.split("User stack trace:")[0].strip()]:
            if not guard:
                continue
            then = now = ""
            for pattern in _THEN_NOW:
                tn = pattern.search(guard)
                if tn:
                    then, now = tn["then"].rstrip("."), (tn.groupdict().get("now") or "").rstrip(".")
                    break
            else:
                expr = re.split(r"\s+#\s", guard, maxsplit=1)[0].strip()
                eq = re.match(r"^(?P<lhs>.+?) == (?P<rhs>.+)$", expr)
                if eq:
                    then = eq["rhs"].strip()
                elif re.match(r"^not \S+$", expr):  # "not kwargs": compiled for none
                    then = "empty"
            out.append(GuardFailure(entry=entry, guard=re.split(r"\s+#\s", guard, maxsplit=1)[0].strip(),
                                    cause=explain(guard), then=then, now=now))
    return tuple(out)


_CHECK_TENSOR = re.compile(
    r"check_tensor\((?P<src>[^,]+), \w+, DispatchKeySet\([^)]*\), (?P<dtype>torch\.\w+), device=(?P<device>[^,]+), "
    r"requires_grad=(?P<rg>True|False), size=\[(?P<size>[^\]]*)\], stride=\[(?P<stride>[^\]]*)\]\)"
)


def tensor_guard(detail: str) -> dict[str, Any]:
    """What a TENSOR_MATCH guard holds (torch 2.11 .. 2.14 print it as ``check_tensor(L['x'],
    Tensor, DispatchKeySet(...), torch.float32, device=None, requires_grad=False, size=[4, 8],
    stride=[8, 1])``; a dynamic dim is ``None``): dtype, requires_grad, size, stride; {} when
    the text is not that."""
    m = _CHECK_TENSOR.search(detail)
    if not m:
        return {}

    def dims(text: str) -> tuple[int | None, ...]:
        return tuple(int(p) if p.strip().lstrip("-").isdigit() else None for p in text.split(",") if p.strip())

    return {"dtype": m["dtype"], "requires_grad": m["rg"] == "True", "size": dims(m["size"]), "stride": dims(m["stride"])}


# -- terms of a guard, shared by the fixes below and report()'s own guard check -------------

_SIZE_TERM = re.compile(r"(?:L\['(?P<local>\w+)'\]|\b(?P<name>[A-Za-z_]\w*))\.size\(\)\[(?P<i>\d+)\]")
_VALUE_GUARD = re.compile(r"^(?P<len>len\()?(?:L\['(?P<local>\w+)'\]|(?P<name>\w+))\)? == (?P<then>.+)$")
_SIZE_FAILURE = re.compile(r"tensor '(?P<n>.+?)' size mismatch at index (?P<i>\d+)")


def size_terms(guard: str) -> set[tuple[str, int]]:
    """(input, dim) of each ``x.size()[i]`` (or ``L['x'].size()[i]``) a guard names."""
    return {(t["local"] or t["name"], int(t["i"])) for t in _SIZE_TERM.finditer(guard)}


def value_guard(guard: str) -> tuple[str, bool] | None:
    """(the local, whether it is its length) of a guard ``n == 2``, ``L['n'] == 2`` or
    ``len(L['xs']) == 2``; None for any other guard."""
    m = _VALUE_GUARD.match(guard)
    return (m["local"] or m["name"], bool(m["len"])) if m else None


# -- recompile fixes that name the user's line ------------------------------------------------


def _fixed_by_code(
    failures: tuple[GuardFailure, ...], shapes: Mapping[str, tuple[SizeFix, ...]], cid: str
) -> dict[str, RecompileFix]:
    """input name -> the fix when a size (or a Python int) the new call changed was fixed by
    the user's own code, in the entry that failed or in the recompile itself (PyTorch made it
    dynamic and the code made it static again): marking it dynamic cannot help there."""
    out: dict[str, RecompileFix] = {}
    for f in failures:
        value = value_guard(f.guard)
        size = _SIZE_FAILURE.search(f.guard)
        if value is not None:
            name, words, dim = value[0], value[0], ""
        elif size is not None:
            name, words, dim = size["n"], f"{size['n']}.size({size['i']})", size["i"]
        else:
            continue
        fx = next((x for x in (*shapes.get(cid, ()), *shapes.get(f.entry, ())) if x.kind == "fixed" and x.size == words), None)
        if fx is None or name in out:
            continue
        kind = VALUE_FIXED_BY_CODE if value is not None else SIZE_FIXED_BY_CODE
        at = location(fx.filename, fx.lineno) if fx.filename else ""  # "": the words say "your code"
        out[name] = RecompileFix(kind, name=name, dim=dim, size=words, value=fx.value, compile_id=fx.compile_id,
                                 at=at, code=fx.code, via=fx.via)
    return out


def _branched_on(failures: tuple[GuardFailure, ...], shapes: Mapping[str, tuple[SizeFix, ...]]) -> dict[str, RecompileFix]:
    """failed shape guard -> the fix when the entry's guard on that size came from a branch
    of the user's code on it (``if x.size(0) > 5:``): each side compiles once."""
    out: dict[str, RecompileFix] = {}
    for f in failures:
        sizes = {f"{n}.size({i})" for n, i in size_terms(f.guard)}
        for fx in shapes.get(f.entry, ()):
            if fx.kind == "guarded" and fx.size in sizes and fx.on_branch:
                out.setdefault(f.guard, RecompileFix(BRANCHED_ON, size=fx.size, value=fx.value, code=fx.code,
                                                     at=location(fx.filename, fx.lineno)))
    return out


def _named_fix(fix: RecompileFix) -> RecompileFix:
    """The fix for a size change with the input and dimension to mark (``mark_dynamic(x, 1)``);
    for a value PyTorch passes to a resume function (``___stack0``), which no one can mark,
    where to look instead."""
    cause = fix.change
    if cause.kind != SIZE:
        return fix
    if cause.name.startswith("___stack"):
        return replace(fix, kind=RESUME_VALUE, name=cause.name)
    return replace(fix, name=cause.name, dim=cause.dim)


def recompile_fixes(
    fixes: tuple[RecompileFix, ...],
    failures: tuple[GuardFailure, ...],
    shapes: Mapping[str, tuple[SizeFix, ...]],
    cid: str,
) -> tuple[RecompileFix, ...]:
    """The fixes of a recompile, each made specific where the records say more: the user's
    line that fixed the size or value that changed, the branch on a size, the input and dim
    to mark. Each keeps the change it answers.

    Args:
        fixes: the fixes as guard_text.causes_of reads them.
        failures: the recompile's failed guards, per earlier entry.
        shapes: compile id -> the sizes that compile fixed or guarded.
        cid: the recompile's compile id.
    """
    fixed = _fixed_by_code(failures, shapes, cid)
    branched = _branched_on(failures, shapes)
    out = []
    for fix in fixes:
        cause = fix.change
        said = fixed.get(cause.name) if cause.kind in (SIZE, VALUE) else None
        guarded = branched.get(cause.guard) if cause.kind == GUARD else None
        found = said or guarded
        out.append(replace(found, change=cause) if found is not None else _named_fix(fix))
    return tuple(out)
