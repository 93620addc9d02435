"""What a program says and keeps is behaviour too (issue "Fix what we have never seen": none
verified in the must-not cases). The verifier notes the lines a run prints and the log records
its loggers write (fix/said.py), and the plain Python values its modules keep; a patch whose
compiled run silences a message, or leaves a tensor where the program kept a float, is not
verified. Noting changes nothing the program writes. Live in the heavy tier on the held-out
must-not shapes: a print of a count, a logged warning, a list of logged floats."""

from __future__ import annotations

import logging
import sys
import threading
from typing import TYPE_CHECKING

import numpy as np
import pytest
import torch

import dynscope
from dynscope._capture.fix import said, verify

if TYPE_CHECKING:
    from pathlib import Path


def test_printed_lines_and_written_records_are_noted_with_numbers_read_as_hashes(
        capsys: pytest.CaptureFixture[str]) -> None:
    user = logging.getLogger("said_user")
    user.setLevel(logging.INFO)
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    keep = Keep()
    user.addHandler(keep)
    try:
        with said.listening() as heard:
            print("step 3: loss 0.25", end="")
            print(" done")
            user.info("lr %.4f", 0.001)
            user.debug("below the level: never made")
            logging.getLogger("torch._dynamo.said_test").warning("PyTorch's own")
        assert heard.done() == ["print: step #: loss # done", "said_user INFO: lr #"]
        # What the program writes, and where, is as without the listening.
        assert capsys.readouterr().out == "step 3: loss 0.25 done\n"
        assert [r.getMessage() for r in records] == ["lr 0.0010"]
        assert logging.Logger.callHandlers.__name__ == "callHandlers"  # put back
    finally:
        user.removeHandler(keep)


def test_a_record_that_reaches_no_handler_but_a_null_one_is_not_said() -> None:
    quiet = logging.getLogger("said_quiet")
    quiet.addHandler(logging.NullHandler())
    quiet.propagate = False
    with said.listening() as heard:
        quiet.warning("goes nowhere")
    assert heard.done() == []
    # With no handler anywhere Python's last resort writes a warning to stderr: it is said.
    bare = logging.getLogger("said_bare")
    bare.propagate = False
    with said.listening() as heard:
        bare.warning("to stderr")
    assert heard.done() == ["said_bare WARNING: to stderr"]


def test_another_threads_messages_are_not_this_runs() -> None:
    other = logging.getLogger("said_thread")
    other.addHandler(logging.StreamHandler(sys.stderr))
    with said.listening() as heard:
        t = threading.Thread(target=other.warning, args=("from another thread",))
        t.start()
        t.join()
    assert heard.done() == []


def test_the_difference_names_the_message_not_said_and_ignores_order() -> None:
    assert said.differs(["print: a", "x INFO: b"], ["x INFO: b", "print: a"]) == ""
    why = said.differs(["print: vad: #/# frames voiced"], [])
    assert why == ("the unpatched eager run said 1 message(s), the patched compiled run 0; "
                   "not said under torch.compile: 'print: vad: #/# frames voiced'")
    assert "said only under torch.compile: 'print: extra'" in said.differs([], ["print: extra"])


def test_a_list_of_floats_become_tensors_is_a_changed_state() -> None:
    class Trainer(torch.nn.Module):
        def __init__(self, kept: list[object]) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(2, 2)
            self.loss_log = kept
            self.step = 3
            self._private = object()  # neither compared nor copied

        def log(self, value: object) -> None:  # the module's own log, which it reads to append to
            self.loss_log.append(value)

    a = said.python_state([("model", Trainer([0.5]))], lambda t: t.clone(), torch.is_tensor)
    b = said.python_state([("model", Trainer([torch.tensor(0.5)]))], lambda t: t.clone(), torch.is_tensor)
    assert sorted(a) == ["model.loss_log", "model.step"]
    run = verify.Run([], {}, None, (), a)
    ev = verify.compare(run, verify.Run([], {}, None, (), b))
    assert ev.state_differs == ("model.loss_log holds a list of 1 (float) after the unpatched eager run, "
                                "a list of 1 (tensors) after the patched compiled run")
    assert verify.compare(run, verify.Run([], {}, None, (), dict(a))).state_differs == ""



class _Meter:
    """A running average of the program's own class, held by a module."""

    def __init__(self, avg: object) -> None:
        self.avg = avg


