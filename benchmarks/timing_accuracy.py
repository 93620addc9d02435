"""Does dynscope's per-graph timing agree with an independent one? Same graphs, same run.

For each model: ``dynscope.report(timing=True)`` times every graph on torch.compile's own
build; independently, the same captured GraphModule is compiled with ``compile_fx`` (the
config ``torch.compile(mode="default")`` uses, in the grad mode the graph was captured in:
an inference build under ``torch.no_grad()``, a training build with gradients on) and both
it and the eager GraphModule are timed with ``torch.utils.benchmark.Timer`` (CPU) or
``triton.testing.do_bench`` (CUDA), in that same grad mode. The two run in turn ROUNDS
times and the medians of their medians are compared. Per graph it prints eager and
compiled figures and the ratio of dynscope's speedup to the independent one, beside a
control (the independent timer against itself: this machine's noise). Both timers use
torch's current thread count (Timer defaults to one thread otherwise).
Target: every graph's speedup within 10% on a quiet CPU, 5% on CUDA.

Run: ``.venv/bin/python benchmarks/timing_accuracy.py`` (``OMP_NUM_THREADS=1`` on a small
or busy machine: threads fighting for cores make any timer's medians wander).
"""

from __future__ import annotations

import copy
import statistics
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dynscope
from dynscope import _torch
from dynscope._capture.backend import RecordingBackend

ROUNDS = 5


class LinearGeluIf(nn.Module):
    """The issue's graph: Linear(256->512)+GELU, then a data-dependent ``if`` (a break)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(256, 512)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.act(self.lin(x))
        if y.sum() > 0:
            return y * 2
        return y


def models(device: str) -> list[tuple[str, nn.Module, torch.Tensor, bool]]:
    """(name, model, input, grad mode)."""
    torch.manual_seed(0)
    size = 512 if device.startswith("cuda") else 128
    return [
        ("linear+gelu+if", LinearGeluIf().to(device), torch.randn(64, 256, device=device), False),
        ("linear+gelu+if grad", LinearGeluIf().to(device), torch.randn(64, 256, device=device), True),
        ("mlp", nn.Sequential(nn.Linear(size, 4 * size), nn.GELU(), nn.Linear(4 * size, size)).to(device).eval(),
         torch.randn(64, size, device=device), False),
        ("layernorm+softmax", nn.Sequential(nn.LayerNorm(size), nn.Softmax(-1)).to(device).eval(),
         torch.randn(64, size, device=device), False),
        ("encoder layer", nn.TransformerEncoderLayer(size // 2, 4, batch_first=True).to(device).eval(),
         torch.randn(8, 32, size // 2, device=device), False),
    ]


def independent_ms(fn, device: str) -> float:
    if device.startswith("cuda"):
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=25, rep=200, return_mode="median"))
    from torch.utils.benchmark import Timer

    # Timer runs on one thread unless told; dynscope times with torch's current setting.
    timer = Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=0.5).median * 1000


def main() -> int:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    target = 0.05 if device == "cuda" else 0.10
    print(f"device: {device}; target: speedup within {target:.0%}; threads: {torch.get_num_threads()} (both timers)")
    opts = dynscope.TimingOptions(repeats=30, min_time_s=0.3, end_to_end=False, progress=False, backward=False)
    print(f"{'model':22s} {'graph':>5s} {'side':>8s} {'dynscope':>11s} {'independent':>13s} {'ratio':>6s} {'control':>8s}")
    worst = worst_control = 0.0
    for name, model, x, grad in models(device):
        # The independent side: the same captured graphs, compiled by compile_fx in their grad mode.
        backend = RecordingBackend(keep_inputs=True)
        with torch.set_grad_enabled(grad):
            torch.compile(model, backend=backend)(x)
        torch._dynamo.reset()
        theirs = []
        for rec in backend.graphs:
            with torch.set_grad_enabled(rec.grad_enabled):
                comp = _torch.inductor_compile(copy.deepcopy(rec.module), rec.example_inputs, "default")
                comp(*rec.example_inputs)
            theirs.append((copy.deepcopy(rec.module), comp, rec.example_inputs, rec.grad_enabled))
        mine: list[list[tuple[float, float]]] = [[] for _ in theirs]
        their: list[list[tuple[float, float]]] = [[] for _ in theirs]
        again: list[list[tuple[float, float]]] = [[] for _ in theirs]
        for _ in range(ROUNDS):
            with torch.set_grad_enabled(grad):
                rep = dynscope.report(model, x, timing=True, timing_options=opts, coverage=False)
            for gid, (g, (gm, comp, inputs, gmode)) in enumerate(zip(rep.graphs, theirs, strict=True)):
                t = g.timing
                assert t is not None and not t.failed, t.error if t else "not timed"
                mine[gid].append((t.eager_ms, t.compiled_ms))
                with torch.set_grad_enabled(gmode):
                    for bucket in (their[gid], again[gid]):
                        e = independent_ms(lambda gm=gm, inputs=inputs: gm(*inputs), device)
                        c = independent_ms(lambda comp=comp, inputs=inputs: comp(*inputs), device)
                        bucket.append((e, c))
        for gid in range(len(theirs)):
            rows = []
            for side, pick in (("eager", lambda p: p[0]), ("inductor", lambda p: p[1]), ("speedup", lambda p: p[0] / p[1])):
                m = statistics.median(pick(p) for p in mine[gid])
                t = statistics.median(pick(p) for p in their[gid])
                a = statistics.median(pick(p) for p in again[gid])
                rows.append((side, m, t, m / t, a / t))
            for side, m, t, ratio, control in rows:
                if side == "speedup":
                    worst = max(worst, abs(ratio - 1))
                    worst_control = max(worst_control, abs(control - 1))
                unit = "x " if side == "speedup" else "ms"
                print(f"{name:22s} {gid:5d} {side:>8s} {m:9.4f}{unit} {t:11.4f}{unit} {ratio:6.2f} {control:8.2f}")
    ok = worst <= target
    print(f"largest speedup deviation: {worst:.1%} (independent timer against itself: {worst_control:.1%}); "
          f"{'within' if ok else 'OVER'} the {target:.0%} target")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
