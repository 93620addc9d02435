"""``dynscope.advise``: try PyTorch's remedies on a program, one at a time, and measure each.

For every break category and recompile cause with a known remedy, the program is reported
again (``dynscope.report``, same isolation) with only that remedy applied, and its outputs
are compared with eager's. Nothing a trial sets (Dynamo config, matmul precision, dynamic
marks) outlives it: config goes through scoped patches and marks go on clones of the inputs.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import inspect
import os
import sys
import typing
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch

from dynscope import _torch
from dynscope._capture.capture import (
    _MISSING,
    _REPORT_LOCK,
    KEPT_OUTPUTS,
    check_model,
    detached,
    normalise_calls,
    report,
)
from dynscope._errors import CaptureError, InputError
from dynscope._format import clip
from dynscope._model.types import Advice, Outcome, Report, Trial
from dynscope._torch import remedies

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

__all__ = ["REMEDIES", "Remedy", "advise", "advise_report"]

Call = tuple[tuple[Any, ...], dict[str, Any]]

SCALAR = ".item()/scalar output"
DYNAMIC_SHAPE = "data-dependent guard/shape"
LOGGING = "logging/print side effect"
BACKWARD = "backward() in compiled code"

#: Outputs of a trial must match eager's within these (the eager inner backend runs the
#: same ATen ops, so differences are reordering noise at most).
RTOL, ATOL = 1e-4, 1e-5
#: Looser for remedies that change numerics on purpose (TF32 matmuls, Inductor autotuning).
LOOSE_RTOL, LOOSE_ATOL = 1e-2, 1e-2
#: A timing remedy helps when the end-to-end speedup grows by more than this share.
SPEEDUP_MARGIN = 0.05
#: A coverage gain smaller than this is noise.
COVERAGE_MARGIN = 0.01


@dataclass(frozen=True)
class Remedy:
    """One remedy in the catalog: where it applies and what it changes."""

    name: str  # the Trial's ``remedy``
    categories: tuple[str, ...] = ()  # break categories it addresses
    recompiles: bool = False  # addresses recompiles whose cause names an input's size
    automatic: bool = True  # False: a code change dynscope cannot make (shown, not run)
    cuda_only: bool = False  # only on CUDA, and only when timing
    doc: str = ""  # what it does, for the catalog


REMEDIES: tuple[Remedy, ...] = (
    Remedy("capture_scalar_outputs", (SCALAR,),
           doc="Dynamo traces .item()/int()/float() into the graph as an unbacked SymInt/SymFloat."),
    Remedy("capture_dynamic_output_shape_ops", (DYNAMIC_SHAPE,),
           doc="Dynamo traces ops whose output shape depends on values (nonzero, unique...)."),
    Remedy("trace_autograd_ops", (BACKWARD,),
           doc="Dynamo traces loss.backward() / torch.autograd.grad into the graph instead of breaking."),
    Remedy("mark_dynamic", recompiles=True,
           doc="The input dimension a recompile names is compiled dynamic from the first call."),
    Remedy("dynamic=True", recompiles=True,
           doc="torch.compile(..., dynamic=True): every size and int input compiled dynamic."),
    Remedy("reorderable_logging_functions", (LOGGING,),
           doc="Dynamo records the logging call and runs it after the graph instead of breaking."),
    Remedy("is_compiling guard", (LOGGING,), automatic=False,
           doc="The logging line skipped under torch.compile (a code change)."),
    Remedy("matmul_precision_high", cuda_only=True,
           doc='torch.set_float32_matmul_precision("high"): TF32 matmuls on CUDA.'),
    Remedy("max-autotune", cuda_only=True,
           doc='torch.compile(..., mode="max-autotune"): Inductor benchmarks kernel choices.'),
)


@dataclass
class _Plan:
    """How to run one trial: what to change, and what the Trial says about it."""

    remedy: str
    code: str
    target: tuple[str, ...]
    config: dict[str, Any] = field(default_factory=dict)  # Dynamo config for the run
    dynamic: bool | None = None  # report(dynamic=...) override; None: the user's
    marks: tuple[tuple[int | str, int], ...] = ()  # (argument index or keyword, dim) to mark dynamic
    precision: str = ""  # float32 matmul precision for the run
    modes: tuple[str, ...] = ()  # Inductor modes to time (timing remedies)
    loose: bool = False  # compare outputs with the loose tolerance
    tried: bool = True
    note: str = ""
    unhelped: str = ""  # added to the note when the remedy ran and did not help
    cuda: bool = False  # a timing remedy: its speedup is what counts


# -- public entry points ---------------------------------------------------------------


def advise(
    model: Callable[..., Any],
    inputs: Any = _MISSING,
    *,
    calls: Sequence[Any] | None = None,
    timing: bool = False,
    **report_kwargs: Any,
) -> Advice:
    """Report on ``model``, then try each remedy that applies, one at a time, and measure it.

    Each remedy (PyTorch config such as ``capture_scalar_outputs``, ``mark_dynamic`` on the
    dimension a recompile names, ``dynamic=True``, ``reorderable_logging_functions``; on
    CUDA when timing, TF32 matmuls and ``mode="max-autotune"``) reruns
    :func:`dynscope.report` on the same calls with only that remedy applied, and the
    program's outputs are compared with eager's. Code changes dynscope cannot make (an
    ``is_compiling()`` guard) are shown, not run. No config or tensor mark is left changed.

    Args:
        model: an ``nn.Module`` or any callable.
        inputs: one call's inputs, as for :func:`dynscope.report`.
        calls: several calls' inputs. Not together with ``inputs``.
        timing: also time each run (Inductor against eager; slow) and try the CUDA timing
            remedies. Defaults to False.
        **report_kwargs: passed to every :func:`dynscope.report` run (``inner``,
            ``dynamic``, ``coverage``, ``modes``, ``timing_options``, ``restore_state``).

    Returns:
        An :class:`Advice`: ``trials`` best first, ``best``, ``report`` (the before report).

    Raises:
        InputError: the arguments are not usable.
        CaptureError: the model raised without any remedy (``err.report`` holds what was captured).

    Note:
        The calls run many times (eager, then once per report). A training step updates
        parameters each time, as it does under report(); an ``nn.Module``'s parameters are
        put back after each run here.

    Example:
        >>> adv = dynscope.advise(model, torch.randn(8, 16))
        >>> print(adv)
    """
    _check_kwargs(report_kwargs)
    call_list = normalise_calls(model, inputs, calls)
    inner, _ = check_model(model)
    before = _run_report(inner, call_list, _Plan("", "", ()), timing, report_kwargs)
    return _advise(before, inner, call_list, timing, report_kwargs)


def advise_report(rep: Report, *, timing: bool = False, **report_kwargs: Any) -> Advice:
    """``rep.advise()``: advise on the model and calls a live report ran, with its options."""
    subject = rep._subject.value
    if subject is None:
        raise InputError(
            "this report does not hold its model and inputs (it was loaded from JSON or made "
            "by dynscope.capture()); call dynscope.advise(model, inputs) instead"
        )
    _check_kwargs(report_kwargs)
    model, call_list, options = typing.cast("tuple[Any, list[Call], dict[str, Any]]", subject)
    # The report's own options (inner backend, dynamic...) unless the caller overrides them.
    report_kwargs = {**options, **report_kwargs}
    before = rep
    if timing and not rep.timing:
        before = _run_report(model, call_list, _Plan("", "", ()), timing, report_kwargs)
    return _advise(before, model, call_list, timing, report_kwargs)


def _check_kwargs(report_kwargs: dict[str, Any]) -> None:
    taken = sorted(set(report_kwargs) & {"inputs", "calls", "timing"})
    if taken:
        raise InputError(f"advise() got {taken[0]!r} twice; pass it once, as advise's own argument")
    allowed = set(inspect.signature(report).parameters) - {"model", "inputs", "calls", "timing"}
    unknown = sorted(set(report_kwargs) - allowed)
    if unknown:
        raise InputError(
            f"advise() got an unknown argument {unknown[0]!r}; it passes these to "
            f"dynscope.report: {', '.join(sorted(allowed))}"
        )


# -- the engine ------------------------------------------------------------------------------


def _advise(
    before: Report, model: Any, call_list: list[Call], timing: bool, report_kwargs: dict[str, Any]
) -> Advice:
    plans = _plans(before, model, call_list, timing)
    base = outcome(before)
    reference = _eager_outputs(model, call_list) if any(p.tried for p in plans) else None
    trials = []
    for plan in plans:
        raised: list[BaseException] = []
        t = _trial(plan, base, model, call_list, timing, report_kwargs, reference, raised)
        if plan.marks and raised and remedies.is_constraint_violation(raised[0]):
            # PyTorch refused the mark because the code ties the dimension to another
            # input's (a KV cache's x.size(1) and input_pos.size(0)): mark those too.
            t = _retry_tied(plan, t, raised[0], base, model, call_list, timing, report_kwargs, reference)
        trials.append(t)
    ordered = tuple(sorted(trials, key=_rank))
    note = "" if ordered else why_nothing_to_try(before)
    rep = replace(before, trials=ordered, notes=(*before.notes, f"advise: {note}") if note else before.notes)
    return Advice(report=rep, trials=ordered, note=note)


def why_nothing_to_try(rep: Report) -> str:
    """Why advise() tried no remedy on this report: what it found, and where the fixes are."""
    if not rep.breaks and not rep.recompiles:
        return "no remedy to try: the program has no graph break and no recompile."
    parts = []
    by_category: dict[str, list[str]] = {}
    for b in rep.breaks:
        by_category.setdefault(b.category, []).append(b.location)
    if by_category:
        sites = "; ".join(f"{c} at {', '.join(locs)}" for c, locs in by_category.items())
        parts.append(
            "PyTorch has no switch that removes the graph breaks here, so their fix is a code change, "
            f"given with each break in the report: {sites}"
        )
    causes = list(dict.fromkeys(c for r in rep.recompiles for c in (r.causes or r.explained or r.reasons)))
    if causes:
        parts.append(
            f"the recompiles ({'; '.join(causes)}) do not come from an input's size or a Python "
            "value changing, which mark_dynamic and dynamic=True address: see each recompile's fix"
        )
    return "no remedy to try: " + "; ".join(parts) + "."


def outcome(rep: Report) -> Outcome:
    """What a report counted, as one side of a Trial."""
    speedup = None
    if rep.timing:
        first = rep.timing[0]
        speedup = first.speedup if not first.error else None
    return Outcome(
        graphs=rep.graph_count,
        breaks=rep.break_count,
        break_sites=len(rep.breaks),
        recompiles=rep.recompile_count,
        coverage=rep.coverage.ratio if rep.coverage is not None else None,
        speedup=speedup,
        compile_s=rep.compile_time.total_s,
    )


_ORDER = {r.name: i for i, r in enumerate(REMEDIES)}


def _rank(t: Trial) -> tuple[int, float, int]:
    """Best first: what helped (by how much), then what ran and did not, failures, not run;
    ties in catalog order (the narrower remedy first: mark_dynamic before dynamic=True)."""
    order = _ORDER.get(t.remedy, len(_ORDER))
    if t.helped:
        d = t.delta
        gain = -d.get("breaks", 0.0) - d.get("recompiles", 0.0) + 10 * d.get("coverage", 0.0) + d.get("speedup", 0.0)
        return (0, -gain, order)
    if t.tried and not t.error:
        return (1, 0.0, order)
    if t.tried:
        return (2, 0.0, order)
    return (3, 0.0, order)


def _helped(plan: _Plan, before: Outcome, after: Outcome) -> bool:
    fewer_breaks = after.breaks < before.breaks and after.recompiles <= before.recompiles
    fewer_recompiles = after.recompiles < before.recompiles and after.breaks <= before.breaks
    more_coverage = (
        after.coverage is not None and before.coverage is not None
        and after.coverage > before.coverage + COVERAGE_MARGIN
        and after.breaks <= before.breaks and after.recompiles <= before.recompiles
    )
    faster = (
        plan.cuda and after.speedup is not None and before.speedup is not None
        and after.speedup > before.speedup * (1 + SPEEDUP_MARGIN)
    )
    return fewer_breaks or fewer_recompiles or more_coverage or faster


def _trial(
    plan: _Plan,
    before: Outcome,
    model: Any,
    call_list: list[Call],
    timing: bool,
    report_kwargs: dict[str, Any],
    reference: _Reference | None,
    raised: list[BaseException] | None = None,
) -> Trial:
    """Run one plan and judge it; what the run raised is appended to ``raised`` when given."""
    common: dict[str, Any] = {"remedy": plan.remedy, "code": plan.code, "target": plan.target, "before": before}
    if not plan.tried:
        return Trial(**common, tried=False, note=plan.note)
    notes = [plan.note] if plan.note else []
    outputs: list[Any] = []
    token = KEPT_OUTPUTS.set(outputs)
    try:
        with remedies.quiet_trial():
            rep = _run_report(model, call_list, plan, timing, report_kwargs)
    except Exception as err:  # noqa: BLE001 - a remedy that breaks the model is a finding
        if raised is not None:
            raised.append(err)
        return Trial(**common, error=_error_text(err), note="; ".join(notes))
    finally:
        KEPT_OUTPUTS.reset(token)
    after = outcome(rep)
    outputs_match = True
    error = ""
    if reference is not None and reference.comparable:
        try:
            # The report's run went through the inner backend; a mode or CUDA remedy changes
            # the code that runs (Inductor), so its outputs come from a build of their own.
            if plan.modes or plan.cuda:
                with remedies.quiet_trial():
                    outputs = _compiled_outputs(model, call_list, plan, report_kwargs)
            got = outputs
        except Exception as err:  # noqa: BLE001
            return Trial(**common, after=after, error=_error_text(err), note="; ".join(notes))
        rtol, atol = (LOOSE_RTOL, LOOSE_ATOL) if plan.loose else (RTOL, ATOL)
        max_abs, ok = _compare(reference.outputs, got, rtol, atol)
        if not ok:
            outputs_match = False
            error = f"changed outputs: max abs diff {max_abs:.3g} from eager"
    elif reference is not None:
        notes.append(reference.why)
    helped = not error and _helped(plan, before, after)
    if not helped and not error and plan.unhelped:
        notes.append(plan.unhelped)
    if not helped and not error:
        # What PyTorch said at the sites the remedy was for, in the run with it applied.
        # PyTorch's first hint says what would let the remedy work ("Detach ... before
        # returning: e.g. `loss.detach()`" for trace_autograd_ops).
        notes.extend(
            f"still breaks at {b.location}: {clip(b.reason, 160)}" + (f" (PyTorch: {clip(b.hints[0], 120)})" if b.hints else "")
            for b in rep.breaks if b.location in plan.target
        )
    return Trial(**common, after=after, helped=helped, outputs_match=outputs_match, error=error, note="; ".join(notes))


def _retry_tied(
    plan: _Plan,
    first: Trial,
    err: BaseException,
    before: Outcome,
    model: Any,
    call_list: list[Call],
    timing: bool,
    report_kwargs: dict[str, Any],
    reference: _Reference | None,
) -> Trial:
    """mark_dynamic again, with the dimensions the marked ones are tied to marked too.

    PyTorch's ConstraintViolationError names the dimension it specialised and the constant
    it specialised it to ("You marked L['x'].size()[1] as dynamic but your code specialized
    it to be a constant (4)"), and sometimes the other size it must equal. A size the code
    ties to another input's (``k_cache[:, :, input_pos] = k`` ties ``x.size(1)`` to
    ``input_pos.size(0)``) is found as PyTorch names it, or as the dimensions of the other
    inputs whose size equals the marked one in every call. The trial says what was tied;
    when nothing is, the first failure stands, with a note why.
    """
    cause = err.__cause__ if isinstance(err, CaptureError) and err.__cause__ is not None else err
    text = str(cause)
    names = _signature_names(model)
    marked = list(plan.marks)
    tied: list[tuple[int | str, int]] = []
    for name, dim in remedies.constraint_dims(text):
        where = _argument(name, names, call_list)
        if where is not None and (where, dim) not in marked and (where, dim) not in tied:
            tied.append((where, dim))
    specialised = remedies.specialised_dims(text)
    for name, dim, _ in specialised:
        where = _argument(name, names, call_list)
        if where is None:
            continue
        for other in _same_sizes(call_list, (where, dim)):
            if other not in marked and other not in tied:
                tied.append(other)
    what = ", ".join(f"{n}.size({d}) to the constant {v}" for n, d, v in specialised) or "a dimension"
    if not tied:
        why = (
            f"PyTorch specialised {what}: no other input of the call has a dimension of the same size "
            "in every call, so the code itself fixes it (a buffer, a constant, a view of a fixed size)"
        )
        return replace(first, note="; ".join(x for x in (first.note, why) if x))
    shown = ", ".join(_dim_text(w, d, names) for w, d in tied)
    alone = ", ".join(_dim_text(w, d, names) for w, d in marked)
    note = (
        f"marking {alone} alone failed (ConstraintViolationError: PyTorch specialised {what}): the code "
        f"ties it to {shown}, the same size in every call, so {'both are' if len(tied) == 1 else 'all are'} "
        "marked"
    )
    lines = [remedies.mark_dynamic_line(_dim_name(w, names), d) for w, d in tied]
    retry = replace(
        plan, marks=(*plan.marks, *tied), code="\n".join([plan.code, *lines]),
        note="; ".join(x for x in (plan.note, note) if x),
    )
    t = _trial(retry, before, model, call_list, timing, report_kwargs, reference)
    if t.error:
        return replace(t, note="; ".join(x for x in (t.note, f"the first try failed too: {first.error}") if x))
    return t


def _dim_name(where: int | str, names: list[str]) -> str:
    """The argument's name as the user calls it (``args[2]`` past the named ones)."""
    if isinstance(where, str):
        return where
    return names[where] if where < len(names) else f"args[{where}]"


