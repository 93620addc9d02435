"""A corpus of small programs with known graph breaks and recompiles.

Lines that break carry a ``# BREAK: <category>`` comment (`` xN`` when PyTorch reports N
break events there: once per nesting level, per layer, per recompile); tests read these
markers for each break's site, category and count. Each Program's graph, break and
recompile counts are what PyTorch 2.13 reported for it (the graph count is checked
again at test time against a plain torch.compile run with a counting backend).
"""

from __future__ import annotations

import copy
import logging
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from tests.corpus.helpers import noisy_scale

if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger("dynscope.corpus")
log.addHandler(logging.NullHandler())
log.propagate = False


@dataclass
class Program:
    """One corpus entry."""

    name: str
    make: Callable[[], tuple[Callable[..., Any], list[Any]]]  # -> (model, calls)
    graphs: int  # graphs PyTorch captures
    breaks: int  # break events
    recompiles: int
    code: tuple[Any, ...] = ()  # functions/classes whose source holds the BREAK markers


def _x(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


class MLP(nn.Module):
    def __init__(self, width: int = 8, depth: int = 3) -> None:
        super().__init__()
        self.layers = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(depth)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x).softmax(-1)


class PrintModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.a(x)
        print("activations ready")  # BREAK: logging/print side effect
        return self.b(x).relu()


def item_fn(x: torch.Tensor) -> torch.Tensor:
    scale = x.abs().max().item()  # BREAK: .item()/scalar output
    return x / scale


def branch_fn(x: torch.Tensor) -> torch.Tensor:
    y = x.sin()
    if y.sum() > 0:  # BREAK: data-dependent branch
        return y * 2
    return y - 1


def nonzero_fn(x: torch.Tensor) -> torch.Tensor:
    idx = torch.nonzero(x > 0)  # BREAK: data-dependent guard/shape
    return idx.float().sum() + x.sum()


class DeepcopyModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shadow = copy.deepcopy(self.lin)  # BREAK: deepcopy
        return shadow(x) + self.lin(x)


def logger_fn(x: torch.Tensor) -> torch.Tensor:
    y = x.cos()
    log.info("mean %s", 1)  # BREAK: logging/print side effect
    return y + 1


