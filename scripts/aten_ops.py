"""Write dynscope/_torch/aten_ops.txt: the ATen op short names of the installed torch.

Fused kernel names ("cpp_fused_relu_threshold_backward_0") are read into the ops they fuse
against this list, so reading a trace log needs no torch. Run after a torch upgrade:

    .venv/bin/python scripts/aten_ops.py
"""

from __future__ import annotations

from pathlib import Path

import torch

from dynscope._torch.lowering_text import aten_vocabulary

OUT = Path(__file__).resolve().parent.parent / "dynscope" / "_torch" / "aten_ops.txt"

if __name__ == "__main__":
    names = sorted(aten_vocabulary())
    head = (
        f"# ATen op short names registered in torch {torch.__version__.split('+')[0]} "
        "(torch._C._dispatch_get_all_op_names), one a line:\n"
        "# how fused kernel names are read without torch. Remade by scripts/aten_ops.py.\n"
    )
    OUT.write_text(head + "\n".join(names) + "\n", encoding="utf-8")
    print(f"wrote {len(names)} names to {OUT}")
