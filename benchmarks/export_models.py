"""Will it export? The table of models: what ``dynscope.export_report`` found on each, and
whether the dynamic_shapes PyTorch suggested exported when dynscope tried them.

Models (small configs, no downloads): a ResNet-shaped CNN with a batch Dim, a Hugging Face
BERT encoder with batch and sequence Dims (needs ``transformers``), a model with ``.item()``
feeding a branch, a model whose Linear fixes the dim marked dynamic, a ``copy.deepcopy`` in
forward (non-strict and strict), and every program of the test corpus. Plain print.

Run:  .venv/bin/python benchmarks/export_models.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.export import Dim

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dynscope
from tests.capture.test_export import DeepCopies, FixedFeatures, ItemBranch
from tests.capture.test_export_corpus import ResNetish
from tests.corpus.programs import PROGRAMS


def _cases() -> list[tuple[str, object, object, object, bool]]:
    out: list[tuple[str, object, object, object, bool]] = [
        ("ResNet-shaped CNN, batch Dim", ResNetish().eval(), (torch.randn(4, 3, 32, 32),),
         {"x": {0: Dim("batch", min=1, max=128)}}, False),
    ]
    try:
        import transformers

        cfg = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                      intermediate_size=64, max_position_embeddings=64)
        b, s = Dim("batch", max=32), Dim("seq", max=64)
        out.append(("HF BERT encoder, batch and seq Dims", transformers.BertModel(cfg).eval(),
                    {"input_ids": torch.randint(0, 100, (2, 16)), "attention_mask": torch.ones(2, 16, dtype=torch.long)},
                    {"input_ids": {0: b, 1: s}, "attention_mask": {0: b, 1: s}}, False))
    except ImportError:
        print("(transformers not installed: no BERT row)")
    out += [
        (".item() into a branch", ItemBranch(), (torch.ones(3),), None, False),
        ("Linear(8, 3), dim 1 marked dynamic", FixedFeatures(), (torch.randn(4, 8),),
         {"x": {0: Dim("b"), 1: Dim("f")}}, False),
        ("copy.deepcopy in forward", DeepCopies(), (torch.ones(3),), None, False),
        ("copy.deepcopy in forward (strict)", DeepCopies(), (torch.ones(3),), None, True),
    ]
    for p in PROGRAMS:
        model, calls = p.make()
        out.append((f"corpus: {p.name}", model, calls[0], None, False))
    return out


def main() -> None:
    print(f"{'model':42} {'exports':8} {'blockers (kind at line)':60} {'draft':6} {'suggested shapes'}")
    for name, model, inputs, shapes, strict in _cases():
        rep = dynscope.export_report(model, inputs, dynamic_shapes=shapes, strict=strict, compare_compile=False)
        blockers = "; ".join(f"{b.kind} at {b.where or '?'}" for b in rep.blockers) or "-"
        suggested = "-"
        if rep.suggested_shapes is not None:
            state = {True: "exported", False: "failed", None: "not tried"}[rep.suggested_shapes.exported]
            suggested = f"{' '.join(rep.suggested_shapes.source.split())} ({state})"
        print(f"{name:42} {'yes' if rep.exported else 'no':8} {blockers[:60]:60} {len(rep.draft):<6} {suggested}")


if __name__ == "__main__":
    main()
