"""``dynscope.export_report(model, inputs)``: will it export? and ``assert_exports``.

Runs ``torch.export.export``; where it fails, ``torch.export.draft_export`` (which goes on
past what it cannot prove and lists it); for a constraint violation, PyTorch's suggested
``dynamic_shapes``, tried; and ``dynscope.report()`` on the same program, to say which of
torch.compile's graph breaks are export blockers. Everything PyTorch-specific is read
through ``dynscope._torch.export_text``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import torch

from dynscope import _torch
from dynscope._capture.capture import _REPORT_LOCK, _call_shape, check_model, title_of
from dynscope._errors import CaptureError, InputError
from dynscope._format import clip
from dynscope._model import Graph, StackFrame
from dynscope._model.base import _Live
from dynscope._model.export import CompileBreakMatch, ExportBlocker, ExportReport, SuggestedShapes
from dynscope._torch import export_text as ex

__all__ = ["assert_exports", "export_report"]

#: Rounds of PyTorch's suggested fixes tried: a fix can reveal the next constraint.
_SUGGESTION_ROUNDS = 3


def export_report(
    model: Callable[..., Any],
    inputs: Any = (),
    *,
    dynamic_shapes: Any = None,
    strict: bool = False,
    compare_compile: bool = True,
) -> ExportReport:
    """Export ``model`` with ``torch.export`` and report what happened.

    Args:
        model: an ``nn.Module`` or a function (wrapped in a small Module for export).
        inputs: one call's inputs: a Tensor -> model(t); a tuple or list -> model(*inputs);
            a dict -> model(**inputs). Defaults to () (no arguments).
        dynamic_shapes: as ``torch.export.export`` takes it (``{"x": {0: Dim("batch")}}``).
            Defaults to None (every size static).
        strict: strict export (Dynamo traces the Python) instead of non-strict (the Python
            runs on fake tensors). Defaults to False, as ``torch.export.export``.
        compare_compile: also run ``dynscope.report(model, inputs)`` and say which of its
            graph breaks export blocks on. Defaults to True.

    Returns:
        The :class:`ExportReport`: ``exported``, ``blockers`` (file, line, kind, fix),
        ``draft`` (draft_export's findings), ``graph``, ``range_constraints``,
        ``suggested_shapes`` and ``compile_breaks``.

    Raises:
        InputError: the model, inputs or dynamic_shapes are not usable (the message says why).

    Example:
        >>> from torch.export import Dim
        >>> rep = dynscope.export_report(model, (x,), dynamic_shapes={"x": {0: Dim("batch")}})
        >>> print(rep)
    """
    if not ex.has_export():
        raise InputError(f"this torch ({torch.__version__}) has no torch.export; export_report needs torch 2.1 or newer")
    module, args, kwargs, original = _prepare(model, inputs, dynamic_shapes, strict)
    notes: list[str] = []
    with _REPORT_LOCK:
        with _torch.DynamoSandbox():
            rep = _export_locked(module, original, args, kwargs, dynamic_shapes, strict, notes)
        if compare_compile:
            rep = _compared(rep, original, inputs, notes)
    return replace(rep, title=title_of(original), notes=rep.notes + tuple(notes))


def assert_exports(
    model: Callable[..., Any], inputs: Any = (), dynamic_shapes: Any = None, strict: bool = False
) -> ExportReport:
    """Fail (``AssertionError``) unless ``model`` exports with ``dynamic_shapes``.

    The message is the export report's text: the error, each blocker with its kind,
    file:line, source line and fix, and the suggested dynamic_shapes. Returns the report
    when it exports.

    Example:
        >>> dynscope.assert_exports(model, (x,), dynamic_shapes={"x": {0: Dim("batch")}})
    """
    rep = export_report(model, inputs, dynamic_shapes=dynamic_shapes, strict=strict, compare_compile=False)
    if rep.exported:
        return rep
    raise AssertionError(rep.summary())  # the export report's own text: its error, blockers, suggested shapes


def export_blocker_of(err: BaseException) -> ExportBlocker | None:
    """The blocker a failure of ``torch.export.export`` is (its kind, the user's file:line
    and source, the fix: what the ``exports`` pytest marker shows); None when ``err`` is not
    an export failure."""
    if not ex.is_export_error(err):
        return None
    return _blocker_of(ex.read_failure(err))


# -- arguments -------------------------------------------------------------------------------


def _prepare(
    model: Any, inputs: Any, dynamic_shapes: Any, strict: Any
) -> tuple[torch.nn.Module, tuple[Any, ...], dict[str, Any], Any]:
    """(the module to export, args, kwargs, the model as given); InputError if unusable."""
    model, _ = check_model(model)
    args, kwargs = _call_shape(inputs, "inputs")
    if not isinstance(strict, bool):
        raise InputError(f"strict must be True or False; got {clip(repr(strict), 40)}")
    if dynamic_shapes is not None and not isinstance(dynamic_shapes, (Mapping, tuple, list)):
        raise InputError(
            "dynamic_shapes must be None, a dict keyed by the model's argument names "
            '({"x": {0: Dim("batch")}}) or a tuple/list with one entry per input; got '
            f"{type(dynamic_shapes).__name__} {clip(repr(dynamic_shapes), 40)}"
        )
    module = model if isinstance(model, torch.nn.Module) else _as_module(model)
    return module, args, kwargs, model


def _as_module(fn: Callable[..., Any]) -> torch.nn.Module:
    """A Module whose ``forward`` is ``fn`` itself (a static method): torch.export reads
    ``fn``'s signature, so dynamic_shapes keyed by its argument names match, and no frame of
    dynscope's runs between the module and ``fn`` (none in the exported graph's stacks)."""
    name = getattr(fn, "__name__", "function")
    return type(f"{name}_module", (torch.nn.Module,), {"forward": staticmethod(fn)})()


def _forward_names(module: torch.nn.Module) -> list[str]:
    try:
        return list(inspect.signature(module.forward).parameters)
    except (TypeError, ValueError):
        return []


# -- export, draft_export, suggestions ------------------------------------------------------------


def _export_locked(
    module: torch.nn.Module,
    original: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    dynamic_shapes: Any,
    strict: bool,
    notes: list[str],
) -> ExportReport:
    where = _where(original)
    shapes_text = ex.shapes_source(dynamic_shapes) if dynamic_shapes is not None else ""
    base: dict[str, Any] = {
        "title": "", "strict": strict, "dynamic_shapes": shapes_text, "torch_version": str(torch.__version__),
    }
    try:
        program = ex.run_export(module, args, kwargs, dynamic_shapes, strict)
    except Exception as err:  # noqa: BLE001 - every failure of export is what we report
        failure, raised = ex.read_failure(err), err
    else:
        return _with_program(ExportReport(exported=True, **base), program, "export", where)
    if failure.invalid_input:
        names = ", ".join(n for n in _forward_names(module)) or "?"
        raise InputError(
            f"torch.export rejected the arguments: {failure.first_line}\n"
            f"The model's forward takes ({names}); give dynamic_shapes as a dict with those "
            "names as keys, or a tuple/list with one entry per input."
        ) from raised
    rep = ExportReport(exported=False, error=failure.first_line, **base)
    program_source: tuple[Any, str] | None = None
    if failure.kind == "constraint violation" and failure.fixes:
        suggested, program = _try_suggestions(module, args, kwargs, dynamic_shapes, strict, failure)
        rep = replace(rep, suggested_shapes=suggested)
        if program is not None:
            program_source = (program, "suggested")
    draft: tuple[ex.DraftFinding, ...] = ()
    if ex.has_draft_export():
        try:
            draft_program = ex.run_draft_export(module, args, kwargs, dynamic_shapes, strict)
        except Exception as err2:  # noqa: BLE001 - draft_export gives up on some errors too
            notes.append(f"draft_export failed too: {ex.read_failure(err2).first_line}")
            rep = replace(rep, draft_exported=False)
        else:
            draft = ex.draft_findings(draft_program, ex.flat_input_names(module, args, kwargs)) or ()
            rep = replace(rep, draft_exported=True)
            if program_source is None:
                program_source = (draft_program, "draft_export")
    else:
        notes.append(f"this torch ({torch.__version__}) has no torch.export.draft_export")
    blocker = _blocker_of(failure)
    if not blocker.filename:
        # Non-strict export names no line for a constraint violation: draft_export's guard does.
        guard = next((d for d in draft if d.failure_type == "GUARD_ADDED" and d.frames), None)
        if guard is not None and failure.kind == "constraint violation":
            blocker = _at(blocker, guard.frames)
    rep = replace(rep, blockers=(blocker,), draft=tuple(_draft_blocker(d) for d in draft))
    if program_source is not None:
        rep = _with_program(rep, *program_source, where)
    return rep


def _try_suggestions(
    module: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    dynamic_shapes: Any,
    strict: bool,
    failure: ex.ExportFailure,
) -> tuple[SuggestedShapes, Any]:
    """PyTorch's suggested dynamic_shapes, applied and exported again (a fix can reveal the
    next constraint: up to ``_SUGGESTION_ROUNDS`` rounds); (the suggestion, the program or None)."""
    fixes: list[str] = list(failure.fixes)
    message, shapes = failure.message, dynamic_shapes
    for round_ in range(1, _SUGGESTION_ROUNDS + 1):
        refined = ex.refine_shapes(message, shapes)
        if refined is None:
            return SuggestedShapes(fixes=tuple(fixes), source="", exported=None, rounds=round_), None
        source = ex.shapes_source(refined)
        try:
            program = ex.run_export(module, args, kwargs, refined, strict)
        except Exception as err:  # noqa: BLE001 - the suggestion did not work: reported
            again = ex.read_failure(err)
            if again.kind == "constraint violation" and again.fixes and round_ < _SUGGESTION_ROUNDS:
                fixes += [f for f in again.fixes if f not in fixes]
                message, shapes = again.message, refined
                continue
            return SuggestedShapes(tuple(fixes), source, exported=False, error=again.first_line, rounds=round_), None
        return SuggestedShapes(tuple(fixes), source, exported=True, rounds=round_), program
    raise AssertionError("unreachable")  # pragma: no cover - the loop always returns


def _with_program(rep: ExportReport, program: Any, source: str, where: tuple[str, str, int]) -> ExportReport:
    """The report with the program's graph (``where``: its function, file and line) and
    range constraints."""
    frame, filename, lineno = where
    _, sources = ex.exported_inputs(program)
    data = ex.exported_graph_data(program)
    graph = Graph(
        id=0,
        compile_id="export",
        frame=frame,
        filename=filename,
        lineno=lineno,
        node_count=data["node_count"],
        op_count=data["op_count"],
        op_counts=data["op_counts"],
        inputs=data["inputs"],
        nodes=data["nodes"],
        code=data["code"],
        origin="export",
        _module=_Live(program.graph_module),
    )
    return replace(
        rep,
        graph=graph,
        graph_source=source,
        range_constraints=ex.range_words(program, sources),
        _program=_Live(program),
    )


def _where(model: Any) -> tuple[str, str, int]:
    """(function name, file, first line) of the model's forward or of the function."""
    fn = type(model).forward if isinstance(model, torch.nn.Module) else model
    fn = inspect.unwrap(fn)
    try:
        return getattr(fn, "__name__", "forward"), inspect.getsourcefile(fn) or "", inspect.getsourcelines(fn)[1]
    except (OSError, TypeError):
        return getattr(fn, "__name__", "forward"), "", 0


