"""Entry points: ``dynscope.report(model, inputs)`` and ``with dynscope.capture() as cap``."""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NoReturn

import torch

from dynscope import _hooks, _torch
from dynscope._capture.backend import RecordingBackend
from dynscope._capture.guard_check import describe_call
from dynscope._errors import CaptureError, InputError
from dynscope._format import clip, few
from dynscope._hooks import Hook
from dynscope._model.base import _Live
from dynscope._read.assemble import build_report
from dynscope._read.guard_checks import CallsMade
from dynscope._torch.distributed import rank_info
from dynscope._torch.profiler import OWN_MARK, CoverageRecorder
from dynscope._torch.runs import RunCounter
from dynscope._torch.trace import TraceCollector

if TYPE_CHECKING:  # pragma: no cover
    from dynscope._capture.timing_options import TimingOptions
    from dynscope._model import Frame, Report
    from dynscope._model.measured import Measured

_MISSING: Any = object()

#: One report at a time in a process. A report resets the code objects it compiled when
#: it ends; a second report running the same code in another thread would crash.
_REPORT_LOCK = threading.RLock()

#: Set (to a list) by advise() around one report(): the calls' outputs are appended, detached,
#: so a trial compares the outputs of its own run instead of compiling the program again.
KEPT_OUTPUTS: contextvars.ContextVar[list[Any] | None] = contextvars.ContextVar("dynscope_kept_outputs", default=None)


def detached(value: Any) -> Any:
    """A copy of a call's output with every tensor detached and cloned (nested lists, tuples
    and dicts kept as they are)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, list):
        return [detached(v) for v in value]
    if isinstance(value, tuple):
        return tuple(detached(v) for v in value)
    if isinstance(value, dict):
        return {k: detached(v) for k, v in value.items()}
    return value


class Capture:
    """Watches every torch.compile in its ``with`` block and builds a Report.

    Both ways of compiling are seen: code compiled with the user's own backend (the
    default Inductor included) is known from PyTorch's structured trace; code compiled
    with ``backend=cap.backend`` is also recorded graph by graph, with live GraphModules.

    Args:
        inner: backend that ``cap.backend`` delegates to after recording. Defaults to "eager".
        title: a name for the report. Defaults to "".
        provenance: Inductor's provenance tracking on in the block (see :func:`capture`).

    Attributes:
        backend: a recording backend for ``torch.compile(model, backend=cap.backend)``.
    """

    def __init__(self, *, inner: str | Callable[..., Any] = "eager", title: str = "", provenance: bool = False) -> None:
        # Graphs compiled through cap.backend count their runs (Graph.runs): one graph may
        # serve every block of a model.
        self.backend = RecordingBackend(inner, count_runs=True)
        self.title = title
        self.calls = 0
        self.provenance = provenance
        self._collector = TraceCollector()
        self._attached: Any = None
        self._report: Report | None = None
        # Set by report()'s own capture (_ReportCapture) only.
        self._coverage: CoverageRecorder | None = None
        self._ignore_backend_mismatch = False
        self._hooks_from = 0  # dynscope._hooks.mark() when the block began
        self._runs = RunCounter(0)
        self._notes: tuple[str, ...] = ()  # what report() says of its own run (report()'s capture only)

    def __enter__(self) -> Capture:
        if self._attached is not None:
            raise InputError("this capture is already active; use a new dynscope.capture()")
        if self._report is not None:
            raise InputError(
                "this capture has finished; its report is in cap.report. Use a new "
                "dynscope.capture() for a new block (re-entering would mix old graphs in)"
            )
        self._hooks_from = _hooks.mark()
        # Only the thread that opened the block is watched: another thread's compiles
        # are not part of this program's story.
        self._collector.thread = threading.get_ident()
        self.backend.thread = threading.get_ident()
        # The runs of graphs compiled by the program's own backend (runs.py).
        self._runs = RunCounter(threading.get_ident())
        # What Inductor does below Dynamo is kept too (Graph.lowering). Inductor's provenance
        # tracking (which node each kernel computes) is part of its FX graph cache key: turned
        # on for the user's own compiles, a warm cache would miss and the compile times would
        # not be theirs. So it is on only when asked (provenance=True: report()'s own compile).
        self._collector.lowering = True
        self._attached = contextlib.ExitStack()
        self._attached.enter_context(_torch.attached(self._collector))
        self._attached.enter_context(self._runs.counting())
        # PyTorch logs an interned file name once a process (and only while a handler is
        # attached): the names interned before this block are read from its table.
        self._collector.strings.update(_torch.interned_strings())
        if self.provenance:
            self._attached.enter_context(_torch.lowering_config(kernel_profile=False))
        return self

    def __exit__(self, *exc: object) -> None:
        attached, self._attached = self._attached, None
        if attached is not None:
            attached.close()
        self._report = self._build()

    def _build(self, measured: Measured | None = None) -> Report:
        """The report of what was captured; the capture's own notes (report()'s of its run)
        and ``measured`` (what its timing measured) are the builder's inputs."""
        events = self._collector.snapshot()
        rank, world_size = rank_info()
        return build_report(
            events,
            list(self.backend.graphs),
            ignore_backend_mismatch=self._ignore_backend_mismatch,
            title=self.title,
            calls=self.calls,
            # The live process is read here, where the capture ran, not by assembly: a
            # recorded trace assembles without asking the running process.
            rank=rank,
            world_size=world_size,
            torch_version=str(torch.__version__),
            coverage=self._coverage.counts() if self._coverage is not None else None,
            runs=self._runs.runs,
            calls_made=self._calls_made(),
            provenance=self.provenance,
            notes=tuple(f.note for f in _hooks.since(self._hooks_from)) + self._notes,
            measured=measured,
        )

    def rebuilt(self, *, notes: tuple[str, ...] = (), measured: Measured | None = None) -> Report:
        """The finished capture's report built again (the same events and graphs: the same graph
        ids) with ``notes`` said after its own and what its timing measured."""
        self._notes += notes
        self._report = self._build(measured)
        return self._report

    def _calls_made(self) -> CallsMade | None:
        """The calls this capture made, their inputs described, for the guard checks; None
        when it made none of its own (capture() watches the user's calls)."""
        return None

    @property
    def active(self) -> bool:
        """True inside the ``with`` block."""
        return self._attached is not None

    @property
    def report(self) -> Report:
        """The report: final after the block, a snapshot of what was seen so far inside it."""
        if self._report is not None and not self.active:
            return self._report
        return self._build()


