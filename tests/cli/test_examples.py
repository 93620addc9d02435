"""Every example runs, and says what its docs say it shows."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

import dynscope

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.heavy
def test_quickstart(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["quickstart.py", str(tmp_path / "out")])
    runpy.run_path(str(EXAMPLES / "quickstart.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "dynscope report: TinyTransformer" in out
    rep = dynscope.load(tmp_path / "out" / "report.json")
    categories = {b.category for b in rep.breaks}
    assert categories == {"data-dependent branch", "logging/print side effect", ".item()/scalar output"}
    assert rep.recompile_count >= 1
    assert (tmp_path / "out" / "summary.txt").read_text() == rep.summary()


@pytest.mark.slow
def test_timing_transformer(capsys: pytest.CaptureFixture[str]) -> None:
    rep = runpy.run_path(str(EXAMPLES / "timing_transformer.py"))["main"]()
    out = capsys.readouterr().out
    assert rep.graph_count == 2 and rep.breaks[0].category == "explicit graph_break()"
    for g in rep.graphs:
        assert g.timing is not None and not g.timing.failed and g.timing.numerics_ok
        assert f"graph {g.id} ({g.op_count} ops): " in out
    (e2e,) = rep.timing
    assert e2e.eager_ms > 0 and e2e.compiled_ms > 0


@pytest.mark.slow
def test_lowering_training(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "lowering"
    rep = runpy.run_path(str(EXAMPLES / "lowering_training.py"))["main"](str(out))
    printed = capsys.readouterr().out
    lowered = [(g, g.lowering) for g in rep.graphs if g.lowering is not None]
    assert len(lowered) == len(rep.graphs) == 2, "the model's graph and the optimizer step's"
    for g, low in lowered:
        assert all(k.time_ms is not None for k in low.kernels)
        fwd = sum(1 for k in low.kernels if k.graph != "backward")
        bwd = sum(1 for k in low.kernels if k.graph == "backward")
        assert f"graph {g.id}: {fwd} forward kernels, {bwd} backward kernels" in printed
        assert low.kernels_by_time()[0].name in printed
    # The model's graph trains: AOTAutograd split it, and the forward saved activations.
    (low,) = [low for _, low in lowered if low.backward is not None]
    assert low.forward is not None and any(k.graph == "backward" for k in low.kernels)
    assert low.saved_for_backward is not None and low.saved_for_backward.bytes > 0
    assert f"saved for backward: {low.saved_for_backward.count} tensors" in printed
    assert "lowering_training.py:" in printed, "kernels name the example's own lines"
    assert dynscope.load(out / "report.json") == rep


# Each example and the test that runs it; a new example must be added here.
RUN_BY = {
    "ddp_two_ranks.py": ("tests.capture.test_ranks", "test_planted_job_names_the_recompile_and_break_on_rank_1"),
    "diverging_job.py": ("tests.capture.test_watch", "test_the_watch_stops_the_seeded_job_with_its_cause_before_the_timeout"),
    "export_cnn.py": ("tests.cli.test_memory_front", "test_export_example_and_cli"),
    "memory_train_step.py": ("tests.cli.test_memory_front", "test_memory_example"),
    "lowering_training.py": ("tests.cli.test_examples", "test_lowering_training"),
    "quickstart.py": ("tests.cli.test_examples", "test_quickstart"),
    "test_compile_budget.py": ("tests.cli.test_budget", "test_example_budget_file_passes"),
    "timing_transformer.py": ("tests.cli.test_examples", "test_timing_transformer"),
}


def test_every_example_is_run_by_a_test() -> None:
    import importlib

    assert {p.name for p in EXAMPLES.glob("*.py")} == set(RUN_BY)
    for module, test_name in RUN_BY.values():
        assert callable(getattr(importlib.import_module(module), test_name))
