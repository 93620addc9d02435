"""Advice the user can act on, checked on live compiles of real-shaped programs (issue 18).

A train step with torch.optim inside the compiled function, a gpt-fast-shaped KV-cache
decoder, nanoGPT's ``generate`` slicing its context: what dynscope says about each must be
something the user can do, and each remedy it names must do what it says on torch 2.13.
"""

from __future__ import annotations

import json
import re
import sys
from typing import TYPE_CHECKING, Any

import pytest
import torch
import torch._dynamo
from torch import nn

import dynscope
from dynscope._lexicon.break_categories import LIBRARY_BREAK, OPTIMIZER, fix_for
from dynscope._model import Outcome, Trial
from dynscope._model.codec import report_from_dict
from dynscope._read.break_sites import category_of
from dynscope._render.card import render_card
from dynscope._render.text import advice_section
from dynscope._render.words import NOTHING_TO_FIX_FIRST, fix_first_line

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.heavy

#: PyTorch's wording of the two breaks inside torch.optim (torch 2.13).
GRAPH_BREAK = ("Call to `torch._dynamo.graph_break()`", "User-inserted graph break. Message: None")


def _trial(adv: dynscope.Advice, remedy: str) -> Trial:
    found = [t for t in adv.trials if t.remedy == remedy]
    assert len(found) == 1, [t.remedy for t in adv.trials]
    return found[0]


def _site(rep: dynscope.Report, source: str) -> Any:
    (b,) = [b for b in rep.breaks if b.source.startswith(source)]
    return b


# -- torch.optim's breaks are not the user's to fix ----------------------------------------


