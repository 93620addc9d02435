"""One compile time (issue 18): what the user waits for, by phase, with dynscope's own
measurement builds apart; and the timing items that go with it (resume graphs timed
forward+backward, threads fighting for cores, the profiler's chatter off stdout).

Definitions are checked on constructed trace events and on recorded traces of three torch
releases (no compile); live runs check the wiring: one capture of the user's own
``torch.compile`` (Inductor) and one ``report(timing=True)`` of a training model with a graph
break, each made once per module.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
from functools import cache
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import dynscope
from dynscope._capture.graph_timing import fresh_inputs
from dynscope._capture.machine import contention, read_machine
from dynscope._model.codec import report_from_dict
from dynscope._read.assemble import build_report
from dynscope._render.text import render_summary
from dynscope._torch import lowering_text as lt
from dynscope._torch.profiler import quiet_native_output
from dynscope._torch.trace import TraceEvent, event_from

TRACES = Path(__file__).parents[1] / "traces"
VERSIONS = sorted(p.parent.name for p in TRACES.glob("torch-*/lowering"))
FAST = dynscope.TimingOptions(warmup=1, repeats=5, min_time_s=0.02, min_sample_ms=0.2, progress=False, end_to_end=False)


def _header_compile_s(text: str) -> float:
    """The "compile X s" figure of the summary's totals line."""
    m = re.search(r"compile (\d+\.\d+) s", text.splitlines()[2])
    assert m, text.splitlines()[2]
    return float(m.group(1))


def _phases_total_s(text: str) -> float:
    """The "(total X s)" of the summary's "your program's compile ... per phase" line."""
    m = re.search(r"your program's compile \(the header's figure\) per phase: .*?\(total\s+(\d+\.\d+) s\)", text, re.S)
    assert m, text
    return float(m.group(1))


def _agree(rep: dynscope.Report) -> None:
    """Header, phases, summary text and JSON show one compile time."""
    t = rep.compile_time
    assert t.phases, "the user's compile is split by phase"
    assert sum(s for _, s in t.phases) == pytest.approx(t.total_s, abs=5e-3)
    assert t.total_s == pytest.approx(t.dynamo_s + t.backend_s + t.backward_s, abs=1e-6)
    assert t.total_s == pytest.approx(sum(f.compile_time.total_s for f in rep.frames), abs=1e-6)
    text = render_summary(rep)
    assert _header_compile_s(text) == pytest.approx(t.total_s, abs=0.006)
    assert _phases_total_s(text) == pytest.approx(_header_compile_s(text), abs=0.011)
    data = json.loads(rep.to_json())["compile_time"]
    assert data["total_s"] == t.total_s and [tuple(p) for p in data["phases"]] == list(t.phases)
    assert report_from_dict(json.loads(rep.to_json())).compile_time == t


# -- the definition, on constructed events ---------------------------------------------


def _step(name: str, ph: str, ts_s: float, cid: str = "0/0") -> TraceEvent:
    return TraceEvent("chromium_event", cid, 0, {}, json.dumps({"name": name, "ph": ph, "ts": ts_s * 1e6}))


def _metrics(total: float, backend: float, cid: str = "0/0") -> TraceEvent:
    meta = {"co_name": "forward", "entire_frame_compile_time_s": total, "backend_compile_time_s": backend}
    return TraceEvent("compilation_metrics", cid, 0, meta)


def test_frame_total_adds_the_lazy_backward_compile_and_equals_its_phases() -> None:
    events = [
        _step("dynamo", "B", 0.0),  # PyTorch's outer step: its time outside the frame compile is not waited for
        _step("entire_frame_compile", "B", 1.0),
        _step("backend_compile", "B", 1.5),
        _step("GraphLowering.run", "B", 2.0),
        _step("GraphLowering.run", "E", 2.5),
        _step("backend_compile", "E", 3.0),
        _step("entire_frame_compile", "E", 3.0),
        _step("dynamo", "E", 4.0),
        _metrics(2.0, 1.5),
        # The first backward(), later: AOTAutograd compiles the backward graph, under the frame's id.
        _step("entire_backward_compile", "B", 10.0),
        _step("compile_file", "B", 10.5),
        _step("compile_file", "E", 11.0),
        _step("entire_backward_compile", "E", 11.25),
    ]
    rep = build_report(events, [], ignore_backend_mismatch=False)
    t = rep.compile_time
    assert t.backward_s == pytest.approx(1.25)
    assert t.total_s == pytest.approx(2.0 + 1.25), "the frame compile plus the backward compile"
    assert dict(t.phases) == pytest.approx(
        {"dynamo": 0.5, "backend": 1.0, "lowering": 0.5, "aot_autograd": 0.75, "compile": 0.5}
    )
    assert rep.frames[0].compile_time == t
    _agree(rep)


