"""Errors raised by dynscope.

Every error dynscope raises on purpose derives from one base class::

    DynscopeError
    ├── InputError            bad arguments: a model that is not callable, inputs of the
    │   │                     wrong kind, ``calls`` together with ``inputs``, an unknown option
    │   └── DecompressionLimitError  a ``.gz`` trace log that unzips to over 100 times its
    │                         size (a gzip bomb); names the file
    ├── CaptureError          the model raised while dynscope watched it; ``.report`` keeps
    │                         everything captured before the failure
    ├── SchemaError           a saved report that cannot be read (newer schema, not a report)
    ├── GraphvizNotFoundError the Graphviz ``dot`` binary is missing (SVG output only)
    ├── CompileBudgetError    a compile budget was exceeded (also an ``AssertionError``, so
    │                         pytest shows it as a test failure)
    ├── CacheMissError        ``assert_warm()``: a warm start compiled (a cache missed or was
    │                         bypassed); also an ``AssertionError``
    └── RankDivergenceError   ``watch_ranks()``: the ranks of a job compiled differently
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - typing only
    from dynscope._model import Report
    from dynscope._model.watch import Verdict

__all__ = [
    "CacheMissError",
    "CaptureError",
    "CompileBudgetError",
    "DecompressionLimitError",
    "DynscopeError",
    "GraphvizNotFoundError",
    "InputError",
    "RankDivergenceError",
    "RankDivergenceWarning",
    "SchemaError",
]


class DynscopeError(Exception):
    """Base class of every error dynscope raises on purpose."""


class InputError(DynscopeError, ValueError):
    """The arguments given to a dynscope function are not usable.

    The message names what was received, what is allowed and what to do.

    Attributes:
        why: what was wrong without naming the input again (a rank's note in a folder's
            report says it beside the file's name); the message where none was given.
    """

    def __init__(self, message: str = "", *, why: str = "") -> None:
        super().__init__(message)
        self.why = why or message


class DecompressionLimitError(InputError):
    """A ``.gz`` TORCH_TRACE log unzipped to more than its limit (``GZIP_MAX_RATIO`` times
    its size past ``GZIP_FLOOR`` bytes, ``dynscope._torch.trace_log``): a gzip bomb or a
    file that is not a log. The message names the file and how to read it anyway."""


class CaptureError(DynscopeError):
    """The watched program raised; ``report`` holds what was captured before it did.

    Attributes:
        report: the partial :class:`~dynscope.Report` (graphs, breaks, recompiles and
            guards captured up to the failure).
        call_index: which call of ``calls`` raised (0-based).
        party: whose failure it was, found by rerunning the calls on copies: "model" (it
            raises eagerly too), "compiler" (it runs eagerly but a plain ``torch.compile``
            raises), "dynscope" (it runs both ways: a dynscope bug), or "" (not told).
    """

    def __init__(self, message: str, *, report: Report, call_index: int, party: str = "") -> None:
        super().__init__(message)
        self.report = report
        self.call_index = call_index
        self.party = party


class SchemaError(DynscopeError):
    """A saved report cannot be loaded (not a dynscope report, or a newer schema)."""


class GraphvizNotFoundError(DynscopeError, RuntimeError):
    """Graphviz's ``dot`` program is needed for SVG output and was not found."""


class CompileBudgetError(DynscopeError, AssertionError):
    """A program broke its compile budget (too many graph breaks, recompiles, too little coverage).

    Attributes:
        report: the :class:`~dynscope.Report` that was checked.
        problems: one line per exceeded limit.
    """

    def __init__(self, message: str, *, report: Report, problems: list[str]) -> None:
        super().__init__(message)
        self.report = report
        self.problems = problems


class CacheMissError(DynscopeError, AssertionError):
    """A run that should have started warm compiled: a compile cache missed or was bypassed
    (``dynscope.assert_warm``).

    Attributes:
        diff: the ``CacheDiff`` checked (``misses``: each lookup that did not hit, explained
            against the reference run when one was given).
    """

    def __init__(self, message: str, *, diff: object) -> None:
        super().__init__(message)
        self.diff = diff


class RankDivergenceError(DynscopeError):
    """The ranks of a distributed job compiled differently (``dynscope.watch_ranks``).

    Raised on every rank that takes part in the check of the compile that diverged, before
    the compiled code runs its collectives. The message says which ranks, the frame and
    compile, what differs, the user's line and a remedy.

    Attributes:
        verdict: the plain-data :class:`~dynscope._model.watch.Verdict` (``divergences``,
            ``ranks``, ``frame``, ``compile_id``, ``line``, ``remedy``, ``found_by``).
        saved: where this rank's report so far was written ("" when it was not).
    """

    def __init__(self, verdict: Verdict, *, saved: str = "") -> None:
        super().__init__(verdict.message(saved=saved))
        self.verdict = verdict
        self.saved = saved

    def __reduce__(self) -> tuple[object, ...]:
        # Pickled (multiprocessing, torchrun's error files) as the plain error, the subclass
        # that leaves a compile (dynscope._torch.distributed.raisable_in_compile) aside.
        return (_rank_divergence, (self.verdict, self.saved))


def _rank_divergence(verdict: Verdict, saved: str) -> RankDivergenceError:
    return RankDivergenceError(verdict, saved=saved)


class RankDivergenceWarning(UserWarning):
    """``watch_ranks(on_divergence="warn")``: the ranks compiled differently; the job goes on."""
