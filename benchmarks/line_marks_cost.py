"""What does placing eager ops at their lines cost (issue 32)?

dynscope's line tracer (``dynscope/_torch/line_marks.py``) runs during report()'s calls
from the program's first graph break on. Each program, in one run, side by side:
``dynscope.report(program)`` with the tracer (the default) and with ``DYNSCOPE_LINES=0``.
Rounds alternate the two (reversed every other round), each after ``torch._dynamo.reset()``
and ``gc.collect()``; medians of wall time and the median of the per-round ratios are printed.

Programs: a 40-layer MLP with three breaks (no loop: the tracer runs, Dynamo keeps the
frames), a decoding loop whose condition breaks (Dynamo gives up on the frame: every step
runs eagerly under the tracer), and Hugging Face GPT-2 ``generate`` from a small config
(skipped without transformers). A program without a break never starts the tracer.

Run: ``.venv/bin/python benchmarks/line_marks_cost.py [--repeats N]``. No assertion: the
figures are for reading.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dynscope
from benchmarks.capture_overhead import BrokenMLP, _quietly

if TYPE_CHECKING:
    from collections.abc import Callable

REPEATS = 5
VOCAB = torch.randn(64, 64)


def _still_running(unfinished: torch.Tensor) -> bool:
    return bool(unfinished.max() == 0) is False


def decode(h: torch.Tensor, steps: int = 32) -> torch.Tensor:
    """generate's loop: its condition breaks, so the frame runs eagerly."""
    unfinished = torch.ones(h.shape[0], dtype=torch.long)
    out = []
    n = 0
    while _still_running(unfinished) and n < steps:
        nxt = (h @ VOCAB).argmax(-1)
        nxt = nxt * unfinished
        unfinished = unfinished & ~(nxt == 999)
        out.append(nxt)
        h = h + 0.01
        n += 1
    return torch.stack(out)


def _programs() -> list[tuple[str, Callable[[], Any]]]:
    torch.manual_seed(0)
    mlp, x = BrokenMLP(40).eval(), torch.randn(8, 64)
    h = torch.randn(4, 64)
    out: list[tuple[str, Callable[[], Any]]] = [
        ("mlp x40, 3 breaks", lambda: dynscope.report(mlp, x)),
        ("decode loop, 32 steps", lambda: dynscope.report(decode, h)),
    ]
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        print("transformers not installed: the GPT-2 generate row is skipped")
        return out
    cfg = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=64, bos_token_id=0, eos_token_id=0)
    gpt2 = GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, 100, (1, 8))
    out.append(("hf gpt2 generate, 6 tokens",
                lambda: dynscope.report(lambda: gpt2.generate(ids, max_new_tokens=6, do_sample=False, pad_token_id=0))))
    return out


def _timed(fn: Callable[[], Any], lines: bool) -> float:
    os.environ["DYNSCOPE_LINES"] = "1" if lines else "0"
    torch._dynamo.reset()
    gc.collect()
    start = time.perf_counter()
    _quietly(fn)()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=REPEATS)
    args = parser.parse_args(argv)
    os.environ.setdefault("DYNSCOPE_PROGRESS", "0")
    print(f"{'program':28s} {'lines s':>8s} {'no lines s':>10s} {'ratio':>6s}")
    for name, fn in _programs():
        _timed(fn, True)  # warm-up: imports, linecache
        on: list[float] = []
        off: list[float] = []
        for r in range(args.repeats):
            for lines in ((True, False) if r % 2 == 0 else (False, True)):
                (on if lines else off).append(_timed(fn, lines))
        ratio = statistics.median(a / b for a, b in zip(on, off, strict=True))
        print(f"{name:28s} {statistics.median(on):8.3f} {statistics.median(off):10.3f} {ratio:6.2f}x")
    os.environ.pop("DYNSCOPE_LINES", None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
