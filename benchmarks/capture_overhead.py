"""How much does capture without timing cost next to ``torch._dynamo.explain`` (issue 20)?

Target: ``dynscope.report(model, inputs)`` (timing off) costs at most 1.10x
``torch._dynamo.explain(model)(inputs)`` wall time.

Each model, in one run, side by side:
  - ``dynscope.report(model, x)``          (timing off, coverage on: the defaults)
  - ``torch._dynamo.explain(model)(x)``
  - ``torch.compile(model, backend="eager")(x)``  (first call: compile + run; for scale)

Fairness: the three make the same call (same positional / keyword inputs) under the same grad
mode (the model's as it comes: grad on, modules in eval so dropout is off for all); each
measurement starts after ``torch._dynamo.reset()`` and ``gc.collect()`` (not timed: each call
starts from the same collector state, see _interleaved) and is the wall time around the one
call, in process. One untimed warm-up round first (imports, linecache, lazy torch
initialisation would otherwise land on whichever runs first). Then REPEATS rounds, the three
in turn each round (in reversed order every other round), so drift on a shared machine hits
them alike; medians are printed, and ``report / explain`` per model (the median of each
round's ratio) with the target and whether the row meets it, and the same ratio on process
CPU time beside it (steadier when other jobs share the cores; the target is on wall time).

Models: a deep MLP with graph breaks, a tiny transformer with breaks (examples/quickstart.py),
Hugging Face GPT-2 and T5 built from small configs (no downloads; skipped with a note when
transformers is missing).

Run: ``.venv/bin/python benchmarks/capture_overhead.py [--repeats N] [--only NAME ...]``.
No assertion: the figures are for reading (timing assertions in tests would be flaky).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dynscope
from examples.quickstart import TinyTransformer

if TYPE_CHECKING:
    from collections.abc import Callable

TARGET = 1.10
REPEATS = 7


class DeepMLP(nn.Module):
    def __init__(self, depth: int) -> None:
        super().__init__()
        self.layers = nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.LayerNorm(64), nn.GELU()) for _ in range(depth)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class BrokenMLP(DeepMLP):
    """A deep MLP with a graph break after every quarter (a print: a logging side effect).

    Written out, not in a loop: a break inside a loop makes Dynamo give up on the whole frame.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = len(self.layers) // 4
        x = self.layers[:q](x)
        print("", end="")
        x = self.layers[q : 2 * q](x)
        print("", end="")
        x = self.layers[2 * q : 3 * q](x)
        print("", end="")
        return self.layers[3 * q :](x)


def _hf_models() -> list[tuple[str, nn.Module, Any]]:
    """GPT-2 and T5 from small local configs, or [] when transformers is not installed."""
    try:
        from transformers import GPT2Config, GPT2LMHeadModel, T5Config, T5ForConditionalGeneration
    except ImportError:
        print("transformers not installed: GPT-2 and T5 rows skipped")
        return []
    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=1000, n_positions=128)).eval()
    t5 = T5ForConditionalGeneration(
        T5Config(
            vocab_size=1000, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2,
            num_heads=4, decoder_start_token_id=0,
        )
    ).eval()
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 1000, (2, 16), generator=gen)
    dec = torch.randint(0, 1000, (2, 8), generator=gen)
    return [
        ("hf gpt2 (2 layers)", gpt2, {"input_ids": ids}),
        ("hf t5 (2+2 layers)", t5, {"input_ids": ids, "decoder_input_ids": dec}),
    ]


def _models() -> list[tuple[str, nn.Module, Any]]:
    torch.manual_seed(0)
    return [
        ("mlp x40, 3 breaks", BrokenMLP(40).eval(), torch.randn(8, 64)),
        ("tiny transformer (breaks)", TinyTransformer().eval(), torch.randn(2, 8, 32)),
        *_hf_models(),
    ]


def _call(fn: Callable[..., Any], inputs: Any) -> Any:
    """``fn`` called with ``inputs`` by report()'s rule: a dict by keyword, a tensor alone."""
    if isinstance(inputs, dict):
        return fn(**inputs)
    if isinstance(inputs, (tuple, list)):
        return fn(*inputs)
    return fn(inputs)


