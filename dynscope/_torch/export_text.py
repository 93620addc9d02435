"""What ``torch.export`` needs: calling ``export`` and ``draft_export``, reading their
exceptions, draft_export's report, the suggested ``dynamic_shapes``, and the exported program.

Written against torch 2.13 (checked there; see docs/export.md):

- ``torch.export.export`` raises, non-strict: ``GuardOnDataDependentSymNode`` (a
  ``RuntimeError`` from ``torch.fx.experimental.symbolic_shapes``) for a data-dependent
  branch, with the user's frame in its traceback; strict: ``torch._dynamo.exc.UserError``
  (``error_type`` ANTI_PATTERN) for the same, with the user's frames in ``real_stack``.
  A dim marked dynamic that the code fixes: ``UserError`` CONSTRAINT_VIOLATION whose text
  ends "Suggested fixes:" and lines ``batch = 4`` / ``dx = Dim('dx', max=6)``. A construct
  Dynamo cannot trace (strict): ``torch._dynamo.exc.Unsupported`` with ``gb_type`` and
  ``real_stack``. A custom op without a fake kernel: a ``RuntimeError`` "There was no fake
  impl registered" (non-strict) or ``TorchRuntimeError`` carrying it (strict). Bad
  ``dynamic_shapes``: ``UserError`` INVALID_INPUT.
- ``torch.export.draft_export`` returns a program whose ``_report`` (a ``DraftExportReport``)
  holds ``failures``: ``FailureReport`` with ``failure_type`` (``FailureType``:
  MISSING_FAKE_KERNEL, DATA_DEPENDENT_ERROR, GUARD_ADDED, MISMATCHED_FAKE_KERNEL) and
  ``data`` (``expr``, ``result``, ``user_stack``: [{"filename": <string-table number>,
  "line", "name", "loc"}], ``symbol_to_sources``, ``op``, ``reason``). File numbers index
  PyTorch's trace string table (only strings first logged during the call are in
  ``_report.str_to_filename``; the rest are in ``INTERN_TABLE``). It removes every
  ``LazyTraceHandler`` from the ``torch.__trace`` logger and does not put them back:
  :func:`run_draft_export` does.
"""

from __future__ import annotations

import inspect
import logging
import os
import re
import shutil
import tempfile
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from dynscope._model import StackFrame
from dynscope._torch.logger import interned_strings
from dynscope._torch.registry import is_user_file

__all__ = [
    "DraftFinding",
    "ExportFailure",
    "draft_findings",
    "exported_graph_data",
    "exported_inputs",
    "flat_input_names",
    "has_draft_export",
    "has_export",
    "range_words",
    "read_failure",
    "refine_shapes",
    "run_draft_export",
    "run_export",
    "shapes_source",
    "suggested_fixes",
]


# -- calling export --------------------------------------------------------------------


def has_export() -> bool:
    """True when this torch has ``torch.export.export`` (2.1+)."""
    return hasattr(torch, "export") and hasattr(torch.export, "export")


def has_draft_export() -> bool:
    """True when this torch has ``torch.export.draft_export`` (2.7+)."""
    return has_export() and hasattr(torch.export, "draft_export")


def run_export(
    module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], dynamic_shapes: Any, strict: bool
) -> Any:
    """``torch.export.export``; its exceptions propagate."""
    return torch.export.export(module, args, kwargs, dynamic_shapes=dynamic_shapes, strict=strict)


#: The variable draft_export reads for its trace folder (torch._logging._internal.DTRACE_ENV_VAR, 2.7 .. 2.13).
_DTRACE_ENV = "TORCH_DTRACE"


def run_draft_export(
    module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], dynamic_shapes: Any, strict: bool
) -> Any:
    """``torch.export.draft_export``, with the ``torch.__trace`` logger's handlers put back
    afterwards (draft_export removes the lazy TORCH_TRACE handler and never re-adds it) and
    its own warning banner kept out of the user's log (dynscope reports what it found)."""
    trace_log = logging.getLogger("torch.__trace")
    handlers = list(trace_log.handlers)
    draft_log = logging.getLogger("torch.export._draft_export")
    level = draft_log.level
    draft_log.setLevel(logging.ERROR)
    # draft_export writes a trace file per call under $TMPDIR/export_<user>/ unless
    # TORCH_DTRACE names a folder: dynscope's calls write to a folder of their own, removed
    # after (a folder the user chose is left to them).
    own_dir = None if os.environ.get(_DTRACE_ENV) else tempfile.mkdtemp(prefix="dynscope-draft-")
    if own_dir is not None:
        os.environ[_DTRACE_ENV] = own_dir
    try:
        return torch.export.draft_export(module, args, kwargs, dynamic_shapes=dynamic_shapes, strict=strict)
    finally:
        if own_dir is not None:
            os.environ.pop(_DTRACE_ENV, None)
            shutil.rmtree(own_dir, ignore_errors=True)
        draft_log.setLevel(level)
        for handler in trace_log.handlers:
            if handler not in handlers:  # pragma: no cover - draft_export removes its own
                trace_log.removeHandler(handler)
        for handler in handlers:
            if handler not in trace_log.handlers:
                trace_log.addHandler(handler)


