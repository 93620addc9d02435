"""export_report / assert_exports on live torch.export runs (no mocks): real-shaped models
that export with Dims, and programs that block export in each way PyTorch has.

Lines are found by marker comments in this file (``# MARK: name``), never hard-coded.
"""

from __future__ import annotations

import copy
import inspect
import logging
import os
from typing import TYPE_CHECKING

import pytest
import torch
from torch import nn
from torch.export import Dim

from dynscope._capture.export import assert_exports, export_report
from dynscope._errors import InputError
from dynscope._model.base import REPR_MAX
from dynscope._model.codec import from_plain
from dynscope._model.export import BLOCKER_KINDS, ExportReport
from dynscope._model.plain import to_plain

if TYPE_CHECKING:
    from pathlib import Path

HERE = __file__


def line_of(marker: str) -> int:
    """The line of this file that carries ``# MARK: marker``."""
    lines = inspect.getsource(inspect.getmodule(line_of)).splitlines()  # type: ignore[arg-type]
    hits = [i + 1 for i, ln in enumerate(lines) if ln.rstrip().endswith(f"# MARK: {marker}")]
    assert len(hits) == 1, f"marker {marker!r} found {len(hits)} times"
    return hits[0]


# -- models ---------------------------------------------------------------------------------------


class SmallCNN(nn.Module):
    """torchvision-like: conv/bn/relu blocks, pooling, a linear head."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
        )
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.features(x)), 1))


class ItemBranch(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.sum().item()  # MARK: item-call
        if n > 0:  # MARK: item-branch
            return x * 2
        return x - 1


class FixedFeatures(nn.Module):
    """Marks dim 1 dynamic in the test, but Linear(8, 3) needs it to be 8."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x).relu()  # MARK: specialize


