"""dynscope._capture.copies: deep copies of what copy.deepcopy refuses (a tensor with a history)."""

from __future__ import annotations

import warnings
import weakref

import torch
from torch import nn

from dynscope._capture.copies import deep_copy
from dynscope._errors import InputError


def test_a_weight_normed_module_is_copied_with_its_computed_weight_detached() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        conv = nn.utils.weight_norm(nn.Conv1d(2, 3, 3))
    x = torch.randn(1, 2, 6)
    conv(x)
    assert conv.weight.grad_fn is not None  # the hook's weight: what copy.deepcopy refuses
    twin = deep_copy(conv)
    assert twin.weight.grad_fn is None and torch.equal(twin.weight, conv.weight)
    assert torch.equal(twin(x), conv(x))
    twin.weight_g.data.mul_(2)  # a copy, not a view of the user's parameters
    assert not torch.equal(twin(x), conv(x))


def test_inputs_with_a_history_are_copied_shared_once_and_keep_requires_grad() -> None:
    leaf = torch.randn(3, requires_grad=True)
    made = leaf * 2
    calls = [((made, {"again": made}), {}), ((leaf.detach(),), {"n": 3})]
    out = deep_copy(calls)
    a, b = out[0][0]
    assert a is b["again"] and a.requires_grad and a.grad_fn is None and torch.equal(a, made)
    assert out[1] == ((out[1][0][0],), {"n": 3}) and out[1][0][0] is not calls[1][0][0]


def test_what_deepcopy_takes_is_copied_as_deepcopy_copies_it() -> None:
    model = nn.Linear(2, 2)
    twin = deep_copy(model)
    assert twin is not model and torch.equal(twin.weight, model.weight) and twin.weight.requires_grad


class _Holder:
    def __init__(self, fn: object) -> None:
        self.run = lambda x: fn(x)  # type: ignore[operator]


class _WithClosure(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)
        lin = self.lin
        self.holder = _Holder(lambda x: lin(x) * 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.holder.run(x)


def test_closures_the_copy_holds_read_the_copy_s_modules_not_the_user_s() -> None:
    # copy.deepcopy keeps a function as itself: the lambda would still call the user's own
    # Linear, and a backward through the copy would fill the user's .grad.
    model = _WithClosure()
    twin = deep_copy(model)
    twin(torch.randn(3, 2)).sum().backward()
    assert model.lin.weight.grad is None and twin.lin.weight.grad is not None
    with torch.no_grad():
        twin.lin.weight.add_(1.0)
    x = torch.randn(1, 2)
    assert not torch.equal(twin(x), model(x))  # the copy's closure reads the copy's weight


class AttrDict(dict):  # type: ignore[type-arg]
    """A config dict read by attribute, as research code writes it: a missing name raises
    KeyError, so Python's own copy.deepcopy fails asking it for ``__deepcopy__``."""

    __getattr__ = dict.__getitem__


class Configured(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.cfg = AttrDict(scale=2.0, inner=AttrDict(k=3), head=self.lin)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cfg.head(x) * self.cfg.scale


def test_an_object_whose_getattr_raises_key_error_is_copied_field_by_field() -> None:
    model = Configured()
    try:
        import copy

        copy.deepcopy(model)
    except KeyError:
        pass
    else:  # pragma: no cover - the premise: Python itself cannot copy it
        raise AssertionError("copy.deepcopy copied the AttrDict: the test no longer tests anything")
    twin = deep_copy(model)
    assert type(twin.cfg) is AttrDict and twin.cfg is not model.cfg and twin.cfg.inner is not model.cfg.inner
    assert twin.cfg.inner.k == 3 and twin.cfg.scale == 2.0
    # What the config shares with the module is shared in the copy too: the copy's own Linear.
    assert twin.cfg.head is twin.lin and twin.lin is not model.lin
    x = torch.randn(1, 2)
    assert torch.equal(twin(x), model(x))
    twin.lin.weight.data.mul_(2)
    assert not torch.equal(twin(x), model(x))


def test_what_cannot_be_copied_is_a_clear_error_naming_it() -> None:
    class Uncopyable:
        def __deepcopy__(self, memo: dict[int, object]) -> object:
            raise TypeError("holds a socket")

    try:
        deep_copy({"conn": Uncopyable()})
    except InputError as err:
        said = str(err)
    else:
        raise AssertionError("no error")
    assert "copy.deepcopy failed on it: TypeError: holds a socket" in said and "dict" in said
    assert "__deepcopy__" in said


class SelfDict(dict):  # type: ignore[type-arg]
    """A config dict that is its own ``__dict__`` (an audio model's hyperparameters): Python's
    copy.deepcopy gives a copy whose items are there but whose attributes are not."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.__dict__ = self


def test_an_object_that_is_its_own_dict_is_copied_with_its_attributes() -> None:
    import copy

    params = SelfDict(noise_schedule=[0.1, 0.2], rate=16000)
    assert not hasattr(copy.deepcopy(params), "noise_schedule")  # the premise: Python's copy loses them
    holder = nn.Module()
    holder.params = params  # type: ignore[assignment]
    twin = deep_copy(holder)
    assert twin.params is not params and twin.params.noise_schedule == [0.1, 0.2] and twin.params.rate == 16000
    assert twin.params.noise_schedule is not params.noise_schedule and vars(twin.params) is twin.params


class Lamb(torch.optim.Optimizer):
    """An optimizer with a setting of its own, as LAMB's reference code keeps ``self.adam``:
    torch's Optimizer.__getstate__ keeps only defaults, state and param_groups."""

    def __init__(self, params: object, lr: float = 1e-2, adam: bool = False) -> None:
        super().__init__(params, {"lr": lr})
        self.adam = adam

    @torch.no_grad()
    def step(self, closure: object = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            for p in group["params"]:
                p.add_(p.grad, alpha=-group["lr"] * (1.0 if self.adam else 2.0))


def test_an_optimizer_is_copied_with_the_settings_its_subclass_keeps() -> None:
    import copy

    lin = nn.Linear(2, 1)
    opt = Lamb(lin.parameters(), adam=True)
    assert not hasattr(copy.deepcopy(opt), "adam")  # the premise: Python's copy drops it
    lin2, opt2 = deep_copy((lin, opt))
    assert opt2.adam is True and opt2.param_groups[0]["params"][0] is lin2.weight
    lin2(torch.ones(1, 2)).sum().backward()
    before = lin.weight.detach().clone()
    opt2.step()
    assert torch.equal(lin.weight, before) and not torch.equal(lin2.weight, before)


def test_an_optimizer_an_lr_scheduler_wraps_steps_the_copied_parameters_not_the_user_s() -> None:
    torch.manual_seed(0)
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)  # wraps opt.step, kept as opt's attribute
    holder = {"model": model, "opt": opt, "sched": sched}
    model(torch.ones(1, 2)).sum().backward()
    weight = model.weight.detach().clone()

    # The premise: the optimizer's own attributes, which its copy keeps (a subclass's settings
    # are among them), hold the scheduler's wrapper of its step, over a weak reference to it.
    wrapper = vars(opt)["step"]
    assert any(isinstance(c.cell_contents, weakref.ref) and c.cell_contents() is opt for c in wrapper.__closure__)

    twin = deep_copy(holder)
    twin["model"](torch.ones(1, 2)).sum().backward()
    twin["opt"].step()
    twin["sched"].step()
    assert torch.equal(model.weight, weight)  # the user's did not move, though its gradient is there
    assert not torch.equal(twin["model"].weight, weight)
    assert twin["opt"]._opt_called and twin["sched"].last_epoch == 1 and sched.last_epoch == 0
