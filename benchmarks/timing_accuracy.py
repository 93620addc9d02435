"""Does dynscope's timer agree with an independent one? Same GraphModules, same run.

For a few models: capture with dynscope.report(timing=True), then time the very same
eager GraphModule and Inductor-compiled module with torch.utils.benchmark.Timer (CPU) or
triton.testing.do_bench (CUDA), and print dynscope / independent for each median, beside
a control: the independent timer run again / itself, which shows this machine's noise.
Both timers use torch's current thread count (Timer defaults to one thread otherwise), and
a "speedup" row per graph compares dynscope's eager/compiled ratio with Timer's.
Target: within 10% on CPU, 5% on CUDA.
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
from dynscope._capture.timing import time_graph

ROUNDS = 5


def models(device: str) -> list[tuple[str, nn.Module, torch.Tensor]]:
    torch.manual_seed(0)
    size = 512 if device.startswith("cuda") else 128
    return [
        ("mlp", nn.Sequential(nn.Linear(size, 4 * size), nn.GELU(), nn.Linear(4 * size, size)).to(device).eval(),
         torch.randn(64, size, device=device)),
        ("layernorm+softmax", nn.Sequential(nn.LayerNorm(size), nn.Softmax(-1)).to(device).eval(),
         torch.randn(64, size, device=device)),
        ("encoder layer", nn.TransformerEncoderLayer(size // 2, 4, batch_first=True).to(device).eval(),
         torch.randn(8, 32, size // 2, device=device)),
    ]


def independent_ms(fn, device: str) -> float:
    if device.startswith("cuda"):
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=25, rep=200, return_mode="median"))
    from torch.utils.benchmark import Timer

    # Timer runs on one thread unless told; dynscope times with torch's current setting.
    timer = Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=0.5).median * 1000


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"device: {device}; target: within {'5' if device == 'cuda' else '10'}%; "
          f"threads: {torch.get_num_threads()} (both timers)")
    worst = worst_control = 0.0
    interleave = "--no-interleave" not in sys.argv
    opts = dynscope.TimingOptions(repeats=30, min_time_s=0.3, end_to_end=False, progress=False,
                                  interleave=interleave)
    print(f"dynscope sampling: {'interleaved' if interleave else 'back to back'} (--no-interleave to switch)")
    print(f"{'model':20s} {'graph':>5s} {'side':>8s} {'dynscope ms':>12s} {'independent ms':>15s} {'ratio':>6s} "
          f"{'control':>8s}")
    for name, model, x in models(device):
        # Capture once; dynscope's timer and the independent one time the same records.
        backend = RecordingBackend(keep_inputs=True)
        with torch.no_grad():
            torch.compile(model, backend=backend)(x)
        torch._dynamo.reset()
        for gid, rec in enumerate(backend.graphs):
            gm = copy.deepcopy(rec.module)
            inputs = rec.example_inputs
            with torch.no_grad():
                comp = _torch.inductor_compile(copy.deepcopy(rec.module), inputs, "default")
                comp(*inputs)
            # This machine is shared and noisy: alternate the two timers ROUNDS times and
            # compare the medians of their medians.
            mine_e, mine_c, their_e, their_c, again_e, again_c = [], [], [], [], [], []
            failed = ""
            for _ in range(ROUNDS):
                t = time_graph(rec, "default", opts)
                if t.failed:
                    failed = t.error
                    break
                mine_e.append(t.eager_ms)
                mine_c.append(t.compiled_ms)
                with torch.no_grad():
                    their_e.append(independent_ms(lambda gm=gm, inputs=inputs: gm(*inputs), device))
                    their_c.append(independent_ms(lambda comp=comp, inputs=inputs: comp(*inputs), device))
                    # Control: the independent timer against itself shows the machine's noise.
                    again_e.append(independent_ms(lambda gm=gm, inputs=inputs: gm(*inputs), device))
                    again_c.append(independent_ms(lambda comp=comp, inputs=inputs: comp(*inputs), device))
            if failed:
                print(f"{name:20s} {gid:5d} failed: {failed}")
                continue
            # The number a reader acts on is the speedup: dynscope's against Timer's, per graph.
            speed_mine = statistics.median(e / c for e, c in zip(mine_e, mine_c, strict=True))
            speed_theirs = statistics.median(e / c for e, c in zip(their_e, their_c, strict=True))
            speed_again = statistics.median(e / c for e, c in zip(again_e, again_c, strict=True))
            for side, mine, theirs, again in (("eager", mine_e, their_e, again_e),
                                              ("inductor", mine_c, their_c, again_c),
                                              ("speedup", [speed_mine], [speed_theirs], [speed_again])):
                ratio = statistics.median(mine) / statistics.median(theirs)
                control = statistics.median(again) / statistics.median(theirs)
                worst = max(worst, abs(ratio - 1))
                worst_control = max(worst_control, abs(control - 1))
                print(f"{name:20s} {gid:5d} {side:>8s} {statistics.median(mine):12.4f} "
                      f"{statistics.median(theirs):15.4f} {ratio:6.2f} {control:8.2f}")
    print(f"largest deviation: {worst:.1%} (independent timer against itself: {worst_control:.1%})")


if __name__ == "__main__":
    main()