def test_a_held_meter_s_float_kept_as_a_tensor_is_said_a_module_s_own_is_a_change() -> None:
    class Loop(torch.nn.Module):
        def __init__(self, avg: object, total: object) -> None:
            super().__init__()
            self.meter = _Meter(avg)
            self.total_loss = total

        def postfix(self) -> str:  # the module reads its own running loss: not only added to
            return f"{self.total_loss:.4f}"

    def state(avg: object, total: object) -> dict[str, object]:
        return said.python_state([("model", Loop(avg, total))], lambda t: t.clone(), torch.is_tensor)

    run = verify.Run([], {}, None, (), state(0.25, 1.5))
    held = verify.compare(run, verify.Run([], {}, None, (), state(torch.tensor(0.25), 1.5)))
    assert held.state_differs == "" and held.state_as_tensors == ("model.meter.avg",)
    own = verify.compare(run, verify.Run([], {}, None, (), state(0.25, torch.tensor(1.5))))
    assert own.state_differs.startswith("model.total_loss holds float") and own.state_as_tensors == ()
    other = verify.compare(run, verify.Run([], {}, None, (), state(torch.tensor(0.5), 1.5)))  # another value
    assert other.state_differs.startswith("model.meter.avg holds float")


class _Accumulating(torch.nn.Module):
    """A step that adds each loss to its own running total and never reads it back itself (an
    FNO's ``self.train_l2 += loss.item()``, read by the epoch loop outside the call)."""

    def __init__(self, total: object) -> None:
        super().__init__()
        self.train_l2 = total

    def forward(self, loss: torch.Tensor) -> torch.Tensor:
        self.train_l2 += loss.item()
        return loss


class _Rereading(_Accumulating):
    def forward(self, loss: torch.Tensor) -> torch.Tensor:
        self.train_l2 = self.train_l2 + loss.item()  # read, then set: not only added to
        return loss


def test_a_module_s_own_float_it_only_adds_to_may_be_kept_a_tensor_one_it_reads_may_not() -> None:
    assert said.only_accumulated(_Accumulating, "train_l2")
    assert not said.only_accumulated(_Rereading, "train_l2")  # its base only adds; it reads
    assert not said.only_accumulated(_Accumulating, "missing")  # never set: nothing known

    def compared(cls: type[_Accumulating]) -> object:
        run = verify.Run([], {}, None, (), said.python_state([("model", cls(0.25))], torch.clone, torch.is_tensor))
        got = said.python_state([("model", cls(torch.tensor(0.25)))], torch.clone, torch.is_tensor)
        return verify.compare(run, verify.Run([], {}, None, (), got))

    assert compared(_Accumulating).state_as_tensors == ("model.train_l2",)  # type: ignore[attr-defined]
    assert compared(_Rereading).state_differs.startswith("model.train_l2 holds float")  # type: ignore[attr-defined]


class _Writer:
    """An event writer of the program's own class, held by a module: rows ``(tag, value, step)``
    and the latest value of each tag."""

    def __init__(self, rows: list[object], latest: dict[str, object]) -> None:
        self.rows = rows
        self.latest = latest


@pytest.mark.parametrize(("rows", "latest", "differs"), [
    ([("loss", torch.tensor(0.25), 3)], {"loss": torch.tensor(0.25)}, ""),  # floats kept as tensors: said
    ([("loss", 0.25, 3)], {"loss": torch.tensor(0.25)}, ""),
    ([("loss", torch.tensor(0.25), 4)], {"loss": 0.25}, "model.writer.rows holds"),  # the step differs too
    ([("loss", torch.tensor(0.5), 3)], {"loss": 0.25}, "model.writer.rows holds"),  # another value
    ([("loss", 0.25, torch.tensor(3))], {"loss": 0.25}, "model.writer.rows holds"),  # an int (a count) turned tensor
    ([("loss", 0.25, 3), ("lr", 0.1, 3)], {"loss": 0.25}, "model.writer.rows holds"),  # a row more
])
def test_a_held_writer_s_rows_with_floats_kept_as_tensors_are_said_anything_else_is_a_change(
        rows: list[object], latest: dict[str, object], differs: str) -> None:
    class Loop(torch.nn.Module):
        def __init__(self, rows: list[object], latest: dict[str, object]) -> None:
            super().__init__()
            self.writer = _Writer(rows, latest)

    def state(rows: list[object], latest: dict[str, object]) -> dict[str, object]:
        return said.python_state([("model", Loop(rows, latest))], lambda t: t.detach().clone(), torch.is_tensor)

    run = verify.Run([], {}, None, (), state([("loss", 0.25, 3)], {"loss": 0.25}))
    ev = verify.compare(run, verify.Run([], {}, None, (), state(rows, latest)))
    if differs:
        assert ev.state_differs.startswith(differs) and ev.state_as_tensors == (), ev.state_differs
    else:
        assert ev.state_differs == "" and ev.state_as_tensors, ev


