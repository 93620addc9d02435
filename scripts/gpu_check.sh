#!/usr/bin/env bash
# On a GPU machine with torch preinstalled (e.g. torch 2.11 + CUDA): install dynscope in
# place without touching torch, run the CUDA tests, then the CUDA timing benchmark, and
# print a short table. Takes a few minutes; prints everything to stdout.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
"$PY" - <<'PY'
import torch
print(f"torch {torch.__version__}, cuda available: {torch.cuda.is_available()}",
      f"({torch.cuda.get_device_name(0)})" if torch.cuda.is_available() else "")
PY
# dynscope's own dependencies, without letting pip replace the machine's torch. A GPU
# machine may have no network: prepare a wheelhouse beside the checkout first with
#   pip download -d .wheels networkx graphviz tabulate pytest hypothesis pillow
# and bring .wheels along; it is used when present.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ -d .wheels ]; then
  "$PY" -m pip install -q --no-index --find-links .wheels networkx graphviz tabulate pytest hypothesis >/dev/null 2>&1
else
  "$PY" -m pip install -q networkx graphviz tabulate pytest hypothesis >/dev/null 2>&1
fi
"$PY" -c "import networkx, graphviz, tabulate, pytest" || { echo "missing dependencies: see the comment above"; exit 1; }
echo "== CUDA tests"
timeout 240 "$PY" -m pytest -q -p no:cacheprovider tests/capture/test_timing.py tests/capture/test_corpus.py -k "cuda or corpus_program" 2>&1 | tail -5
echo "== Do no harm and counts on this torch (hooks, blame, eager lines, run counts, cache keys)"
timeout 300 "$PY" -m pytest -q -p no:cacheprovider -m "not heavy or slow" tests/capture/test_do_no_harm.py tests/capture/test_blame.py \
  tests/capture/test_eager_lines.py tests/capture/test_capture_cache.py 2>&1 | tail -5
echo "== capture() of a CUDA Inductor program: runs counted, outputs unchanged"
timeout 240 "$PY" - <<'PY' 2>&1 | grep -v "^W[0-9]"
import torch, dynscope
def f(x):
    return (x.sin() * 2 + 1).relu() @ x.t()
x = torch.randn(64, 64, device="cuda")
expected = f(x)
for mode in ("default", "reduce-overhead"):
    torch._dynamo.reset()
    with dynscope.capture() as cap:
        g = torch.compile(f, mode=mode)
        outs = [g(x).clone() for _ in range(5)]  # CUDA graphs reuse their output buffers
    ok = all(torch.allclose(o, expected, atol=1e-4) for o in outs)
    print(f"{mode:16} runs {[gr.runs for gr in cap.report.graphs]} (5 calls) outputs equal eager: {ok}; "
          f"notes: {len(cap.report.notes)}")
PY
echo "== CUDA timing benchmark (dynscope vs triton.testing.do_bench)"
timeout 240 "$PY" benchmarks/timing_accuracy.py 2>&1 | grep -v "^W[0-9]"
echo "== end-to-end on CUDA"
timeout 120 "$PY" - <<'PY' 2>&1 | grep -v "^W[0-9]"
import torch, dynscope
from examples.timing_transformer import Block
model = Block(dim=256, heads=8).cuda().eval()
x = torch.randn(16, 128, 256, device="cuda")
rep = dynscope.report(model, x, timing=True, modes=["default", "max-autotune-no-cudagraphs"],
                      timing_options=dynscope.TimingOptions(progress=False))
print(f"{'graph':>5} {'mode':28} {'eager ms':>9} {'compiled ms':>11} {'speedup':>8}")
for g in rep.graphs:
    for t in g.timings:
        print(f"{g.id:5d} {t.mode:28} {t.eager_ms:9.4f} {t.compiled_ms:11.4f} {t.speedup:8.2f}")
for m in rep.timing:
    print(f"  all {m.mode:28} {m.eager_ms:9.4f} {m.compiled_ms:11.4f} {m.speedup:8.2f} "
          f"peak MB {m.peak_mem_eager_mb:.0f} -> {m.peak_mem_compiled_mb:.0f}")
PY