def test_frame_without_steps_is_split_by_compilation_metrics() -> None:
    meta = {"entire_frame_compile_time_s": 3.0, "backend_compile_time_s": 2.5, "inductor_compile_time_s": 2.0}
    rep = build_report([TraceEvent("compilation_metrics", "0/0", 0, meta)], [], ignore_backend_mismatch=False)
    t = rep.compile_time
    assert t.total_s == 3.0 and t.backward_s == 0.0
    assert dict(t.phases) == pytest.approx({"dynamo": 0.5, "backend": 0.5, "inductor": 2.0})
    _agree(rep)


def test_windowed_phases_count_only_what_the_user_waits_for() -> None:
    steps = [
        ("dynamo", "B", 0.0),
        ("entire_frame_compile", "B", 1e6),
        ("entire_frame_compile", "E", 2e6),
        ("compile_file", "B", 3e6),  # outside both spans: not the user's wait
        ("compile_file", "E", 5e6),
        ("dynamo", "E", 6e6),
    ]
    assert lt.phases_of_steps(steps, within=lt.WAIT_STEPS) == {"dynamo": 1.0}
    assert lt.step_seconds(steps, "compile_file") == 2.0
    assert lt.step_seconds(steps, "entire_backward_compile") == 0.0


def _recorded(version: str, program: str) -> list[TraceEvent]:
    data = json.loads((TRACES / version / "lowering" / f"{program}.json").read_text(encoding="utf-8"))
    return [e for r in data["records"] if (e := event_from(r["metadata"], r["payload"], lowering=True))]


@pytest.mark.parametrize("version", VERSIONS)
def test_recorded_training_compile_counts_its_backward(version: str) -> None:
    events = _recorded(version, "train_step")
    frame_s = sum(float(e.metadata.get("entire_frame_compile_time_s") or 0) for e in events if e.name == "compilation_metrics")
    rep = build_report(events, [], ignore_backend_mismatch=False, title="train_step")
    t = rep.compile_time
    assert t.backward_s > 0, "the backward graph compiled at the first backward()"
    assert t.total_s == pytest.approx(frame_s + t.backward_s)
    # The page's phases (of the user's compile, source "trace") are the header's seconds.
    (g,) = rep.graphs
    assert g.lowering is not None and g.lowering.source == "trace"
    assert g.lowering.compile_s == pytest.approx(t.total_s, abs=5e-3)
    _agree(rep)
    assert f"(total {t.total_s:.2f} s)" in " ".join(render_summary(rep).split())


def test_old_reports_load_without_the_new_figures() -> None:
    data = json.loads((Path(__file__).parents[1] / "golden" / "reports" / "mlp.json").read_text(encoding="utf-8"))
    for key in ("backward_s", "phases", "measure_s", "measure_builds"):
        data["compile_time"].pop(key, None)
    rep = report_from_dict(data)
    assert rep.compile_time.phases == () and rep.compile_time.measure_s == 0.0
    assert "per phase" not in render_summary(rep).split("Compile time", 1)[1]


# -- threads against cores --------------------------------------------------------------


def test_contention_names_the_figures_and_the_fix() -> None:
    said = contention(2, 2, 3.1)
    assert said == (
        "torch uses 2 threads on 2 cores with load 3.1: timings fight for cores (medians read slow and "
        "spread wide); set OMP_NUM_THREADS=1 or torch.set_num_threads(1), or run on a quiet machine"
    )
    assert contention(2, 2, 1.0) == "", "this process's own thread is the load: a quiet machine"
    assert contention(1, 2, 0.5) == "" and contention(16, 16, 4.0) == ""
    assert contention(8, 2, -1.0).startswith("torch uses 8 threads on 2 cores:"), "no load figure: threads alone"
    assert contention(1, 1, 3.0).endswith("; run on a quiet machine"), "one thread: fewer threads cannot help"
    assert contention(0, 0, 9.0) == "", "unknown figures claim nothing"


