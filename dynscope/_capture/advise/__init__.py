"""``dynscope.advise``: try PyTorch's remedies on a program, one at a time, and measure each.

For every break category and recompile cause with a known remedy, the program is reported
again (``dynscope.report``, same isolation) with only that remedy applied, and its outputs
are compared with eager's. Nothing a trial sets (Dynamo config, matmul precision, dynamic
marks) outlives it: config goes through scoped patches and marks go on clones of the inputs.

    plans     which remedies apply to a report (the catalog, one Plan per remedy)
    trials    the trial runner: one plan run in isolation, its outputs compared with eager's
    ranking   judging trials (did the remedy help?) and ordering them, best first
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from dynscope._capture.advise.plans import (
    REMEDIES,
    Call,
    Remedy,
    plans_for,
    variant_plans,
    why_nothing_to_try,
)
from dynscope._capture.advise.ranking import outcome, ranked
from dynscope._capture.advise.trials import NO_REMEDY, eager_outputs, retry_tied, run_report, run_trial
from dynscope._capture.capture import _MISSING, check_model, normalise_calls, report
from dynscope._capture.sampling import Budget
from dynscope._errors import InputError
from dynscope._format import plural
from dynscope._model import Advice, Report
from dynscope._progress import Progress
from dynscope._torch import remedies

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["REMEDIES", "Remedy", "advise", "advise_report"]


def advise(
    model: Callable[..., Any] | Report,
    inputs: Any = _MISSING,
    *,
    calls: Sequence[Any] | None = None,
    timing: bool = False,
    variants: Mapping[str, Callable[..., Any]] | None = None,
    memory: bool = False,
    budget_s: float | None = None,
    progress: bool | None = None,
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
        model: an ``nn.Module`` or any callable; or a live :class:`Report` (one
            :func:`dynscope.report` made in this process), whose model, calls and options
            are reused (no ``inputs`` nor ``calls`` then).
        inputs: one call's inputs, as for :func:`dynscope.report`.
        calls: several calls' inputs. Not together with ``inputs``.
        timing: also time each run (Inductor against eager; slow) and try the CUDA timing
            remedies. Defaults to False.
        variants: your own rewrites of the model (name -> a model or function taking the
            same calls), each tried as a remedy "your rewrite": outputs compared with the
            model's in eager, breaks and recompiles with the model's. Defaults to none.
        memory: also try the memory remedies (``activation_memory_budget`` at a few levels,
            activation checkpointing of the repeated blocks, full and saving matmuls), each
            measured for peak memory and step time (the program compiled with Inductor,
            timed end to end) with outputs and gradients compared with eager's; the report
            before them is measured the same way. Defaults to False.
        budget_s: seconds the trials may take in all: once spent, the remedies not yet
            tried are listed as not tried (``Advice.note`` and the report's notes say so).
            None: no limit. Defaults to None.
        progress: False says nothing on stderr; else one line per trial (a bar on a
            terminal), unless ``DYNSCOPE_PROGRESS=0``. Defaults to None.
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
        >>> adv = dynscope.advise(dynscope.report(model, x))  # the report's model and calls
        >>> print(adv)
    """
    if isinstance(model, Report):
        if inputs is not _MISSING or calls is not None:
            raise InputError(
                "advise() got a report and inputs: a report brings its own calls; pass "
                "dynscope.advise(rep) or dynscope.advise(model, inputs)"
            )
        return advise_report(model, timing=timing, variants=variants, memory=memory, budget_s=budget_s,
                             progress=progress, **report_kwargs)
    _check_kwargs(report_kwargs)
    budget = _checked_budget(budget_s)
    memory = _checked_memory(memory)
    call_list = normalise_calls(model, inputs, calls)
    inner, _ = check_model(model)
    rewrites = _checked_variants(variants)
    show = Progress("advise", show=progress)
    show.phase("the report before any remedy")
    before = run_report(inner, call_list, _BEFORE_MEMORY if memory else NO_REMEDY, timing, report_kwargs)
    return _advise(before, inner, call_list, timing, report_kwargs, rewrites, memory=memory, budget=budget, show=show)


