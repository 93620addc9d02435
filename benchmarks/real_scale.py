"""Real models in bounded time (issue 30): dynscope beside a plain torch.compile and tlparse,
measured side by side in one run, as ratios.

For each program of benchmarks/real_scale_programs.py (ViT-tiny-shaped inference at batch 1
and 8, a diffusers UNet train step, HF Llama ``generate`` with a static cache, an HF GPT-2
AdamW step, a per-block compiled Llama, a ResNet-18 SGD step), each figure is the wall
time of one fresh Python process with a fresh Inductor cache (every compile cold, as a
user's first run), all on this machine in one run:

- plain: ``torch.compile(program)`` (mode default, and max-autotune-no-cudagraphs), its
  first call and one more step; the default run writes the TORCH_TRACE log used below;
- report: ``dynscope.report(program, calls=...)``; render: ``rep.render(dir)`` after it;
- timing 1 / 2: ``report(timing=True)`` with one mode / two, against the plain runs of those modes;
- memory: ``report(memory=True)`` against the plain default run;
- CLI: ``dynscope report FILE.py:FUNC --html DIR`` against a script doing report + render;
- trace: ``dynscope trace LOG -o DIR`` against ``tlparse LOG -o DIR``; read: ``load_trace`` MB/s.

A program that compiles parts of itself (the per-block Llama) is watched with
``dynscope.capture()`` in place of report(); timing and memory rows are report()'s and are
left out for it. Goals: every page under 30 s; trace within 3x tlparse; timing and memory
at most 1.5x the plain runs; the CLI at most 1.2x the API + render; logs read at 40 MB/s or more.

Run: ``.venv/bin/python benchmarks/real_scale.py [PROGRAM ...] [--skip timing2,...]``
(needs transformers, diffusers and tlparse: ``pip install diffusers tlparse``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SECOND = "max-autotune-no-cudagraphs"
#: No single run may take longer (a hung step fails the benchmark instead of stalling it).
RUN_LIMIT_S = 1800
KINDS = ("plain", "plain2", "report", "timing1", "timing2", "memory", "api", "cli", "trace", "tlparse")


# -- children --------------------------------------------------------------------------------


def _child(kind: str, name: str, out: Path) -> dict[str, float]:
    """One measurement in this fresh process; returns its figures (seconds, MB/s)."""
    import torch

    from benchmarks.real_scale_programs import PROGRAMS, SELF_COMPILING

    fn, spec = PROGRAMS[name]()
    calls = spec["calls"]

    def run(f: Any) -> None:
        for c in calls:
            f(*c) if isinstance(c, tuple) else f(c)

    if kind in ("plain", "plain2"):
        mode = "default" if kind == "plain" else SECOND
        start = time.perf_counter()
        run(fn if name in SELF_COMPILING else torch.compile(fn, mode=mode))
        return {"s": time.perf_counter() - start}
    import dynscope

    quiet = dynscope.TimingOptions(progress=False)
    start = time.perf_counter()
    if name in SELF_COMPILING:
        with dynscope.capture() as cap:
            run(fn)
        rep = cap.report
    elif kind == "report":
        rep = dynscope.report(fn, calls=calls)
    elif kind == "timing1":
        rep = dynscope.report(fn, calls=calls, timing=True, timing_options=quiet)
    elif kind == "timing2":
        rep = dynscope.report(fn, calls=calls, timing=True, modes=("default", SECOND), timing_options=quiet)
    elif kind == "memory":
        rep = dynscope.report(fn, calls=calls, memory=True, timing_options=quiet)
    else:
        raise SystemExit(f"unknown kind {kind}")
    took = time.perf_counter() - start
    figures = {"s": took, "graphs": float(rep.graph_count)}
    if kind == "report":
        start = time.perf_counter()
        rep.render(out / "page", progress=False)
        figures["render_s"] = time.perf_counter() - start
        notes = (out / "page" / "index.html").read_text(encoding="utf-8").count('class="picture-note"')
        figures["noted"] = float(notes)
    return figures


# -- parent ----------------------------------------------------------------------------------


def _env(cache: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_TRACE", "TORCH_LOGS"))}
    env.update(TORCHINDUCTOR_CACHE_DIR=str(cache), CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT),
               DYNSCOPE_PROGRESS="0", **extra)
    return env


def _timed(cmd: list[str], env: dict[str, str], what: str) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=RUN_LIMIT_S, check=False)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({done.returncode}): {done.stderr[-2000:]}")
    return took, done.stdout


def measure(name: str, skip: set[str], work: Path) -> dict[str, Any]:
    """Every figure of one program (seconds; wall time of each fresh process)."""
    from benchmarks.real_scale_programs import SELF_COMPILING

    me = str(Path(__file__).resolve())
    row: dict[str, Any] = {"program": name}
    trace_dir = work / "trace"
    for kind in ("plain", "plain2", "report", "timing1", "timing2", "memory"):
        if kind in skip or (name in SELF_COMPILING and kind in ("plain2", "timing1", "timing2", "memory")):
            continue
        out = work / kind
        out.mkdir(parents=True, exist_ok=True)
        extra = {"TORCH_TRACE": str(trace_dir)} if kind == "plain" else {}
        wall, stdout = _timed([sys.executable, me, "--child", kind, name, str(out)], _env(work / f"cache-{kind}", **extra),
                              f"{name} {kind}")
        figures = json.loads(stdout.strip().splitlines()[-1])
        row[kind] = wall
        row[f"{kind}_inner"] = figures["s"]
        for key in ("render_s", "graphs", "noted"):
            if key in figures:
                row[key] = figures[key]
        print(f"  {name} {kind}: {wall:.1f} s", file=sys.stderr, flush=True)
    if "cli" not in skip and name not in SELF_COMPILING:
        target = _target(name)
        row["cli"], _ = _timed([sys.executable, "-m", "dynscope", "report", target, "--html", str(work / "cli")],
                               _env(work / "cache-cli"), f"{name} cli")
        script = (f"import dynscope, benchmarks.real_scale_programs as p; fn, spec = p.{target.rsplit(':', 1)[1]}(); "
                  f"dynscope.report(fn, calls=spec['calls']).render({str(work / 'api')!r}, progress=False)")
        row["api"], _ = _timed([sys.executable, "-c", script], _env(work / "cache-api"), f"{name} api")
    logs = sorted(trace_dir.glob("*.log")) if trace_dir.exists() else []
    if logs and "trace" not in skip:
        log = max(logs, key=lambda p: p.stat().st_size)
        row["log_mb"] = log.stat().st_size / 1e6
        row["trace"], _ = _timed([sys.executable, "-m", "dynscope", "trace", str(log), "-o", str(work / "trace-page")],
                                 _env(work / "cache-trace"), f"{name} trace")
        tlparse = shutil.which("tlparse") or str(Path(sys.executable).parent / "tlparse")
        row["tlparse"], _ = _timed([tlparse, str(log), "-o", str(work / "tlparse"), "--overwrite"],
                                   _env(work / "cache-tl"), f"{name} tlparse")
        from dynscope import load_trace

        start = time.perf_counter()
        load_trace(log)
        row["read_mb_s"] = row["log_mb"] / (time.perf_counter() - start)
    return row


def _target(name: str) -> str:
    func = {"gpt2-train-adamw": "gpt2_train"}.get(name, name.replace("-", "_"))
    return f"{ROOT / 'benchmarks' / 'real_scale_programs.py'}:{func}"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a is not None and b else "-"


def _s(value: float | None) -> str:
    return f"{value:.1f}" if value is not None else "-"


def table(rows: list[dict[str, Any]]) -> str:
    """The table: seconds and ratios (goals in the header)."""
    head = (f"{'program':<18} {'graphs':>6} {'plain s':>8} {'report s':>8} {'render s':>8} "
            f"{'timing1':>8} {'<=1.5x':>7} {'timing2':>8} {'<=1.5x':>7} {'memory':>7} {'<=1.5x':>7} "
            f"{'cli':>6} {'api+r':>6} {'<=1.2x':>7} {'trace':>6} {'tlparse':>7} {'<=3x':>6} {'MB/s':>6}")
    out = [head, "-" * len(head)]
    for r in rows:
        plain, plain2 = r.get("plain"), r.get("plain2")
        both = plain + plain2 if plain is not None and plain2 is not None else None
        out.append(
            f"{r['program']:<18} {int(r.get('graphs', 0)):>6} {_s(plain):>8} {_s(r.get('report')):>8} "
            f"{_s(r.get('render_s')):>8} {_s(r.get('timing1')):>8} {_ratio(r.get('timing1'), plain):>7} "
            f"{_s(r.get('timing2')):>8} {_ratio(r.get('timing2'), both):>7} {_s(r.get('memory')):>7} "
            f"{_ratio(r.get('memory'), plain):>7} {_s(r.get('cli')):>6} {_s(r.get('api')):>6} "
            f"{_ratio(r.get('cli'), r.get('api')):>7} {_s(r.get('trace')):>6} {_s(r.get('tlparse')):>7} "
            f"{_ratio(r.get('trace'), r.get('tlparse')):>6} {r.get('read_mb_s', 0):>6.0f}"
        )
    out.append("seconds: wall time of a fresh process each (Python and torch start-up included); ratios side by side.")
    return "\n".join(out)


def pages(work: Path) -> str:
    """Pages of graphs too big for Graphviz unfolded: a 5,000-node graph of varied blocks
    (tests/corpus/big_graphs.py) rendered, and the recorded ViT-shaped log's page, each in a
    fresh process (folded, and --full under the default time limit)."""
    log = ROOT / "tests" / "traces" / "torch-2.13" / "logs" / "vit-tiny.log.gz"
    varied = ("import dataclasses, dynscope; from tests.corpus.big_graphs import varied_graph; "
              "rep = dynscope.load('tests/golden/reports/mlp.json'); "
              "rep = dataclasses.replace(rep, graphs=(dataclasses.replace(varied_graph(5000), compile_id='0/0'),)); "
              f"rep.render({str(work / 'varied')!r}{{full}}, progress=False)")
    rows = [
        ("5,000-node varied graph: render()", [sys.executable, "-c", varied.format(full="")]),
        ("5,000-node varied graph: render(full=True)", [sys.executable, "-c", varied.format(full=", full=True")]),
        ("vit-tiny.log.gz: dynscope trace -o", [sys.executable, "-m", "dynscope", "trace", str(log), "-o", str(work / "vit")]),
        ("vit-tiny.log.gz: dynscope trace -o --full", [sys.executable, "-m", "dynscope", "trace", str(log), "-o",
                                                       str(work / "vit-full"), "--full"]),
    ]
    out = [f"{'page':<46} {'s':>7}  pictures noted (folded, or stopped at the time limit)"]
    for label, cmd in rows:
        took, _ = _timed(cmd, {**_env(work / "cache-pages"), "PYTHONPATH": str(ROOT)}, label)
        folder = work / ("varied" if "varied" in label else ("vit-full" if "full" in label else "vit"))
        page = (folder / "index.html").read_text(encoding="utf-8")
        stopped = page.count("did not finish laying this picture out")
        noted = page.count('class="picture-note"')
        out.append(f"{label:<46} {took:>7.1f}  {noted} noted, {stopped} stopped for time")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    if len(argv) > 1 and argv[1] == "--child":
        print(json.dumps(_child(argv[2], argv[3], Path(argv[4]))))
        return 0
    from benchmarks.real_scale_programs import PROGRAMS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("programs", nargs="*", help=f"any of {', '.join(PROGRAMS)} (default: all)")
    parser.add_argument("--skip", default="", help=f"comma-separated figures to leave out: {', '.join(KINDS)}")
    parser.add_argument("--json", metavar="FILE", help="also save the rows as JSON")
    parser.add_argument("--pages-only", action="store_true", help="only the big pages (no compile)")
    args = parser.parse_args(argv[1:])
    chosen = args.programs or list(PROGRAMS)
    unknown = [p for p in chosen if p not in PROGRAMS]
    if unknown:
        parser.error(f"unknown program(s) {', '.join(unknown)}")
    skip = {s for s in args.skip.split(",") if s}
    rows = []
    with tempfile.TemporaryDirectory(prefix="dynscope-scale-") as tmp:
        print(pages(Path(tmp) / "pages"), flush=True)
        if args.pages_only:
            return 0
        for name in chosen:
            print(f"{name}:", file=sys.stderr, flush=True)
            rows.append(measure(name, skip, Path(tmp) / name))
    print()
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
