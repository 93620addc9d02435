"""Parse Dynamo's guard trees and read failed guards into causes (``Cause``: kind, name,
values; their words are dynscope._render.causes').

Input: the ``dynamo_cpp_guards_str`` text (one guard per line under accessor lines) and
the ``recompile_reasons`` texts. Pure functions, no torch import.

Forms read: the C++ guard tree printout (``TREE_GUARD_MANAGER`` / ``+- KIND: ...`` lines,
torch 2.3 .. 2.14) and recompile reasons "F/C: <failed guard>", as a JSON list in the
``recompile_reasons`` artifact (2.5 .. 2.14) or as plain text in ``compilation_metrics``
(older). Guard sources read ``L['x']``, ``L['self'].fc`` and, through ``**kwargs``,
``L['kwargs']['x']`` / ``kwargs['x']``. Recorded on 2.11, 2.13, 2.14 (tests/traces).
"""

from __future__ import annotations

import json
import re

from dynscope._model import Cause, Guard, RecompileFix, StateChange
from dynscope._model import causes as k

_SOURCE_EXPR = re.compile(r"((?:L|G)\[[^\]]+\](?:\[[^\]]+\]|\.[A-Za-z_]\w*)*)")
_MANAGER_SOURCE = re.compile(r"source=([^,]+(?:\[[^\]]*\])*)")
_KIND_LINE = re.compile(r"^(?P<kind>[A-Z][A-Z0-9_]*): (?P<rest>.*)$")
#: A line of the guard tree: indentation of "|" and " ", then "+- " and the entry.
_TREE_LINE = re.compile(r"^(?P<indent>[| ]*)\+- (?P<body>.*)$", re.M)


def parse_guards(text: str, compile_id: str) -> tuple[Guard, ...]:
    """Guards of one compiled frame from its guard-tree text.

    Accessor lines (``GuardManager: source=...``) give each guard below them its source
    when the guard text names none; PyTorch's trailing ``# code  # file:line`` comment
    becomes ``user_line``.
    """
    guards: list[Guard] = []
    manager_sources: dict[int, str] = {}
    # One pass over the lines that hold a tree entry ("| | +- ..."); a T5-sized frame has
    # a few thousand guards, so the work per line is kept to a few string operations.
    for entry in _TREE_LINE.finditer(text):
        depth = len(entry["indent"]) // 2
        body = entry["body"].strip()
        colon = body.find(":")
        if "GuardManager" in (body if colon < 0 else body[:colon]):
            m = _MANAGER_SOURCE.search(body)
            manager_sources[depth] = m.group(1).strip() if m else ""
            continue
        m = _KIND_LINE.match(body)
        if m is None:
            continue
        detail, _, comment = m["rest"].partition("  # ")
        detail = detail.strip()
        found = _SOURCE_EXPR.search(detail)
        source = found.group(1) if found else _nearest(manager_sources, depth)
        user_line = comment.split("  # ", 1)[0].strip() if comment else ""
        guards.append(Guard(compile_id, m["kind"], source, detail, user_line))
    return tuple(guards)


def _nearest(sources: dict[int, str], depth: int) -> str:
    for d in range(depth - 1, -1, -1):
        if sources.get(d):
            return sources[d]
    return ""


_PREFIX = re.compile(r"^\d+/\d+:\s*")


def parse_recompile_reasons(payload: str) -> tuple[str, ...]:
    """Failed-guard texts from a ``recompile_reasons`` artifact.

    The payload is a JSON list (several failed cache entries) or plain text (one). Each
    reason starts "F/C: <guard>" and may go on with "User stack trace:" lines; the guard
    line is kept, without its "F/C: " prefix, once per distinct guard.
    """
    try:
        data = json.loads(payload)
    except ValueError:
        data = None
    if isinstance(data, list):
        blocks = [str(item) for item in data]
    else:
        blocks = []
        for line in payload.splitlines():
            if _PREFIX.match(line) or not blocks:
                blocks.append(line)
            else:
                blocks[-1] += "\n" + line
    out: list[str] = []
    for block in blocks:
        first = block.strip().splitlines()[0] if block.strip() else ""
        if not _PREFIX.match(first):
            continue  # not a "F/C: <guard>" line: a form no rule reads (counted as unparsed)
        text = _PREFIX.sub("", first).strip()
        if text and text not in out:
            out.append(text)
    return tuple(out)