# -- user frames ---------------------------------------------------------------------------


def _code_line(frame: Any) -> str:
    return (getattr(frame, "line", "") or "").strip()


def user_frames_of(frames: Any) -> tuple[StackFrame, ...]:
    """The user's frames (outside torch, dynscope and the stdlib) of a ``StackSummary`` or
    list of ``FrameSummary``, outermost first."""
    out = []
    for f in frames or ():
        filename = getattr(f, "filename", "")
        if is_user_file(filename):
            out.append(StackFrame(filename, int(getattr(f, "lineno", 0) or 0), str(getattr(f, "name", "")), _code_line(f)))
    return tuple(out)


def _draft_stack(stack: Any, names: Mapping[int, str]) -> tuple[StackFrame, ...]:
    """draft_export's ``user_stack`` ([{"filename": n, "line", "name", "loc"}]) as the user's frames."""
    out = []
    for entry in stack or ():
        if not isinstance(entry, Mapping):
            continue
        raw = entry.get("filename")
        filename = names.get(raw, "") if isinstance(raw, int) else str(raw or "")
        if is_user_file(filename):
            out.append(StackFrame(filename, int(entry.get("line") or 0), str(entry.get("name") or ""), str(entry.get("loc") or "").strip()))
    return tuple(out)


_FILE_LINE = re.compile(r'^\s*File "(?P<file>.+)", line (?P<line>\d+), in (?P<func>.+?)\s*$')


def _frames_in_text(text: str) -> tuple[StackFrame, ...]:
    """``File "...", line N, in f`` entries of an error text (Dynamo's "User stack:" and
    "from user code:" sections), the user's only."""
    lines = text.splitlines()
    out: list[StackFrame] = []
    for i, line in enumerate(lines):
        m = _FILE_LINE.match(line)
        if m and is_user_file(m["file"]):
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            frame = StackFrame(m["file"], int(m["line"]), m["func"], "" if code.startswith("File ") else code)
            if frame not in out:
                out.append(frame)
    return tuple(out)


# -- reading export's exceptions -----------------------------------------------------------------


@dataclass(frozen=True)
class ExportFailure:
    """One exception of ``torch.export.export``, read."""

    kind: str  # one of dynscope._model.export.BLOCKER_KINDS
    error_type: str  # "GuardOnDataDependentSymNode", "UserError.CONSTRAINT_VIOLATION", "Unsupported"
    message: str  # PyTorch's words, whole (its hint about draft_export left out)
    frames: tuple[StackFrame, ...] = ()  # the user's frames, outermost first
    expr: str = ""  # the data-dependent expression ("zuf0 > 0.0"), "" when none
    op: str = ""  # the operator without a fake kernel ("dsprobe::numpy_sin"), "" when none
    gb_type: str = ""  # Dynamo's graph-break type (Unsupported)
    hints: tuple[str, ...] = ()  # Dynamo's hints
    fixes: tuple[str, ...] = field(default=())  # "Suggested fixes:" lines
    invalid_input: bool = False  # UserError INVALID_INPUT: the arguments (dynamic_shapes...) are wrong

    @property
    def first_line(self) -> str:
        """The message's first non-blank line."""
        return next((ln.strip() for ln in self.message.splitlines() if ln.strip()), "")


#: The paragraph torch.export adds to every error (torch 2.7+): not the user's problem.
_DRAFT_HINT = re.compile(r"\n*The error above occurred when calling torch\.export\.export\..*", re.S)
_EXPR = re.compile(r"Could not (?:guard on|extract specialized integer from) data-dependent expression (?P<expr>.+?) \(unhinted")
_NO_FAKE = re.compile(r"no fake impl registered for <CustomOpDef\((?P<op>[^)]+)\)>|Could not run '(?P<aten>[\w:.]+)' with arguments from the 'Meta' backend")


def _error_type(err: BaseException) -> str:
    name = type(err).__name__
    kind = getattr(err, "error_type", None)
    return f"{name}.{kind.name}" if kind is not None and hasattr(kind, "name") else name