def _adamw_step() -> tuple[Any, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()

    return train_step, (torch.randn(4, 8), torch.randn(4, 1))


def test_adamw_inside_the_compiled_step_is_not_fix_first() -> None:
    step, inputs = _adamw_step()
    rep = dynscope.report(step, inputs)
    opt_step, zero_grad, backward = (_site(rep, s) for s in ("opt.step()", "opt.zero_grad()", "loss.backward()"))
    for b in (opt_step, zero_grad):
        assert b.category == OPTIMIZER and not b.actionable
        assert "torch.compile(opt.step)" in b.fix and "outside the compiled function" in b.fix
        assert "Remove" not in b.fix
    assert opt_step.count == 2  # before and after the update, as torch/optim/optimizer.py does
    assert backward.actionable and backward.category == "backward() in compiled code"
    # "fix first" names the one site the user's change helps, in the text, page and card.
    assert fix_first_line(rep).startswith(f"fix {backward.location} first:")
    assert rep.breaks_by_cost()[-2:] in ((opt_step, zero_grad), (zero_grad, opt_step))
    assert f"Fix {backward.location} first:" in rep.to_html()
    card = render_card(rep)
    assert card.index(backward.location) < min(card.index(opt_step.location), card.index(zero_grad.location))
    # A saved report says the same (the category is saved; actionable follows from it).
    again = report_from_dict(json.loads(rep.to_json()))
    assert [b.actionable for b in again.breaks] == [b.actionable for b in rep.breaks]


def test_only_optimizer_breaks_leave_nothing_to_fix_first() -> None:
    step, inputs = _adamw_step()
    step(*inputs)  # gradients for the step; the optimizer lives in the step's closure
    opt = next(c.cell_contents for c in step.__closure__ if isinstance(c.cell_contents, torch.optim.Optimizer))

    def update() -> None:
        opt.step()

    rep = dynscope.report(update, ())
    assert rep.breaks and all(not b.actionable for b in rep.breaks)
    assert fix_first_line(rep) == NOTHING_TO_FIX_FIRST
    assert "<b>Nothing to fix first in your code:" in rep.to_html()


def test_graph_break_inside_a_library_is_the_librarys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A third-party package that breaks on purpose: its site is its own line (third-party
    # code counts as the user's for the site), but no change of the user's removes it.
    lib = tmp_path / "site-packages"
    lib.mkdir()
    (lib / "fakelib_breaks.py").write_text(
        "import torch\n\ndef scaled(x):\n    torch._dynamo.graph_break()\n    return x * 2\n", encoding="utf-8"
    )
    monkeypatch.syspath_prepend(str(lib))
    import fakelib_breaks

    def fn(x: torch.Tensor) -> torch.Tensor:
        return fakelib_breaks.scaled(x + 1) - 1

    try:
        rep = dynscope.report(fn, torch.randn(4))
    finally:
        sys.modules.pop("fakelib_breaks", None)
    (b,) = rep.breaks
    assert b.filename.endswith("fakelib_breaks.py")
    assert b.category == LIBRARY_BREAK and not b.actionable
    assert "no change at this line removes it" in b.fix
    # The same words raised in the user's own file are the user's explicit graph_break().
    assert category_of(*GRAPH_BREAK, raised_at=__file__) == "explicit graph_break()"
    assert category_of(*GRAPH_BREAK, raised_at="/venv/lib/python3.11/site-packages/torch/optim/optimizer.py") == OPTIMIZER
    assert fix_for(OPTIMIZER) != fix_for("explicit graph_break()")


# -- trace_autograd_ops, and why nothing was tried ----------------------------------------


def _backward_step(detach: bool) -> tuple[Any, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

    def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss.detach() if detach else loss

    return train_step, (torch.randn(4, 8), torch.randn(4, 1))


def test_trace_autograd_ops_removes_the_backward_break() -> None:
    step, inputs = _backward_step(detach=True)
    adv = dynscope.advise(step, inputs)
    t = _trial(adv, "trace_autograd_ops")
    assert t.code == "torch._dynamo.config.trace_autograd_ops = True"
    assert t.after is not None and (t.before.breaks, t.after.breaks) == (1, 0)
    assert t.helped and t.outputs_match and adv.best is t
    assert not torch._dynamo.config.trace_autograd_ops  # put back


def test_trace_autograd_ops_says_what_stops_it() -> None:
    # Returning the loss itself: PyTorch cannot trace a backward that consumes a returned
    # tensor's grad_fn. The trial says so, with PyTorch's hint (detach it).
    step, inputs = _backward_step(detach=False)
    adv = dynscope.advise(step, inputs)
    t = _trial(adv, "trace_autograd_ops")
    assert t.after is not None and t.after.breaks == 1 and not t.helped
    assert "still breaks at test_advice_real.py:" in t.note and "loss.detach()" in t.note


def test_trace_autograd_ops_names_the_break_after_backward() -> None:
    # With opt.step() inside the compiled step, the graph ends at torch.optim's break after
    # backward(): PyTorch 2.13 then cannot trace backward(). The trial names that break.
    step, inputs = _adamw_step()
    adv = dynscope.advise(step, inputs)
    t = _trial(adv, "trace_autograd_ops")
    assert t.after is not None and not t.helped
    opt_step = _site(adv.report, "opt.step()")
    assert f"here {opt_step.location} ({OPTIMIZER})" in t.note and "compile opt.step on its own" in t.note


def test_advise_says_why_it_tried_nothing() -> None:
    step, inputs = _adamw_step()
    step(*inputs)
    opt = next(c.cell_contents for c in step.__closure__ if isinstance(c.cell_contents, torch.optim.Optimizer))

    def update() -> None:
        opt.step()

    adv = dynscope.advise(update, ())
    assert adv.trials == ()
    assert adv.note.startswith("no remedy to try: ") and OPTIMIZER in adv.note
    text = str(adv)
    assert text.startswith("What each fix buys: no remedy to try") and "---" not in text  # no empty table
    rep = adv.report
    assert f"advise: {adv.note}" in rep.notes
    assert "no remedy to try" in rep.to_html()
    assert f"advise: {adv.note}" in report_from_dict(json.loads(rep.to_json())).notes


def test_advise_on_a_program_without_breaks_says_so() -> None:
    adv = dynscope.advise(nn.Linear(4, 2), torch.randn(3, 4))
    assert adv.trials == () and "no graph break and no recompile" in adv.note
    assert "no graph break and no recompile" in str(adv)


# -- mark_dynamic on dimensions the code ties together (gpt-fast's KV cache) ---------------


class KVCache(nn.Module):
    """gpt-fast's cache: positions written in place, ``k_cache[:, :, input_pos] = k``."""

    def __init__(self, max_len: int, heads: int, dim: int) -> None:
        super().__init__()
        self.register_buffer("k_cache", torch.zeros(1, heads, max_len, dim))
        self.register_buffer("v_cache", torch.zeros(1, heads, max_len, dim))

    def update(self, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k_out, v_out = self.k_cache, self.v_cache
        k_out[:, :, input_pos] = k
        v_out.index_copy_(2, input_pos, v)
        return k_out, v_out


class Decoder(nn.Module):
    """One attention layer decoding with a KV cache: ``x`` is (1, T, C), ``input_pos`` (T,)."""

    def __init__(self, max_len: int = 32, heads: int = 2, dim: int = 8) -> None:
        super().__init__()
        self.heads, self.dim = heads, dim
        self.qkv = nn.Linear(heads * dim, 3 * heads * dim)
        self.out = nn.Linear(heads * dim, heads * dim)
        self.cache = KVCache(max_len, heads, dim)
        self.register_buffer("causal", torch.tril(torch.ones(max_len, max_len, dtype=torch.bool)))

    def forward(self, x: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(x).split(self.heads * self.dim, dim=-1)
        q, k, v = (z.view(b, t, self.heads, self.dim).transpose(1, 2) for z in (q, k, v))
        k, v = self.cache.update(input_pos, k, v)
        mask = self.causal[input_pos][None, None]
        y = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out(y.transpose(1, 2).reshape(b, t, -1))


def _decode_calls() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Two prompts (4 and 6 tokens), each prefilled at once, then decoded one token a call."""
    torch.manual_seed(0)
    calls = []
    for prompt, steps in ((4, 2), (6, 1)):
        calls.append((torch.randn(1, prompt, 16), torch.arange(prompt)))
        calls.extend((torch.randn(1, 1, 16), torch.tensor([prompt + s])) for s in range(steps))
    return calls


def test_mark_dynamic_marks_the_dims_a_kv_cache_ties() -> None:
    model = Decoder().eval()
    with torch.no_grad():
        adv = dynscope.advise(model, calls=_decode_calls())
    t = _trial(adv, "mark_dynamic")
    # Marking x alone raises ConstraintViolationError (x.size(1) is specialised to the
    # prompt length that input_pos carries); with input_pos.size(0) marked too it works.
    assert t.before.graphs == 3
    assert not t.error and t.after is not None and t.after.graphs == 2
    assert t.helped and t.outputs_match
    assert t.code.splitlines() == [
        "torch._dynamo.mark_dynamic(x, 1)  # before the first call",
        "torch._dynamo.mark_dynamic(input_pos, 0)  # before the first call",
    ]
    assert "x.size(1) alone failed" in t.note and "ties it to input_pos.size(0)" in t.note


# -- a stride recompile, as nanoGPT's generate() makes one -----------------------------------


class TinyGPT(nn.Module):
    """nanoGPT's forward in small: token and position embeddings, a head on the last token."""

    def __init__(self, vocab: int = 50, block_size: int = 8) -> None:
        super().__init__()
        self.wte, self.wpe, self.head = nn.Embedding(vocab, 16), nn.Embedding(block_size, 16), nn.Linear(16, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        _, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long)
        return self.head((self.wte(idx) + self.wpe(pos))[:, [-1], :])


def _generate_calls(batch: int, fix: str = "") -> list[torch.Tensor]:
    """The contexts nanoGPT's generate() passes: growing, then ``idx[:, -block_size:]``."""
    torch.manual_seed(0)
    tokens = torch.randint(0, 50, (batch, 11))
    idx = tokens[:, :1].clone()
    out = []
    for t in range(1, 11):
        if t > 1:  # generate() appends the sampled token: a new, contiguous tensor
            idx = torch.cat((idx, tokens[:, t - 1 : t]), dim=1)
        idx_cond = idx if idx.size(1) <= 8 else idx[:, -8:]
        if fix == "contiguous":
            idx_cond = idx_cond.contiguous()
        elif fix == "clone":
            idx_cond = idx_cond.clone(memory_format=torch.contiguous_format)
        out.append(idx_cond)
    return out


def test_stride_recompile_says_what_changed_and_the_fix() -> None:
    torch.manual_seed(0)
    model = TinyGPT()
    rep = dynscope.report(model, calls=_generate_calls(1))
    stride = [r for r in rep.recompiles if any("stride()" in reason for reason in r.raw_reasons)]
    assert stride, [r.raw_reasons for r in rep.recompiles]
    r = stride[0]
    said = " ".join(r.explained)
    assert "input idx changed strides" in said and "slice" in said
    assert "please file a bug" not in said and "unknown source" not in said
    assert "strides of input idx changed (dim 0)" in r.cause_words
    fix = r.fixes[r.cause_words.index("strides of input idx changed (dim 0)")].words
    assert "see the guard" not in fix
    assert "idx.contiguous()" in fix and "idx.clone(memory_format=torch.contiguous_format)" in fix


@pytest.mark.parametrize(("batch", "fix"), [(1, "clone"), (2, "contiguous")])
def test_the_stride_fix_removes_the_stride_recompile(batch: int, fix: str) -> None:
    # What the fix text says, measured: with a batch of one, x.contiguous() returns the slice
    # unchanged (PyTorch ignores a size-1 dim's stride), so the text names the clone too.
    torch.manual_seed(0)
    model = TinyGPT()
    before = dynscope.report(model, calls=_generate_calls(batch))
    after = dynscope.report(model, calls=_generate_calls(batch, fix))
    assert any("stride" in reason for r in before.recompiles for reason in r.raw_reasons)
    assert not any("stride" in reason for r in after.recompiles for reason in r.raw_reasons)
    assert after.recompile_count < before.recompile_count
    if batch == 1:
        unfixed = dynscope.report(model, calls=_generate_calls(1, "contiguous"))
        assert unfixed.recompile_count == before.recompile_count
        # Nor does dynamic=True remove it (so the fix text does not offer it).
        dynamic = dynscope.report(model, calls=_generate_calls(1), dynamic=True)
        assert any("stride" in reason for r in dynamic.recompiles for reason in r.raw_reasons)


# -- what the table says -------------------------------------------------------------------


def scaled_fn(x: torch.Tensor) -> torch.Tensor:
    return x * x.shape[0]


def test_dynamic_true_names_the_function_the_user_passed() -> None:
    adv = dynscope.advise(scaled_fn, calls=[torch.randn(4, 2), torch.randn(6, 2)])
    assert _trial(adv, "dynamic=True").code == "torch.compile(scaled_fn, dynamic=True)"
    adv = dynscope.advise(nn.Linear(2, 2), calls=[torch.randn(4, 2), torch.randn(6, 2)])
    assert _trial(adv, "dynamic=True").code == "torch.compile(model, dynamic=True)"


def test_target_column_wraps_at_words() -> None:
    target = "TinyTransformer.forward: size of input x changed (dim 1)"
    changed = dynscope.Cause("size", name="x", dim="1", then="4", now="6")
    targets = (dynscope.Target(frame="TinyTransformer.forward", changes=(changed,)), dynscope.Target(block="b"),
               dynscope.Target(block="c"))
    t = Trial("mark_dynamic", "torch._dynamo.mark_dynamic(x, 1)", targets, Outcome(graphs=3), Outcome(graphs=2))
    text = advice_section([t])
    table = text.split("\n\n")[0]
    assert "..." not in table
    for word in f"{target}, +2".split():  # every word whole, none cut
        assert re.search(rf"(?<!\S){re.escape(word)}(?!\S)", table), word
    assert f"for: {target}, b, c" in text  # the full list below the table