class DeepCopies(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = copy.deepcopy(x)  # MARK: deepcopy
        return y + 1


@torch.library.custom_op("dynscope_test_export::opaque_scale", mutates_args=())
def opaque_scale(x: torch.Tensor) -> torch.Tensor:
    """A custom op with a real kernel and no fake kernel."""
    return x * 3


class CallsCustomOp(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return opaque_scale(x) + 1  # MARK: custom-op


def add_rows(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


def _kinds(rep: ExportReport, source: str) -> list[str]:
    return [b.kind for b in rep.all_blockers if b.source == source]


# -- models that export -------------------------------------------------------------------------


def test_cnn_exports_with_a_batch_dim() -> None:
    model = SmallCNN().eval()
    shapes = {"x": {0: Dim("batch", max=256)}}
    rep = export_report(model, (torch.randn(4, 3, 16, 16),), dynamic_shapes=shapes, compare_compile=False)
    assert rep.exported and rep.blockers == () and rep.draft == ()
    assert rep.graph is not None and rep.graph_source == "export" and rep.program is not None
    assert rep.graph.op_count_of("aten.conv2d.default") == 2
    (symbol, words), = rep.range_constraints
    assert words.startswith(f"{symbol} (x.size(0)): ") and words.endswith("to 256")
    # The graph input carries the symbolic batch and the size it ran at.
    x_in = next(m for n, m in zip(rep.graph.nodes, rep.graph.inputs, strict=False) if n.name == "x")
    assert x_in.shape[0] == symbol and x_in.ran_at == (4, 3, 16, 16)
    assert "Dim('batch', max=256)" in rep.dynamic_shapes
    assert assert_exports(model, (torch.randn(4, 3, 16, 16),), dynamic_shapes=shapes).exported


@pytest.mark.slow  # about 4 s: importing transformers and exporting a 2-layer BERT
def test_hf_encoder_exports_with_batch_and_sequence_dims() -> None:
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64,
    )
    model = transformers.BertModel(cfg).eval()
    batch, seq = Dim("batch", max=32), Dim("seq", max=64)
    inputs = {"input_ids": torch.randint(0, 100, (2, 16)), "attention_mask": torch.ones(2, 16, dtype=torch.long)}
    shapes = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
    rep = export_report(model, inputs, dynamic_shapes=shapes, compare_compile=False)
    assert rep.exported, rep
    words = [w for _, w in rep.range_constraints]
    assert any("(input_ids.size(0)): " in w and w.endswith("to 32") for w in words), words
    assert any("(input_ids.size(1)): " in w and w.endswith("to 64") for w in words), words
    assert rep.graph is not None and rep.graph.op_count_of("aten.layer_norm.default") >= 2


def test_plain_function_keeps_its_argument_names_for_dynamic_shapes() -> None:
    b = Dim("b")
    rep = export_report(add_rows, (torch.randn(3, 4), torch.randn(3, 4)),
                        dynamic_shapes={"x": {0: b}, "y": {0: b}}, compare_compile=False)
    assert rep.exported and rep.title == "add_rows"
    assert rep.graph is not None and rep.graph.frame == "add_rows" and rep.graph.filename == HERE


# -- what blocks export ---------------------------------------------------------------------------


@pytest.mark.parametrize("strict", [False, True])
def test_item_branch_is_a_data_dependent_blocker_at_the_users_line(strict: bool) -> None:
    rep = export_report(ItemBranch(), (torch.randn(3, 4),), strict=strict)
    assert not rep.exported and rep.strict is strict
    (blocker,) = rep.blockers
    assert blocker.kind == "data-dependent" and blocker.source == "export"
    assert (blocker.filename, blocker.lineno) == (HERE, line_of("item-branch"))
    assert blocker.code.startswith("if n > 0:") and blocker.function == "forward"
    assert "data-dependent expression" in blocker.pytorch and "torch._check" in blocker.fix
    # draft_export goes on past it, assuming this call's value, and says where.
    assert rep.draft_exported is True and rep.graph_source == "draft_export"
    assert [(d.kind, d.lineno, d.source) for d in rep.draft] == [("data-dependent", line_of("item-branch"), "draft_export")]
    # torch.compile breaks at .item(); export takes .item() and stops at the branch.
    sites = {(m.lineno, m.blocker) for m in rep.compile_breaks}
    assert rep.compile_compared and (line_of("item-call"), False) in sites


def test_assert_exports_lists_blockers_with_file_line_and_fix() -> None:
    with pytest.raises(AssertionError) as info:
        assert_exports(ItemBranch(), (torch.randn(3, 4),))
    text = str(info.value)
    assert f"data-dependent at test_export.py:{line_of('item-branch')}: " in text, text
    assert text.startswith("ItemBranch: does not export (non-strict)") and "\nError: " in text, text
    assert "fix: " in text and "if n > 0:" in text


@pytest.mark.parametrize("strict", [False, True])
def test_specialized_dim_suggests_shapes_that_export(strict: bool) -> None:
    x = torch.randn(6, 8)
    shapes = {"x": {0: Dim("batch"), 1: Dim("feat")}}
    rep = export_report(FixedFeatures(), (x,), dynamic_shapes=shapes, strict=strict, compare_compile=False)
    assert not rep.exported
    (blocker,) = rep.blockers
    assert blocker.kind == "constraint violation" and "feat" in blocker.summary
    assert (blocker.filename, blocker.lineno) == (HERE, line_of("specialize"))
    guard = next(d for d in rep.draft if d.error_type == "GUARD_ADDED")
    assert guard.kind == "constraint violation" and "x.size(1)" in guard.summary
    assert guard.lineno == line_of("specialize")
    suggested = rep.suggested_shapes
    assert suggested is not None and suggested.fixes == ("feat = 8",)
    assert rep.suggested_exported is True and rep.graph_source == "suggested"
    # Confirmed by PyTorch, not only by dynscope: the pasted source exports.
    scope: dict[str, object] = {}
    exec(suggested.source, scope)  # the text dynscope tells users to paste
    program = torch.export.export(FixedFeatures(), (x,), dynamic_shapes=scope["dynamic_shapes"], strict=strict)
    assert program.graph_module is not None


@pytest.mark.parametrize(("strict", "kind"), [(False, "unsupported operator"), (True, "graph break")])
def test_deepcopy_blocks_export_where_compile_breaks(strict: bool, kind: str) -> None:
    rep = export_report(DeepCopies(), (torch.randn(3, 4),), strict=strict)
    (blocker,) = rep.blockers
    assert blocker.kind == kind and blocker.lineno == line_of("deepcopy") and blocker.filename == HERE
    assert rep.graph is None and rep.draft_exported is False
    assert any("draft_export failed too" in n for n in rep.notes)
    (match,) = [m for m in rep.compile_breaks if m.lineno == line_of("deepcopy")]
    assert match.blocker and match.blocker_kind == kind and match.category == "deepcopy"


def test_custom_op_without_fake_kernel() -> None:
    rep = export_report(CallsCustomOp(), (torch.randn(3, 4),), compare_compile=False)
    (blocker,) = rep.blockers
    assert blocker.kind == "missing fake kernel" and "opaque_scale" in blocker.detail
    assert "register_fake" in blocker.fix
    assert [d.error_type for d in rep.draft] == ["MISSING_FAKE_KERNEL"]
    assert rep.draft[0].kind == "missing fake kernel" and "opaque_scale" in rep.draft[0].summary


# -- report model ---------------------------------------------------------------------------------


def test_report_round_trips_and_reprs_are_short() -> None:
    rep = export_report(FixedFeatures(), (torch.randn(6, 8),),
                        dynamic_shapes={"x": {0: Dim("batch"), 1: Dim("feat")}}, compare_compile=False)
    back = from_plain(ExportReport, to_plain(rep))
    assert back == rep and back.program is None and back.graph is not None and back.graph.module is None
    for obj in (rep, *rep.all_blockers, rep.suggested_shapes):
        assert len(repr(obj)) <= REPR_MAX and "\n" not in repr(obj)
    assert {b.kind for b in rep.all_blockers} <= set(BLOCKER_KINDS)
    assert "Suggested dynamic_shapes (exports)" in str(rep)


# -- bad input and PyTorch's state --------------------------------------------------------------------


def test_bad_arguments_say_what_to_do() -> None:
    x = torch.randn(3, 4)
    with pytest.raises(InputError, match="callable"):
        export_report(42, (x,))
    with pytest.raises(InputError, match="not an instance"):
        export_report(SmallCNN, (x,))
    with pytest.raises(InputError, match="must be a Tensor"):
        export_report(ItemBranch(), "x")
    with pytest.raises(InputError, match="dynamic_shapes must be None, a dict"):
        export_report(ItemBranch(), (x,), dynamic_shapes=Dim("b"))
    with pytest.raises(InputError, match=r"forward takes \(x\)"):
        export_report(ItemBranch(), (x,), dynamic_shapes={"y": {0: Dim("b")}}, compare_compile=False)


def test_export_leaves_pytorch_state_as_it_was(tmp_path: Path) -> None:
    from torch._dynamo.utils import counters
    from torch._logging._internal import LazyTraceHandler

    # A user's TORCH_TRACE handler: draft_export removes every LazyTraceHandler and never
    # re-adds them (torch's own default one removes itself when no folder is set, so it is
    # not a fair witness).
    trace_log = logging.getLogger("torch.__trace")
    users = LazyTraceHandler(str(tmp_path))
    trace_log.addHandler(users)
    dtrace = os.environ.get("TORCH_DTRACE")
    before = {k: dict(v) for k, v in counters.items() if v}
    try:
        export_report(DeepCopies(), (torch.randn(3, 4),), strict=True, compare_compile=False)
        export_report(ItemBranch(), (torch.randn(3, 4),), strict=True, compare_compile=False)  # runs draft_export
        assert users in trace_log.handlers and os.environ.get("TORCH_DTRACE") == dtrace
        assert {k: dict(v) for k, v in counters.items() if v} == before
    finally:
        trace_log.removeHandler(users)
        users.close()