def is_export_error(err: BaseException) -> bool:
    """Whether ``err`` is what torch.export raises when it cannot export (not a bug in the
    test around it): its user errors, constraint violations, data-dependent guards, Dynamo's
    Unsupported, or an error PyTorch tagged with its export hint."""
    from torch._dynamo.exc import Unsupported, UserError
    from torch.fx.experimental.symbolic_shapes import ConstraintViolationError, GuardOnDataDependentSymNode

    if isinstance(err, (UserError, ConstraintViolationError, GuardOnDataDependentSymNode, Unsupported)):
        return True
    return "The error above occurred when calling torch.export.export" in str(err)


def read_failure(err: BaseException) -> ExportFailure:
    """What one exception of ``torch.export.export`` says: its kind, PyTorch's words, the
    user's frames, and what it names (expression, operator, suggested fixes)."""
    from torch._dynamo.exc import Unsupported, UserError, UserErrorType
    from torch.fx.experimental.symbolic_shapes import ConstraintViolationError, GuardOnDataDependentSymNode

    message = _DRAFT_HINT.sub("", str(err)).strip()
    # Strict export: Dynamo's stack of the frames it traced. Non-strict: Python ran the user's
    # code, so its frames are in the traceback (innermost last).
    frames = user_frames_of(getattr(err, "real_stack", None)) or _frames_in_text(message)
    if not frames and err.__traceback__ is not None:
        frames = user_frames_of(traceback.extract_tb(err.__traceback__))
    expr_m = _EXPR.search(message)
    fake_m = _NO_FAKE.search(message)
    kind = "other"
    invalid = False
    if isinstance(err, UserError) and err.error_type == UserErrorType.CONSTRAINT_VIOLATION:
        kind = "constraint violation"
    elif isinstance(err, ConstraintViolationError):
        kind = "constraint violation"
    elif isinstance(err, UserError) and err.error_type == UserErrorType.INVALID_INPUT:
        invalid = True
    elif fake_m is not None:
        kind = "missing fake kernel"
    elif isinstance(err, GuardOnDataDependentSymNode) or expr_m is not None or (
        isinstance(err, UserError) and err.error_type == UserErrorType.DYNAMIC_CONTROL_FLOW
    ):
        kind = "data-dependent"
    elif isinstance(err, Unsupported):
        gb = (getattr(err, "gb_type", "") or "").lower()
        kind = "data-dependent" if "data-dependent" in gb or "data dependent" in gb else "graph break"
    elif "Cannot access data pointer of Tensor" in message or "is not supported" in message:
        kind = "unsupported operator"
    gb_type = (getattr(err, "gb_type", "") or "") if isinstance(err, Unsupported) else ""
    hints = tuple(ln.strip()[len("Hint:"):].strip() for ln in message.splitlines() if ln.strip().startswith("Hint:"))
    op = ""
    if fake_m is not None:
        op = fake_m["op"] or fake_m["aten"] or ""
    return ExportFailure(
        kind=kind,
        error_type=_error_type(err),
        message=message,
        frames=frames,
        expr=expr_m["expr"] if expr_m else "",
        op=op,
        gb_type=gb_type,
        hints=hints,
        fixes=suggested_fixes(message),
        invalid_input=invalid,
    )


# -- draft_export's report -------------------------------------------------------------------


@dataclass(frozen=True)
class DraftFinding:
    """One failure of draft_export's report."""

    failure_type: str  # "DATA_DEPENDENT_ERROR", "GUARD_ADDED", "MISSING_FAKE_KERNEL", "MISMATCHED_FAKE_KERNEL"
    text: str  # PyTorch's words (FailureReport.print)
    frames: tuple[StackFrame, ...] = ()  # the user's frames, outermost first
    expr: str = ""  # the expression or guard ("zuf0 > 0.0", "Eq(s77, 4)")
    result: str = ""  # what draft_export assumed it to be ("True")
    sources: tuple[tuple[str, str], ...] = ()  # (symbol, input size) it names: ("s77", "x.size(0)")
    op: str = ""  # the custom operator concerned
    reason: str = ""  # a mismatched fake kernel's reason
    occurrences: int = 1