def _dim_text(where: int | str, dim: int, names: list[str]) -> str:
    return f"{_dim_name(where, names)}.size({dim})"


def _tensor_at(call: Call, where: int | str) -> torch.Tensor | None:
    args, kwargs = call
    value = kwargs.get(where) if isinstance(where, str) else (args[where] if where < len(args) else None)
    return value if isinstance(value, torch.Tensor) else None


def _same_sizes(call_list: list[Call], mark: tuple[int | str, int]) -> list[tuple[int | str, int]]:
    """The (argument, dim) of every other tensor input whose size equals ``mark``'s in every
    call (the sizes the code ties together move together)."""
    sizes = []
    for call in call_list:
        t = _tensor_at(call, mark[0])
        if t is None or mark[1] >= t.dim():
            return []
        sizes.append(t.shape[mark[1]])
    args, kwargs = call_list[0]
    places: list[int | str] = [*range(len(args)), *kwargs]
    out: list[tuple[int | str, int]] = []
    for where in places:
        first = _tensor_at(call_list[0], where)
        if first is None:
            continue
        for dim in range(first.dim()):
            if (where, dim) == mark:
                continue
            found = [_tensor_at(c, where) for c in call_list]
            if all(t is not None and dim < t.dim() and t.shape[dim] == s for t, s in zip(found, sizes, strict=True)):
                out.append((where, dim))
    return out