def is_backend_mismatch(reason: str) -> bool:
    """True when a recompile happened only because a different backend compiled the code."""
    return "BACKEND_MATCH" in reason


# Keyword arguments reach the frame through ``**kwargs``: PyTorch names them
# ``kwargs['x']`` (``L['kwargs']['x']`` in guard trees), a quote inside the quoted name.
_KWARG = re.compile(r"(?:L\['kwargs'\]|kwargs)\['(?P<key>[^']+)'\]")
_LOCAL = re.compile(r"L\['(?P<name>[^']+)'\]")
# A Python value a guard reads: a local (``L['n']``, ``n``), then items and attributes.
_VALUE = r"(?:L\['[^']+'\]|[A-Za-z_]\w*)(?:\['[^']*'\]|\[\d+\]|\.[A-Za-z_]\w*)*"


# A wrapper's positional argument: ``L['args'][0]`` in guard trees and older texts,
# ``args[0]`` in newer ones.
_WRAPPER_ARG = re.compile(r"L\['args'\]\[(?P<i>\d+)\]|(?<![\w.\]])args\[(?P<j>\d+)\]")


def with_argument_names(text: str, names: tuple[str, ...]) -> str:
    """``text`` (a guard, a failed guard, a size source) of a decorator's pass-through wrapper
    frame (``def inner(*args, **kwargs)``) with its ``args[i]`` named as the wrapped function
    names them: ``L['args'][0]`` -> ``L['x']`` and ``args[0]`` -> ``x`` for ``names[0] == "x"``.
    Positions past ``names`` are kept as written."""
    if not names or "args" not in text:
        return text

    def named(m: re.Match[str]) -> str:
        i = int(m["i"] if m["i"] is not None else m["j"])
        if i >= len(names):
            return m[0]
        return f"L['{names[i]}']" if m["i"] is not None else names[i]

    return _WRAPPER_ARG.sub(named, text)


def _name(source: str) -> str:
    """The input as the user calls it: ``L['x']`` -> x, ``kwargs['x']`` -> x."""
    source = source.strip()
    m = _KWARG.fullmatch(source)
    if m:
        return m["key"]
    return _LOCAL.sub(lambda found: found["name"], source)


#: A guard on an input's stride (dynamic shapes: the strides are written in its sizes, as
#: "idx.stride()[0] == idx.size()[1]": the tensor was contiguous when compiled).
_STRIDE_GUARD = re.compile(rf"(?P<n>{_VALUE})\.stride\(\)\[(?P<i>\d+)\]")
#: PyTorch's own bookkeeping note on some shape guards ("# (unknown source idx.stride()[0],
#: please file a bug)", symbolic_shapes.produce_guards_verbose, torch 2.13): not the user's line.
_NO_ORIGIN = re.compile(r"^\((?:unknown source|unknown var) .*please file a bug\)$")

#: Failed guards PyTorch words, each read into a cause of one kind (the words:
#: dynscope._render.causes). First match wins.
_EXPLAIN: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"tensor '(?P<n>.+?)' size mismatch at index (?P<i>\d+)\. expected (?P<a>\S+), actual (?P<b>\S+)"), k.SIZE),
    (re.compile(r"tensor '(?P<n>.+?)' stride mismatch at index (?P<i>\d+)\. expected (?P<a>\S+), actual (?P<b>\S+)"), k.STRIDE),
    (re.compile(rf"^(?P<n>{_VALUE})\.stride\(\)\[(?P<i>\d+)\] == (?P<a>.+)$"), k.CONTIGUOUS),
    (re.compile(r"tensor '(?P<n>.+?)' dtype mismatch\. expected (?P<a>\S+), actual (?P<b>\S+)"), k.DTYPE),
    (re.compile(r"tensor '(?P<n>.+?)' device mismatch\. expected (?P<a>.+), actual (?P<b>.+)"), k.DEVICE),
    (re.compile(r"tensor '(?P<n>.+?)' requires_grad mismatch\. expected requires_grad=(?P<a>\d)"), k.REQUIRES_GRAD),
    (re.compile(r"tensor '(?P<n>.+?)' rank mismatch\. expected (?P<a>\d+), actual (?P<b>\d+)"), k.RANK),
    (re.compile(rf"^(?P<n>{_VALUE}) == (?P<a>.+)$"), k.VALUE),
    (re.compile(rf"^len\((?P<n>{_VALUE})\) == (?P<a>\d+)$"), k.LENGTH),
    (re.compile(rf"___check_type_id\((?P<n>{_VALUE})"), k.TYPE),
    (re.compile(r"___check_obj_id\((?P<n>[^,]+),"), k.OBJECT),
    (re.compile(r"global state changed|GLOBAL_STATE", re.I), k.GLOBAL_STATE),
    (re.compile(r"grad_mode", re.I), k.GRAD_MODE),
)


