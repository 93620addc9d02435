"""Does dynscope.report() keep memory alive? RSS over 20 reports of a ~100 MB model.

The model is six Linear(2048, 2048) layers (~100 MB of float32 parameters) with a print
break in the middle, so each report captures two graphs. Each round makes a new input,
reports, drops the report and runs gc.collect(); RSS (from /proc/self/statm) is read after
every round. The control does the same with a plain torch.compile(backend="eager") followed
by torch._dynamo.reset(). Both run twice: on one model for all rounds, and on a new model
each round (dropped after it), where anything the report keeps alive shows as ~100 MB a
round. Each loop runs in its own process so none inherits another's heap. Also counted: how
many of the rounds' inputs and models are still alive at the end.

Run:  .venv/bin/python benchmarks/report_memory.py [--rounds 20]   (about 2 minutes)
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import weakref
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import dynscope  # noqa: E402

WIDTH = 2048
LAYERS = 6
MB = 1024 * 1024


class Big(nn.Module):
    """Six 2048x2048 linear layers (~100 MB) with a print break after the third."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Sequential(*[nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS // 2)])
        self.second = nn.Sequential(*[nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS - LAYERS // 2)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.first(x)
        print("", end="")  # one graph break: two graphs
        return self.second(x)


def rss_mb() -> float:
    """Resident set size of this process, in MB."""
    with open("/proc/self/statm", encoding="ascii") as f:
        resident_pages = int(f.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE") / MB


def one_loop(mode: str, rounds: int, new_model: bool) -> dict[str, object]:
    """Run ``rounds`` rounds of ``mode`` ("report" or "control") here; RSS after each."""
    torch.manual_seed(0)
    model = Big()
    params_mb = sum(p.numel() * p.element_size() for p in model.parameters()) / MB
    models = [weakref.ref(model)]
    torch.compile(lambda x: x + 1, backend="eager")(torch.ones(1))  # PyTorch's first-compile setup
    gc.collect()
    before = rss_mb()
    after: list[float] = []
    graphs: list[int] = []
    alive_inputs: list[weakref.ref[torch.Tensor]] = []
    for i in range(rounds):
        if new_model and i:
            del model
            gc.collect()
            model = Big()
            models.append(weakref.ref(model))
        x = torch.randn(8, WIDTH)
        alive_inputs.append(weakref.ref(x))
        if mode == "report":
            rep = dynscope.report(model, x)
            graphs.append(rep.graph_count)
            del rep
        else:
            compiled = torch.compile(model, backend="eager")
            compiled(x)
            del compiled
            torch._dynamo.reset()
        del x
        gc.collect()
        after.append(rss_mb())
    return {
        "mode": mode,
        "params_mb": params_mb,
        "before": before,
        "after": after,
        "graphs": graphs,
        "inputs_alive": sum(ref() is not None for ref in alive_inputs),
        # The model of the last round is still in use; count the others.
        "models_alive": sum(ref() is not None for ref in models[:-1]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="rounds per loop (default 20)")
    parser.add_argument("--child", choices=("report", "control"), help=argparse.SUPPRESS)
    parser.add_argument("--new-model", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_loop(args.child, args.rounds, args.new_model)))
        return

    n = args.rounds
    for new_model in (False, True):
        results = []
        for mode in ("report", "control"):
            out = subprocess.run(
                [sys.executable, __file__, "--child", mode, "--rounds", str(n)]
                + (["--new-model"] if new_model else []),
                capture_output=True, text=True, check=True,
            )
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"\n== {'a new model each round' if new_model else 'one model for all rounds'}: "
              f"{LAYERS} x Linear({WIDTH}, {WIDTH}), {results[0]['params_mb']:.0f} MB of parameters, "
              f"{results[0]['graphs'][0]} graphs per report")
        print(f"{'':34s} {'dynscope.report':>16s} {'compile+reset':>16s}")
        rows = [
            ("RSS before (MB)", [r["before"] for r in results]),
            ("RSS after round 1 (MB)", [r["after"][0] for r in results]),
            (f"RSS after round {n} (MB)", [r["after"][-1] for r in results]),
            (f"growth round 1 -> {n} (MB)", [r["after"][-1] - r["after"][0] for r in results]),
            (f"max RSS over rounds 1..{n} (MB)", [max(r["after"]) for r in results]),
        ]
        for label, values in rows:
            print(f"{label:34s} {values[0]:16.1f} {values[1]:16.1f}")
        for key in ("inputs_alive", "models_alive"):
            label = f"{key.split('_')[0]} still alive (of {n if key == 'inputs_alive' else n - 1})"
            print(f"{label:34s} {results[0][key]:16d} {results[1][key]:16d}")
        print("RSS after each round (MB):")
        for r in results:
            print(f"  {r['mode']:8s} " + " ".join(f"{v:.0f}" for v in r["after"]))


if __name__ == "__main__":
    main()
