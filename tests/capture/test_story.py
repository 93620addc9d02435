"""The program story on real compiles: execution order, qualified names, what to fix first,
recompiles grouped by cause, and everything PyTorch said kept."""

from __future__ import annotations

import functools
import inspect
import re
from typing import TYPE_CHECKING, Any

import pytest
import torch

import dynscope

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


def _line(func: object, text: str) -> int:
    """The line number of the first line of ``func`` that contains ``text``."""
    lines, start = inspect.getsourcelines(func)  # type: ignore[arg-type]
    return start + next(i for i, line in enumerate(lines) if text in line)


def _edges(dot: str) -> set[tuple[str, str]]:
    return {(a.strip('"'), b.strip('"')) for a, b in re.findall(r"^\s+(\S+) -> (\S+?)[;\s]", dot, re.M)}


def helper(x: torch.Tensor) -> torch.Tensor:
    x = x * 2
    print("in helper")  # the break: helper runs as its own frame
    return x + 1


class Nested(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.relu()
        x = helper(x)
        return x.exp()


class LateBreak(torch.nn.Module):
    def forward(self, x: torch.Tensor, flag: bool) -> torch.Tensor:
        x = x.sin()
        if flag:
            print("late")  # breaks only in the recompile for flag=True
        return x.cos()


def test_break_in_a_called_function_sits_between_its_graph_and_its_resume() -> None:
    rep = dynscope.report(Nested(), torch.randn(4))
    at, call = _line(helper, "print("), _line(Nested.forward, "helper(x)")
    names = {g.compile_id: g.frame for g in rep.graphs}
    assert names == {"0/0": "Nested.forward", "1/0": "helper", "2/0": f"torch_dynamo_resume_in_helper_at_{at}",
                     "3/0": f"torch_dynamo_resume_in_Nested.forward_at_{call}"}
    edges = _edges(rep.program_dot())
    # forward's graph -> helper's graph -> BREAK -> helper's resume -> forward's resume
    assert {("c_0/0", "c_1/0"), ("c_1/0", "break_0"), ("break_0", "c_2/0"), ("c_2/0", "c_3/0")} <= edges
    assert ("c_0/0", "break_0") not in edges
    text = rep.summary(color=False)
    line = " ".join(text[text.index("Program (in execution order)"):].split("\n\n")[0].split()[4:])
    assert re.search(rf"graph 0 \S*forward -> graph 1 \S*helper -> BREAK test_story.py:{at} -> "
                     rf"graph 2 resume \S*helper_at_{at} -> graph 3 resume \S*forward_at_{call}", line), line


def test_break_of_a_recompile_follows_that_recompile() -> None:
    rep = dynscope.report(LateBreak(), calls=[(torch.randn(4), False), (torch.randn(4), True)])
    assert [b.compile_ids for b in rep.breaks] == [("0/1",)]
    edges = _edges(rep.program_dot())
    assert ("c_0/1", "break_0") in edges and ("break_0", "c_1/0") in edges
    assert ("c_0/0", "break_0") not in edges


def logged(func: Callable[..., Any]) -> Callable[..., Any]:
    """A decorator as Hugging Face writes them (can_return_tuple, check_model_inputs)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapper


class Attention(torch.nn.Module):
    @logged
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.sin()
        print("attention")
        return x.cos()


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = Attention()

    @logged
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.relu()
        y = self.attn(y)
        return y + x


def test_frames_and_breaks_are_named_by_qualified_function_and_wrapped_function() -> None:
    rep = dynscope.report(Block(), torch.randn(4))
    names = [g.frame for g in rep.graphs]
    assert names[0] == "Block.forward", names  # the wrapper frame, named after what it wraps
    assert "Attention.forward" in names, names
    assert any(n.startswith("torch_dynamo_resume_in_Attention.forward_at_") for n in names), names
    assert not any("wrapper" in n for n in names), names
    assert not any("wrapper" in f.function for f in rep.frames if f.graph_ids), rep.frames
    assert [b.function for b in rep.breaks] == ["Attention.forward"]
    assert "graph 0 Block.forward" in rep.summary(color=False)


@pytest.mark.heavy
def test_hugging_face_graphs_are_named_after_the_model_not_its_decorators() -> None:
    from transformers import GPT2Config, GPT2Model

    cfg = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=32,
                     bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    rep = dynscope.report(GPT2Model(cfg).eval(), torch.randint(0, 100, (1, 8)))
    assert rep.graphs
    assert all(g.frame != "wrapper" and "<locals>" not in g.frame for g in rep.graphs), [g.frame for g in rep.graphs]
    assert rep.graphs[0].frame == "GPT2Model.forward"


@torch.compiler.disable
def heavy(x: torch.Tensor) -> torch.Tensor:
    """Runs eagerly at its call (a break): its matmuls are eager time at that site."""
    for _ in range(4):
        x = x @ x / x.shape[0]
    return x


class TwoSites(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.sin()
        print("cheap")  # first hit, costs nothing eager
        x = x.cos()
        x = heavy(x)  # later, costs eager matmuls
        return x.relu()


def test_break_sites_are_ranked_by_what_they_cost(tmp_path: Path) -> None:
    rep = dynscope.report(TwoSites(), calls=[torch.randn(128, 128)] * 2)
    cheap, costly = _line(TwoSites.forward, "print("), _line(TwoSites.forward, "heavy(x)")
    assert [b.lineno for b in rep.breaks] == [cheap, costly]  # order of first hit
    by_line = {b.lineno: b for b in rep.breaks}
    # Four 128x128 matmuls against a print: the order holds however loaded the machine.
    assert by_line[costly].eager_ms > max(0.05, by_line[cheap].eager_ms)
    assert (by_line[cheap].graphs_split, by_line[costly].graphs_split) == (1, 1)
    assert [b.lineno for b in rep.breaks_by_cost()] == [costly, cheap]
    first = rep.summary(color=False).splitlines()[3]
    assert first.startswith(f"fix test_story.py:{costly} first: 1 break, 1 graph, ")
    assert first.endswith(" eager per call")
    assert dynscope.load(rep.save(tmp_path / "r.json")).breaks == rep.breaks  # the figures are kept


class Scaled(torch.nn.Module):
    def forward(self, x: torch.Tensor, n: float) -> torch.Tensor:
        return x.sin() * n


def test_recompiles_are_grouped_by_function_and_cause_with_a_fix() -> None:
    x = torch.randn(4)
    calls = [(x, 1.5), (x.double(), 1.5), (x.bfloat16(), 1.5), (x, 2.5), (x.clone().requires_grad_(), 2.5)]
    rep = dynscope.report(Scaled(), calls=calls)
    assert rep.recompile_count == 4
    groups = {g.cause.what_changed: g for g in rep.recompile_groups()}
    assert list(groups) == ["dtype of input x changed", "Python value n changed", "requires_grad changed on input x"]
    dtype, scalar, grad = groups.values()
    assert (dtype.frame, dtype.count, scalar.count, grad.count) == ("Scaled.forward", 2, 1, 1)
    assert scalar.fix and grad.fix and dtype.fix
    assert "torch.tensor(value)" in scalar.fix.words and "requires_grad" in grad.fix.words and "dtype" in dtype.fix.words
    assert len(rep.recompiles) == 4  # the flat list stays
    text = rep.summary(color=False)
    assert "2 recompiles of Scaled.forward: dtype of input x changed" in text
    assert "1 recompile of Scaled.forward: requires_grad changed on input x" in text
    section = text[text.index("Recompiles ("):]
    assert section.count(" of Scaled.forward: ") == 3  # one line per group, not one per recompile
    page = rep.to_html(pictures=False)
    assert "Python value n changed" in page and "torch.tensor(value)" in page


def outer_call(x: torch.Tensor) -> torch.Tensor:
    return Branchy()(x) + 1


class Branchy(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            x = x * 2
        return x.cos()


def test_everything_pytorch_said_about_a_break_is_kept() -> None:
    rep = dynscope.report(outer_call, torch.ones(3))
    (b,) = rep.breaks
    assert "branch condition involves a tensor computed as follows" in b.detail
    assert "gt(" in b.detail and "Developer debug context" in b.torch_text
    assert b.debug_context.startswith("attempted to jump")
    # From the compiled function to the site: not pytest's frames nor report()'s
    assert [f.function for f in b.call_chain] == ["outer_call", "Branchy.forward"]
    text = rep.summary(color=False)
    assert "branch condition involves a tensor computed as follows" in text
    call, site = _line(outer_call, "Branchy()(x)"), _line(Branchy.forward, "if x.sum()")
    assert f"test_story.py:{call} in outer_call -> test_story.py:{site} in Branchy.forward" in text
    page = rep.to_html(pictures=False)
    assert "branch condition involves a tensor computed as follows" in page
    assert f"test_story.py:{call} in outer_call -&gt; test_story.py:{site} in Branchy.forward" in page
    assert "What PyTorch said" in page


def test_a_grad_mode_or_autocast_recompile_says_which_state_went_from_what_to_what() -> None:
    cap = dynscope.capture()
    with cap:
        f = torch.compile(Scaled(), backend=cap.backend)
        f(torch.randn(3), 2.0)
        with torch.no_grad():
            f(torch.randn(3), 2.0)
        with torch.autocast("cpu"):
            f(torch.randn(3), 2.0)
    rep = cap.report
    said = [r.explained for r in rep.recompiles]
    assert said[0] == ("global state changed: grad mode enabled -> disabled (no_grad)",)
    assert "autocast on cpu off -> on" in said[1][0]
    assert [g.cause.what_changed for g in rep.recompile_groups()] == ["grad mode changed", "autocast on cpu changed"]
    assert "grad mode enabled -> disabled (no_grad)" in rep.summary(color=False)
    assert "grad mode enabled -&gt; disabled (no_grad)" in rep.to_html(pictures=False)
