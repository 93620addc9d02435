"""dynscope.fix never runs the user's own objects: a trainer's step, a train step reading its
file's globals, a partial, a model holding a lock, a thread's queue, a log file or a
generator (tests/corpus/fix_owned.py), and a script that calls fix at its top level. Each
asserts the user's objects are as they were after fix, and that the patch is still verified
(each run starts from the same copy of the user's state)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch

import dynscope
from tests.corpus import fix_owned as fo

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.heavy


def _branch(result: dynscope.FixResult) -> dynscope.Patch:
    (patch,) = [p for p in result.patches if p.rewrite == "branch to torch.where"]
    return patch


def test_a_trainer_s_step_runs_on_copies_of_its_model_optimizer_and_scheduler() -> None:
    trainer = fo.Trainer()
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    trainer.model(x).sum().backward()  # the user's gradients are there, as after their own backward
    weight, grad = trainer.model.weight.detach().clone(), trainer.model.weight.grad.clone()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        result = dynscope.fix(trainer.step, (x, y))
    assert _branch(result).verified, _branch(result).why_not
    assert torch.equal(trainer.model.weight, weight) and torch.equal(trainer.model.weight.grad, grad)
    assert trainer.opt.state == {} and trainer.sched.last_epoch == 0 and trainer.steps == 0
    assert trainer.opt.param_groups[0]["lr"] == 1e-2
    # Each copy's scheduler saw its own optimizer step (the wrapper it set on the copy is the copy's)
    assert not [w for w in said if "lr_scheduler.step()` before `optimizer.step()" in str(w.message)]


def test_a_train_step_reading_its_file_s_globals_runs_on_copies_of_them() -> None:
    weight = fo.model.weight.detach().clone()
    result = dynscope.fix(fo.global_step, (torch.randn(16, 8), torch.randn(16, 1)))
    assert _branch(result).verified, _branch(result).why_not
    assert torch.equal(fo.model.weight, weight) and fo.model.weight.grad is None
    assert fo.history == [] and fo.optimizer.state_dict()["state"] == {}


def test_a_partial_is_run_over_copies_of_its_arguments_and_its_patch_verified() -> None:
    step = fo.partial_head()
    result = dynscope.fix(step, torch.randn(4, 8))
    assert _branch(result).verified, _branch(result).why_not
    assert step.keywords["w"].grad is None


def test_a_model_holding_a_lock_a_writer_thread_and_a_log_file_is_fixed_and_the_file_not_written(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    model = fo.Logged(str(log))
    try:
        result = dynscope.fix(model, torch.randn(4, 8))
        model.log.flush()
    finally:
        model.log.close()
    assert _branch(result).verified, _branch(result).why_not
    assert log.read_bytes() == b"" and model.writer.q.empty() and not model.lock.locked()


def test_a_model_that_draws_from_a_generator_it_holds_runs_on_the_generator_made_again() -> None:
    model = fo.Annealed()
    result = dynscope.fix(model, torch.randn(4, 8))
    assert _branch(result).verified, _branch(result).why_not
    assert next(model.temps) == 1.0  # the user's did not advance


def test_a_model_that_draws_from_a_started_generator_is_told_so_and_the_generator_not_advanced() -> None:
    model = fo.Annealed(started=True)
    with pytest.raises(dynscope.InputError, match=r"cannot copy the generator held at model\.temps"):
        dynscope.fix(model, torch.randn(4, 8))
    assert next(model.temps) == 0.9


SCRIPT = '''
import torch
from torch import nn
import dynscope

print("top level ran")
REGISTRY = {}


def register(cls):
    REGISTRY[cls.__name__] = cls
    return cls


@register
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 1)

    def forward(self, x):
        y = self.fc(x)
        if y.mean() > 0:
            y = y * 2
        else:
            y = y - 1
        return y


model = REGISTRY["Net"]()
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def train_step(x, y):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    return loss.detach()


x, y = torch.randn(16, 8), torch.randn(16, 1)
for _ in range(3):
    train_step(x, y)
weight = model.fc.weight.detach().clone()
result = dynscope.fix(train_step, (x, y))
print([(p.rewrite, p.verified, p.why_not) for p in result.patches])
print("unchanged", torch.equal(weight, model.fc.weight), REGISTRY["Net"] is Net)
'''


def test_a_script_that_calls_fix_at_its_top_level_is_not_run_again_by_fix(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("top level ran") == 1, done.stdout
    assert "[('branch to torch.where', True, '')]" in done.stdout
    assert "unchanged True True" in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]  # no copy of the script left beside it


def test_only_the_globals_a_function_reads_are_copied_not_an_attribute_of_the_same_name() -> None:
    from dynscope._capture.fix.programs import global_state

    # global_step reads the file's `model`, `optimizer` and `history`; Trainer.step reads
    # `self.model` and `self.opt`, an attribute named as the file's global `model`, not the global.
    assert global_state(fo.global_step) == ["history", "model", "optimizer"]
    assert global_state(fo.Trainer.step) == []


def test_a_function_that_calls_itself_reads_the_copies_in_every_call() -> None:
    from dynscope._capture.fix.programs import copied

    fo.history.clear()
    twin = copied(fo.recursive_log)
    twin(torch.ones(2), 3)
    assert fo.history == []  # the user's list: no call of the copy, however deep, appended to it
    fo.recursive_log(torch.ones(2), 1)
    assert len(fo.history) == 1
    fo.history.clear()
