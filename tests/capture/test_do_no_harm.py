"""Do no harm: every hook dynscope installs, made to fail, leaves the program's outputs and
exceptions what a plain ``torch.compile`` gives, and the report says what was lost.

Faults are injected with ``dynscope._hooks.injected`` (the hook's own guard raises), over the
held-out programs of tests/corpus/harm_programs.py that once crashed under the line tracer.
Truth is the same program under a plain ``torch.compile(backend="eager")``.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import torch

import dynscope
from dynscope import _hooks
from dynscope._capture.capture import KEPT_OUTPUTS
from tests.corpus import harm_programs

pytestmark = pytest.mark.filterwarnings("ignore")


def _spread(call: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if isinstance(call, dict):
        return (), call
    return (tuple(call), {}) if isinstance(call, (tuple, list)) and not isinstance(call, torch.Tensor) else ((call,), {})


def _outcome(run: Any) -> tuple[list[Any], tuple[type, str] | None]:
    """(outputs of the calls that returned, (type, message) of what raised or None)."""
    outs: list[Any] = []
    try:
        run(outs)
    except Exception as err:  # noqa: BLE001 - what raised is the outcome
        cause = err.__cause__ if isinstance(err, dynscope.CaptureError) else err
        return outs, (type(cause), str(cause))
    return outs, None


def _plain(name: str) -> tuple[list[Any], tuple[type, str] | None]:
    """The program under a plain torch.compile: the truth."""
    model, calls = (harm_programs.SMALL | harm_programs.HF)[name]()
    torch._dynamo.reset()

    def run(outs: list[Any]) -> None:
        compiled = torch.compile(model, backend="eager")
        for call in calls:
            args, kwargs = _spread(call)
            outs.append(compiled(*args, **kwargs))

    try:
        return _outcome(run)
    finally:
        torch._dynamo.reset()


def _under_report(name: str) -> tuple[tuple[list[Any], tuple[type, str] | None], dynscope.Report | None]:
    model, calls = (harm_programs.SMALL | harm_programs.HF)[name]()
    got: dict[str, Any] = {}

    def run(outs: list[Any]) -> None:
        token = KEPT_OUTPUTS.set(outs)
        try:
            got["rep"] = dynscope.report(model, calls=calls)
        except dynscope.CaptureError as err:
            got["rep"] = err.report
            raise
        finally:
            KEPT_OUTPUTS.reset(token)

    return _outcome(run), got.get("rep")


def _under_capture(name: str) -> tuple[tuple[list[Any], tuple[type, str] | None], dynscope.Report | None]:
    model, calls = (harm_programs.SMALL | harm_programs.HF)[name]()
    torch._dynamo.reset()
    cap = dynscope.capture()

    def run(outs: list[Any]) -> None:
        with cap:
            compiled = torch.compile(model, backend=cap.backend)
            for call in calls:
                args, kwargs = _spread(call)
                outs.append(compiled(*args, **kwargs))

    try:
        return _outcome(run), cap.report
    finally:
        torch._dynamo.reset()


def _same(expected: tuple[list[Any], tuple[type, str] | None], got: tuple[list[Any], tuple[type, str] | None]) -> None:
    (want_outs, want_err), (got_outs, got_err) = expected, got
    assert got_err == want_err
    assert len(got_outs) == len(want_outs)
    for a, b in zip(want_outs, got_outs, strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=0)


_TRUTH: dict[str, Any] = {}


def _truth(name: str) -> tuple[list[Any], tuple[type, str] | None]:
    if name not in _TRUTH:
        _TRUTH[name] = _plain(name)
    return _TRUTH[name]


def _noted(rep: dynscope.Report | None, hook: str) -> bool:
    return rep is not None and any(f"dynscope's {hook} failed" in n for n in rep.notes)


@pytest.mark.heavy  # 7 hooks x 4 programs x 2 ways: 17 s
@pytest.mark.parametrize("hook", sorted(_hooks.HOOKS))
def test_a_failing_hook_never_reaches_the_program(hook: str) -> None:
    """Under report() and capture(), with the hook failing from its first run: the outputs and
    errors of every small program are a plain torch.compile's, and the hook's failure is a note
    in the report of at least one program (so the fault really was injected where it runs)."""
    noted = []
    for name in harm_programs.SMALL:
        for mode in (_under_report, _under_capture):
            with _hooks.injected(hook):
                outcome, rep = mode(name)
            _same(_truth(name), outcome)
            if _noted(rep, hook):
                noted.append((name, mode.__name__))
    assert noted, f"no program ran dynscope's {hook}: the fault was never injected"


def test_without_faults_no_note_and_the_same_outputs() -> None:
    for name in harm_programs.SMALL:
        for mode in (_under_report, _under_capture):
            outcome, rep = mode(name)
            _same(_truth(name), outcome)
            assert rep is not None and not any("turned itself off" in n for n in rep.notes)


def test_a_code_object_holding_a_dict_is_traced() -> None:
    """The line tracer's caches are keyed by identity: Dynamo's code objects can hold a dict
    constant (unhashable). The feature-hashing model once raised "unhashable type: 'dict'"."""
    outcome, rep = _under_report("feature_hash")
    _same(_truth("feature_hash"), outcome)
    assert rep is not None and rep.break_count > 0
    assert not rep.notes or not any("line tracer" in n for n in rep.notes)


def test_the_program_error_reaches_the_user_as_its_own() -> None:
    """picky raises its own BadInput on call 1: CaptureError's cause is that very error."""
    with pytest.raises(dynscope.CaptureError) as info:
        model, calls = harm_programs.picky()
        dynscope.report(model, calls=calls)
    assert isinstance(info.value.__cause__, harm_programs.BadInput)
    assert info.value.call_index == 1
    assert info.value.report.graph_count >= 1  # what was captured before is kept


@pytest.mark.heavy
@pytest.mark.parametrize("name", sorted(harm_programs.HF))
def test_held_out_hf_models_report_as_under_plain_compile(name: str) -> None:
    """BigBird block-sparse and ViLT once raised from the line tracer; now their outputs are
    a plain compile's, and the counts are PyTorch's (tests/invariants.py checks each report)."""
    outcome, rep = _under_report(name)
    _same(_truth(name), outcome)
    assert rep is not None and rep.graph_count > 0 and rep.break_count > 0
    assert not any("turned itself off" in n for n in rep.notes)


@pytest.mark.heavy
@pytest.mark.parametrize("name", sorted(harm_programs.HF))
def test_hf_models_with_every_hook_failing(name: str) -> None:
    """All hooks failing at once (one by one: the small programs above): the outputs stay a
    plain compile's, and each hook that ran says so."""
    with _hooks.injected(*_hooks.HOOKS):
        outcome, rep = _under_report(name)
    _same(_truth(name), outcome)
    assert rep is not None
    # (the line tracer is armed by the compile callbacks, which fail first: it never runs)
    for hook in ("trace collector", "recording backend", "compile callbacks", "call description"):
        assert _noted(rep, hook), (hook, rep.notes)


def test_injected_names_are_checked() -> None:
    with pytest.raises(KeyError), contextlib.ExitStack() as stack:
        stack.enter_context(_hooks.injected("no such hook"))
