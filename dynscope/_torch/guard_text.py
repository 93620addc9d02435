"""Parse Dynamo's guard trees and word failed guards plainly.

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

from dynscope._model import Guard

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

_EXPLAIN: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"tensor '(?P<n>.+?)' size mismatch at index (?P<i>\d+)\. expected (?P<a>\S+), actual (?P<b>\S+)"),
     "input {n} changed size in dim {i}: compiled for {a}, called with {b}"),
    (re.compile(r"tensor '(?P<n>.+?)' stride mismatch at index (?P<i>\d+)\. expected (?P<a>\S+), actual (?P<b>\S+)"),
     "input {n} changed strides (dim {i}: compiled for stride {a}, called with {b}): a slice such as "
     "{n}[:, -n:] or a transpose made it non-contiguous"),
    (re.compile(rf"^(?P<n>{_VALUE})\.stride\(\)\[(?P<i>\d+)\] == (?P<a>.+)$"),
     "input {n} changed strides: compiled for a contiguous {n} ({n}.stride()[{i}] == {a}), called with "
     "one that is not (a slice such as {n}[:, -n:] or a transpose)"),
    (re.compile(r"tensor '(?P<n>.+?)' dtype mismatch\. expected (?P<a>\S+), actual (?P<b>\S+)"),
     "input {n} changed dtype: compiled for {a}, called with {b}"),
    (re.compile(r"tensor '(?P<n>.+?)' device mismatch\. expected (?P<a>.+), actual (?P<b>.+)"),
     "input {n} moved device: compiled for {a}, called with {b}"),
    (re.compile(r"tensor '(?P<n>.+?)' requires_grad mismatch\. expected requires_grad=(?P<a>\d)"),
     "input {n} changed requires_grad (compiled for requires_grad={a})"),
    (re.compile(r"tensor '(?P<n>.+?)' rank mismatch\. expected (?P<a>\d+), actual (?P<b>\d+)"),
     "input {n} changed number of dims: compiled for {a}, called with {b}"),
    (re.compile(rf"^(?P<n>{_VALUE}) == (?P<a>.+)$"),
     "Python value {n} changed: the graph was specialised to {n} == {a}"),
    (re.compile(rf"^len\((?P<n>{_VALUE})\) == (?P<a>\d+)$"),
     "length of {n} changed: compiled for {a} items"),
    (re.compile(rf"___check_type_id\((?P<n>{_VALUE})"),
     "{n} changed type"),
    (re.compile(r"___check_obj_id\((?P<n>[^,]+),"),
     "{n} is a different object than when compiled"),
    (re.compile(r"global state changed|GLOBAL_STATE", re.I),
     "global torch state changed (grad mode, autocast, default dtype or thread count)"),
    (re.compile(r"grad_mode", re.I),
     "grad mode changed (torch.no_grad / enable_grad)"),
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


def explain_reason(reason: str) -> str:
    """A plain sentence for one failed guard; the guard itself when no pattern fits.

    PyTorch appends ``  # user code  # file:line in function`` to some guards; that part
    becomes "(from `code` at file:line)".
    """
    reason = clean_reason(reason)
    parts = re.split(r"\s+#\s", reason, maxsplit=1)
    expr, comment = parts[0].strip(), (parts[1] if len(parts) > 1 else "").strip()
    if _NO_ORIGIN.match(comment):
        comment = ""
    origin = ""
    if comment:
        if comment.startswith("#"):  # no code, only "# file:line in function"
            code, loc = "", comment.lstrip("# ")
        else:
            pieces = re.split(r"\s+#\s", comment, maxsplit=1)
            code, loc = pieces[0].strip(), (pieces[1] if len(pieces) > 1 else "")
        # PyTorch shortens the file name against its own install folder, which mangles a
        # file outside it ("/tmp/job/model.py" -> "mp/job/model.py", torch 2.11-2.14): keep
        # the file's name and line, as every dynscope location reads.
        loc = re.sub(r"^\S*/(?=[^/\s]+:\d+)", "", loc.split(" (", 1)[0].strip())
        if code and loc:
            origin = f" (from `{code}` at {loc})"
        elif code or loc:
            origin = f" (from `{code}`)" if code else f" (at {loc})"
    for pattern, template in _EXPLAIN:
        m = pattern.search(expr)
        if m:
            # Other inputs a value names read as the user calls them too (L['x'] -> x).
            values = {k: _name(v) if k == "n" else _LOCAL.sub(lambda f: f["name"], v.strip()) for k, v in m.groupdict().items()}
            return template.format(**values) + origin
    if comment:
        return f"a value the code depends on changed: guard `{expr}` failed{origin}"
    return expr


# -- causes: what to group recompiles by, and what to do about each ------------------------

_SIZE_FIX = (
    "sizes that change between calls: mark the dimension dynamic before the first call "
    "(torch._dynamo.mark_dynamic(x, dim)) or compile with torch.compile(..., dynamic=True)"
)
_GRAD_FIX = (
    "call with a consistent requires_grad: the same for every call (detach() inputs for "
    "inference), or compile the training and the inference function separately"
)
_SCALAR_FIX = (
    "avoid Python scalars that change between calls: pass the value as a tensor "
    "(torch.tensor(value)) or mark it dynamic (torch.compile(..., dynamic=True))"
)
#: Measured on torch 2.13 (tests/test_advice_real.py): a contiguous copy removes the
#: recompile; x.contiguous() returns a batch-of-1 slice as it is (PyTorch calls a tensor
#: contiguous whatever the stride of a size-1 dim), and neither mark_dynamic nor
#: dynamic=True removes a stride recompile.
_STRIDE_FIX = (
    "pass a contiguous copy: {n}.contiguous() before the call, or, where a dim has size 1 (a "
    "batch of one: PyTorch calls {n}[:, -n:] contiguous then and keeps its strides), "
    "{n}.clone(memory_format=torch.contiguous_format)"
)
_STATE_FIX = (
    "call under the same grad mode and autocast every time (enter torch.no_grad() / "
    "torch.autocast outside the compiled function consistently), or compile one function per state"
)

_CAUSES: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r"tensor '(?P<n>.+?)' size mismatch at index (?P<i>\d+)\."), "size of input {n} changed (dim {i})", _SIZE_FIX),
    (re.compile(r"tensor '(?P<n>.+?)' rank mismatch\."), "number of dims of input {n} changed", _SIZE_FIX),
    (re.compile(r"tensor '(?P<n>.+?)' stride mismatch at index (?P<i>\d+)\."),
     "strides of input {n} changed (dim {i})", _STRIDE_FIX),
    (_STRIDE_GUARD, "strides of input {n} changed (dim {i})", _STRIDE_FIX),
    (re.compile(r"tensor '(?P<n>.+?)' dtype mismatch\."), "dtype of input {n} changed", "cast the input to one dtype before the call"),
    (re.compile(r"tensor '(?P<n>.+?)' device mismatch\."), "device of input {n} changed", "keep the input on one device"),
    (re.compile(r"tensor '(?P<n>.+?)' requires_grad mismatch\."), "requires_grad changed on input {n}", _GRAD_FIX),
    (re.compile(rf"^(?P<n>{_VALUE}) == "), "Python value {n} changed", _SCALAR_FIX),
    # **kwargs: the call passed another set of keyword arguments (not a list to stack).
    (re.compile(r"^(?:len\((?:L\['kwargs'\]|kwargs)\) == |not (?:L\['kwargs'\]|kwargs)\s*$)"),
     "the keyword arguments passed changed",
     "pass the same keyword arguments every call (the optional ones too, as None when unused)"),
    (re.compile(rf"^len\((?P<n>{_VALUE})\) == "), "length of {n} changed",
     "keep the number of items the same between calls, or pass one stacked tensor"),
    (re.compile(rf"___check_type_id\((?P<n>{_VALUE})"), "type of {n} changed", "pass a value of the same type each call"),
    (re.compile(r"___check_obj_id\((?P<n>[^,]+),"), "{n} is a different object",
     "reuse the same object (module, function, tensor) between calls"),
)

#: "GLOBAL_STATE changed: grad_mode autocast(cpu)_enabled" (torch 2.3 .. 2.14): the C++
#: guard names each state that differs, without values.
_GLOBAL = re.compile(r"GLOBAL_STATE changed:\s*(?P<states>.*)$")
_STATE_WORDS = {
    "grad_mode": "grad mode",
    "torch_function": "torch function mode",
    "deterministic_algorithms": "deterministic algorithms",
    "num_threads": "thread count",
    "default_dtype": "default dtype",
    "allow_tf32": "TF32",
    "autocast_cache_enabled": "autocast cache",
}


def global_states(reason: str) -> tuple[str, ...]:
    """The states a GLOBAL_STATE guard names ("grad_mode", "autocast(cpu)_enabled"); ()
    for other guards."""
    m = _GLOBAL.search(reason)
    return tuple(m["states"].split()) if m else ()


def _state_word(state: str) -> str:
    m = re.fullmatch(r"autocast\((?P<d>[^)]+)\)_(?P<what>enabled|dtype)", state)
    if m:
        return f"autocast on {m['d']}" + (" dtype" if m["what"] == "dtype" else "")
    return _STATE_WORDS.get(state, state)


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


def _said(state: str, value: object) -> str:
    if state == "grad_mode" and isinstance(value, bool):
        return "enabled" if value else "disabled (no_grad)"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def states_differ(reason: str, before: dict[str, object], after: dict[str, object]) -> bool:
    """True when every state a GLOBAL_STATE guard names differs between the two states:
    ``before`` is the compile the guard failed against."""
    states = global_states(reason)
    return bool(states) and all(
        _value_of(st, before) is not None and _value_of(st, before) != _value_of(st, after) for st in states
    )


def explain_global_state(reason: str, before: dict[str, object], after: dict[str, object]) -> str:
    """"global state changed: grad mode enabled -> disabled (no_grad); autocast on cpu off ->
    on" for a GLOBAL_STATE failure, given the state of the compile it failed against
    (``before``) and of the new compile (``after``); "" for other guards. A value neither
    state holds is left out ("grad mode changed")."""
    states = global_states(reason)
    if not states:
        return ""
    parts = []
    for state in states:
        a, b = _value_of(state, before), _value_of(state, after)
        word = _state_word(state)
        parts.append(f"{word} {_said(state, a)} -> {_said(state, b)}" if a is not None and b is not None and a != b
                     else f"{word} changed")
    return "global state changed: " + "; ".join(parts)


def causes_of(reason: str) -> tuple[tuple[str, str], ...]:
    """(cause, fix) for one failed guard: what recompiles are grouped by ("requires_grad
    changed on input x", without the values that differ from one recompile to the next)
    and what to do about it. A GLOBAL_STATE guard gives one cause per state it names."""
    states = global_states(reason)
    if states:
        return tuple((f"{_state_word(s)} changed", _STATE_FIX) for s in states)
    expr = re.split(r"\s+#\s", reason, maxsplit=1)[0].strip()
    for pattern, template, fix in _CAUSES:
        m = pattern.search(expr)
        if m:
            values = {k: _name(v) if k == "n" else v.strip() for k, v in m.groupdict().items()}
            return ((template.format(**values), fix.format(**values)),)
    return ((f"guard `{expr}` failed", "see the guard: the code depends on this value"),)


def library_fix(library: str, function: str, fix: str) -> str:
    """The fix of a recompile inside a library's own code: the library calls its function
    differently between calls (Hugging Face's ``generate``: the prompt first, then one token
    a step), which the user's code does not cause; what the user can do, if anything."""
    said = (
        f"{library}'s own recompile: {library}'s code called {function or 'this function'} differently "
        "this time (generate's first step takes the whole prompt, later steps one token; a decorator "
        "makes a new wrapper), which your code does not cause; expected, nothing to change unless it "
        "recompiles on every call"
    )
    return f"{said} (then: {fix})" if fix else said