#: PyTorch's note on a shape guard whose first user line is not its cause ("(user code shown
#: is first use of this value--the guard itself is not due user code but due to 0/1
#: specialization in the framework; ...)) and <the line that caused it>", torch 2.13).
_FIRST_USE = re.compile(r"#\s.*?\(user code shown is first use of this value--.*?\)\) and ", re.S)
#: Where in torch the guard was made, after the user's location: "(_dynamo/variables/tensor.py:2606 in evaluate_expr)".
_TORCH_TAIL = re.compile(r"\s*\((?:_dynamo|_inductor|_functorch|fx|_subclasses|_refs|_prims)/[^()]*\)\s*$")


def clean_reason(reason: str) -> str:
    """A failed guard with PyTorch's notes about itself dropped: of a "first use ... and"
    note, the line that caused the guard is kept; a torch-internal location is dropped."""
    reason = _FIRST_USE.sub("# ", reason, count=1)
    return _TORCH_TAIL.sub("", reason)


def _origin(comment: str) -> tuple[str, str]:
    """(code, location) of PyTorch's ``# user code  # file:line in function`` note on a guard."""
    if comment.startswith("#"):  # no code, only "# file:line in function"
        code, loc = "", comment.lstrip("# ")
    else:
        pieces = re.split(r"\s+#\s", comment, maxsplit=1)
        code, loc = pieces[0].strip(), (pieces[1] if len(pieces) > 1 else "")
    # PyTorch shortens the file name against its own install folder, which mangles a
    # file outside it ("/tmp/job/model.py" -> "mp/job/model.py", torch 2.11-2.14): keep
    # the file's name and line, as every dynscope location reads.
    return code, re.sub(r"^\S*/(?=[^/\s]+:\d+)", "", loc.split(" (", 1)[0].strip())


def reason_cause(reason: str) -> Cause:
    """The cause of one failed guard, with the values PyTorch's words give; kind GUARD
    (the guard kept) when no rule reads it.

    PyTorch appends ``  # user code  # file:line in function`` to some guards; that part
    becomes the cause's ``code`` and ``at``.
    """
    reason = clean_reason(reason)
    parts = re.split(r"\s+#\s", reason, maxsplit=1)
    expr, comment = parts[0].strip(), (parts[1] if len(parts) > 1 else "").strip()
    code, at = _origin(comment) if comment and not _NO_ORIGIN.match(comment) else ("", "")
    for pattern, kind in _EXPLAIN:
        m = pattern.search(expr)
        if m:
            # Other inputs a value names read as the user calls them too (L['x'] -> x).
            values = {g: _name(v) if g == "n" else _LOCAL.sub(lambda f: f["name"], v.strip()) for g, v in m.groupdict().items()}
            return Cause(kind, name=values.get("n", ""), dim=values.get("i", ""), then=values.get("a", ""),
                         now=values.get("b", ""), code=code, at=at)
    return Cause(k.GUARD, guard=expr, code=code, at=at)


# -- causes: what to group recompiles by, and what to do about each ------------------------

#: Failed guards read into what recompiles are grouped by (a cause without values) and the
#: kind of fix for it (its words: dynscope._render.causes.fix_words). First match wins.
_CAUSES: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r"tensor '(?P<n>.+?)' size mismatch at index (?P<i>\d+)\."), k.SIZE, k.MARK_DYNAMIC),
    (re.compile(r"tensor '(?P<n>.+?)' rank mismatch\."), k.RANK, k.MARK_DYNAMIC),
    (re.compile(r"tensor '(?P<n>.+?)' stride mismatch at index (?P<i>\d+)\."), k.STRIDE, k.CONTIGUOUS_COPY),
    (_STRIDE_GUARD, k.STRIDE, k.CONTIGUOUS_COPY),
    (re.compile(r"tensor '(?P<n>.+?)' dtype mismatch\."), k.DTYPE, k.ONE_DTYPE),
    (re.compile(r"tensor '(?P<n>.+?)' device mismatch\."), k.DEVICE, k.ONE_DEVICE),
    (re.compile(r"tensor '(?P<n>.+?)' requires_grad mismatch\."), k.REQUIRES_GRAD, k.SAME_REQUIRES_GRAD),
    (re.compile(rf"^(?P<n>{_VALUE}) == "), k.VALUE, k.SCALAR_AS_TENSOR),
    # **kwargs: the call passed another set of keyword arguments (not a list to stack).
    (re.compile(r"^(?:len\((?:L\['kwargs'\]|kwargs)\) == |not (?:L\['kwargs'\]|kwargs)\s*$)"), k.KWARGS,
     k.SAME_KWARGS),
    (re.compile(rf"^len\((?P<n>{_VALUE})\) == "), k.LENGTH, k.SAME_LENGTH),
    (re.compile(rf"___check_type_id\((?P<n>{_VALUE})"), k.TYPE, k.SAME_TYPE),
    (re.compile(r"___check_obj_id\((?P<n>[^,]+),"), k.OBJECT, k.SAME_OBJECT),
)

