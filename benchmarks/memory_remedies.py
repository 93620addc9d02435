"""The memory remedies, measured: ``dynscope.advise(step, args, memory=True)`` on a
nanoGPT-like train step and on a ResNet-shaped conv net's train step.

For each remedy (activation_memory_budget at 0.5 and 0.1, activation checkpointing of the
repeated blocks, selective checkpointing saving matmuls), each run in isolation: the
compiled call's peak before -> after (CPU, the profiler's allocation events), the compiled
step time before -> after (end to end, median), whether outputs and gradients (here the
weights the optimizer step updated) matched eager's, and the verdict. Plain print.

Run:  OMP_NUM_THREADS=1 .venv/bin/python benchmarks/memory_remedies.py [gpt] [resnet]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dynscope
from dynscope._format import human_bytes, ms
from tests.capture.test_export_corpus import ResNetish
from tests.memory_timeline import gpt_program, sgd_program


def resnet_program() -> tuple[str, object, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    p = sgd_program("ResNet-shaped conv net", ResNetish(width=8),
                    (torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))))
    return p.name, p.step, p.args


def table(name: str, step: object, args: tuple[torch.Tensor, ...]) -> None:
    opts = dynscope.TimingOptions(repeats=10, min_time_s=0.1)
    start = time.perf_counter()
    adv = dynscope.advise(step, args, memory=True, timing_options=opts)
    took = time.perf_counter() - start
    print(f"== {name} ({took:.0f} s for {len(adv.trials)} trials) ==")
    print(f"{'remedy':34} {'compiled peak before -> after':32} {'change':>7} {'step before -> after':28} "
          f"{'outputs':8} helped")
    for t in adv.trials:
        if t.tried and t.after is not None and t.after.peak is None:
            print(f"{t.remedy:34} (not a memory remedy; ran for the report's breaks) helped: {'yes' if t.helped else 'no'}")
            continue
        if not t.tried or t.after is None or t.after.peak is None or t.before.peak is None:
            print(f"{t.remedy:34} not run: {t.note or t.error}")
            continue
        change = (t.after.peak - t.before.peak) / t.before.peak
        step_s = "-" if t.before.step_ms is None or t.after.step_ms is None else (
            f"{ms(t.before.step_ms)} -> {ms(t.after.step_ms)}")
        label = t.remedy + (f" {t.code.rsplit('=', 1)[-1].strip()}" if t.remedy == "activation_memory_budget" else "")
        print(f"{label:34} {human_bytes(t.before.peak) + ' -> ' + human_bytes(t.after.peak):32} {change:+7.1%} "
              f"{step_s:28} {'match' if t.outputs_match else 'DIFFER':8} {'yes' if t.helped else 'no'}"
              + (f"  ({t.error})" if t.error else ""))
    print()


def main() -> None:
    which = set(sys.argv[1:]) or {"gpt", "resnet"}
    if "gpt" in which:
        p = gpt_program()
        table("nanoGPT-like step (AdamW)", p.step, p.args)
    if "resnet" in which:
        table(*resnet_program())


if __name__ == "__main__":
    main()
