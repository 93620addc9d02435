"""export_report on every corpus program and on a ResNet-shaped CNN: a report for each,
consistent with itself and with what torch.export and dynscope.report() say on their own.

(torchvision's PyPI wheel is built for CUDA torch and does not load against the CPU build
the suite pins, so the ResNet here is written out: BasicBlocks with residuals and strided
downsampling, as torchvision's resnet18 is built.)
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.export import Dim

import dynscope
from dynscope._model.export import BLOCKER_KINDS
from tests.corpus.programs import PROGRAMS

CORPUS_FILE = "programs.py"


def _exports_alone(model: object, args: tuple[object, ...], kwargs: dict[str, object]) -> bool:
    """What torch.export.export itself says (the module as export_report would wrap it)."""
    if isinstance(model, nn.Module):
        module = model
    else:  # a function: the test's own wrapper, not export_report's
        module = type("Wrapped", (nn.Module,), {"forward": staticmethod(model)})()
    try:
        torch.export.export(module, args, kwargs)
    except Exception:  # noqa: BLE001 - any failure is export's answer
        return False
    return True


@pytest.mark.slow
@pytest.mark.parametrize("program", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_every_corpus_program_gets_a_consistent_export_report(program: object) -> None:
    model, calls = program.make()  # type: ignore[attr-defined]
    first = calls[0]
    rep = dynscope.export_report(model, first)
    args, kwargs = (tuple(first), {}) if isinstance(first, (tuple, list)) else (
        ((), dict(first)) if isinstance(first, dict) else ((first,), {}))
    assert rep.exported == _exports_alone(model, args, kwargs)
    if rep.graph is not None:  # nothing of dynscope's in the exported graph (its wrapper of a function)
        assert "/dynscope/" not in rep.graph.code and all("/dynscope/" not in n.filename for n in rep.graph.nodes)
    if rep.exported:
        assert rep.blockers == () and rep.graph is not None and rep.graph_source == "export"
        assert rep.graph.op_count > 0 or program.graphs == 0  # type: ignore[attr-defined]
    else:
        assert rep.blockers and rep.error
        for b in (*rep.blockers, *rep.draft):
            assert b.kind in BLOCKER_KINDS and b.summary and b.fix and b.pytorch
            if b.filename:  # a line is the user's: never torch's or dynscope's
                assert "/torch/" not in b.filename and "/dynscope/" not in b.filename
    if program.name == "generator_break":  # type: ignore[attr-defined]
        assert "an input export cannot take" in rep.blockers[0].summary
    if program.name == "train_step":  # type: ignore[attr-defined]
        assert "export the model's forward" in rep.blockers[0].fix
    # Side by side with torch.compile: one entry per break site report() found.
    compiled = dynscope.report(model, first)
    assert rep.compile_compared
    assert {(c.filename, c.lineno) for c in rep.compile_breaks} == {(b.filename, b.lineno) for b in compiled.breaks}
    for c in rep.compile_breaks:
        at_blocker = any(b.filename == c.filename and b.lineno == c.lineno for b in rep.all_blockers)
        assert c.blocker == at_blocker


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.down(x))


class ResNetish(nn.Module):
    """resnet18's layout at a small width: stem, four stages of two BasicBlocks, pooled head."""

    def __init__(self, width: int = 8, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        stages, cin = [], width
        for i, mult in enumerate((1, 2, 4, 8)):
            cout = width * mult
            stages += [BasicBlock(cin, cout, 1 if i == 0 else 2), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.layers(self.stem(x)), 1), 1))


@pytest.mark.slow
def test_resnet_shaped_cnn_exports_with_a_batch_dim_and_matches_eager() -> None:
    model = ResNetish().eval()
    x = torch.randn(4, 3, 32, 32)
    shapes = {"x": {0: Dim("batch", min=1, max=128)}}
    rep = dynscope.export_report(model, (x,), dynamic_shapes=shapes)
    assert rep.exported and not rep.blockers and rep.compile_breaks == ()
    assert rep.graph is not None and rep.graph.op_count_of("aten.conv2d.default") == 1 + 16 + 3
    (_, words), = rep.range_constraints
    assert "(x.size(0)): " in words and words.endswith("to 128")
    # The program PyTorch exported runs at another batch and agrees with eager.
    other = torch.randn(7, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(rep.program.module()(other), model(other))
    assert rep.graph.to_dot().startswith("digraph")


@pytest.mark.slow
def test_hf_encoder_side_by_side_with_compile() -> None:
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=64)
    model = transformers.BertModel(cfg).eval()
    inputs = {"input_ids": torch.randint(0, 100, (2, 16)), "attention_mask": torch.ones(2, 16, dtype=torch.long)}
    batch, seq = Dim("batch", max=32), Dim("seq", max=64)
    shapes = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
    rep = dynscope.export_report(model, inputs, dynamic_shapes=shapes)
    compiled = dynscope.report(model, inputs)
    assert rep.exported and rep.compile_compared
    assert len(rep.compile_breaks) == len(compiled.breaks)
    assert not rep.break_blockers  # it exported: no compile break blocks it


def test_export_page_and_text_say_what_blocks(tmp_path: object) -> None:
    class Fixed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x)

    rep = dynscope.export_report(Fixed(), (torch.randn(4, 8),), dynamic_shapes={"x": {0: Dim("b"), 1: Dim("f")}},
                                 compare_compile=False)
    assert not rep.exported and rep.suggested_exported is True
    text = rep.summary()
    assert text == str(rep) and "constraint violation at test_export_corpus.py:" in text
    assert "Suggested dynamic_shapes (exports):" in text
    page = rep.to_html(pictures=False)
    assert page.startswith("<!DOCTYPE html>") and 'id="blockers"' in page and 'id="suggested"' in page
    assert "The exported graph (torch.export with the suggested dynamic_shapes)" in page
    assert "<script" not in page  # nothing runs on the page
    hostile = dynscope.ExportReport(title="<script>alert(1)</script>", exported=False, strict=False,
                                    error="<img src=x onerror=alert(1)>")
    assert "<script>alert" not in hostile.to_html(pictures=False) and "<img src=x" not in hostile.to_html(pictures=False)