def _quietly(fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` with stdout sent nowhere (the models print at their breaks), the same for all three."""

    def run() -> object:
        saved = sys.stdout
        sys.stdout = _NULL
        try:
            return fn()
        finally:
            sys.stdout = saved

    return run


class _Null:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


_NULL: Any = _Null()


def _interleaved(fns: list[Callable[[], object]], repeats: int) -> tuple[list[list[float]], list[list[float]]]:
    """Wall and CPU seconds of each function per round (round 0 is a warm-up, not kept).

    The functions run in turn each round, so drift hits all alike, in reversed order every
    other round, so none always runs right after the same neighbour. CPU time is the
    process's (all threads): on a shared machine it moves less than wall time when other
    jobs take the cores.
    """
    wall: list[list[float]] = [[] for _ in fns]
    cpu: list[list[float]] = [[] for _ in fns]
    for round_no in range(repeats + 1):
        order = list(range(len(fns)))
        if round_no % 2:
            order.reverse()
        for i in order:
            torch._dynamo.reset()
            # Each call starts from the same collector state (as PyTorch's own timed() does):
            # otherwise a full collection, due to the survivors of both calls, lands on
            # whichever call first allocates after a compile ends, and report() builds its
            # report right then: 10 rounds of GPT-2 gave report() 5 full collections of
            # 0.3-0.5 s each and explain() none.
            gc.collect()
            cpu_start = time.process_time()
            start = time.perf_counter()
            fns[i]()
            took = time.perf_counter() - start
            cpu_took = time.process_time() - cpu_start
            if round_no:
                wall[i].append(took)
                cpu[i].append(cpu_took)
    torch._dynamo.reset()
    return wall, cpu


def _ratio(a: list[float], b: list[float]) -> float:
    """Median of the per-round ratios a/b (each round's pair ran side by side)."""
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=REPEATS, help=f"timed rounds (default {REPEATS})")
    parser.add_argument("--only", nargs="*", default=None, help="model names containing one of these words")
    args = parser.parse_args(argv)
    rows = []
    for name, model, x in _models():
        if args.only and not any(w in name for w in args.only):
            continue
        rep = _quietly(lambda m=model, x=x: dynscope.report(m, x))()
        assert isinstance(rep, dynscope.Report)
        n_ops = sum(g.op_count for g in rep.graphs)
        (t_report, t_explain, t_compile), (c_report, c_explain, _) = _interleaved(
            [
                _quietly(lambda m=model, x=x: dynscope.report(m, x)),
                _quietly(lambda m=model, x=x: _call(torch._dynamo.explain(m), x)),
                _quietly(lambda m=model, x=x: _call(torch.compile(m, backend="eager"), x)),
            ],
            args.repeats,
        )
        rows.append(
            (name, n_ops, rep.graph_count, rep.break_count, statistics.median(t_report),
             statistics.median(t_explain), statistics.median(t_compile), _ratio(t_report, t_explain),
             _ratio(t_report, t_compile), _ratio(c_report, c_explain))
        )
    print(
        f"\n{args.repeats} rounds each, medians of wall time; ratios are medians of the per-round "
        f"ratios (rep/expl: the target, <= {TARGET:.2f}x; cpu r/e: the same on process CPU time)"
    )
    print(
        f"{'model':26s} {'ops':>4s} {'grph':>4s} {'brk':>3s} {'report s':>9s} {'explain s':>9s} "
        f"{'compile s':>9s} {'rep/expl':>8s} {'rep/comp':>8s} {'cpu r/e':>8s}  meets"
    )
    met = 0
    for name, n_ops, n_graphs, n_breaks, r, e, c, ratio, vs_compile, cpu_ratio in rows:
        ok = ratio <= TARGET
        met += ok
        print(
            f"{name:26s} {n_ops:4d} {n_graphs:4d} {n_breaks:3d} {r:9.3f} {e:9.3f} {c:9.3f} {ratio:8.2f} "
            f"{vs_compile:8.2f} {cpu_ratio:8.2f}  {'yes' if ok else 'NO'}"
        )
    print(f"{met} of {len(rows)} models meet report/explain <= {TARGET:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