def explicit_fn(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    torch._dynamo.graph_break()  # BREAK: explicit graph_break()
    return y * 3


@torch.compiler.disable
def _eager_only(x: torch.Tensor) -> torch.Tensor:
    return x * 3


def disabled_fn(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    y = _eager_only(y)  # BREAK: skipped or disallowed function
    return y.exp()


def zlib_fn(x: torch.Tensor) -> torch.Tensor:
    y = x.tanh()
    salt = zlib.crc32(b"dynscope")  # BREAK: unsupported builtin or C/numpy call
    return y + (salt % 7)


def requires_grad_fn(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    y.requires_grad = True  # BREAK: tensor attribute mutation (requires_grad)
    return y + 1


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        print("block")  # BREAK: logging/print side effect x3
        return h.relu()


class Nested(nn.Module):
    """A break deep inside: Encoder -> Block x3 -> print."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(Block(), Block(), Block())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder(x) * 2


def helper_file_fn(x: torch.Tensor) -> torch.Tensor:
    return noisy_scale(x.sin()).cos()


def loop_print_fn(x: torch.Tensor) -> torch.Tensor:
    for _ in range(3):
        x = x + 1
        print("step")  # BREAK: logging/print side effect
    return x


def _train_step_setup() -> tuple[Callable[..., Any], list[Any]]:
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        opt.zero_grad()  # BREAK: torch.optim (on purpose)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()  # BREAK: backward() in compiled code
        opt.step()  # BREAK: torch.optim (on purpose) x2
        return loss.detach()

    return train_step, [(_x(4, 8), _x(4, 1))]


class KwModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, *, mask: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return self.lin(x).masked_fill(mask, 0.0) * scale


def scalar_fn(x: torch.Tensor, n: int) -> torch.Tensor:
    return x * n + n


def dtype_fn(x: torch.Tensor) -> torch.Tensor:
    return (x * 2).sum(-1)


def tolist_fn(x: torch.Tensor) -> torch.Tensor:
    counts = (x > 0).long().sum(-1).tolist()  # BREAK: .item()/scalar output
    return x * max(counts)


def generator_fn(x: torch.Tensor, scales: Any) -> torch.Tensor:
    return x * next(scales)  # BREAK: generator/iterator


def _scales() -> Any:
    return (torch.full((1,), float(i)) for i in range(1, 4))


PROGRAMS: list[Program] = [
    Program("mlp_no_break", lambda: (MLP(), [_x(4, 8)]), graphs=1, breaks=0, recompiles=0),
    Program("print_break", lambda: (PrintModel(), [_x(4, 8)]), graphs=2, breaks=1, recompiles=0, code=(PrintModel,)),
    Program("item_break", lambda: (item_fn, [_x(4, 8)]), graphs=2, breaks=1, recompiles=0, code=(item_fn,)),
    Program("branch_break", lambda: (branch_fn, [_x(4, 8)]), graphs=2, breaks=1, recompiles=0, code=(branch_fn,)),
    Program("nonzero_break", lambda: (nonzero_fn, [_x(4, 8)]), graphs=2, breaks=1, recompiles=0, code=(nonzero_fn,)),
    Program("deepcopy_break", lambda: (DeepcopyModel(), [_x(4, 8)]), graphs=1, breaks=1, recompiles=0, code=(DeepcopyModel,)),
    Program("logger_break", lambda: (logger_fn, [_x(4, 8)]), graphs=2, breaks=1, recompiles=0, code=(logger_fn,)),
    Program("explicit_break", lambda: (explicit_fn, [_x(4, 8)]), graphs=2, breaks=1, recompiles=0, code=(explicit_fn,)),
    Program("disabled_break", lambda: (disabled_fn, [_x(4, 8)]), graphs=2, breaks=1, recompiles=0, code=(disabled_fn,)),
    Program("zlib_break", lambda: (zlib_fn, [_x(4, 8)]), graphs=2, breaks=1, recompiles=0, code=(zlib_fn,)),
    Program("requires_grad_break", lambda: (requires_grad_fn, [_x(4, 8)]), graphs=2, breaks=1, recompiles=0, code=(requires_grad_fn,)),
    Program("nested_break", lambda: (Nested(), [_x(4, 8)]), graphs=4, breaks=3, recompiles=1, code=(Block, Nested,)),
    Program("helper_file_break", lambda: (helper_file_fn, [_x(4, 8)]), graphs=4, breaks=2, recompiles=0, code=(helper_file_fn, noisy_scale,)),
    Program("loop_print", lambda: (loop_print_fn, [_x(4, 8)]), graphs=0, breaks=1, recompiles=0, code=(loop_print_fn,)),
    Program("train_step", _train_step_setup, graphs=3, breaks=4, recompiles=0, code=(_train_step_setup,)),
    Program(
        "dict_kwargs",
        lambda: (KwModel(), [{"x": _x(4, 8), "mask": _x(4, 8) > 0, "scale": 0.5}]),
        graphs=1, breaks=0, recompiles=0,
    ),
    Program(
        "recompile_shape",
        lambda: (MLP(), [_x(4, 8), _x(6, 8), _x(9, 8)]),
        graphs=2, breaks=0, recompiles=1,
    ),
    Program(
        "recompile_dtype",
        lambda: (dtype_fn, [_x(4, 8), _x(4, 8).double()]),
        graphs=2, breaks=0, recompiles=1,
    ),
    Program(
        "recompile_scalar",
        lambda: (scalar_fn, [(_x(4), 2), (_x(4), 3), (_x(4), 4)]),
        graphs=2, breaks=0, recompiles=1,
    ),
    # .tolist() of an integer tensor: PyTorch says "Data dependent operator
    # aten._local_scalar_dense", a scalar output (capture_scalar_outputs removes it).
    Program("tolist_break", lambda: (tolist_fn, [_x(4, 8)]), graphs=2, breaks=1, recompiles=0, code=(tolist_fn,)),
    # A generator made outside the compiled function ("Missing tp_iternext" on 2.13).
    Program(
        "generator_break",
        lambda: (generator_fn, [(_x(4, 8), _scales())]),
        graphs=1, breaks=1, recompiles=0, code=(generator_fn,),
    ),
]


#: (version, corpus program) -> the counts that release legitimately reports instead of the
#: ones tests/corpus/programs.py pins for 2.13, with what differs and why (read in its trace).
CORPUS_OVERRIDES: dict[tuple[str, str], dict[str, object]] = {
    # 2.14 tries to trace next() into the generator expression, fails to wrap its
    # range_iterator ("Unexpected type in sourceless builder", gb0116), then logs "Failed to
    # handle graph break gracefully. Skipping the function": generator_fn runs eager, so no
    # graph (2.11/2.13 break and compile the resume function). Its wording names the
    # generator's "<class 'range_iterator'>", filed as generator/iterator. The first attempt
    # and the restart that gave up are two records, two events.
    ("torch-2.14", "generator_break"): {
        "graphs": 0,
        "breaks": 2,
        "categories": [("programs.py", "generator/iterator", 2)],
    },
    # 2.15 does as 2.14 (seen in scripts/compat.sh 2.15: 0 graphs, 2 events at the one site).
    ("torch-2.15", "generator_break"): {
        "graphs": 0,
        "breaks": 2,
        "categories": [("programs.py", "generator/iterator", 2)],
    },
}