class _Stats:
    """A stats logger of the program's own class, kept on a module (pymarl's learner keeps one)."""

    def __init__(self) -> None:
        self.stats: dict[str, list[tuple[int, float]]] = {}
        self.sink = logging.getLogger("stats")  # a library's object: not compared


def test_what_an_object_of_the_programs_own_class_keeps_is_state_too() -> None:
    class Learner(torch.nn.Module):
        def __init__(self, logged: bool) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(2, 2)
            self.logger = _Stats()
            if logged:
                self.logger.stats["loss"] = [(500, 0.25)]

    a = said.python_state([("model", Learner(True))], lambda t: t.clone(), torch.is_tensor)
    b = said.python_state([("model", Learner(False))], lambda t: t.clone(), torch.is_tensor)
    assert a == {"model.logger.stats": {"loss": [(500, 0.25)]}}, a  # said by its path; the Logger left out
    ev = verify.compare(verify.Run([], {}, None, (), a), verify.Run([], {}, None, (), b))
    assert ev.state_differs == ("model.logger.stats holds a dict of 1 (float, int, str) after the unpatched eager "
                                "run, a dict of 0 after the patched compiled run")


def test_numpys_numbers_are_read_as_pythons() -> None:
    # A compiled run whose numpy code Dynamo traced leaves a 0-d array where eager left an
    # np.float64 (TRL's KL controller): the same number, not a changed state.
    class Controller(torch.nn.Module):
        def __init__(self, value: object) -> None:
            super().__init__()
            self.kl_value, self.history = value, np.array([1.0, 2.0])

    eager = said.python_state([("model", Controller(np.float64(0.25)))], lambda t: t.clone(), torch.is_tensor)
    traced = said.python_state([("model", Controller(np.array(0.25)))], lambda t: t.clone(), torch.is_tensor)
    assert eager == traced == {"model.kl_value": 0.25, "model.history": [1.0, 2.0]}
    assert type(eager["model.kl_value"]) is float
    moved = said.python_state([("model", Controller(np.float64(0.5)))], lambda t: t.clone(), torch.is_tensor)
    assert verify.compare(verify.Run([], {}, None, (), eager), verify.Run([], {}, None, (), moved)).state_differs

PROGRAM = '''import logging

import torch

logger = logging.getLogger("saidmod")


class Vad(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 1)
        self.loss_log = []

    def forward(self, x):
        voiced = self.fc(x).squeeze(-1) > 0
        print(f"vad: {int(voiced.sum())}/{x.shape[0]} frames voiced")
        loss = (self.fc(x) ** 2).mean()
        self.loss_log.append(loss.item())
        return loss


class Quiet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        logger.info("hidden norm %s", h.norm())
        return h.relu()
'''


@pytest.mark.heavy
def test_a_silenced_print_and_a_log_of_tensors_are_not_verified_a_record_never_written_is(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "saidmod.py").write_text(PROGRAM)
    sys.path.insert(0, str(tmp_path))
    try:
        import saidmod  # type: ignore[import-not-found]

        vad = dynscope.fix(saidmod.Vad(), torch.randn(6, 4))
        quiet = dynscope.fix(saidmod.Quiet(), torch.ones(2, 4))  # at the root's WARNING: nothing written
        saidmod.logger.setLevel(logging.INFO)
        saidmod.logger.addHandler(logging.StreamHandler(sys.stderr))
        heard = dynscope.fix(saidmod.Quiet(), torch.ones(2, 4))  # now written to stderr
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("saidmod", None)
    printed, logged = sorted(vad.patches, key=lambda p: p.lineno)
    assert not printed.verified and "not said under torch.compile: 'print: vad: #/# frames voiced'" in printed.why_not
    assert not logged.verified
    assert "what the model keeps changes: model.loss_log holds a list of 1 (float)" in logged.why_not
    (guard,) = quiet.patches
    assert guard.verified and guard.rewrite == "guard side effect", guard.why_not
    assert "what it prints or logs is not said there" in guard.assumes
    (silenced,) = heard.patches
    assert not silenced.verified
    assert "not said under torch.compile: 'saidmod INFO: hidden norm tensor(#" in silenced.why_not
    capsys.readouterr()
