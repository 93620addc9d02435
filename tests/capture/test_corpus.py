"""The corpus: real torch.compile runs checked against what PyTorch reports."""

from __future__ import annotations

import os

import pytest
import torch

import dynscope
from dynscope._capture.capture import _MISSING, normalise_calls
from dynscope._lexicon.break_categories import CATEGORY_NAMES
from tests.corpus.markers import markers
from tests.corpus.programs import CORPUS_OVERRIDES, PROGRAMS, Program


def _plain_graph_count(prog: Program) -> int:
    """Graphs a plain torch.compile run captures, counted by a backend of our own."""
    model, calls = prog.make()
    seen: list[int] = []

    def counting(gm: torch.fx.GraphModule, example_inputs: list) -> object:
        seen.append(1)
        return gm.forward

    compiled = torch.compile(model, backend=counting)
    for args, kwargs in normalise_calls(model, _MISSING, calls):
        compiled(*args, **kwargs)
    torch._dynamo.reset()
    return len(seen)


@pytest.mark.parametrize("prog", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_corpus_program(prog: Program) -> None:
    model, calls = prog.make()
    rep = dynscope.report(model, calls=calls)
    # A release that legitimately differs from 2.13 says so in CORPUS_OVERRIDES, with why.
    release = "torch-" + ".".join(torch.__version__.split(".")[:2])
    overrides = CORPUS_OVERRIDES.get((release, prog.name), {})

    assert rep.graph_count == overrides.get("graphs", prog.graphs)
    assert rep.break_count == overrides.get("breaks", prog.breaks)
    assert rep.recompile_count == overrides.get("recompiles", prog.recompiles)
    assert rep.graph_count == _plain_graph_count(prog), "dynscope must see what plain torch.compile sees"

    if "categories" in overrides:  # the release's own sites, as its recorded trace pins them
        got_sites = sorted((os.path.basename(b.filename), b.category, b.count) for b in rep.breaks)
        assert got_sites == sorted(overrides["categories"])  # type: ignore[call-overload]
    else:
        expected = markers(prog.code)
        got = {(b.filename, b.lineno): (b.category, b.count) for b in rep.breaks}
        assert got == expected
    for b in rep.breaks:
        assert b.category in CATEGORY_NAMES
        assert b.source and b.source in open(b.filename).read()
        assert b.reason and "\n" not in b.reason
        assert b.fix
        assert b.user_stack and b.user_stack[-1].filename
    assert len(rep.break_events) == rep.break_count
    assert sum(len(b.compile_ids) for b in rep.breaks) == rep.break_count


def test_counts_are_not_explains_mistake() -> None:
    """explain() says graph_break_count = graph_count - 1; recompiles are not breaks."""
    prog = next(p for p in PROGRAMS if p.name == "recompile_shape")
    model, calls = prog.make()
    rep = dynscope.report(model, calls=calls)
    assert rep.graph_count == 2 and rep.break_count == 0 and rep.recompile_count == 1


def test_break_in_loop_falls_back_to_eager() -> None:
    prog = next(p for p in PROGRAMS if p.name == "loop_print")
    model, calls = prog.make()
    rep = dynscope.report(model, calls=calls)
    assert rep.graph_count == 0
    failed = [f for f in rep.frames if f.status == "failed"]
    assert len(failed) == 1 and failed[0].function == "loop_print_fn"
    assert "print" in failed[0].fail_reason


def test_deepcopy_site_is_the_users_line_not_copy_py() -> None:
    prog = next(p for p in PROGRAMS if p.name == "deepcopy_break")
    model, calls = prog.make()
    rep = dynscope.report(model, calls=calls)
    (b,) = rep.breaks
    assert b.filename.endswith("programs.py")
    assert "copy.deepcopy(self.lin)" in b.source
    event = rep.break_events[0]
    # PyTorch itself points into copy.py on 2.13/2.14 (2.11 already names the caller).
    assert event.reported_filename.endswith(("copy.py", "programs.py"))


def test_recompile_reasons_in_words() -> None:
    by_name = {p.name: p for p in PROGRAMS}
    model, calls = by_name["recompile_dtype"].make()
    (r,) = dynscope.report(model, calls=calls).recompiles
    assert any("dtype" in said and "Double" in said for said in r.explained)
    model, calls = by_name["recompile_shape"].make()
    (r,) = dynscope.report(model, calls=calls).recompiles
    assert r.explained[0] == "input x changed size in dim 0: compiled for 4, called with 6"
    model, calls = by_name["recompile_scalar"].make()
    (r,) = dynscope.report(model, calls=calls).recompiles
    assert r.frame == "scalar_fn"
    assert any("n" in said for said in r.explained)


def test_graph_contents_from_the_backend() -> None:
    from tests.corpus.programs import MLP, _x

    rep = dynscope.report(MLP(), _x(4, 8))
    (g,) = rep.graphs
    assert g.origin == "backend" and g.module is not None
    assert dict(g.op_counts) == {"torch.nn.functional.linear": 3, "torch.nn.functional.relu": 3, "softmax": 1}
    assert g.op_count == sum(n for _, n in g.op_counts)
    assert g.node_count == len(g.nodes)
    x_input = g.inputs[2]  # weights and biases of the first layer come first
    assert (x_input.shape, x_input.dtype, x_input.device, x_input.stride) == ((4, 8), "float32", "cpu", (8, 1))
    ops = [n for n in g.nodes if n.is_op]
    linear = next(n for n in ops if "linear" in n.target)
    assert linear.outputs[0].shape == (4, 8)
    assert linear.module_stack and linear.module_stack[-1][1] == "Linear"
    assert linear.module_stack[0][0] == "layers"
    assert linear.filename.endswith("programs.py") and linear.source
    frame = next(f for f in rep.frames if f.compile_id == g.compile_id)
    assert frame.op_count == g.op_count, "PyTorch's own op count agrees"
    assert rep.guards and any(gd.kind == "TENSOR_MATCH" and gd.source == "L['x']" for gd in rep.guards)


def test_recompile_limit_hit() -> None:
    """Past the recompile limit Dynamo stops compiling; the report says so plainly."""
    from tests.corpus.programs import scalar_fn

    with torch._dynamo.config.patch(recompile_limit=3, automatic_dynamic_shapes=False):
        rep = dynscope.report(scalar_fn, calls=[(_ones(), n) for n in range(6)])
    assert rep.graph_count == 3 and rep.recompile_count == 3
    assert all("\n" not in reason for r in rep.recompiles for reason in r.raw_reasons)
    assert rep.recompiles[0].explained[0].startswith("Python value n changed: the graph was specialised to n == 0")
    assert len(rep.recompiles[-1].raw_reasons) == 3, "the third recompile failed three cached guards"
    (failed,) = [f for f in rep.frames if f.status == "failed"]
    assert "recompile limit" in failed.fail_reason.lower()
    assert "Frames that fell back to eager" in rep.summary()


def _ones() -> torch.Tensor:
    return torch.ones(4)
