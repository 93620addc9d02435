"""dynscope._capture.resources: what a copy of the user's program holds in place of what
Python cannot copy (a lock, a file, a thread's queue, a generator, a data iterator). Each
premise, that Python's own ``copy.deepcopy`` refuses the object, is asserted first."""

from __future__ import annotations

import copy
import queue
import threading
from typing import TYPE_CHECKING, Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from dynscope._capture.copies import deep_copy
from dynscope._capture.resources import StandIn
from dynscope._errors import InputError

if TYPE_CHECKING:
    from pathlib import Path


def _refused_by_python(value: Any) -> None:
    with pytest.raises((TypeError, NotImplementedError)):
        copy.deepcopy(value)


class Collector(nn.Module):
    """A module whose statistics are guarded by a lock (a metrics collector read by a thread)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.lock = threading.Lock()
        self.rlock = threading.RLock()
        self.total = [0.0]


def test_a_lock_is_a_new_free_lock_of_its_kind_in_the_copy() -> None:
    model = Collector()
    _refused_by_python(model)
    with model.lock:  # held by the user while the copy is made: the copy's is free all the same
        twin = deep_copy(model)
    assert type(twin.lock) is type(model.lock) and twin.lock is not model.lock and not twin.lock.locked()
    assert type(twin.rlock) is type(model.rlock) and twin.rlock is not model.rlock
    assert twin.fc is not model.fc and torch.equal(twin.fc.weight, model.fc.weight)
    twin.total.append(1.0)
    assert model.total == [0.0]


class EventWriter:
    """A tensorboard-style writer: rows put on a queue that a daemon thread drains."""

    def __init__(self) -> None:
        self.q: queue.Queue[Any] = queue.Queue()
        self.rows: list[Any] = []
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        while True:
            self.rows.append(self.q.get())

    def add_scalar(self, tag: str, value: float) -> None:
        self.q.put((tag, value))


def test_a_queue_drained_by_a_thread_is_a_working_queue_of_the_copy_s_own() -> None:
    writer = EventWriter()
    _refused_by_python(writer)
    twin = deep_copy({"writer": writer})["writer"]
    assert twin.thread is writer.thread  # a handle: the copy never starts or joins it
    twin.add_scalar("loss", 1.0)  # goes on the copy's queue, never to the user's writer
    assert twin.q.get_nowait() == ("loss", 1.0)
    assert writer.q.empty() and twin.q is not writer.q and twin.q.mutex is not writer.q.mutex
    # the queue's three conditions share its one (new) lock, as a queue's do
    assert twin.q.not_empty._lock is twin.q.mutex is twin.q.not_full._lock


def test_a_file_for_writing_is_an_in_memory_file_and_the_user_s_is_not_written(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    holder = {"log": log.open("w"), "raw": (tmp_path / "raw.bin").open("wb")}
    try:
        _refused_by_python(holder)
        holder["log"].write("user line\n")
        holder["log"].flush()
        twin = deep_copy(holder)
        twin["log"].write("from the copy\n")
        twin["raw"].write(b"\x00")
    finally:
        holder["log"].close()
        holder["raw"].close()
    assert log.read_text() == "user line\n"
    assert (tmp_path / "raw.bin").read_bytes() == b""


def test_a_file_for_reading_is_the_same_file_opened_again_where_the_user_s_stands(tmp_path: Path) -> None:
    data = tmp_path / "tokens.txt"
    data.write_text("a\nb\nc\n")
    with data.open() as f:
        assert f.readline() == "a\n"
        twin = deep_copy([f])[0]
        try:
            assert twin.readline() == "b\n" and twin.readline() == "c\n"
        finally:
            twin.close()
        assert f.readline() == "b\n"  # the user's position did not move


def schedule(t: float = 1.0, *, factor: float = 0.5) -> Any:
    while True:
        yield t
        t *= factor


class Sampler:
    """N-BEATS-style: a sampler whose ``__iter__`` draws windows forever from its own RNG."""

    def __init__(self) -> None:
        self.rng = torch.Generator().manual_seed(0)

    def __iter__(self) -> Any:
        while True:
            yield torch.rand(2, generator=self.rng)


class Annealed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.temps = schedule(2.0, factor=0.5)
        self.windows = iter(Sampler())
        self.started = schedule()
        next(self.started)
        self.batches = iter(DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2))
        self.backend = torch  # a Python module held as an attribute


def test_a_generator_not_yet_started_is_made_again_over_copies_of_its_arguments() -> None:
    model = Annealed()
    _refused_by_python(model.temps)
    twin = deep_copy(model)
    assert [next(twin.temps) for _ in range(3)] == [2.0, 1.0, 0.5]
    first = next(twin.windows)
    assert torch.equal(first, next(model.windows))  # the same draws, from the copied random state
    assert next(model.temps) == 2.0  # the user's did not advance


def test_a_started_generator_or_an_iterator_is_a_stand_in_that_names_where_it_was_held_when_used() -> None:
    model = Annealed()
    _refused_by_python(model.started)
    _refused_by_python(model.batches)
    _refused_by_python(torch)
    twin = deep_copy(model)
    assert twin.backend is torch
    assert isinstance(twin.started, StandIn) and isinstance(twin.batches, StandIn)
    x = torch.randn(1, 2)
    assert torch.equal(twin.fc(x), model.fc(x))  # what does not use them runs
    with pytest.raises(InputError, match=r"the generator held at model\.started; the program used it"):
        next(twin.started)
    with pytest.raises(InputError, match=r"_SingleProcessDataLoaderIter held at model\.batches"):
        iter(twin.batches)
    assert next(model.started) == 0.5  # the user's generator did not advance
    assert "model.started" in repr(twin.started)


def _loss_factory() -> Any:
    def l1(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # a local function: its reduce raises
        return (a - b).abs().mean()

    return l1


def test_what_deepcopy_keeps_as_it_is_stays_itself_beside_what_it_refuses() -> None:
    model = Collector()
    model.loss_fn = _loss_factory()  # type: ignore[assignment]
    with pytest.raises(TypeError, match="cannot pickle 'function' object"):
        model.loss_fn.__reduce_ex__(4)  # what tells the objects deepcopy refuses from the rest
    twin = deep_copy(model)  # the lock makes Python's deepcopy refuse the whole
    assert twin.loss_fn is model.loss_fn and not isinstance(twin.loss_fn, StandIn)
