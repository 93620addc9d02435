"""Issue 10's "done when" on real Hugging Face models, built from tiny configs (no downloads).

Inference: a tiny BertModel and LlamaForCausalLM, each called with three sequence lengths
(8, 12, 16) under ``torch.no_grad()``, timed with ``dynscope.report(timing=True)``: every
graph (dynamic ones included) must time, with numerics checked.
Training: one step of the tiny BERT (forward, ``last_hidden_state.mean()``, backward) timed
end to end and per graph (forward, forward+backward, gradients checked).

Needs ``transformers`` (not a dynscope dependency); without it this prints a message and
exits 0. Run: ``.venv/bin/python benchmarks/real_models.py [infer|train] [--summary]``
(``--summary`` also prints the train step's ``rep.summary()``). Exit status 1 when a graph
did not time, or a training graph's forward+backward failed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dynscope

SEQ_LENS = (8, 12, 16)
# Small on purpose: a 2-core CI box; the figures are about every graph timing, not precision.
OPTIONS = dynscope.TimingOptions(warmup=1, repeats=10, min_time_s=0.1, min_sample_ms=5.0, progress=False)


def _calls(vocab: int) -> list[dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    return [{"input_ids": torch.randint(0, vocab, (2, n), generator=gen)} for n in SEQ_LENS]


def _graph_rows(rep: Any, train: bool = False) -> list[str]:
    rows = []
    for g in rep.graphs:
        t = g.timing
        if t is None:
            rows.append(f"  graph {g.id:>2} {g.frame[:34]:<34} ops={g.op_count:<4} NOT TIMED")
            continue
        line = (
            f"  graph {g.id:>2} {g.frame[:34]:<34} ops={g.op_count:<4} runs={g.runs:<2} "
            f"timed={'no' if t.failed else 'yes'} eager={t.eager_ms:.3f}ms compiled={t.compiled_ms:.3f}ms "
            f"speedup={t.speedup:.2f}x{'?' if t.doubtful else ''} (n={t.samples}, IQR {t.spread:.0%}) "
            f"numerics_ok={t.numerics_ok} "
            f"({t.numerics_mode or '-'}, max_abs_err={t.max_abs_err:.1e})"
        )
        if train and (t.grads_checked or t.train_error):
            line += (
                f"\n           fwd+bwd eager={t.train_eager_ms:.3f}ms compiled={t.train_compiled_ms:.3f}ms "
                f"grads_checked={t.grads_checked} max_grad_err={t.max_grad_err:.1e}"
            )
            if t.train_error:
                line += f" train_error={t.train_error!r}"
        if t.error:
            line += f"\n           error={t.error!r}"
        rows.append(line)
    return rows


def _end_to_end(rep: Any) -> str:
    rows = []
    for m in rep.timing:
        rows.append(
            f"  end to end [{m.mode}], all calls: eager={m.eager_ms:.3f}ms compiled={m.compiled_ms:.3f}ms "
            f"speedup={m.speedup:.2f}x{'~' if m.noisy else ''} (n={min(len(m.eager_samples_ms), len(m.compiled_samples_ms))}, "
            f"IQR {m.spread:.0%}) first_call={m.first_call_s:.1f}s in_graphs={m.in_graphs_share:.0%}"
            f"{' error=' + repr(m.error) if m.error else ''}"
        )
    return "\n".join(rows) or "  end to end: not timed"


def _print(name: str, rep: Any, train: bool = False) -> int:
    """Print one model's table; return the number of graphs that did not time."""
    failed = sum(1 for g in rep.graphs if g.timing is None or g.timing.failed)
    if train:
        # A training graph (outputs needed gradients) must time forward+backward with gradients
        # checked; a graph without gradients (the resume after backward()) has nothing to check.
        failed += sum(1 for g in rep.graphs if g.timing and g.timing.train_error)
        if not any(g.timing and g.timing.grads_checked for g in rep.graphs):
            failed += 1
    print(f"{name}: graphs={rep.graph_count} breaks={rep.break_count} recompiles={rep.recompile_count}")
    for b in rep.breaks:
        print(f"  break x{b.count}: {Path(b.filename).name}:{b.lineno} {b.source!r}: {b.reason}"[:200])
    print("\n".join(_graph_rows(rep, train)))
    print(_end_to_end(rep))
    if rep.coverage is not None:
        c = rep.coverage
        print(f"  coverage: {c.ratio:.2f} ({c.ops_in_graphs} ops in graphs, {c.ops_eager} eager)")
    print()
    return failed


def main() -> int:
    try:
        import transformers
    except ImportError:
        print("transformers missing: pip install transformers to run this benchmark")
        return 0
    from transformers import BertConfig, BertModel, LlamaConfig, LlamaForCausalLM

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, threads {torch.get_num_threads()}\n")
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    only = args[0] if args else "all"  # "infer", "train" or "all"
    bad = 0
    torch.manual_seed(0)
    bert_cfg = BertConfig(
        vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=128, max_position_embeddings=64,
    )
    llama_cfg = LlamaConfig(
        vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, intermediate_size=128, max_position_embeddings=64,
    )
    models = (
        ("BertModel (inference)", BertModel(bert_cfg).eval(), bert_cfg.vocab_size),
        ("LlamaForCausalLM (inference)", LlamaForCausalLM(llama_cfg).eval(), llama_cfg.vocab_size),
    )
    for name, model, vocab in models if only in ("all", "infer") else ():
        with torch.no_grad():  # inference, as a user would write it
            rep = dynscope.report(model, calls=_calls(vocab), timing=True, timing_options=OPTIONS)
        bad += _print(name, rep)

    if only == "infer":
        return 1 if bad else 0
    torch.manual_seed(0)
    bert = BertModel(bert_cfg).train()

    def train_step(input_ids: torch.Tensor) -> torch.Tensor:
        out = bert(input_ids=input_ids)
        loss = out.last_hidden_state.mean()
        loss.backward()
        return loss.detach()

    rep = dynscope.report(train_step, calls=[(c["input_ids"],) for c in _calls(bert_cfg.vocab_size)],
                          timing=True, timing_options=OPTIONS)
    bad += _print("BertModel train step (forward, loss, backward)", rep, train=True)
    if "--summary" in sys.argv:
        print(rep.summary(), "\n")
    print(f"graphs that did not time (or had no checked gradients in training): {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