def _error_text(err: BaseException) -> str:
    """"Type: message" of what raised; for a CaptureError, of the model's own exception."""
    cause = err.__cause__ if isinstance(err, CaptureError) and err.__cause__ is not None else err
    lines = [line.strip() for line in str(cause).strip().splitlines() if line.strip()]
    return clip(f"{type(cause).__name__}: " + " ".join(lines[:2]), 300)


# -- running ------------------------------------------------------------------------------


@contextlib.contextmanager
def _applied(plan: _Plan) -> Iterator[None]:
    """The plan's config for the block; everything back after it."""
    with contextlib.ExitStack() as stack:
        if plan.config:
            stack.enter_context(remedies.dynamo_config(**plan.config))
        if plan.precision:
            stack.enter_context(remedies.matmul_precision(plan.precision))
        yield


@contextlib.contextmanager
def _kept_parameters(model: Any) -> Iterator[None]:
    """An nn.Module's parameters put back after the block: each run starts from the same
    weights (a training step would otherwise move them between trials)."""
    if not isinstance(model, torch.nn.Module):
        yield
        return
    with torch.no_grad():
        saved = [(p, p.detach().clone()) for p in model.parameters()]
    try:
        yield
    finally:
        with torch.no_grad():
            for live, copy in saved:
                if live.shape == copy.shape:
                    live.copy_(copy)


