"""Issue 43: each eager op at the innermost user line that ran it, whatever context managers,
generators or helper calls lie between; and how often each graph ran, in every capture mode.

Truth: PyTorch's profiler, run on the same program eagerly (the decoding frame runs eagerly
under compile too: Dynamo gives up on it), counts each top-level aten op; a counting backend
counts each compiled graph's runs.

Before: the decode loop's ops were listed "outside compiled frames" (or at the helper's break
line, in the issue's measurement), because the frame that loops started before the line
tracer did; ``Graph.runs`` was 0 under ``capture()`` with per-block compiles.
"""

from __future__ import annotations

import inspect
from collections import Counter
from typing import Any

import pytest
import torch
from torch import nn

import dynscope
from tests.capture.test_library_truth import Block  # torchtitan's block, as compiled there
from tests.corpus import decode_loops

pytestmark = pytest.mark.filterwarnings("ignore")


def _line(fn: Any, text: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, ln in enumerate(lines) if text in ln)


def _eager_profile(model: nn.Module) -> Counter[str]:
    """PyTorch's profiler: top-level aten ops of one eager call, by name."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        model(*decode_loops.inputs())
    out: Counter[str] = Counter()
    for ev in prof.events():
        parent = ev.cpu_parent
        if ev.name.startswith("aten::") and not (parent is not None and parent.name.startswith("aten::")):
            out[ev.name] += 1
    return out


def _by_line(rep: dynscope.Report) -> dict[int, Counter[str]]:
    """The report's eager ops in the decode file: line -> op -> count."""
    name = decode_loops.__file__.rsplit("/", 1)[-1]
    out: dict[int, Counter[str]] = {}
    assert rep.coverage is not None
    for key, n in rep.coverage.eager_sites:
        where, op = key.rsplit(" ", 1)
        first = where.split(" ", 1)[0]
        if first.startswith(f"{name}:"):
            out.setdefault(int(first.split(":")[1]), Counter())[op] += n
    return out


#: Where the decode loop's ops run: the text of the line -> the ops it runs.
_LOOP = {
    "self.head(self.emb(ids[:, -1]))": {"aten::select", "aten::embedding", "aten::linear"},
    "logits.argmax(-1)": {"aten::argmax"},
    "nxt * unfinished + 0": {"aten::mul", "aten::add", "aten::rsub"},
    "unfinished & ~(nxt == 31)": {"aten::__and__", "aten::bitwise_not", "aten::eq"},
    "torch.cat([ids, nxt[:, None]], dim=1)": {"aten::cat", "aten::unsqueeze"},
}
_STOP_OPS = {"aten::max", "aten::eq", "aten::is_nonzero", "aten::item", "aten::_local_scalar_dense"}


@pytest.mark.parametrize("cls", [decode_loops.Decoder, decode_loops.NoGradDecoder, decode_loops.StreamingDecoder],
                         ids=lambda c: c.__name__)
def test_the_decode_loops_ops_are_at_the_loops_lines_with_pytorchs_counts(cls: type) -> None:
    rep = dynscope.report(decode_loops.made(cls), decode_loops.inputs())
    (site,) = rep.breaks
    assert site.lineno == _line(decode_loops.Stop.__call__, "unfinished.max() == 0")
    lines = _by_line(rep)
    # Only what the helper's own line runs is listed there.
    assert set(lines.get(site.lineno, ())) <= _STOP_OPS, lines.get(site.lineno)
    loop_fn = {decode_loops.Decoder: cls.forward, decode_loops.NoGradDecoder: decode_loops.NoGradDecoder._loop,
               decode_loops.StreamingDecoder: decode_loops.StreamingDecoder._tokens}[cls]
    truth = _eager_profile(decode_loops.made(cls))
    placed = 0
    for text, ops in _LOOP.items():
        source = inspect.getsource(loop_fn)
        if text not in source:
            continue  # the variant computes it elsewhere (a compiled helper, another spelling)
        here = lines.get(_line(loop_fn, text), Counter())
        for op in ops & set(here):
            placed += 1
            # Every eager run of the op is listed at a line of the program, with the count
            # PyTorch's profiler gives an eager call (== also runs in the stop test's graph).
            total = sum(c[op] for c in lines.values())
            assert here[op] > 0 and total <= truth[op]
            if op != "aten::eq":
                assert total == truth[op], (text, op, lines, truth[op])
    assert placed >= 5, lines