def draft_findings(program: Any, flat_names: Sequence[str] = ()) -> tuple[DraftFinding, ...] | None:
    """draft_export's failures of an exported program, or None when it carries no report
    (``ExportedProgram._report``, torch 2.7 .. 2.13). ``flat_names``: see :func:`user_size`."""
    report = getattr(program, "_report", None)
    failures = getattr(report, "failures", None)
    if failures is None:
        return None
    names = interned_strings()
    names.update(getattr(report, "str_to_filename", None) or {})
    out = []
    for failure in failures:
        if getattr(failure, "xfail", False):
            continue
        data = getattr(failure, "data", None) or {}
        ftype = str(getattr(failure, "failure_type", "other"))
        try:
            text = failure.print(names).strip()
        except Exception:  # noqa: BLE001 - a report format we do not know: keep the raw data
            text = repr(failure)
        sources = tuple(
            (str(k), user_size(str(v), flat_names)) for k, v in (data.get("symbol_to_sources") or {}).items()
        )
        out.append(
            DraftFinding(
                failure_type=ftype,
                text=text,
                frames=_draft_stack(data.get("user_stack"), names),
                expr=str(data.get("expr") or ""),
                result=str(data.get("result") or ""),
                sources=sources,
                op=str(data.get("op") or ""),
                reason=str(data.get("reason") or ""),
                occurrences=int(data.get("occurrences") or 1),
            )
        )
    return tuple(out)


_SIZE_SOURCE = re.compile(r"^L\['(?P<name>[^']+)'\](?P<rest>.*?)\.size\(\)\[(?P<dim>\d+)\]$")


def user_size(source: str, flat_names: Sequence[str] = ()) -> str:
    """A guard source as users write it: ``L['x'].size()[0]`` -> ``x.size(0)``; strict
    export's flat arguments (``L['flat_args'][0].size()[0]``) by ``flat_names`` (the
    inputs' names in flattened order); other sources unchanged."""
    m = _SIZE_SOURCE.match(source)
    if m is None:
        return source
    name, rest = m["name"], m["rest"]
    if name == "flat_args":
        index = re.match(r"^\[(\d+)\]$", rest)
        if index is None or int(index.group(1)) >= len(flat_names):
            return source
        return f"{flat_names[int(index.group(1))]}.size({m['dim']})"
    rest = re.sub(r"\['([^']+)'\]", r"[\1]", rest)
    return f"{name}{rest}.size({m['dim']})"


def flat_input_names(module: torch.nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[str]:
    """The name of each tensor/scalar leaf of a call's inputs, in the order export flattens
    them (``x``, ``inputs[0]``, ``batch['ids']``); [] when forward's signature cannot bind them."""
    from torch.utils import _pytree as pytree

    try:
        bound = inspect.signature(module.forward).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return []
    names: list[str] = []
    for name, value in bound.arguments.items():
        leaves, _ = pytree.tree_flatten_with_path(value)
        names += [name + pytree.keystr(path) for path, _ in leaves]
    return names


# -- suggested dynamic_shapes -------------------------------------------------------------


def suggested_fixes(message: str) -> tuple[str, ...]:
    """The lines under "Suggested fixes:" of a constraint violation ("batch = 4")."""
    if "Suggested fixes:" not in message:
        return ()
    tail = message.split("Suggested fixes:", 1)[1]
    out: list[str] = []
    for line in tail.splitlines():
        line = line.strip()
        if not line:
            if out:
                break
            continue
        if " = " not in line:
            break
        out.append(line)
    return tuple(out)


def refine_shapes(message: str, dynamic_shapes: Any) -> Any:
    """The dynamic_shapes with PyTorch's suggested fixes applied
    (``torch.export.dynamic_shapes.refine_dynamic_shapes_from_suggested_fixes``, torch 2.4+);
    None when this torch has no such helper or the fixes cannot be applied."""
    from torch.export import dynamic_shapes as ds

    refine = getattr(ds, "refine_dynamic_shapes_from_suggested_fixes", None)
    if refine is None or not dynamic_shapes:
        return None
    try:
        return refine(message, dynamic_shapes)
    except Exception:  # noqa: BLE001 - PyTorch's parser could not read its own suggestion
        return None


def shapes_source(dynamic_shapes: Any) -> str:
    """Python source for a dynamic_shapes structure, to paste: the import, its ``Dim``
    definitions, then the structure::

        from torch.export import Dim
        batch = Dim('batch', max=1024)
        dynamic_shapes = {'x': {0: batch}}
    """
    dims: dict[str, str] = {}
    body = _source_of(dynamic_shapes, dims)
    defs = "".join(f"{name} = {text}\n" for name, text in dims.items())
    uses_dim = bool(dims) or "Dim." in body
    return ("from torch.export import Dim\n" if uses_dim else "") + defs + f"dynamic_shapes = {body}"


def _dim_text(dim: Any) -> str:
    args = [repr(dim.__name__)]
    lo, hi = getattr(dim, "min", None), getattr(dim, "max", None)
    # A Dim without bounds reports PyTorch's defaults (min 0 or 2, max int_oo): not written.
    if isinstance(lo, int) and lo > 2:
        args.append(f"min={lo}")
    if isinstance(hi, int) and hi < 2**62 and str(hi) not in ("int_oo", "oo"):
        args.append(f"max={hi}")
    return f"Dim({', '.join(args)})"


def _source_of(value: Any, dims: dict[str, str]) -> str:
    from torch.export import dynamic_shapes as ds

    derived = getattr(ds, "_DerivedDim", None)
    hint = getattr(ds, "_DimHint", None)
    if value is None or isinstance(value, (bool, int, str)):
        return repr(value)
    if derived is not None and isinstance(value, derived):
        root = value.root
        dims.setdefault(root.__name__, _dim_text(root))
        return str(value.__name__)  # "2*dx", "dx + 1": valid Python over the root's name
    if hint is not None and isinstance(value, hint):
        kind = getattr(getattr(value, "type", None), "name", "AUTO")
        return f"Dim.{kind}"
    if isinstance(value, ds.Dim):
        dims.setdefault(value.__name__, _dim_text(value))
        return str(value.__name__)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k!r}: {_source_of(v, dims)}" for k, v in value.items()) + "}"
    if isinstance(value, tuple):
        inner = ", ".join(_source_of(v, dims) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list):
        return "[" + ", ".join(_source_of(v, dims) for v in value) + "]"
    return repr(value)