class _ReportCapture(Capture):
    """The capture ``report()`` runs its calls in (not public: report() owns the compile).

    Its backend counts each graph's runs and keeps the example inputs (timing needs both)
    and, when coverage is measured, marks each graph run for the profiler. A BACKEND_MATCH
    "recompile" is dropped: report() compiles with a backend of its own, so it only means
    someone compiled this code before with another backend.
    """

    def __init__(
        self, *, inner: str | Callable[..., Any], title: str, coverage: CoverageRecorder | None,
        notes: tuple[str, ...] = (),
    ) -> None:
        # report() owns its compile: Inductor's provenance is on for it (its cache entries are
        # under a key of their own; the user's compiles are capture()'s, which leaves it off).
        super().__init__(inner=inner, title=title, provenance=True)
        self.backend.count_runs = True
        self.backend.keep_inputs = True
        self.backend.mark_runs = coverage is not None
        self._coverage = coverage
        self._ignore_backend_mismatch = True
        # Known before the calls: built into the report at the block's end, not added after.
        self._notes = notes
        # Per call: how many trace events had arrived before it, and its inputs described
        # (guard_check: every guard an earlier entry failed on the call that recompiled).
        self.call_starts: list[int] = []
        self.call_values: list[dict[str, Any]] = []
        self._describe_hook = Hook("call description")

    def described(self, model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The call's inputs described for guard_check; {} when that failed (a guarded hook)."""
        return self._describe_hook.call(describe_call, model, args, kwargs, default={})

    def _calls_made(self) -> CallsMade | None:
        return CallsMade(tuple(self.call_starts), tuple(self.call_values)) if self.call_values else None


#: Said when capture() saw Inductor compiles but, leaving provenance off, could not list kernels.


def capture(*, inner: str | Callable[..., Any] = "eager", title: str = "", provenance: bool = False) -> Capture:
    """Watch everything torch.compile does inside a ``with`` block.

    Args:
        inner: backend that ``cap.backend`` delegates to after recording. Defaults to
            "eager". Compiles that do not use ``cap.backend`` keep their own backend.
        title: a name for the report. Defaults to "".
        provenance: turn on Inductor's provenance tracking in the block, so each kernel is
            tied to the nodes it computes. Defaults to False: it is part of Inductor's FX graph
            cache key, so a warm cache would miss and compile times would not be your run's.

    Returns:
        A :class:`Capture`; its ``report`` is ready when the block ends (also when the
        block raised: what was captured before the error is kept).

    Example:
        >>> with dynscope.capture() as cap:
        ...     compiled = torch.compile(model)
        ...     compiled(x)
        >>> print(cap.report)
    """
    return Capture(inner=inner, title=title, provenance=provenance)


def as_report_call(call: tuple[tuple[Any, ...], dict[str, Any]]) -> Any:
    """A normalised call (:func:`normalise_calls`) back in report()'s form: a dict of keyword
    arguments, or a tuple of positional ones (a single list or dict argument stays one)."""
    args, kwargs = call
    return dict(kwargs) if kwargs else tuple(args)


def _call_shape(value: Any, what: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """(args, kwargs) for one call: a Tensor is the one argument, a tuple or list is spread, a dict passed by keyword."""
    if isinstance(value, torch.Tensor):
        return (value,), {}
    if isinstance(value, (tuple, list)):
        return tuple(value), {}
    if isinstance(value, Mapping):
        bad = [k for k in value if not isinstance(k, str)]
        if bad:
            raise InputError(f"{what}: a dict of inputs needs string keyword names; got key {bad[0]!r}")
        return (), dict(value)
    raise InputError(
        f"{what} must be a Tensor (model(t)), a tuple or list (model(*inputs)) or a dict "
        f"(model(**inputs)); got {type(value).__name__}. Wrap a single non-tensor argument "
        f"in a tuple: ({_short_repr(value)},)"
    )


def _short_repr(value: Any) -> str:
    return clip(repr(value), 40)


def check_model(model: Any) -> tuple[Any, str]:
    """The callable to compile and a note ("" or why it was changed); InputError if unusable."""
    if isinstance(model, type):
        raise InputError(
            f"model is the class {model.__name__}, not an instance: torch.compile would patch "
            f"{model.__name__}.__call__ for every later use of the class. Pass an instance, "
            f"e.g. dynscope.report({model.__name__}(...), inputs)"
        )
    if not callable(model):
        raise InputError(
            f"model must be callable (an nn.Module or a function); got {type(model).__name__} "
            f"{_short_repr(model)}"
        )
    inner, was_compiled = _torch.unwrap_compiled(model)
    if was_compiled:
        return inner, (
            "model was already a torch.compile result: dynscope reported on the original "
            f"{title_of(inner)} it wraps (your compiled object is left as it was)"
        )
    return model, ""


def normalise_calls(
    model: Any, inputs: Any, calls: Sequence[Any] | None
) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Check report()'s arguments; return one (args, kwargs) per call."""
    check_model(model)
    if calls is not None and inputs is not _MISSING:
        raise InputError(
            "give either inputs (one call) or calls=[...] (several calls), not both"
        )
    if calls is None:
        if inputs is _MISSING:
            return [((), {})]
        return [_call_shape(inputs, "inputs")]
    if isinstance(calls, (str, bytes, torch.Tensor, Mapping)) or not isinstance(calls, Sequence):
        raise InputError(
            f"calls must be a list of inputs, one per call (calls=[x1, x2]); got "
            f"{type(calls).__name__}"
        )
    if not calls:
        raise InputError("calls is empty; give at least one call's inputs")
    return [_call_shape(c, f"calls[{i}]") for i, c in enumerate(calls)]


def _check_options(dynamic: Any, timing_options: Any) -> None:
    if dynamic is not None and not isinstance(dynamic, bool):
        raise InputError(
            f"dynamic must be True, False or None (PyTorch's automatic dynamic); got "
            f"{_short_repr(dynamic)}"
        )
    if timing_options is not None:
        from dynscope._capture.timing_options import TimingOptions

        if not isinstance(timing_options, TimingOptions):
            raise InputError(
                f"timing_options must be a dynscope.TimingOptions, e.g. "
                f"TimingOptions(repeats=10); got {type(timing_options).__name__} "
                f"{_short_repr(timing_options)}"
            )


def title_of(model: Any) -> str:
    """A readable name for a model or callable."""
    if isinstance(model, torch.nn.Module):
        return type(model).__name__
    return str(getattr(model, "__qualname__", None) or type(model).__name__)


def report(
    model: Callable[..., Any],
    inputs: Any = _MISSING,
    *,
    calls: Sequence[Any] | None = None,
    inner: str | Callable[..., Any] = "eager",
    dynamic: bool | None = None,
    timing: bool = False,
    modes: Sequence[str] = ("default",),
    timing_options: TimingOptions | None = None,
    coverage: bool = True,
    restore_state: bool = True,
    memory: bool | None = None,
) -> Report:
    """Compile ``model``, run it, and report what torch.compile did.

    Args:
        model: an ``nn.Module`` or any callable.
        inputs: one call's inputs: a Tensor -> model(t); a tuple or list -> model(*inputs);
            a dict -> model(**inputs). Omit for a model that takes no arguments.
        calls: several calls' inputs, each by the same rule (recompiles show). Not
            together with ``inputs``.
        inner: backend the recording backend delegates to. Defaults to "eager" (fast,
            exact); "inductor" also compiles with Inductor.
        dynamic: passed to torch.compile. Defaults to None (PyTorch's automatic dynamic).
        timing: also time each graph and the whole model, eager against Inductor.
            Defaults to False.
        modes: Inductor modes to time when ``timing`` is on: "default", "reduce-overhead"
            (CUDA only), "max-autotune", "max-autotune-no-cudagraphs". Defaults to ("default",).
        timing_options: a :class:`dynscope.TimingOptions` for repetitions and warm-up.
        coverage: measure compile coverage (torch's profiler runs during the calls).
            Defaults to True. Inside your own ``torch.profiler`` session coverage is not
            measured (your profile is left intact) and the report says why.
        memory: measure memory, eager against Inductor: per graph the peak of a forward
            (and of forward+backward for training graphs) and what the forward saves for
            the backward, and the whole call's peak (docs/memory.md). Defaults to None:
            on with ``timing``, else off. Costs the one Inductor compile ``timing`` makes.
        restore_state: put the module's buffers (BatchNorm statistics...) and the CPU and
            CUDA random-number state back after the calls. Defaults to True. Parameters
            are never restored: a training step you pass updates them.

    Returns:
        The :class:`Report`.

    Raises:
        InputError: the arguments are not usable (the message says why).
        CaptureError: the model raised; ``err.report`` holds what was captured.

    Example:
        >>> rep = dynscope.report(model, torch.randn(8, 16))
        >>> print(rep)
    """
    call_list = normalise_calls(model, inputs, calls)
    _check_options(dynamic, timing_options)
    model, note = check_model(model)
    parts = _torch.compiled_parts(model)
    memory = _memory_option(memory, timing)
    if timing or memory:
        from dynscope._capture.timing_options import device_of, validate_modes

        validate_modes(modes, device_of([c[0] for c in call_list] + [c[1] for c in call_list]))
    notes, coverage, timing, memory = _planned(note, parts, coverage=coverage, timing=timing, memory=memory)
    state = _torch.restored_model_state(model) if restore_state else contextlib.nullcontext()
    with _REPORT_LOCK, state:
        rep = _report_locked(
            model, call_list, inner=inner, dynamic=dynamic, timing=timing, modes=modes,
            timing_options=timing_options, coverage=coverage, notes=notes, memory=memory,
            whole=not parts,
        )
    # Kept beside the model (never saved) so dynscope.advise(rep) can rerun the same program the
    # same way (the options timing does not decide). Set as the report is made: a made Report
    # is never changed.
    options = {"inner": inner, "dynamic": dynamic, "coverage": coverage, "restore_state": restore_state}
    return replace(rep, _subject=_Live((model, call_list, options)))


def _memory_option(memory: bool | None, timing: bool) -> bool:
    """report()'s ``memory``: None follows ``timing``; anything but a bool is an InputError."""
    if memory is None:
        memory = timing
    if not isinstance(memory, bool):
        raise InputError(f"memory must be True, False or None; got {type(memory).__name__} {_short_repr(memory)}")
    return memory


def _planned(
    note: str, parts: tuple[str, ...], *, coverage: bool, timing: bool, memory: bool
) -> tuple[tuple[str, ...], bool, bool, bool]:
    """The notes report() starts with, and what it measures after all: (notes, coverage,
    timing, memory).

    ``parts``: what the program compiles of itself. It is run as it is: compiling it whole
    would trace through its compiled parts into graphs and breaks its own run never has;
    nor is it timed, which compares the program compiled whole with eager.
    """
    notes = [note] if note else []
    if parts:
        notes.append(
            f"your program compiles parts of itself ({few(parts, 4)}): report() ran it as it is and "
            "reports what those compiles did, with the options you gave them, as dynscope.capture() "
            "would; it did not compile the whole program around them (pass the uncompiled program for that)"
        )
    if coverage and _torch.profiler_running():
        coverage = False
        notes.append(
            "coverage not measured: a torch.profiler session was already running; "
            "dynscope left your profile intact instead of starting its own"
        )
    if parts and (timing or memory):
        timing = memory = False
        notes.append("timing and memory not measured: they compare the program compiled whole with eager, "
                     "and this program compiles only its parts")
    return tuple(notes), coverage, timing, memory


def _report_locked(
    model: Callable[..., Any],
    call_list: list[tuple[tuple[Any, ...], dict[str, Any]]],
    *,
    inner: str | Callable[..., Any],
    dynamic: bool | None,
    timing: bool,
    modes: Sequence[str],
    timing_options: TimingOptions | None,
    coverage: bool,
    notes: tuple[str, ...],
    memory: bool = False,
    whole: bool = True,
) -> Report:
    failure: tuple[int, BaseException] | None = None
    started = time.perf_counter()
    recorder = CoverageRecorder() if coverage else None
    cap = _ReportCapture(inner=inner, title=title_of(model), coverage=recorder, notes=notes)
    profiling = recorder.recording() if recorder is not None else contextlib.nullcontext()
    with _torch.DynamoSandbox(model) as sandbox:
        sandbox.own(backend=cap.backend)
        with cap, profiling:
            # whole=False: the program compiles its own parts, and runs as it is.
            compiled = torch.compile(
                model, backend=cap.backend, dynamic=dynamic, **_torch.compile_kwargs()
            ) if whole else model
            if whole:
                sandbox.own(compiled)
            kept = KEPT_OUTPUTS.get()
            for index, (args, kwargs) in enumerate(call_list):
                cap.calls += 1
                cap.call_starts.append(len(cap._collector.events))
                cap.call_values.append(cap.described(model, args, kwargs))
                try:
                    out = compiled(*args, **kwargs)
                except Exception as raised:  # noqa: BLE001 - re-raised below with the report
                    failure = (index, raised)
                    break
                if kept is not None:
                    # Under the coverage profiler: dynscope's own copy, not the program's ops.
                    with torch.profiler.record_function(OWN_MARK):
                        kept.append(detached(out))
        del compiled
    rep = cap.report
    if not whole and not rep.frames:
        rep = cap.rebuilt(notes=(
            "nothing compiled during the calls: your program's compiled parts had been compiled before "
            "report() ran (their cached code ran); report on a fresh program, or call "
            "torch._dynamo.reset() first",
        ))
    if failure is not None:
        _raise_failure(model, call_list, failure, rep, inner=inner, whole=whole)
    if timing or memory:
        from dynscope._capture.timing import time_report
        from dynscope._torch.trace import own_work

        with _torch.DynamoSandbox(model), own_work():
            measured = time_report(
                rep, model, call_list, cap.backend.graphs, modes=modes, options=timing_options,
                capture_s=time.perf_counter() - started, dynamic=dynamic, timing=timing, memory=memory,
            )
        # The one builder again, with what was measured as its input: the same events and
        # graphs give the same graph ids the measurements name.
        rep = cap.rebuilt(measured=measured)
    return rep


def _raise_failure(model: Any, call_list: list[tuple[tuple[Any, ...], dict[str, Any]]],
                   failure: tuple[int, BaseException], rep: Report, *, inner: str | Callable[..., Any],
                   whole: bool) -> NoReturn:
    """Raise the CaptureError for a call that raised, saying whose failure it was (blame.py)."""
    from dynscope._capture.blame import COMPILER, Blame, blame, message

    index, err = failure
    # A program that compiles its own parts is rerun with its own compiles: only eagerly-run
    # reruns can tell (blame's plain compile is of the whole program, as report() compiled it).
    told = blame(model, call_list, index, err, inner) if whole else Blame("", "")
    if told.party == COMPILER:
        rep, frame = crashed(rep)
        if frame is not None:  # the user's function being compiled, not a frame of the compiler
            told = replace(told, at=f"compiling {frame.function} at {frame.filename}:{frame.lineno}",
                           function=frame.function)
    name = inner if isinstance(inner, str) else getattr(inner, "__name__", "custom")
    raise CaptureError(message(told, err, index, len(call_list), rep, name), report=rep, call_index=index,
                       party=told.party) from err


def crashed(rep: Report) -> tuple[Report, Frame | None]:
    """The report with the last frame whose compile failed marked "crashed" (its error raised
    into the program: it did not fall back to eager), and that frame; (rep, None) when none failed."""
    for i in range(len(rep.frames) - 1, -1, -1):
        if rep.frames[i].status == "failed":
            frame = replace(rep.frames[i], status="crashed")
            return replace(rep, frames=(*rep.frames[:i], frame, *rep.frames[i + 1:])), frame
    return rep, None
