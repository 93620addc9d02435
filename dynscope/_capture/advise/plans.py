"""Which of PyTorch's remedies apply to a report: the catalog and one ``Plan`` per remedy.

A plan says what a trial changes (Dynamo config, dynamic marks, matmul precision, Inductor
modes) and what its Trial will say (the code line shown, the sites it is for). Plans are
read from the report and the model's calls; nothing here runs the model.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import os
import sys
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch

from dynscope._errors import CaptureError
from dynscope._format import clip, location
from dynscope._lexicon.break_categories import BACKWARD, DYNAMIC_SHAPE, LOGGING, SCALAR
from dynscope._model.advice import Target
from dynscope._model.causes import VALUE
from dynscope._torch import remedies

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from dynscope._model import Recompile, Report

#: One normalised call of the model: (positional arguments, keyword arguments).
Call = tuple[tuple[Any, ...], dict[str, Any]]


@dataclass(frozen=True)
class Remedy:
    """One remedy in the catalog: where it applies and what it changes."""

    name: str  # the Trial's ``remedy``
    categories: tuple[str, ...] = ()  # break categories it addresses
    recompiles: bool = False  # addresses recompiles whose cause names an input's size
    automatic: bool = True  # False: a code change dynscope cannot make (shown, not run)
    cuda_only: bool = False  # only on CUDA, and only when timing
    memory: bool = False  # a memory remedy: tried with advise(memory=True)
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
    Remedy("maybe_mark_dynamic", recompiles=True,
           doc="The same dimension marked dynamic unless the code fixes it (no ConstraintViolationError)."),
    Remedy("mark_unbacked", recompiles=True,
           doc="The same dimension as a size Dynamo assumes nothing about (not even that it is not 0 or 1)."),
    Remedy("value as tensor", recompiles=True,
           doc="A Python int the graph was specialised on passed as a 0-d tensor (one graph for every value)."),
    Remedy("size independence", recompiles=True, automatic=False,
           doc="The line that fixed a size to one value rewritten not to depend on it (a code change, shown)."),
    Remedy("your rewrite", recompiles=True,
           doc="A rewrite of the model you pass (advise(..., variants={name: model})), run on the same calls."),
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
    Remedy("activation_memory_budget", memory=True,
           doc="AOTAutograd's activation_memory_budget below 1.0: its partitioner "
               "recomputes more in the backward to save less in the forward."),
    Remedy("activation checkpointing", memory=True,
           doc="Each repeated block (a transformer's layers) run under torch.utils.checkpoint "
               "(use_reentrant=False): its activations recomputed in the backward."),
    Remedy("selective checkpointing", memory=True,
           doc="The same, with a policy that saves matmul and attention outputs and recomputes the rest."),
)

#: activation_memory_budget levels advise(memory=True) tries.
MEMORY_BUDGETS = (0.5, 0.1)


@dataclass
class Plan:
    """How to run one trial: what to change, and what the Trial says about it."""

    remedy: str  # the catalog name (``Remedy.name``)
    code: str  # the code a user writes to apply it, as the Trial shows it
    target: tuple[Target, ...]  # the break sites or recompiles it is for (Target(): the whole program)
    config: dict[str, Any] = field(default_factory=dict)  # Dynamo config for the run
    dynamic: bool | None = None  # report(dynamic=...) override; None: the user's
    marks: tuple[tuple[int | str, int], ...] = ()  # (argument index or keyword, dim) to mark dynamic
    mark_with: str = "mark_dynamic"  # how: mark_dynamic, maybe_mark_dynamic or mark_unbacked
    as_tensor: tuple[int | str, ...] = ()  # arguments (index or keyword) passed as 0-d tensors
    model: Any = None  # run this instead of the model (a rewrite the user passed); None: the model
    precision: str = ""  # float32 matmul precision for the run
    modes: tuple[str, ...] = ()  # Inductor modes to time (timing remedies)
    loose: bool = False  # compare outputs with the loose tolerance
    tried: bool = True  # False: shown, not run (a code change, or not possible here)
    note: str = ""  # what the Trial says beside its numbers
    unhelped: str = ""  # added to the note when the remedy ran and did not help
    cuda: bool = False  # a timing remedy: its speedup is what counts
    memory_budget: float | None = None  # activation_memory_budget for the run
    checkpoint: str = ""  # "full" or "selective": the repeated blocks checkpointed
    blocks: tuple[str, ...] = ()  # the blocks checkpointed, by name
    memory: bool = False  # a memory remedy: its compiled peak is what counts


def _at(sites: Iterable[str]) -> tuple[Target, ...]:
    """Break sites ("file.py:LINE") as targets, each once, in order."""
    return tuple(Target(site=s) for s in dict.fromkeys(sites))


def _recompiled(r: Recompile) -> Target:
    """A recompile as a target: its function and what changed (the failed guards where no
    change is named, PyTorch's words where no cause is known)."""
    return Target(frame=r.frame, changes=r.changes, failed=() if r.changes else r.causes,
                  raw=() if r.changes or r.causes else r.raw_reasons)


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
    causes = list(dict.fromkeys(c for r in rep.recompiles for c in (r.cause_words or r.explained or r.raw_reasons)))
    if causes:
        parts.append(
            f"the recompiles ({'; '.join(causes)}) do not come from an input's size or a Python "
            "value changing, which mark_dynamic and dynamic=True address: see each recompile's fix"
        )
    return "no remedy to try: " + "; ".join(parts) + "."


# -- which remedies apply -------------------------------------------------------------------


def memory_plans(model: Any) -> list[Plan]:
    """The memory remedies: the partitioner's budget at a few levels, and checkpointing of
    the repeated blocks (full, and saving matmuls) of the modules ``model`` works on."""
    plans = []
    for level in MEMORY_BUDGETS:
        plan = Plan("activation_memory_budget", remedies.memory_budget_line(level),
                    (Target(),), memory_budget=level, memory=True, loose=True)
        if not remedies.has_memory_budget():
            plan.tried, plan.note = False, "this torch has no activation_memory_budget in AOTAutograd's config"
        plans.append(plan)
    found = [(name, block) for m in remedies.modules_of(model) for name, block in remedies.repeated_blocks(m)]
    blocks = [name for name, _ in found]
    # BatchNorm in training updates its statistics in place: checkpointing runs its forward
    # again in the backward, which autograd's version check rejects (or counts the batch twice).
    batchnorm = remedies.trains_batchnorm([block for _, block in found])
    shown = ", ".join(blocks[:3]) + (", ..." if len(blocks) > 3 else "")
    for how, code in (
        ("full", "block.forward = functools.partial(checkpoint, block.forward, use_reentrant=False)"),
        ("selective", "block.forward = functools.partial(checkpoint, block.forward, use_reentrant=False,\n"
                      "    context_fn=functools.partial(create_selective_checkpoint_contexts, save_matmuls))"),
    ):
        name = "activation checkpointing" if how == "full" else "selective checkpointing"
        plan = Plan(name, f"# for each repeated block ({shown or 'none found'}):\n{code}",
                    tuple(Target(block=b) for b in blocks[:8]),
                    checkpoint=how, blocks=tuple(blocks), memory=True, loose=True)
        if not blocks:
            plan.tried, plan.note = False, "no repeated block found (a ModuleList or Sequential of blocks of one class)"
        elif batchnorm:
            plan.note = ("the blocks hold BatchNorm in training mode, which updates its running statistics in "
                         "place: a checkpointed block runs its forward again in the backward, so autograd may "
                         "reject it (a tensor modified in place) and the statistics count the batch twice; "
                         "checkpoint only blocks without BatchNorm, or use activation_memory_budget")
        plans.append(plan)
    return plans


def plans_for(rep: Report, model: Any, call_list: list[Call], timing: bool, memory: bool = False) -> list[Plan]:
    """One plan per remedy that applies to what ``rep`` found, in catalog order.

    Args:
        rep: the report before any remedy.
        model: what the report ran (its inputs' names are read from its signature).
        call_list: the normalised calls.
        timing: also plan the CUDA timing remedies.
        memory: also plan the memory remedies (:func:`memory_plans`).
    """
    plans: list[Plan] = []
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
    if memory:
        plans.extend(memory_plans(model))
    return plans


def compiled_name(model: Any) -> str:
    """What the user passes to torch.compile in the code a trial shows: ``model`` for an
    nn.Module (its variable's name is not known), a function's own name (``train_step``)."""
    if isinstance(model, torch.nn.Module):
        return "model"
    name = getattr(model, "__name__", "")
    return name if isinstance(name, str) and name.isidentifier() else "fn"


def _config_plan(option: str, sites: list[str]) -> Plan:
    if not remedies.has_dynamo_option(option):
        return Plan(option, remedies.config_line(option), _at(sites), tried=False,
                    note=f"this torch has no Dynamo config option {option}")
    return Plan(option, remedies.config_line(option), _at(sites), config={option: True})


def _backward_plan(rep: Report, sites: list[str]) -> Plan:
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


def _logging_plans(rep: Report) -> list[Plan]:
    """reorderable_logging_functions with the function each logging break calls; where the
    break sits in a helper of the user's (a ``log_stats(t)`` that prints), a second trial with
    that helper (Dynamo then runs the whole helper after the graph), and the is_compiling
    guard, shown."""
    sites = [b for b in rep.breaks if b.category == LOGGING]
    direct: list[tuple[str, Any]] = []
    helpers: list[tuple[str, Any]] = []
    notes: list[str] = []
    unhelped: list[str] = []
    for b in sites:
        expr = _callee(b.source)
        fn = _resolve(expr, b.filename) if expr else None
        if fn is None:
            notes.append(f"{b.location}: could not tell which function `{clip(b.source, 60)}` calls")
        else:
            if not remedies.is_reorderable(fn):
                # Said only when the trial did not help: newer torch reorders Logger methods too.
                unhelped.append(
                    f"{b.location}: `{expr}` is a {type(fn).__name__}, and this PyTorch reorders only plain "
                    "functions and builtins (a logging.Logger method goes through Dynamo's logger "
                    f"handling, which here honours only {remedies.IGNORE_LOGGING}: the "
                    "call is then dropped under compile)"
                )
            if all(f is not fn for _, f in direct):
                direct.append((expr, fn))
        helper = _helper(b)
        if helper is not None and all(f is not helper[1] for _, f in helpers):
            helpers.append(helper)
    plans = []
    target = _at(b.location for b in sites)
    for chosen, note, unhelped_note in (
        (direct, "; ".join(notes), "; ".join(unhelped)),
        (helpers, "your logging helper is added whole: Dynamo runs it after the graph, with the "
                  "graph's values, so it must not change what the program computes", ""),
    ):
        if chosen:
            plans.append(Plan(
                "reorderable_logging_functions",
                "\n".join(remedies.reorderable_line(e) for e, _ in chosen),
                target, config={"reorderable_logging_functions": {f for _, f in chosen}}, note=note,
                unhelped=unhelped_note,
            ))
    guarded = "\n".join(
        f"# {b.location}\nif not torch.compiler.is_compiling():\n    {b.source}" for b in sites if b.source
    )
    plans.append(Plan(
        "is_compiling guard", guarded or "if not torch.compiler.is_compiling():\n    ...", target, tried=False,
        note="a change to your code (`dynscope fix` writes it and verifies it on a copy of your file; "
             "advise(..., patches=True) ranks it here): the line is skipped while compiled (no output "
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


def _recompile_plans(rep: Report, model: Any, call_list: list[Call]) -> list[Plan]:
    if not rep.recompiles:
        return []
    names = _signature_names(model)
    marks: list[tuple[int | str, int]] = []
    lines: list[str] = []
    targets: list[Target] = []
    notes: list[str] = []
    fn = model.forward if isinstance(model, torch.nn.Module) else model
    # Report frames are named by qualified name ("MLP.forward"); older ones by plain name.
    top = {getattr(fn, "__qualname__", ""), getattr(fn, "__name__", "")} - {""}
    sized = False
    for r in rep.recompiles:
        changes = remedies.size_changes(r.raw_reasons)
        if not changes:
            continue
        sized = True
        targets.append(_recompiled(r))
        for name, dim in changes:
            where = _argument(name, names, call_list) if r.frame in top else None
            if where is None:
                notes.append(f"input {name} of {r.frame} is not an argument of the model's call: mark it by hand")
                continue
            if (where, dim) not in marks:
                marks.append((where, dim))
                lines.append(remedies.mark_dynamic_line(name, dim))
    plans: list[Plan] = []
    target = tuple(dict.fromkeys(targets))
    if marks:
        note = "; ".join(dict.fromkeys(notes))
        plans.append(Plan("mark_dynamic", "\n".join(lines), target, marks=tuple(marks), note=note))
        # Wider nets over the same dimensions, in order of reach: each tried, the narrowest
        # that removes the recompile with outputs unchanged ranks first (catalog order).
        # The dims of other inputs the same size in every call go with them (what mark_dynamic
        # finds on its retry when PyTorch says they are tied).
        wide = list(marks)
        for mark in marks:
            wide.extend(o for o in _same_sizes(call_list, mark) if o not in wide)
        for how in ("maybe_mark_dynamic", "mark_unbacked"):
            if remedies.has_mark(how):
                code = "\n".join(remedies.mark_dynamic_line(_dim_name(w, names), d, how) for w, d in wide)
                plans.append(Plan(how, code, target, marks=tuple(wide), mark_with=how, note=note))
    plans.extend(_value_plans(rep, names, call_list, top))
    plans.extend(_independence_plans(rep))
    value_changed = any(c.kind == VALUE for r in rep.recompiles for c in r.changes)
    if sized or value_changed:
        value_targets = target or tuple(dict.fromkeys(Target(frame=r.frame, changes=r.changes) for r in rep.recompiles))
        plans.append(Plan("dynamic=True", f"torch.compile({compiled_name(model)}, dynamic=True)", value_targets, dynamic=True))
    return plans


def _value_plans(rep: Report, names: list[str], call_list: list[Call], top: set[str]) -> list[Plan]:
    """For Python ints of the model's call that a recompile names ("Python value n changed"):
    the same calls with each passed as a 0-d tensor, so one graph takes every value (the
    model must accept a tensor there; the trial checks the outputs)."""
    where: list[int | str] = []
    targets: list[Target] = []
    shown: list[str] = []
    for r in rep.recompiles:
        for cause in r.changes:
            # A value a call passes by name: an argument (not an attribute, not an item).
            if cause.kind != VALUE or not cause.name.isidentifier() or r.frame not in top:
                continue
            n = cause.name
            at = _argument(n, names, call_list)
            if at is None or at in where:
                continue
            if all(type(a[at] if isinstance(at, int) else k[at]) is int for a, k in call_list):
                where.append(at)
                targets.append(Target(frame=r.frame, changes=(cause,)))
                shown.append(f"{n} = torch.tensor({n})  # pass {n} as a 0-d tensor")
    if not where:
        return []
    return [Plan("value as tensor", "\n".join(shown), tuple(targets), as_tensor=tuple(where))]


def _independence_plans(rep: Report) -> list[Plan]:
    """For each line of the user's code that fixed a dynamic size to one value (Frame.shapes):
    the change that helps when no mark can, shown, not run (dynscope does not edit code)."""
    plans = []
    seen: set[tuple[str, int]] = set()
    for f in rep.frames:
        for fx in f.shapes:
            # A fix, or a branch on the size (a guard made by an if/while line, or an == / !=
            # guard): what no mark gets past.
            branch = fx.kind == "guarded" and ("==" in fx.value or "!=" in fx.value or fx.on_branch)
            if (fx.kind != "fixed" and not branch) or not fx.filename or (fx.filename, fx.lineno) in seen:
                continue
            seen.add((fx.filename, fx.lineno))
            where = location(fx.filename, fx.lineno)
            what = f"fixes {fx.size} to one value ({fx.reason or 'specialised'})" if not branch else (
                f"branches on {fx.size} ({fx.value})")
            plans.append(Plan(
                "size independence",
                f"# {where}: {fx.code or '(the line)'}\n# {what}: write it without reading {fx.size} as a "
                f"Python int (a tensor op such as torch.where, or a size kept symbolic)",
                (Target(site=where, size=fx.size, branched=branch),),
                tried=False,
                note=f"marking {fx.size} dynamic cannot help while {where} {'fixes' if not branch else 'branches on'} "
                     f"it: mark_dynamic fails (ConstraintViolationError) and maybe_mark_dynamic recompiles",
            ))
    return plans


def variant_plans(variants: Mapping[str, Any], rep: Report, plans: list[Plan]) -> list[Plan]:
    """Trials of each rewrite the user passed: the same calls, its outputs compared with the
    model's eager outputs, its breaks and recompiles with the model's; and, when recompiles
    name sizes, the rewrite with those dimensions marked dynamic too (a rewrite that stops a
    line fixing a size is what lets mark_dynamic keep it dynamic from the first call)."""
    target = tuple(
        [Target(frame=r.frame, changes=r.changes, failed=() if r.changes else r.causes) for r in rep.recompiles]
        + [Target(site=b.location, category=b.category) for b in rep.breaks]
    ) or (Target(),)
    marked = next((p for p in plans if p.remedy == "mark_dynamic" and p.marks), None)
    out = []
    for name, m in variants.items():
        out.append(Plan("your rewrite", f"# {name}: your rewrite of the model", target, model=m,
                        note=f"your rewrite {name!r}"))
        if marked is not None:
            out.append(Plan("your rewrite", f"# {name}: your rewrite of the model\n{marked.code}", target, model=m,
                            marks=marked.marks, note=f"your rewrite {name!r}, with mark_dynamic"))
    return out


def _timing_plans(model: Any, call_list: list[Call]) -> list[Plan]:
    from dynscope._capture.timing_options import device_of

    device = device_of([a for a, _ in call_list] + [k for _, k in call_list])
    precision = Plan("matmul_precision_high", 'torch.set_float32_matmul_precision("high")', (),
                      precision="high", loose=True, cuda=True, modes=("default",))
    autotune = Plan("max-autotune", f'torch.compile({compiled_name(model)}, mode="max-autotune")', (),
                     modes=("max-autotune",), loose=True, cuda=True)
    if not device.startswith("cuda"):
        for p in (precision, autotune):
            p.tried = False
            p.note = f"CUDA only: not tried, the inputs are on {device}"
    return [precision, autotune]


# -- dimensions tied together (a mark PyTorch refused) --------------------------------------


def tied_retry(plan: Plan, err: BaseException, model: Any, call_list: list[Call]) -> tuple[Plan | None, str]:
    """The mark_dynamic plan again, with the dimensions the marked ones are tied to marked too.

    PyTorch's ConstraintViolationError names the dimension it specialised and the constant
    it specialised it to ("You marked L['x'].size()[1] as dynamic but your code specialized
    it to be a constant (4)"), and sometimes the other size it must equal. A size the code
    ties to another input's (``k_cache[:, :, input_pos] = k`` ties ``x.size(1)`` to
    ``input_pos.size(0)``) is found as PyTorch names it, or as the dimensions of the other
    inputs whose size equals the marked one in every call.

    Returns:
        (the plan to retry, "") when something is tied; (None, why not) when nothing is.
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
        return None, (
            f"PyTorch specialised {what}: no other input of the call has a dimension of the same size "
            "in every call, so the code itself fixes it (a buffer, a constant, a view of a fixed size)"
        )
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
    return retry, ""


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