def advise_report(
    rep: Report,
    *,
    timing: bool = False,
    variants: Mapping[str, Callable[..., Any]] | None = None,
    memory: bool = False,
    budget_s: float | None = None,
    progress: bool | None = None,
    **report_kwargs: Any,
) -> Advice:
    """``dynscope.advise(rep)``: advise on the model and calls a live report ran, with its options.

    Args:
        rep: a report :func:`dynscope.report` made in this process (it holds its model and calls).
        timing: as for :func:`advise`; the report is run again, timed, when it was not.
        **report_kwargs: override the report's own options (``inner``, ``dynamic``...).

    Raises:
        InputError: ``rep`` does not hold its model (loaded from JSON, or made by capture()).
    """
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
    rewrites = _checked_variants(variants)
    memory = _checked_memory(memory)
    budget = _checked_budget(budget_s)
    show = Progress("advise", show=progress)
    before = rep
    if (timing and not rep.timing) or (memory and (rep.memory is None or not rep.timing)):
        show.phase("the report before any remedy, measured as the trials are")
        before = run_report(model, call_list, _BEFORE_MEMORY if memory else NO_REMEDY, timing, report_kwargs)
    return _advise(before, model, call_list, timing, report_kwargs, rewrites, memory=memory, budget=budget, show=show)


def _checked_budget(budget_s: Any) -> Budget:
    if budget_s is not None and (isinstance(budget_s, bool) or not isinstance(budget_s, (int, float)) or not budget_s > 0):
        raise InputError(f"budget_s must be a positive number of seconds or None; got {budget_s!r:.60}")
    return Budget(budget_s)


#: The report before the memory remedies: measured and timed as they are.
_BEFORE_MEMORY = replace(NO_REMEDY, memory=True)


def _checked_memory(memory: Any) -> bool:
    if not isinstance(memory, bool):
        raise InputError(f"memory must be True or False; got {type(memory).__name__} {memory!r:.60}")
    return memory


def _checked_variants(variants: Mapping[str, Callable[..., Any]] | None) -> dict[str, Any]:
    """The rewrites, each a callable under a name; InputError otherwise."""
    if variants is None:
        return {}
    if not isinstance(variants, Mapping):
        raise InputError(
            f"variants must map a name to a rewrite of the model (variants={{'pos as a tensor': fixed}}); "
            f"got {type(variants).__name__}"
        )
    out = {}
    for name, m in variants.items():
        if not isinstance(name, str) or not callable(m):
            raise InputError(f"variants[{name!r}] must be a callable (an nn.Module or a function) under a str name")
        out[name] = check_model(m)[0]
    return out


def _check_kwargs(report_kwargs: dict[str, Any]) -> None:
    taken = sorted(set(report_kwargs) & {"inputs", "calls", "timing", "memory"})
    if taken:
        raise InputError(f"advise() got {taken[0]!r} twice; pass it once, as advise's own argument")
    allowed = set(inspect.signature(report).parameters) - {"model", "inputs", "calls", "timing", "memory"}
    unknown = sorted(set(report_kwargs) - allowed)
    if unknown:
        raise InputError(
            f"advise() got an unknown argument {unknown[0]!r}; it passes these to "
            f"dynscope.report: {', '.join(sorted(allowed))}"
        )


def _advise(
    before: Report, model: Any, call_list: list[Call], timing: bool, report_kwargs: dict[str, Any],
    variants: Mapping[str, Any] | None = None,
    *,
    memory: bool = False,
    budget: Budget | None = None,
    show: Progress | None = None,
) -> Advice:
    """Plan, run each trial, rank them: the engine both entry points share."""
    plans = plans_for(before, model, call_list, timing, memory)
    plans += variant_plans(variants or {}, before, plans)
    base = outcome(before)
    reference = eager_outputs(model, call_list) if any(p.tried for p in plans) else None
    trials = []
    budget = budget or Budget(None)
    show = show or Progress("advise", show=False)
    untried: list[str] = []
    for k, plan in enumerate(plans, 1):
        if plan.tried and budget.spent():
            untried.append(plan.remedy)
            continue
        if plan.tried:
            show.phase(f"trial {k}/{len(plans)}: {plan.remedy}")
        raised: list[BaseException] = []
        t = run_trial(plan, base, model, call_list, timing, report_kwargs, reference, raised)
        if plan.marks and raised and remedies.is_constraint_violation(raised[0]):
            # PyTorch refused the mark because the code ties the dimension to another
            # input's (a KV cache's x.size(1) and input_pos.size(0)): mark those too.
            t = retry_tied(plan, t, raised[0], base, model, call_list, timing, report_kwargs, reference)
        trials.append(t)
    show.done()
    ordered = ranked(trials)
    note = "" if ordered else why_nothing_to_try(before)
    if untried:
        cut = (f"the budget of {budget.seconds:g} s (budget_s) was spent before {plural(len(untried), 'remedy')} "
               f"could be tried: {', '.join(untried)}")
        note = f"{note}; {cut}" if note else cut
    rep = replace(before, trials=ordered, notes=(*before.notes, f"advise: {note}") if note else before.notes)
    return Advice(report=rep, trials=ordered, note=note)