def test_a_no_grad_helper_that_compiles_keeps_its_ops_in_its_graph() -> None:
    """NoGradDecoder._step compiles (its own frame): its ops are in graphs, not eager lines."""
    rep = dynscope.report(decode_loops.made(decode_loops.NoGradDecoder), decode_loops.inputs())
    step = _line(decode_loops.NoGradDecoder._step, "self.head(self.emb")
    assert step not in _by_line(rep)
    assert any(g.frame.endswith("_step") for g in rep.graphs)


# -- graph runs under capture(), per block ---------------------------------------------------


class Counting:
    """The user's own backend: counts each compiled graph's runs (PyTorch's own count)."""

    def __init__(self) -> None:
        self.runs: list[int] = []

    def __call__(self, gm: torch.fx.GraphModule, _inputs: list[Any]) -> Any:
        index = len(self.runs)
        self.runs.append(0)

        def run(*args: Any) -> Any:
            self.runs[index] += 1
            return gm.forward(*args)

        return run


def test_capture_counts_the_runs_of_per_block_compiles() -> None:
    """torchtitan's recipe under capture(): block.compile() in a loop over the blocks."""
    backend = Counting()
    torch.manual_seed(0)
    blocks = nn.ModuleList([Block() for _ in range(4)])
    for block in blocks:
        block.compile(backend=backend)
    with dynscope.capture() as cap:
        for _ in range(2):
            x = torch.randn(2, 16)
            for block in blocks:
                x = block(x)
    rep = cap.report
    assert [g.runs for g in rep.graphs] == backend.runs and sum(backend.runs) == 8
    summary = rep.summary(color=False)
    header = next(ln for ln in summary.splitlines() if ln.lstrip().startswith("id "))
    assert header.rstrip().endswith("runs")
    assert "<th>runs</th>" in rep.to_html()
    assert [g["runs"] for g in rep.to_dict()["graphs"]] == backend.runs
    # After the block the user's compiled code is Dynamo's own again (nothing of dynscope).
    before = [g.runs for g in rep.graphs]
    for block in blocks:
        block(torch.randn(2, 16))
    assert sum(backend.runs) == 12 and [g.runs for g in cap.report.graphs] == before
    for module in {type(b).forward.__module__ for b in blocks}:
        import sys

        for name, value in vars(sys.modules[module]).items():
            if name.startswith("__compiled_fn"):
                assert "RunCounter" not in getattr(getattr(value, "__wrapped__", None), "__qualname__", "")


@pytest.mark.slow
def test_capture_counts_the_runs_of_inductor_graphs() -> None:
    torch._dynamo.reset()
    with dynscope.capture() as cap:
        f = torch.compile(lambda x: x.sin() + 1)
        for _ in range(3):
            f(torch.randn(4))
    assert [g.runs for g in cap.report.graphs] == [3]


@pytest.mark.heavy  # 15 s
def test_hf_generate_eager_ops_are_at_library_lines() -> None:
    """Hugging Face ``generate`` (a program nobody here wrote), compiled whole: its loop's eager
    ops are listed at transformers' own lines, none at the break's line alone."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=1, n_head=2)
    model = GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, 64, (1, 4))

    def generate(ids: torch.Tensor) -> torch.Tensor:
        return model.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=0)

    rep = dynscope.report(generate, ids)
    assert rep.coverage is not None
    files = Counter(k.split(":", 1)[0] for k, _ in rep.coverage.eager_sites)
    assert not any(k.startswith("outside compiled frames") for k, _ in rep.coverage.eager_sites)
    assert any(f.endswith(".py") for f in files), files