# -- blockers in words -------------------------------------------------------------------------------


def _at(blocker: ExportBlocker, frames: tuple[StackFrame, ...]) -> ExportBlocker:
    if not frames:
        return blocker
    site = frames[-1]
    return replace(blocker, filename=site.filename, lineno=site.lineno, function=site.function, code=site.line)


_DATA_FIX = (
    "state what holds with torch._check(...) on the value at this line (torch._check(n > 0)), "
    "or make the branch tensor code (torch.where, torch.cond) so it no longer depends on a Python value"
)
_CONSTRAINT_FIX = (
    "the code fixes or bounds a size you marked dynamic: use the suggested dynamic_shapes "
    "(an int or Dim.STATIC for a size the code fixes, Dim(..., min=, max=) for a bounded one), "
    "or Dim.AUTO to let export infer it"
)


def _fake_fix(op: str) -> str:
    short = op.split("::")[-1].split(".")[0] if op else "the op"
    return (
        f"register a fake kernel that computes the output's shape and dtype: "
        f"@{short}.register_fake (or torch.library.register_fake({op.replace('.default', '')!r}))"
        if op
        else "register a fake kernel for the custom operator (torch.library.register_fake)"
    )


def _blocker_of(failure: ex.ExportFailure) -> ExportBlocker:
    """The blocker one exception of export is."""
    kind = failure.kind
    if kind == "data-dependent":
        what = f"`{failure.expr}`" if failure.expr else "a condition"
        summary = f"export cannot decide {what}: it depends on a tensor's values (.item(), .tolist(), nonzero())"
        fix = _DATA_FIX
    elif kind == "constraint violation":
        marked = next((ln.strip(" -") for ln in failure.message.splitlines() if ln.strip().startswith("- ")), "")
        # PyTorch's line goes on with advice for mark_dynamic users: the fix says it for export.
        summary = marked.split(". If you")[0] or failure.first_line
        fix = _CONSTRAINT_FIX
    elif kind == "missing fake kernel":
        summary = f"custom operator {failure.op or '?'} has no fake kernel: export cannot know its output's shape"
        fix = _fake_fix(failure.op)
    elif kind == "graph break":
        summary = f"torch.compile would break the graph here ({failure.gb_type or failure.first_line}); export cannot"
        fix = (failure.hints[0] + "; or " if failure.hints else "rewrite this line so Dynamo can trace it, or ") + (
            "export non-strict (strict=False), which runs this Python instead of tracing it"
        )
    elif kind == "unsupported operator":
        summary = "the code reads a tensor's data (copy.deepcopy, .numpy(), .data_ptr()), but export traces fake tensors that have none"
        fix = "move it out of forward, or wrap it in a custom op (torch.library.custom_op) with a fake kernel"
    elif "Unsupported input type" in failure.message:
        summary = ("an input export cannot take (a generator, an object): inputs must be tensors, numbers or "
                   "pytree containers of them")
        fix = ("pass the values themselves (the tensor a generator yields, a list), or register the type: "
               "torch.export.register_dataclass, torch.utils._pytree.register_pytree_node")
    elif "fake tensor in the exported program constant" in failure.message:
        summary = ("the code made a tensor export cannot keep as a constant: a training step's optimizer state "
                   "or gradients, or an op it could not trace")
        fix = ("export the model's forward (inference), not the train step: loss.backward() and optimizer.step() "
               "are not part of an exported program; for training, see torch.export's joint graph (aot_export_joint)")
    else:
        summary = failure.first_line
        fix = "see PyTorch's words; draft_export's findings below may say more"
    blocker = ExportBlocker(
        kind=kind,
        pytorch=failure.message,
        summary=summary,
        fix=fix,
        source="export",
        error_type=failure.error_type,
        detail=failure.expr or failure.op,
    )
    return _at(blocker, failure.frames)