# -- the exported program ------------------------------------------------------------------


def exported_inputs(program: Any) -> tuple[list[Any], dict[str, str]]:
    """(each placeholder's fake value, in order; symbol -> the user input size it came from,
    "x.size(0)") of an ExportedProgram."""
    gm = program.graph_module
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    values = [n.meta.get("val") for n in placeholders]
    user = set(getattr(program.graph_signature, "user_inputs", ()) or ())
    sources: dict[str, str] = {}
    for node, value in zip(placeholders, values, strict=True):
        if node.name not in user or not isinstance(value, torch.Tensor):
            continue
        for i, size in enumerate(value.shape):
            if isinstance(size, torch.SymInt):
                sources.setdefault(str(size), f"{node.name}.size({i})")
    return values, sources


#: How an ATen overload's module reads through fx's target_name (torch 2.13); export's graph
#: calls ATen overloads, shown as PyTorch prints them ("aten.conv2d.default").
_OPS_PREFIX = "torch._ops."


def exported_graph_data(program: Any) -> dict[str, Any]:
    """The exported program's graph as :func:`dynscope._torch.fx.extract` reads a captured one
    (nodes, inputs with symbolic dims and the sizes they ran at, op counts), targets named
    ``aten.conv2d.default``; plus its readable ``code``."""
    from dynscope._torch.fx import extract
    from dynscope._torch.graph_text import readable_code

    values, _ = exported_inputs(program)
    gm = program.graph_module
    data = extract(gm, values)
    data["nodes"] = tuple(
        replace(n, target=n.target.removeprefix(_OPS_PREFIX)) for n in data["nodes"]
    )
    data["op_counts"] = tuple((t.removeprefix(_OPS_PREFIX), c) for t, c in data["op_counts"])
    data["code"] = readable_code(gm)
    return data


def _bound(value: Any) -> int | None:
    if value is None or getattr(value, "is_finite", True) is False:
        return None  # int_oo, oo, -oo
    try:
        number = int(value)
    except Exception:  # noqa: BLE001 - sympy raises several kinds for an infinite bound
        return None
    return number if abs(number) < 2**62 else None


def range_words(program: Any, sources: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The program's ``range_constraints`` in words: ("s0", "s0 (x.size(0)): 2 to 1024")."""
    out = []
    for symbol, vr in (getattr(program, "range_constraints", None) or {}).items():
        name = str(symbol)
        lo, hi = _bound(getattr(vr, "lower", None)), _bound(getattr(vr, "upper", None))
        origin = sources.get(name) or ("data-dependent" if name.startswith(("u", "zuf")) else "")
        head = f"{name} ({origin})" if origin else name
        if lo is not None and hi is not None:
            span = f"{lo} to {hi}" if lo != hi else f"always {lo}"
        elif lo is not None:
            span = f"{lo} or more"
        elif hi is not None:
            span = f"at most {hi}"
        else:
            span = "any value"
        out.append((name, f"{head}: {span}"))
    return tuple(sorted(out, key=lambda kv: (not kv[0].startswith("s"), kv[0])))