#: "GLOBAL_STATE changed: grad_mode autocast(cpu)_enabled" (torch 2.3 .. 2.14): the C++
#: guard names each state that differs, without values.
_GLOBAL = re.compile(r"GLOBAL_STATE changed:\s*(?P<states>.*)$")

def global_states(reason: str) -> tuple[str, ...]:
    """The states a GLOBAL_STATE guard names ("grad_mode", "autocast(cpu)_enabled"); ()
    for other guards."""
    m = _GLOBAL.search(reason)
    return tuple(m["states"].split()) if m else ()


def state_values(detail: str) -> dict[str, object]:
    """The global state a compile was made under, from its GLOBAL_STATE guard text
    ("___check_global_state() against {json}", torch 2.5 .. 2.14); {} when not readable."""
    _, _, raw = detail.partition(" against ")
    try:
        data = json.loads(raw)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _value_of(state: str, values: dict[str, object]) -> object:
    if state.startswith("autocast(") and state.endswith(")_enabled"):
        auto = values.get("autocast_state")
        enabled = auto.get("enabled") if isinstance(auto, dict) else None
        # One flag per device type; the guard names the device, so any flag on = "on".
        return any(enabled) if isinstance(enabled, list) else None
    return values.get(state)


def states_differ(reason: str, before: dict[str, object], after: dict[str, object]) -> bool:
    """True when every state a GLOBAL_STATE guard names differs between the two states:
    ``before`` is the compile the guard failed against."""
    states = global_states(reason)
    return bool(states) and all(
        _value_of(st, before) is not None and _value_of(st, before) != _value_of(st, after) for st in states
    )


def global_state_cause(reason: str, before: dict[str, object], after: dict[str, object]) -> Cause | None:
    """The cause of a GLOBAL_STATE failure, with each state it names from what to what,
    given the state of the compile it failed against (``before``) and of the new compile
    (``after``); None for other guards. A value neither state holds is left "" (said
    "grad mode changed")."""
    states = global_states(reason)
    if not states:
        return None
    changes = []
    for state in states:
        a, b = _value_of(state, before), _value_of(state, after)
        known = a is not None and b is not None and a != b
        changes.append(StateChange(state, json.dumps(a) if known else "", json.dumps(b) if known else ""))
    return Cause(k.GLOBAL_STATE, states=tuple(changes))


def causes_of(reason: str) -> tuple[RecompileFix, ...]:
    """The fix for one failed guard, each with the change it answers (``change``: what
    recompiles are grouped by, requires_grad of input x, without the values that differ from
    one recompile to the next). A GLOBAL_STATE guard gives one per state it names."""
    states = global_states(reason)
    if states:
        return tuple(RecompileFix(k.SAME_STATE, Cause(k.STATE, name=s)) for s in states)
    expr = re.split(r"\s+#\s", reason, maxsplit=1)[0].strip()
    for pattern, kind, fix in _CAUSES:
        m = pattern.search(expr)
        if m:
            values = {g: _name(v) if g == "n" else v.strip() for g, v in m.groupdict().items()}
            name = values.get("n", "")
            # Only the stride fix names the input; a size fix is named where its records are
            # read (shape_text.recompile_fixes).
            return (RecompileFix(fix, Cause(kind, name=name, dim=values.get("i", "")),
                                 name=name if fix == k.CONTIGUOUS_COPY else ""),)
    return (RecompileFix(k.SEE_GUARD, Cause(k.GUARD, guard=expr)),)