def _draft_blocker(d: ex.DraftFinding) -> ExportBlocker:
    """The blocker one of draft_export's findings is."""
    sizes = ", ".join(f"{size}" for _, size in d.sources)
    if d.failure_type == "DATA_DEPENDENT_ERROR":
        kind = "data-dependent"
        summary = f"draft_export could not decide `{d.expr}` and assumed {d.result or '?'} (this call's value)"
        fix = _DATA_FIX
    elif d.failure_type == "GUARD_ADDED":
        kind = "constraint violation"
        summary = f"the code added the guard `{d.expr}`" + (f" on {sizes}" if sizes else "")
        fix = _CONSTRAINT_FIX
    elif d.failure_type == "MISSING_FAKE_KERNEL":
        kind = "missing fake kernel"
        summary = f"custom operator {d.op} has no fake kernel; draft_export ran the real one to get shapes"
        fix = _fake_fix(d.op)
    elif d.failure_type == "MISMATCHED_FAKE_KERNEL":
        kind = "missing fake kernel"
        summary = f"custom operator {d.op}'s fake kernel disagrees with the real one: {d.reason}"
        fix = "fix the fake kernel so its output's shape, dtype and strides match the real kernel's"
    else:
        kind, summary, fix = "other", d.text.splitlines()[0] if d.text else d.failure_type, "see PyTorch's words"
    blocker = ExportBlocker(
        kind=kind, pytorch=d.text, summary=summary, fix=fix, source="draft_export",
        error_type=d.failure_type, detail=d.expr or d.op,
    )
    return _at(blocker, d.frames)


# -- torch.compile side by side --------------------------------------------------------------------


def _compared(rep: ExportReport, model: Any, inputs: Any, notes: list[str]) -> ExportReport:
    """The report with each graph break of ``dynscope.report()`` matched to export's blockers."""
    from dynscope._capture.capture import report

    try:
        compiled = report(model, inputs, inner="eager", coverage=False)
    except CaptureError as err:
        compiled = err.report
        notes.append(f"report() raised while comparing with torch.compile: {err}".splitlines()[0])
    except Exception as err:  # noqa: BLE001 - the comparison is extra; export's verdict stands
        notes.append(f"torch.compile comparison failed: {type(err).__name__}: {clip(str(err), 120)}")
        return rep
    at = {(b.filename, b.lineno): b.kind for b in rep.all_blockers if b.filename}
    matches = []
    for gb in compiled.breaks:
        kind = at.get((gb.filename, gb.lineno), "")
        matches.append(
            CompileBreakMatch(
                filename=gb.filename, lineno=gb.lineno, function=gb.function, code=gb.source,
                reason=gb.reason, category=gb.category, blocker=bool(kind), blocker_kind=kind,
            )
        )
    return replace(rep, compile_breaks=tuple(matches), compile_compared=True)