def _clone(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone().requires_grad_(value.requires_grad)
    if isinstance(value, tuple):
        return tuple(_clone(v) for v in value)
    if isinstance(value, list):
        return [_clone(v) for v in value]
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    return value


def _fresh_calls(call_list: list[Call], plan: _Plan) -> list[Call]:
    """Clones of the calls' tensors (the user's are never marked nor mutated), with the
    plan's dimensions marked dynamic."""
    out: list[Call] = []
    for args, kwargs in call_list:
        new_args, new_kwargs = list(_clone(args)), _clone(kwargs)
        for where, dim in plan.marks:
            value = new_kwargs.get(where) if isinstance(where, str) else new_args[where]
            if isinstance(value, torch.Tensor) and dim < value.dim():
                remedies.mark_dynamic(value, dim)
        out.append((tuple(new_args), new_kwargs))
    return out


def _as_report_call(call: Call) -> Any:
    """A normalised call back in report()'s form (a dict, or a tuple of arguments)."""
    args, kwargs = call
    return dict(kwargs) if kwargs else tuple(args)


def _run_report(
    model: Any, call_list: list[Call], plan: _Plan, timing: bool, report_kwargs: dict[str, Any]
) -> Report:
    kwargs = dict(report_kwargs)
    if plan.dynamic is not None:
        kwargs["dynamic"] = plan.dynamic
    if plan.modes:
        kwargs["modes"] = plan.modes
    calls = [_as_report_call(c) for c in _fresh_calls(call_list, plan)]
    with _kept_parameters(model), _applied(plan):
        return report(model, calls=calls, timing=timing or plan.cuda, **kwargs)


@dataclass
class _Reference:
    outputs: list[Any]
    comparable: bool = True
    why: str = ""


def _eager_outputs(model: Any, call_list: list[Call]) -> _Reference:
    """The calls' outputs run eagerly (twice: a program whose two eager runs differ, one
    that updates state it reads, cannot be compared)."""
    runs = []
    for _ in range(2):
        outs = []
        with _REPORT_LOCK, _torch.restored_model_state(model), _kept_parameters(model):
            for args, kwargs in _fresh_calls(call_list, _Plan("", "", ())):
                outs.append(detached(model(*args, **kwargs)))
        runs.append(outs)
    _, same = _compare(runs[0], runs[1], 0.0, 0.0)
    if not same:
        return _Reference(runs[0], False, "outputs not compared: two eager runs of the calls differ")
    return _Reference(runs[0])


def _compiled_outputs(model: Any, call_list: list[Call], plan: _Plan, report_kwargs: dict[str, Any]) -> list[Any]:
    """The calls' outputs through torch.compile with the plan applied, in the same isolation
    as report() (Dynamo state, model buffers and RNG put back)."""
    inner = report_kwargs.get("inner", "eager")
    dynamic = plan.dynamic if plan.dynamic is not None else report_kwargs.get("dynamic")
    options: dict[str, Any] = {}
    if plan.modes and plan.modes[0] != "default":
        inner, options = "inductor", {"mode": plan.modes[0]}
    elif plan.cuda:
        inner = "inductor"
    backend = _torch.lookup_backend(inner) if isinstance(inner, str) else inner
    if options:
        backend = inner  # a mode goes with the backend's name (torch.compile's rule)
    outs = []
    calls = _fresh_calls(call_list, plan)
    with _REPORT_LOCK, _torch.restored_model_state(model), _kept_parameters(model), _applied(plan):
        with _torch.DynamoSandbox() as sandbox:
            if not isinstance(backend, str):
                sandbox.own(backend=backend)
            compiled = torch.compile(model, backend=backend, dynamic=dynamic, **options, **_torch.compile_kwargs())
            sandbox.own(compiled)
            for args, kwargs in calls:
                outs.append(detached(compiled(*args, **kwargs)))
            del compiled
    return outs


def _compare(expected: list[Any], got: list[Any], rtol: float, atol: float) -> tuple[float, bool]:
    """(max abs difference, match) over every call's outputs; non-tensor values must be equal."""
    from dynscope._capture.timing import compare_outputs

    max_abs, _, ok = compare_outputs(expected, got, rtol, atol)
    return max_abs, ok and _plain_values(expected) == _plain_values(got)


def _plain_values(value: Any) -> list[Any]:
    if isinstance(value, torch.Tensor):
        return []
    if isinstance(value, (list, tuple)):
        return [v for x in value for v in _plain_values(x)]
    if isinstance(value, dict):
        return [v for x in value.values() for v in _plain_values(x)]
    return [value]


# -- which remedies apply -------------------------------------------------------------------


def _plans(rep: Report, model: Any, call_list: list[Call], timing: bool) -> list[_Plan]:
    plans: list[_Plan] = []
    by_category: dict[str, list[str]] = {}
    for b in rep.breaks:
        by_category.setdefault(b.category, []).append(b.location)

    if SCALAR in by_category:
        plans.append(_config_plan("capture_scalar_outputs", by_category[SCALAR]))
    if DYNAMIC_SHAPE in by_category:
        plans.append(_config_plan("capture_dynamic_output_shape_ops", by_category[DYNAMIC_SHAPE]))
    if BACKWARD in by_category:
        plans.append(_backward_plan(rep, by_category[BACKWARD]))
    if LOGGING in by_category:
        plans.extend(_logging_plans(rep))
    plans.extend(_recompile_plans(rep, model, call_list))
    if timing:
        plans.extend(_timing_plans(model, call_list))
    return plans


def compiled_name(model: Any) -> str:
    """What the user passes to torch.compile in the code a trial shows: ``model`` for an
    nn.Module (its variable's name is not known), a function's own name (``train_step``)."""
    if isinstance(model, torch.nn.Module):
        return "model"
    name = getattr(model, "__name__", "")
    return name if isinstance(name, str) and name.isidentifier() else "fn"


def _config_plan(option: str, sites: list[str]) -> _Plan:
    if not remedies.has_dynamo_option(option):
        return _Plan(option, remedies.config_line(option), tuple(sites), tried=False,
                     note=f"this torch has no Dynamo config option {option}")
    return _Plan(option, remedies.config_line(option), tuple(sites), config={option: True})


def _backward_plan(rep: Report, sites: list[str]) -> _Plan:
    """trace_autograd_ops; when it cannot help because a break follows backward() in the same
    function (the loss then leaves the graph as an output), the trial says which."""
    plan = _config_plan("trace_autograd_ops", sites)
    backward = [b for b in rep.breaks if b.category == BACKWARD]
    later = [
        o for o in rep.breaks
        if any(o.filename == b.filename and o.function == b.function and o.lineno > b.lineno for b in backward)
    ]
    if later:
        where = ", ".join(f"{o.location} ({o.category})" for o in later)
        plan.unhelped = (
            "PyTorch traces backward() only when nothing after it in the compiled function breaks "
            f"(the loss would leave the graph as an output); here {where} {'does' if len(later) == 1 else 'do'}: "
            "move it out of the compiled function (for torch.optim: compile opt.step on its own), then try again"
        )
    return plan


def _logging_plans(rep: Report) -> list[_Plan]:
    """reorderable_logging_functions with the function each logging break calls; where the
    break sits in a helper of the user's (a ``log_stats(t)`` that prints), a second trial with
    that helper (Dynamo then runs the whole helper after the graph), and the is_compiling
    guard, shown."""
    sites = [b for b in rep.breaks if b.category == LOGGING]
    direct: list[tuple[str, Any]] = []
    helpers: list[tuple[str, Any]] = []
    notes: list[str] = []
    for b in sites:
        expr = _callee(b.source)
        fn = _resolve(expr, b.filename) if expr else None
        if fn is None:
            notes.append(f"{b.location}: could not tell which function `{clip(b.source, 60)}` calls")
        else:
            if not remedies.is_reorderable(fn):
                notes.append(
                    f"{b.location}: `{expr}` is a {type(fn).__name__}, and PyTorch reorders only plain "
                    "functions and builtins (a logging.Logger method goes through Dynamo's logger "
                    f"handling, which honours only {remedies.IGNORE_LOGGING}: the "
                    "call is then dropped under compile)"
                )
            if all(f is not fn for _, f in direct):
                direct.append((expr, fn))
        helper = _helper(b)
        if helper is not None and all(f is not helper[1] for _, f in helpers):
            helpers.append(helper)
    plans = []
    target = tuple(dict.fromkeys(b.location for b in sites))
    for chosen, note in (
        (direct, "; ".join(notes)),
        (helpers, "your logging helper is added whole: Dynamo runs it after the graph, with the "
                  "graph's values, so it must not change what the program computes"),
    ):
        if chosen:
            plans.append(_Plan(
                "reorderable_logging_functions",
                "\n".join(remedies.reorderable_line(e) for e, _ in chosen),
                target, config={"reorderable_logging_functions": {f for _, f in chosen}}, note=note,
            ))
    guarded = "\n".join(
        f"# {b.location}\nif not torch.compiler.is_compiling():\n    {b.source}" for b in sites if b.source
    )
    plans.append(_Plan(
        "is_compiling guard", guarded or "if not torch.compiler.is_compiling():\n    ...", target, tried=False,
        note="a code change dynscope cannot make for you: the line is skipped while compiled (no output "
             "under torch.compile), and the graph no longer breaks there",
    ))
    return plans


def _helper(b: Any) -> tuple[str, Any] | None:
    """(name, function) of the user's helper the break sits in, when its caller's line calls
    it by a name the caller's module knows; None otherwise."""
    if len(b.call_chain) < 2:
        return None
    caller = b.call_chain[-2]
    expr = _callee(caller.line)
    fn = _resolve(expr, caller.filename) if expr else None
    code = getattr(fn, "__code__", None)
    if code is None or code.co_name != b.function or not remedies.is_reorderable(fn):
        return None
    return expr, fn


def _callee(source: str) -> str:
    """The called function's dotted name in a line of code (``print``, ``log.info``), or ""."""
    try:
        tree = ast.parse(source.strip())
    except SyntaxError:
        return ""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
            if name:
                return name
    return ""


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def _resolve(expr: str, filename: str) -> Any:
    """The object ``expr`` names in the module of ``filename`` (then builtins), or None."""
    module = _module_of(filename)
    scope: dict[str, Any] = dict(vars(builtins))
    if module is not None:
        scope.update(vars(module))
    head, *rest = expr.split(".")
    if head not in scope:
        return None
    value = scope[head]
    for part in rest:
        value = getattr(value, part, None)
        if value is None:
            return None
    return value


def _module_of(filename: str) -> Any:
    if not filename:
        return None
    want = os.path.realpath(filename)
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and os.path.realpath(path) == want:
            return module
    return None


def _signature_names(model: Any) -> list[str]:
    """Positional parameter names of the model's call, in order (forward for a module)."""
    fn = model.forward if isinstance(model, torch.nn.Module) else model
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _argument(name: str, names: list[str], call_list: list[Call]) -> int | str | None:
    """Where input ``name`` is in every call: its positional index, its keyword, or None."""
    if name in names and all(names.index(name) < len(a) for a, _ in call_list):
        return names.index(name)
    if all(name in k for _, k in call_list):
        return name
    return None


def _recompile_plans(rep: Report, model: Any, call_list: list[Call]) -> list[_Plan]:
    if not rep.recompiles:
        return []
    names = _signature_names(model)
    marks: list[tuple[int | str, int]] = []
    lines: list[str] = []
    targets: list[str] = []
    notes: list[str] = []
    fn = model.forward if isinstance(model, torch.nn.Module) else model
    # Report frames are named by qualified name ("MLP.forward"); older ones by plain name.
    top = {getattr(fn, "__qualname__", ""), getattr(fn, "__name__", "")} - {""}
    sized = False
    for r in rep.recompiles:
        changes = remedies.size_changes(r.reasons)
        if not changes:
            continue
        sized = True
        targets.append(f"{r.frame}: " + "; ".join(r.causes or r.explained or r.reasons))
        for name, dim in changes:
            where = _argument(name, names, call_list) if r.frame in top else None
            if where is None:
                notes.append(f"input {name} of {r.frame} is not an argument of the model's call: mark it by hand")
                continue
            if (where, dim) not in marks:
                marks.append((where, dim))
                lines.append(remedies.mark_dynamic_line(name, dim))
    plans: list[_Plan] = []
    target = tuple(dict.fromkeys(targets))
    if marks:
        plans.append(_Plan("mark_dynamic", "\n".join(lines), target, marks=tuple(marks), note="; ".join(dict.fromkeys(notes))))
    value_changed = any(c.startswith("Python value") for r in rep.recompiles for c in r.causes)
    if sized or value_changed:
        value_targets = target or tuple(f"{r.frame}: " + "; ".join(r.causes) for r in rep.recompiles)
        plans.append(_Plan("dynamic=True", f"torch.compile({compiled_name(model)}, dynamic=True)", value_targets, dynamic=True))
    return plans


def _timing_plans(model: Any, call_list: list[Call]) -> list[_Plan]:
    from dynscope._capture.timing import device_of

    device = device_of([a for a, _ in call_list] + [k for _, k in call_list])
    precision = _Plan("matmul_precision_high", 'torch.set_float32_matmul_precision("high")', (),
                      precision="high", loose=True, cuda=True, modes=("default",))
    autotune = _Plan("max-autotune", f'torch.compile({compiled_name(model)}, mode="max-autotune")', (),
                     modes=("max-autotune",), loose=True, cuda=True)
    if not device.startswith("cuda"):
        for p in (precision, autotune):
            p.tried = False
            p.note = f"CUDA only: not tried, the inputs are on {device}"
    return [precision, autotune]

