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
import statistics
import typing
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from dynscope._capture.advise.patches import patch_trials
from dynscope._capture.advise.plans import (
    REMEDIES,
    Call,
    Plan,
    Remedy,
    plans_for,
    variant_plans,
    why_nothing_to_try,
)
from dynscope._capture.advise.ranking import outcome, ranked
from dynscope._capture.advise.trials import (
    NO_REMEDY,
    STALL_FACTOR,
    Reference,
    eager_outputs,
    eager_step_ms,
    rejudged,
    retry_tied,
    run_report,
    run_trial,
    same_eager,
    stalled_by,
)
from dynscope._capture.capture import _MISSING, check_model, normalise_calls, report
from dynscope._capture.sampling import Deadline
from dynscope._errors import InputError
from dynscope._format import ms, plural
from dynscope._model import Advice, Report, Trial
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
    patches: bool = False,
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
            before them is measured the same way, and a run whose eager step says the
            machine stalled is measured again (the notes say so). Defaults to False.
        budget_s: seconds the trials may take in all: once spent, the remedies not yet
            tried are listed as not tried (``Advice.note`` and the report's notes say so).
            None: no limit. Defaults to None.
        progress: False says nothing on stderr; else one line per trial (a bar on a
            terminal), unless ``DYNSCOPE_PROGRESS=0``. Defaults to None.
        patches: also try :func:`dynscope.fix`'s source patches, each a trial ranked beside
            the config remedies (a verified patch helped). Defaults to False.
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
        _no_inputs_beside(inputs, calls)
        return advise_report(model, timing=timing, variants=variants, memory=memory, budget_s=budget_s,
                             progress=progress, patches=patches, **report_kwargs)
    _check_kwargs(report_kwargs)
    budget = _checked_budget(budget_s)
    memory = _checked_memory(memory)
    call_list = normalise_calls(model, inputs, calls)
    inner, _ = check_model(model)
    rewrites = _checked_variants(variants)
    show = Progress("advise", show=progress)
    show.phase("the report before any remedy")
    before = run_report(inner, call_list, _BEFORE_MEMORY if memory else NO_REMEDY, timing, report_kwargs)
    return _advise(before, inner, call_list, timing, report_kwargs, rewrites, memory=memory, budget=budget, show=show,
                   patches=patches)


def advise_report(
    rep: Report,
    *,
    timing: bool = False,
    variants: Mapping[str, Callable[..., Any]] | None = None,
    memory: bool = False,
    budget_s: float | None = None,
    progress: bool | None = None,
    patches: bool = False,
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
    return _advise(before, model, call_list, timing, report_kwargs, rewrites, memory=memory, budget=budget, show=show,
                   patches=patches)


def _no_inputs_beside(inputs: Any, calls: Sequence[Any] | None) -> None:
    """advise(rep) takes the report's own calls: InputError when inputs come with it."""
    if inputs is not _MISSING or calls is not None:
        raise InputError(
            "advise() got a report and inputs: a report brings its own calls; pass "
            "dynscope.advise(rep) or dynscope.advise(model, inputs)"
        )


def _checked_budget(budget_s: Any) -> Deadline:
    if budget_s is not None and (isinstance(budget_s, bool) or not isinstance(budget_s, (int, float)) or not budget_s > 0):
        raise InputError(f"budget_s must be a positive number of seconds or None; got {budget_s!r:.60}")
    return Deadline(budget_s)


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
    budget: Deadline | None = None,
    show: Progress | None = None,
    patches: bool = False,
) -> Advice:
    """Plan, run each trial, rank them: the engine both entry points share."""
    plans = plans_for(before, model, call_list, timing, memory)
    plans += variant_plans(variants or {}, before, plans)
    base = outcome(before)
    reference = eager_outputs(model, call_list) if any(p.tried for p in plans) else None
    trials = []
    budget = budget or Deadline(None)
    show = show or Progress("advise", show=False)
    untried: list[str] = []
    runs: list[tuple[Plan, Trial]] = []
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
        runs.append((plan, t))
    measured: list[str] = []
    if timing or memory:
        before, runs, measured = _measured_alike(
            before, runs, model, call_list, timing, report_kwargs, reference, memory=memory, budget=budget, show=show,
        )
    trials = [t for _, t in runs]
    if patches:
        show.phase("source patches (dynscope.fix), each verified on a copy of your file")
        trials += patch_trials(model, call_list)
    show.done()
    ordered = ranked(trials)
    note = "" if ordered else why_nothing_to_try(before)
    if untried:
        cut = (f"the budget of {budget.seconds:g} s (budget_s) was spent before {plural(len(untried), 'remedy')} "
               f"could be tried: {', '.join(untried)}")
        note = f"{note}; {cut}" if note else cut
    notes = (*before.notes, *(f"advise: {n}" for n in measured), *((f"advise: {note}",) if note else ()))
    rep = replace(before, trials=ordered, notes=notes)
    return Advice(report=rep, trials=ordered, note=note)


def _measured_alike(
    before: Report, runs: list[tuple[Plan, Trial]], model: Any, call_list: list[Call], timing: bool,
    report_kwargs: dict[str, Any], reference: Reference | None, *, memory: bool, budget: Deadline, show: Progress,
) -> tuple[Report, list[tuple[Plan, Trial]], list[str]]:
    """The report before any remedy and the trials, each measured in the same conditions.

    Every run is measured by the same function (:func:`run_report`: the program compiled,
    its first call apart, then eager and compiled samples interleaved), yet each at its own
    moment: one taken while the machine stalled (another process on the cores) reads every
    op slower, eager and compiled alike. The baseline is the figure every trial is read
    against, so one stalled baseline (a 1 s step against 3-11 ms in each trial) would make
    every remedy look like a tenfold gain. A run whose eager step (the same program in the
    baseline and in each trial whose remedy leaves eager alone: :func:`same_eager`) took over
    STALL_FACTOR times the median of those runs', is measured again, and the
    run measured in the calmer conditions (the shorter eager step) is kept; the baseline is
    measured again too when its compiled step reads over STALL_FACTOR times the trials'
    median (a surprise every trial would inherit). The notes say what was measured again,
    and a trial whose eager step still differs from the baseline's by over STALL_FACTOR
    (either way) says its step time is not comparable.

    Returns:
        (the report before any remedy, the (plan, trial) pairs, notes), the trials judged
        against the baseline kept.
    """
    notes: list[str] = []
    base = outcome(before)
    alike = [t for plan, t in runs if same_eager(plan)]
    yardsticks = [y for y in (eager_step_ms(o) for o in (base, *(t.after for t in alike))) if y is not None]
    if len(yardsticks) < 2:
        return before, runs, notes
    typical = statistics.median(yardsticks)
    steps = [t.after.step_ms for t in alike if t.after is not None and t.after.step_ms is not None]
    slow_step = bool(steps) and base.step_ms is not None and base.step_ms > STALL_FACTOR * statistics.median(steps)
    stall = stalled_by(base, typical)
    if (stall > STALL_FACTOR or slow_step) and not budget.spent():
        show.phase("the report before any remedy, measured again (its first run's times were not the trials')")
        again = run_report(model, call_list, _BEFORE_MEMORY if memory else NO_REMEDY, timing, report_kwargs)
        first_eager, second_eager = eager_step_ms(base), eager_step_ms(outcome(again))
        why = (f"its eager step took {ms(first_eager or 0.0)}, {stall:.0f}x the median of the runs' "
               f"({ms(typical)}): the machine was busy" if stall > STALL_FACTOR
               else f"its compiled step took {ms(base.step_ms or 0.0)} against a median of {ms(statistics.median(steps))} "
                    "in the trials")
        if second_eager is not None and (first_eager is None or second_eager < first_eager):
            before, base = again, outcome(again)
            runs = [(plan, rejudged(plan, t, base, timing)) for plan, t in runs]
            notes.append(f"the report before any remedy was measured again after the trials ({why}); the second "
                         f"run, compiled step {ms(base.step_ms or 0.0)}, eager {ms(second_eager)}, is the one shown")
        else:
            notes.append(f"the report before any remedy was measured again after the trials ({why}); the second "
                         "run was no calmer, so the first is the one shown")
    for i, (plan, t) in enumerate(runs):
        # A mark_dynamic trial may be the retry with tied dimensions: its plan is not this one.
        stall = stalled_by(t.after, typical)
        if stall <= STALL_FACTOR or plan.marks or not same_eager(plan) or budget.spent():
            continue
        show.phase(f"{plan.remedy}, measured again (its eager step took {stall:.0f}x the runs' median)")
        retried = run_trial(plan, base, model, call_list, timing, report_kwargs, reference)
        eager = eager_step_ms(retried.after)
        first = eager_step_ms(t.after)
        if retried.after is not None and eager is not None and first is not None and eager < first:
            runs[i] = (plan, retried)
            notes.append(f"{plan.remedy} was measured again: in its first run its eager step took {ms(first)}, "
                         f"{stall:.0f}x the median of the runs' ({ms(typical)}): the machine was busy")
    # What is still not comparable is said on the trial: its step column reads a change the
    # remedy did not make. The speedups stay comparable (each against eager in its own run).
    base_eager = eager_step_ms(base)
    for i, (plan, t) in enumerate(runs):
        eager = eager_step_ms(t.after)
        if (base_eager is None or eager is None or not same_eager(plan)
                or max(eager / base_eager, base_eager / eager) <= STALL_FACTOR):
            continue
        said = (f"its step time is not comparable with the one before: eager took {ms(eager)} in its run against "
                f"{ms(base_eager)} in the run before any remedy (the machine's load changed between the two); "
                "the speedup compares each with eager in its own run")
        runs[i] = (plan, replace(t, note="; ".join(x for x in (t.note, said) if x)))
    return before, runs, notes
