"""The trial runner: one plan run in isolation (a fresh report with only its remedy applied),
its outputs compared with eager's, and the Trial that says what it bought.

Nothing a trial sets outlives it: config goes through scoped patches, marks go on clones of
the inputs, an ``nn.Module``'s parameters and buffers and the RNG state are put back.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch

from dynscope import _torch
from dynscope._capture.advise.plans import Call, Plan, tied_retry
from dynscope._capture.advise.ranking import ATOL, LOOSE_ATOL, LOOSE_RTOL, RTOL, helped, moved, outcome
from dynscope._capture.capture import _REPORT_LOCK, KEPT_OUTPUTS, as_report_call, detached, report
from dynscope._capture.raised import what_raised
from dynscope._format import clip, location
from dynscope._model import Outcome, Report, Site, Trial
from dynscope._progress import within
from dynscope._torch import remedies

if TYPE_CHECKING:
    from collections.abc import Iterator

#: The plan of the report before any remedy (nothing changed).
NO_REMEDY = Plan("", "", ())


def run_trial(
    plan: Plan,
    before: Outcome,
    model: Any,
    call_list: list[Call],
    timing: bool,
    report_kwargs: dict[str, Any],
    reference: Reference | None,
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
            rep = run_report(plan.model if plan.model is not None else model, call_list, plan, timing, report_kwargs)
    except Exception as err:  # noqa: BLE001 - a remedy that breaks the model is a finding
        if raised is not None:
            raised.append(err)
        return Trial(**common, error=what_raised(err), note="; ".join(notes))
    finally:
        KEPT_OUTPUTS.reset(token)
    after = outcome(rep)
    outputs_match = True
    error = ""
    if reference is not None and reference.comparable:
        try:
            # The report's run went through the inner backend; a mode or CUDA remedy changes
            # the code that runs (Inductor), so its outputs come from a build of their own.
            if plan.modes or plan.cuda or plan.memory:
                with remedies.quiet_trial():
                    outputs = _compiled_outputs(model, call_list, plan, report_kwargs)
            got = outputs
        except Exception as err:  # noqa: BLE001
            return Trial(**common, after=after, error=what_raised(err), note="; ".join(notes))
        rtol, atol = (LOOSE_RTOL, LOOSE_ATOL) if plan.loose else (RTOL, ATOL)
        expected = [*reference.outputs, reference.state] if plan.memory else reference.outputs
        max_abs, ok = _compare(expected, got, rtol, atol)
        if not ok:
            outputs_match = False
            error = f"changed outputs: max abs diff {max_abs:.3g} from eager"
    elif reference is not None:
        notes.append(reference.why)
    better = not error and helped(plan, before, after, timing=timing)
    shifted = moved(before, after)
    if shifted and not error:
        # Said first: the coverage column rises (the ops between the two lines joined a
        # graph) while the program breaks as often, so "helped" must not be read into it.
        notes.append(_moved_note(shifted, rep, before, after))
    if not better and not error and plan.unhelped:
        notes.append(plan.unhelped)
    if not better and not error:
        # What PyTorch said at the sites the remedy was for, in the run with it applied.
        # PyTorch's first hint says what would let the remedy work ("Detach ... before
        # returning: e.g. `loss.detach()`" for trace_autograd_ops).
        notes.extend(
            f"still breaks at {b.location}: {clip(b.reason, 160)}" + (f" (PyTorch: {clip(b.hints[0], 120)})" if b.hints else "")
            for b in rep.breaks if b.location in {t.site for t in plan.target}
        )
    return Trial(**common, after=after, helped=better, outputs_match=outputs_match, error=error,
                 note="; ".join(notes), moved=shifted)


def _moved_note(shifted: tuple[tuple[Site, Site], ...], rep: Report, before: Outcome, after: Outcome) -> str:
    """"the break moved from prog.py:4 to prog.py:5 (data-dependent branch: `if n > 0:`), not
    removed: 1 break before and after": what each moved break is now, from the run with the
    remedy applied."""
    at = {Site.at(b.filename, b.lineno): b for b in rep.breaks}
    parts = []
    for old, new in shifted:
        b = at.get(new)
        what = f" ({b.category}: `{clip(b.source.strip(), 60)}`)" if b is not None and b.source.strip() else (
            f" ({b.category})" if b is not None else "")
        parts.append(f"from {location(old.file, old.line)} to {location(new.file, new.line)}{what}")
    counts = (f"{_breaks(before.breaks)} before and after" if before.breaks == after.breaks
              else f"{_breaks(before.breaks)} before, {after.breaks} after")
    return f"the break{'s' if len(shifted) > 1 else ''} moved {', and '.join(parts)}, not removed: {counts}"


def _breaks(n: int) -> str:
    return f"{n} break{'' if n == 1 else 's'}"


def retry_tied(
    plan: Plan,
    first: Trial,
    err: BaseException,
    before: Outcome,
    model: Any,
    call_list: list[Call],
    timing: bool,
    report_kwargs: dict[str, Any],
    reference: Reference | None,
) -> Trial:
    """mark_dynamic again, with the dimensions the marked ones are tied to marked too
    (:func:`~dynscope._capture.advise.plans.tied_retry`). The trial says what was tied;
    when nothing is, the first failure stands, with a note why."""
    retry, why = tied_retry(plan, err, model, call_list)
    if retry is None:
        return replace(first, note="; ".join(x for x in (first.note, why) if x))
    t = run_trial(retry, before, model, call_list, timing, report_kwargs, reference)
    if t.error:
        return replace(t, note="; ".join(x for x in (t.note, f"the first try failed too: {first.error}") if x))
    return t


# -- runs measured while the machine stalled ----------------------------------------------

#: A measured run whose eager step took more than this many times the median eager step of
#: the measured runs (those whose eager program is the same: :func:`same_eager`) ran while
#: the machine stalled (another process on the cores, every op slower), not because of its
#: remedy: it is measured again.
STALL_FACTOR = 3.0


def same_eager(plan: Plan) -> bool:
    """Whether the plan leaves the program's eager run as it is (it changes what compile
    builds, or config Dynamo reads), so its run's eager step is the baseline's program.
    Not so for checkpointing (eager recomputes; selective checkpointing's dispatch mode made
    a small step's eager about 4x slower here), a rewrite of the user's, or a matmul precision."""
    return not plan.checkpoint and plan.model is None and not plan.precision


def eager_step_ms(o: Outcome | None) -> float | None:
    """The eager step a measured run timed beside its compiled one (speedup x compiled
    step): the yardstick of the conditions a run was measured in, for the runs whose eager
    program is the same (:func:`same_eager`). None when not timed."""
    if o is None or o.speedup is None or o.step_ms is None or not o.speedup:
        return None
    return o.speedup * o.step_ms


def stalled_by(o: Outcome | None, typical: float) -> float:
    """How many times ``typical`` the run's eager step took (0.0 when not timed)."""
    eager = eager_step_ms(o)
    return eager / typical if eager is not None and typical > 0 else 0.0


def rejudged(plan: Plan, t: Trial, before: Outcome, timing: bool) -> Trial:
    """The trial against another measurement of the program before any remedy."""
    if t.after is None:
        return replace(t, before=before)
    better = not t.error and helped(plan, before, t.after, timing=timing)
    return replace(t, before=before, helped=better)


# -- running ------------------------------------------------------------------------------


@contextlib.contextmanager
def _applied(plan: Plan, model: Any = None) -> Iterator[None]:
    """The plan's config (and checkpointed blocks of ``model``) for the block; everything
    back after it."""
    with contextlib.ExitStack() as stack:
        if plan.config:
            stack.enter_context(remedies.dynamo_config(**plan.config))
        if plan.precision:
            stack.enter_context(remedies.matmul_precision(plan.precision))
        if plan.memory_budget is not None:
            stack.enter_context(remedies.memory_budget(plan.memory_budget))
        if plan.checkpoint:
            blocks = [b for m in remedies.modules_of(model) for _, b in remedies.repeated_blocks(m)]
            stack.enter_context(remedies.checkpointed(blocks, selective=plan.checkpoint == "selective"))
        yield


@contextlib.contextmanager
def _kept_parameters(model: Any) -> Iterator[None]:
    """The parameters (and gradients) of the modules ``model`` works on (itself, or those a
    train step closes over) put back after the block, and the state of the optimizers the
    step names: each run starts from the same weights (a training step would otherwise
    move them between trials)."""
    modules = remedies.modules_of(model)
    optimizers = remedies.optimizers_of(model)
    with torch.no_grad():
        saved = [(p, p.detach().clone(), None if p.grad is None else p.grad.detach().clone())
                 for m in modules for p in m.parameters()]
        states = [(opt, copy.deepcopy(opt.state_dict())) for opt in optimizers]
    try:
        yield
    finally:
        with torch.no_grad():
            for live, value, grad in saved:
                if live.shape == value.shape:
                    live.copy_(value)
                    live.grad = grad
        for opt, state in states:
            opt.load_state_dict(state)


def trained_state(model: Any) -> list[torch.Tensor]:
    """What a step leaves behind to compare: each parameter's gradient, or the parameter
    itself when it has none (an optimizer step applied it and zeroed it)."""
    return [
        (p.grad if p.grad is not None else p).detach().clone()
        for m in remedies.modules_of(model) for p in m.parameters()
    ]


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


def _fresh_calls(call_list: list[Call], plan: Plan) -> list[Call]:
    """Clones of the calls' tensors (the user's are never marked nor mutated), with the
    plan's dimensions marked dynamic."""
    out: list[Call] = []
    for args, kwargs in call_list:
        new_args, new_kwargs = list(_clone(args)), _clone(kwargs)
        for where, dim in plan.marks:
            value = new_kwargs.get(where) if isinstance(where, str) else new_args[where]
            if isinstance(value, torch.Tensor) and dim < value.dim():
                remedies.mark_dynamic(value, dim, plan.mark_with)
        for where in plan.as_tensor:
            if isinstance(where, str):
                new_kwargs[where] = torch.tensor(new_kwargs[where])
            else:
                new_args[where] = torch.tensor(new_args[where])
        out.append((tuple(new_args), new_kwargs))
    return out


def run_report(
    model: Any, call_list: list[Call], plan: Plan, timing: bool, report_kwargs: dict[str, Any]
) -> Report:
    """:func:`dynscope.report` on fresh clones of the calls, with the plan applied for the run."""
    kwargs = dict(report_kwargs)
    if plan.dynamic is not None:
        kwargs["dynamic"] = plan.dynamic
    if plan.modes:
        kwargs["modes"] = plan.modes
    calls = [as_report_call(c) for c in _fresh_calls(call_list, plan)]
    if plan.memory:
        kwargs["memory"] = True
    # advise's own progress (one line per trial) speaks for the reports it runs.
    with _kept_parameters(model), _applied(plan, model), within():
        # A memory remedy is also timed end to end: what it saves is weighed against the step time.
        return report(model, calls=calls, timing=timing or plan.cuda or plan.memory, **kwargs)


@dataclass
class Reference:
    """Eager's outputs of the calls, which a trial's must match; or why they cannot be compared."""

    outputs: list[Any]  # one per call, detached
    comparable: bool = True  # False: two eager runs differ, so no comparison means anything
    why: str = ""  # the note a trial carries when not comparable
    state: list[Any] = field(default_factory=list)  # trained_state after the calls (gradients, weights)


def eager_outputs(model: Any, call_list: list[Call]) -> Reference:
    """The calls' outputs run eagerly (twice: a program whose two eager runs differ, one
    that updates state it reads, cannot be compared)."""
    runs = []
    state: list[Any] = []
    for _ in range(2):
        outs = []
        with _REPORT_LOCK, _torch.restored_model_state(model), _kept_parameters(model):
            for args, kwargs in _fresh_calls(call_list, NO_REMEDY):
                outs.append(detached(model(*args, **kwargs)))
            state = trained_state(model)
        runs.append(outs)
    _, same = _compare(runs[0], runs[1], 0.0, 0.0)
    if not same:
        return Reference(runs[0], False, "outputs not compared: two eager runs of the calls differ")
    return Reference(runs[0], state=state)


def _compiled_outputs(model: Any, call_list: list[Call], plan: Plan, report_kwargs: dict[str, Any]) -> list[Any]:
    """The calls' outputs through torch.compile with the plan applied, in the same isolation
    as report() (Dynamo state, model buffers and RNG put back)."""
    inner = report_kwargs.get("inner", "eager")
    dynamic = plan.dynamic if plan.dynamic is not None else report_kwargs.get("dynamic")
    options: dict[str, Any] = {}
    if plan.modes and plan.modes[0] != "default":
        inner, options = "inductor", {"mode": plan.modes[0]}
    elif plan.cuda or plan.memory:  # a memory remedy changes what AOTAutograd and Inductor build
        inner = "inductor"
    backend = _torch.lookup_backend(inner) if isinstance(inner, str) else inner
    if options:
        backend = inner  # a mode goes with the backend's name (torch.compile's rule)
    outs = []
    calls = _fresh_calls(call_list, plan)
    with _REPORT_LOCK, _torch.restored_model_state(model), _kept_parameters(model), _applied(plan, model):
        with _torch.DynamoSandbox(model) as sandbox:
            if not isinstance(backend, str):
                sandbox.own(backend=backend)
            compiled = torch.compile(model, backend=backend, dynamic=dynamic, **options, **_torch.compile_kwargs())
            sandbox.own(compiled)
            for args, kwargs in calls:
                outs.append(detached(compiled(*args, **kwargs)))
            del compiled
            if plan.memory:  # gradients (or the weights a step updated) are results too
                outs.append(trained_state(model))
    return outs


def _compare(expected: list[Any], got: list[Any], rtol: float, atol: float) -> tuple[float, bool]:
    """(max abs difference, match) over every call's outputs; non-tensor values must be equal."""
    from dynscope._capture.sampling import compare_outputs

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
