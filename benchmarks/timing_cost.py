"""What does ``report(timing=True)`` cost next to the compile a user makes anyway?

Issue 20's target: ``report(timing=True)`` wall time at most 1.5x a plain ``torch.compile``
first call (with its ``loss.backward()`` where the model trains) plus one more step of the
same model. Two programs:

- ``gpt``: nanoGPT's GPT shape (tests/corpus/real.py: 2 layers, width 64, batch 2x32),
  forward with loss, gradients on; the plain side runs ``loss.backward()`` after each call;
- ``bert``: a tiny Hugging Face BertModel (transformers, small config, no download) over
  three sequence lengths (8, 12, 16) under ``torch.no_grad()``; the plain side's first call
  is the three lengths, its "one more step" the three again.

Each measurement runs in a fresh process (a new Python, a new Inductor cache folder: a cold
compile, as a first run is), the two sides interleaved over ROUNDS rounds so machine drift
hits both alike; each process times its own work in-process (imports excluded). Prints the
medians, the ratio against the 1.5x target, and the median split of dynscope's time by
phase (``Report.timing_cost``).

Run: ``.venv/bin/python benchmarks/timing_cost.py [gpt|bert ...] [--rounds N]``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TARGET = 1.5
ROUNDS = 3
SEQ_LENS = (8, 12, 16)


def _gpt() -> tuple[Any, list[tuple[Any, ...]], bool]:
    import torch

    sys.path.insert(0, str(ROOT))
    from tests.corpus.real import GPT

    torch.manual_seed(0)
    model = GPT(vocab=64, block_size=32, d=64, heads=2, layers=2)
    gen = torch.Generator().manual_seed(0)
    idx, targets = torch.randint(0, 64, (2, 32), generator=gen), torch.randint(0, 64, (2, 32), generator=gen)
    return model, [(idx, targets)], True


def _bert() -> tuple[Any, list[tuple[Any, ...]], bool]:
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=128, max_position_embeddings=64)
    model = BertModel(cfg).eval()
    gen = torch.Generator().manual_seed(0)
    return model, [(torch.randint(0, 100, (2, n), generator=gen),) for n in SEQ_LENS], False


PROGRAMS = {"gpt": _gpt, "bert": _bert}


def _child(side: str, name: str) -> dict[str, Any]:
    """One measurement, in this (fresh) process."""
    sys.path.insert(0, str(ROOT))  # this checkout's dynscope, not another one installed
    import torch

    model, calls, trains = PROGRAMS[name]()
    grad = torch.enable_grad() if trains else torch.no_grad()
    if side == "plain":
        with grad:
            start = time.perf_counter()
            compiled = torch.compile(model)
            for args in calls:  # the first call: compile (and the backward's compile) included
                out = compiled(*args)
                if trains:
                    out.backward()
            first = time.perf_counter() - start
            for args in calls:  # one more step
                out = compiled(*args)
                if trains:
                    out.backward()
            return {"wall_s": time.perf_counter() - start, "first_call_s": first}
    import dynscope

    with grad:
        start = time.perf_counter()
        rep = dynscope.report(model, calls=list(calls), timing=True,
                              timing_options=dynscope.TimingOptions(progress=False))
        wall = time.perf_counter() - start
    # Reports of dynscope before issue 20 have no timing_cost: their builds stand alone.
    cost = getattr(rep, "timing_cost", None)
    old = [("dynscope builds", rep.compile_time.measure_s)] + [("first call", m.first_call_s) for m in rep.timing]
    return {
        "wall_s": wall,
        "phases": list(cost.phases) if cost else old,
        "reused": cost.reused if cost else 0,
        "rebuilt": cost.rebuilt if cost else 0,
        "graphs": rep.graph_count,
        "timed": sum(1 for g in rep.graphs if g.timing is not None and not g.timing.failed),
    }


def _spawn(side: str, name: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="dynscope-cost-") as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
        out = subprocess.run(
            [sys.executable, __file__, "--child", side, name],
            capture_output=True, text=True, env=env, cwd=ROOT, check=False,
        )
    if out.returncode != 0:
        raise SystemExit(f"{side} {name} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        print(json.dumps(_child(argv[1], argv[2])))
        return 0
    rounds = ROUNDS
    if "--rounds" in argv:
        rounds = int(argv[argv.index("--rounds") + 1])
    names = [a for a in argv if a in PROGRAMS] or list(PROGRAMS)
    if "bert" in names:
        try:
            import transformers  # noqa: F401
        except ImportError:
            print("transformers missing: bert left out (pip install transformers)")
            names.remove("bert")
    import torch

    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, cores {os.cpu_count()}, "
          f"load {os.getloadavg()[0]:.1f}; {rounds} rounds, each side in a fresh process, interleaved")
    print(f"{'program':8s} {'report s':>9s} {'plain s':>8s} {'ratio':>6s} {'target':>7s}  split of report(timing=True)")
    worst = 0.0
    for name in names:
        mine: list[dict[str, Any]] = []
        plain: list[dict[str, Any]] = []
        for _ in range(rounds):
            plain.append(_spawn("plain", name))
            mine.append(_spawn("report", name))
        ours = statistics.median(m["wall_s"] for m in mine)
        base = statistics.median(p["wall_s"] for p in plain)
        ratio = ours / base
        worst = max(worst, ratio)
        phases: dict[str, list[float]] = {}
        for m in mine:
            for phase, s in m["phases"]:
                phases.setdefault(phase, []).append(s)
        split = ", ".join(f"{p} {statistics.median(v):.2f} s" for p, v in phases.items())
        first = statistics.median(p["first_call_s"] for p in plain)
        print(f"{name:8s} {ours:9.2f} {base:8.2f} {ratio:6.2f} {'ok' if ratio <= TARGET else 'OVER':>7s}  {split}")
        print(f"{'':8s} plain first call {first:.2f} s; graphs {mine[-1]['graphs']}, timed {mine[-1]['timed']}, "
              f"on torch.compile's build {mine[-1]['reused']}, rebuilt {mine[-1]['rebuilt']}")
    print(f"largest ratio {worst:.2f} (target <= {TARGET})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