@given(st.integers(1, 256), st.integers(1, 256), st.floats(0.0, 512.0))
def test_contention_is_monotonic(threads: int, cores: int, load: float) -> None:
    said = contention(threads, cores, load)
    if threads > cores:
        assert said, "more threads than cores always fight"
    if said:
        # More load, more threads or fewer cores never make it better.
        assert contention(threads, cores, load + 1.0)
        assert contention(threads + 1, cores, load)
        assert cores == 1 or contention(threads, cores - 1, load)
        assert f"{threads} thread" in said and f"{cores} core" in said and f"load {load:.1f}" in said
    if load <= 1.0 and threads <= cores:
        assert said == "", "a quiet machine (the load is dynscope's own thread)"


def test_machine_figures_are_this_process() -> None:
    m = read_machine()
    assert m.threads == torch.get_num_threads()
    assert m.cores == (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
    assert m.load >= 0 or not hasattr(os, "getloadavg")
    assert m.contention == contention(m.threads, m.cores, m.load)


# -- resume graphs' inputs --------------------------------------------------------------


def test_fresh_inputs_cut_history_and_keep_requires_grad() -> None:
    w = torch.nn.Parameter(torch.randn(3))
    h = w * 2  # a previous graph's output: history back into it
    ints = torch.arange(3)
    out = fresh_inputs([w, h, ints, 5])
    assert out[0] is w and out[2] is ints and out[3] == 5, "leaves and non-tensors as they were"
    assert out[1].is_leaf and out[1].requires_grad and out[1].grad_fn is None
    assert out[1].data_ptr() == h.data_ptr(), "same storage: no copy"


# -- the profiler's native chatter ------------------------------------------------------


def test_native_output_is_silenced_and_restored(capfd: pytest.CaptureFixture[str]) -> None:
    print("before", flush=True)
    with quiet_native_output():
        os.write(1, b"chatter on fd 1\n")
        os.write(2, b"chatter on fd 2\n")
        with quiet_native_output():  # nested: the outer restore still finds the real descriptors
            os.write(1, b"nested\n")
    print("after", flush=True)
    sys.stderr.write("err after\n")
    sys.stderr.flush()

    def hammer() -> None:
        for _ in range(50):
            with quiet_native_output():
                os.write(1, b"thread chatter\n")

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    os.write(1, b"end\n")
    out, err = capfd.readouterr()
    assert out == "before\nafter\nend\n"
    assert err == "err after\n"


# -- live: the user's own torch.compile (Inductor) under capture() ----------------------


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))
        s = h * 2  # made from h: the resume graph's two inputs share h's history
        torch._dynamo.graph_break()
        return self.b(h + s).sum()


@pytest.fixture(scope="module")
def captured() -> dynscope.Report:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    with dynscope.capture() as cap:
        compiled = torch.compile(model)  # Inductor, the user's own
        compiled(torch.randn(4, 8)).sum().backward()
    return cap.report


@pytest.mark.slow
def test_capture_of_inductor_shows_one_compile_time(captured: dynscope.Report, tmp_path: Path, capsys) -> None:
    t = captured.compile_time
    assert t.backend_s > 0 and t.measure_builds == 0, "the user's compile only: dynscope built nothing"
    _agree(captured)
    # The training step's backward compiled at backward(): counted unless a cache served it.
    low = captured.graphs[0].lowering
    assert low is not None and low.source == "trace"
    if {c: r for c, _, r in low.cache}.get("aot_autograd") != "hit":
        assert t.backward_s > 0
    path = captured.save(tmp_path / "run.json")
    from dynscope._cli import main

    assert main(["show", str(path)]) == 0
    shown = capsys.readouterr().out
    assert _header_compile_s(shown) == pytest.approx(t.total_s, abs=0.006)
    assert _phases_total_s(shown) == pytest.approx(_header_compile_s(shown), abs=0.011)
    assert main(["show", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["compile_time"]["total_s"] == t.total_s


# -- live: report(timing=True) of a training model with a graph break -------------------


@cache
def _timed() -> dynscope.Report:
    torch.manual_seed(0)
    return dynscope.report(_Net(), torch.randn(4, 8), timing=True, timing_options=FAST)


@pytest.mark.slow
def test_timed_report_writes_nothing_to_stdout(capfd: pytest.CaptureFixture[str]) -> None:
    # First in this module's timed tests: the report is made here, under capfd.
    _timed.cache_clear()
    rep = _timed()
    out, err = capfd.readouterr()
    assert rep.graphs and all(g.timing is not None for g in rep.graphs)
    assert any(g.lowering is not None and g.lowering.kernels for g in rep.graphs), "the kernel profiler ran"
    assert out == "", "nothing of PyTorch's (the profiler's USDT lines) on the user's stdout"
    assert "profiler_start" not in err and "USDT" not in err


@pytest.mark.slow
def test_resume_graph_with_inputs_needing_grad_times_forward_and_backward() -> None:
    rep = _timed()
    assert rep.graph_count == 2 and rep.graphs[1].is_resume
    for g in rep.graphs:
        t = g.timing
        assert t is not None and not t.failed, t.error if t else "not timed"
        assert t.train_error == "", f"graph {g.id}: {t.train_error}"
        assert t.trains and t.train_compiled_ms > 0 and t.grads_checked and t.numerics_ok


@pytest.mark.slow
def test_timed_report_keeps_its_builds_apart_from_the_compile_time() -> None:
    rep = _timed()
    _agree(rep)
    t = rep.compile_time
    cost = rep.timing_cost
    timings = [g.timing for g in rep.graphs if g.timing is not None]
    # Each graph is timed on torch.compile's own build of the program; the program never ran
    # backward (a forward with gradients on), so each graph's backward is one extra build.
    assert cost is not None and cost.reused == len(timings) == 2 and cost.rebuilt == 0
    assert t.measure_builds == sum(x.builds for x in timings) == len(timings), "one backward compile per graph"
    assert t.measure_s == pytest.approx(sum(x.build_s for x in timings))
    assert cost.seconds("extra builds") == pytest.approx(t.measure_s, rel=0.05, abs=0.05)
    assert all(x.build_s > 0 and x.compile_s > 0 for x in timings)
    assert [p for p, _ in cost.phases][:2] == ["capture", "compile"]
    for g in rep.graphs:
        assert g.lowering is not None and g.lowering.source == "timing"
        assert g.lowering.backward is not None, "the backward compiled at the graph's first backward is logged too"
    text = " ".join(render_summary(rep).split())
    assert f"timing=True took {cost.total_s:.2f} s: capture" in text
    assert f"extra Inductor builds (2 builds: numerics, backward compiles, graphs rebuilt) {t.measure_s:.2f} s" in text
    assert "2 of 2 graph timings ran on torch.compile's own build" in text
    assert "the builds dynscope measured on (first mode), per phase (not in the compile time above; 2 extra builds apart" in text
    page = rep.to_html()
    assert "Your program&#x27;s compile (the header&#x27;s figure) per phase" in page
    # The page keeps the figure's no-break gap (FIGURE_GAP): "0.91" and "s" never on two lines.
    assert f"timing=True took {cost.total_s:.2f}\u00a0s" in page


@pytest.mark.slow
def test_timed_report_carries_the_machine_figures() -> None:
    rep = _timed()
    machine = read_machine()
    for g in rep.graphs:
        t = g.timing
        assert t is not None
        assert t.threads == torch.get_num_threads() and t.cores == machine.cores
        assert (t.load >= 0) == hasattr(os, "getloadavg")
        assert t.contention == contention(t.threads, t.cores, t.load)
    said = {g.timing.contention for g in rep.graphs if g.timing is not None and g.timing.contention}
    assert all(s in rep.notes for s in said), "a fight for cores is said in the summary, once"
    back = report_from_dict(json.loads(rep.to_json()))
    assert [g.timing for g in back.graphs] == [g.timing for g in rep.graphs]


def test_builds_per_phase_say_how_they_meet_the_measurement_total() -> None:
    # The page said "measurement builds took 20.99 s over 28 Inductor builds" and, of the
    # same builds, "per phase ... (total 13.28 s)": the phases are of each graph's first-mode
    # build only. Both figures stay, and the phase line says what the rest was.
    from dataclasses import replace

    stored = dynscope.load(Path(__file__).parents[1] / "golden" / "reports" / "lowered_train.json")
    shown = sum(s for g in stored.graphs if g.lowering is not None and g.lowering.source == "timing" for _, s in g.lowering.phases)
    rep = replace(stored, compile_time=replace(stored.compile_time, measure_s=shown + 7.5, measure_builds=9))
    text = rep.summary().replace("\n      ", " ")
    assert "dynscope's first-mode builds shown here, per phase" in text
    assert f"{shown + 7.5:.2f} s for all 9 measurement builds, the rest forward+backward, numerics" in text
    assert f"measurement builds (timing=True) took {shown + 7.5:.2f} s over 9 Inductor builds" in text
