"""Graph.lowering: what AOTAutograd and Inductor did below Dynamo (issue 11).

Recorded traces (tests/traces/torch-*/lowering/, from scripts/record_lowering.py) are read
under every release stored, without compiling; a few live runs check the wiring (timed
builds, capture of the user's own Inductor compile, eager capture costing nothing). Live
tests compile with Inductor: programs stay tiny and each report is built once per module.
"""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

import dynscope
from dynscope import TimingOptions
from dynscope._read.assemble import build_report
from dynscope._torch import lowering_text as lt
from dynscope._torch.records import KEPT_ARTIFACTS, KEPT_EVENTS
from dynscope._torch.trace import TraceEvent, event_from

if TYPE_CHECKING:
    from dynscope._model import Graph, Lowering, Report

TRACES = Path(__file__).parents[1] / "traces"
VERSIONS = sorted(p.parent.name for p in TRACES.glob("torch-*/lowering"))
PROGRAMS = ("mlp_infer", "train_step", "sort_conv", "dynamic")
GOLDEN_REPORTS = Path(__file__).parents[1] / "golden" / "reports"


# -- recorded traces -----------------------------------------------------------------------


def _events(version: str, program: str) -> list[TraceEvent]:
    path = TRACES / version / "lowering" / f"{program}.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["command"] and data["program"] == program
    events = []
    for record in data["records"]:
        event = event_from(record["metadata"], record["payload"], lowering=True)
        assert event is not None, f"{path}: a stored record dynscope does not keep"
        events.append(event)
    return events


def _payloads(version: str, program: str, name: str) -> list[str]:
    return [e.payload for e in _events(version, program) if e.name == name]


@cache
def _report(version: str, program: str) -> Report:
    return build_report(_events(version, program), [], ignore_backend_mismatch=False, title=program)


def _lowering(version: str, program: str) -> Lowering:
    rep = _report(version, program)
    assert rep.graph_count == 1
    (graph,) = rep.graphs
    assert graph.lowering is not None, f"{version}/{program}: no lowering read"
    return graph.lowering


def test_three_releases_recorded() -> None:
    assert {"torch-2.11", "torch-2.13", "torch-2.14"} <= set(VERSIONS)
    for version in VERSIONS:
        stored = {p.stem for p in (TRACES / version / "lowering").glob("*.json")}
        assert stored == set(PROGRAMS), f"{version}: run scripts/record_lowering.py under it"


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("program", PROGRAMS)
def test_recorded_lowering_is_complete(version: str, program: str) -> None:
    rep = _report(version, program)
    assert rep.unparsed == 0 and not rep.notes
    low = _lowering(version, program)
    assert low.source == "trace" and low.profiled_ms is None
    assert low.mapped_share >= 0.95 and low.unmapped == ()
    assert low.notes == (), "nothing failed to read"
    assert low.kernels and low.code
    # Every kernel is tied to Dynamo nodes, and carries no time (nothing was profiled).
    for k in low.kernels:
        assert k.nodes, f"{k.name} is tied to no node"
        assert k.aten_ops, f"{k.name} names no op"
        assert k.time_ms is None and k.share is None
        assert k.code_line > 0 and k.name.split(":")[0] in (low.code + low.backward_code)
    phases = dict(low.phases)
    assert {"dynamo", "aot_autograd", "lowering", "codegen", "compile"} <= set(phases)
    assert all(s > 0 for s in phases.values())
    # A fresh cache folder: both caches missed.
    cache = {(c, g): r for c, g, r in low.cache}
    assert cache["aot_autograd", ""] == "miss"
    assert {r for (c, _), r in cache.items() if c == "fx_graph"} == {"miss"}
    assert low.forward is not None and low.forward.op_count > 0


@pytest.mark.parametrize("version", VERSIONS)
def test_recorded_inference_mlp(version: str) -> None:
    low = _lowering(version, "mlp_infer")
    assert low.forward is not None and low.forward.kind == "inference"
    assert low.backward is None and low.saved_for_backward is None
    assert [k.graph for k in low.kernels] == ["inference"] * len(low.kernels)
    kinds = [(k.kind, k.aten_ops) for k in low.kernels if k.kind == "extern"]
    assert kinds == [("extern", ("aten.addmm",))] * 2, "both Linears call the library's addmm"
    (fused,) = [k for k in low.kernels if k.kind == "cpp"]
    assert {"aten.relu", "aten.rsqrt"} <= set(fused.aten_ops), "LayerNorm and ReLU fused into one C++ kernel"
    assert ("fx_graph", "inference", "miss") in low.cache


@pytest.mark.parametrize("version", VERSIONS)
def test_recorded_training_step(version: str) -> None:
    low = _lowering(version, "train_step")
    assert low.forward is not None and low.forward.kind == "forward"
    assert low.backward is not None and low.backward.kind == "backward" and low.backward.op_count > 0
    saved = low.saved_for_backward
    assert saved is not None and saved.count > 0 and saved.bytes > 0
    assert set(saved.names) <= set(low.backward.input_names)
    assert low.backward_code and low.backward_code != low.code
    graphs = [k.graph for k in low.kernels]
    assert graphs == sorted(graphs, key=("forward", "backward").index), "forward kernels first"
    backward = [k for k in low.kernels if k.graph == "backward"]
    assert {k.kind for k in backward} == {"cpp", "extern"}
    assert any(k.aten_ops == ("aten.mm",) for k in backward), "weight gradients are library mm calls"
    # Backward kernels are tied through their user source lines (no node mapping is logged).
    assert all(k.source_lines and k.source_lines[0][0].endswith(".py") and k.source_lines[0][1] == 79 for k in backward)
    assert {(c, g) for c, g, _ in low.cache} == {("aot_autograd", ""), ("fx_graph", "forward"), ("fx_graph", "backward")}


@pytest.mark.parametrize("version", VERSIONS)
def test_recorded_fallback_and_extern(version: str) -> None:
    low = _lowering(version, "sort_conv")
    by_kind = {k.kind: k for k in low.kernels}
    assert set(by_kind) == {"cpp", "extern", "fallback"}
    assert by_kind["extern"].aten_ops == ("aten.convolution",)
    assert by_kind["fallback"].aten_ops == ("aten.sort",)
    assert "sort" in by_kind["fallback"].nodes
    assert any(f.endswith("record_lowering.py") and n == 92 for f, n in by_kind["fallback"].source_lines)


@pytest.mark.parametrize("version", VERSIONS)
def test_recorded_dynamic_graph_takes_a_symint(version: str) -> None:
    low = _lowering(version, "dynamic")
    assert low.forward is not None
    kinds = [m.kind for m in low.forward.inputs]
    assert "symint" in kinds and "tensor" in kinds
    (x,) = [m for m in low.forward.inputs if m.kind == "tensor"]
    assert isinstance(x.shape[0], str), "the batch size is a symbol"


# -- readers, on payloads from the recorded files --------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_parse_backward_graph_multiline_signature_and_return(version: str) -> None:
    (text,) = _payloads(version, "train_step", "aot_backward_graph")
    g = lt.parse_graph_text(text)
    names = [n.name for n in g.placeholders]
    assert names[-1] == "tangents_1" and any(n.startswith("primals_") for n in names)
    assert all(n.meta is not None and n.meta.kind == "tensor" for n in g.placeholders)
    # The grads returned (None for inputs without grad is not a node).
    assert g.outputs and set(g.outputs) <= {n.name for n in g.nodes}
    assert "None" not in g.outputs
    mms = [n for n in g.nodes if n.target == "torch.ops.aten.mm.default"]
    assert len(mms) == 3
    assert all(n.filename.endswith("record_lowering.py") and n.lineno == 79 for n in mms)
    tangent = g.by_name()["tangents_1"].meta
    assert tangent is not None and tangent.shape == () and tangent.nbytes == 4


@pytest.mark.parametrize("version", VERSIONS)
def test_parse_getitem_subscripts(version: str) -> None:
    (text,) = _payloads(version, "mlp_infer", "aot_inference_graph")
    g = lt.parse_graph_text(text)
    nodes = g.by_name()
    getitems = [n for n in g.nodes if n.target == "operator.getitem"]
    assert len(getitems) == 2, "LayerNorm's var_mean is split with var_mean[0], var_mean[1]"
    for n in getitems:
        assert n.args == ("var_mean",)
        assert n.meta is not None and n.meta.shape == (4, 1)
    assert nodes["var_mean"].meta is None, "a tuple-valued node prints no meta"
    assert len(g.outputs) == 1 and nodes[g.outputs[0]].target == "torch.ops.aten.addmm.default"


@pytest.mark.parametrize("version", VERSIONS)
def test_parse_sym_inputs(version: str) -> None:
    (text,) = _payloads(version, "dynamic", "aot_inference_graph")
    g = lt.parse_graph_text(text)
    metas = [n.meta for n in g.placeholders]
    assert any(m is not None and m.kind == "symint" for m in metas)
    tensors = [m for m in metas if m is not None and m.kind == "tensor"]
    assert tensors and all(m.symbolic for m in tensors)


@pytest.mark.parametrize("version", VERSIONS)
def test_read_provenance_and_kernel_calls_agree(version: str) -> None:
    (code,) = _payloads(version, "mlp_infer", "inductor_output_code")
    (mapping,) = _payloads(version, "mlp_infer", "inductor_provenance_tracking_node_mappings")
    prov = lt.read_provenance(mapping)
    calls = lt.kernel_calls(code)
    assert [key for key, _ in calls] == sorted(prov.kernel_to_post, key=lambda k: lt.split_handle(k)[1])
    lines = code.splitlines()
    for key, line in calls:
        name, n = lt.split_handle(key)
        assert n > 0 and name.split(".")[-1] in lines[line - 1], f"line {line} calls {name}"
    post_nodes = {p for ps in prov.kernel_to_post.values() for p in ps}
    assert post_nodes <= set(prov.post_to_pre), "every kernel's post-grad node maps to Dynamo nodes"
    # A backward compile logs no node mapping: an empty Provenance, not an error.
    _fwd, bwd = _payloads(version, "train_step", "inductor_provenance_tracking_node_mappings")
    assert lt.read_provenance(bwd).empty
    assert lt.read_provenance("not json").empty


@pytest.mark.parametrize("version", VERSIONS)
def test_phases_of_steps_from_recorded_steps(version: str) -> None:
    steps = [s for p in _payloads(version, "train_step", "chromium_event") if (s := lt.read_chromium(p))]
    assert steps and {ph for _, ph, _ in steps} == {"B", "E"}
    phases = lt.phases_of_steps(steps)
    span = (max(t for *_, t in steps) - min(t for *_, t in steps)) / 1e6
    # Nested steps are counted once (in the innermost): the phases add up to at most the span.
    assert 0 < sum(phases.values()) <= span + 1e-6
    assert set(phases) <= set(lt.PHASE_ORDER)


def test_phases_of_steps_gives_time_to_the_innermost_step() -> None:
    steps = [
        ("GraphLowering.run", "B", 0.0),
        ("compile_file", "B", 1e6),
        ("compile_file", "E", 3e6),
        ("GraphLowering.run", "E", 4e6),
        ("unknown_step", "B", 5e6),  # a step of no phase, outside any: not counted
        ("unknown_step", "E", 9e6),
    ]
    assert lt.phases_of_steps(steps) == {"lowering": 2.0, "compile": 2.0}


_CODES = sorted(k for k in lt._DTYPE_BYTES if k in lt._DTYPE_NAMES)
_DIM = st.one_of(st.integers(0, 64), st.sampled_from(["s0", "s1", "u0"]))


@given(
    code=st.sampled_from(_CODES),
    sizes=st.lists(_DIM, max_size=4),
    strides=st.lists(st.integers(0, 4096), max_size=4),
    device=st.sampled_from(["cpu", "cuda:0", "cuda:1", "meta"]),
)
def test_tensor_text_round_trips(code: str, sizes: list[int | str], strides: list[int], device: str) -> None:
    text = f"{code}[{', '.join(map(str, sizes))}][{', '.join(map(str, strides))}]{device}"
    t = lt.tensor_text(text)
    assert t.kind == "tensor"
    assert t.shape == tuple(sizes) and t.stride == tuple(strides) and t.device == device
    assert t.dtype == lt._DTYPE_NAMES[code]
    assert t.symbolic == any(isinstance(d, str) for d in sizes)
    numel = math.prod(d for d in sizes if isinstance(d, int))  # symbols count as 1
    assert t.nbytes == numel * lt._DTYPE_BYTES[code]


# -- JSON ------------------------------------------------------------------------------------


def test_report_with_lowering_round_trips(tmp_path: Path) -> None:
    rep = _report("torch-2.13", "train_step")
    assert rep.graphs[0].lowering is not None
    back = dynscope.load(rep.save(tmp_path / "r.json"))
    assert back == rep
    assert back.graphs[0].lowering == rep.graphs[0].lowering


def test_schema_1_report_still_loads() -> None:
    path = GOLDEN_REPORTS / "mlp.json"
    assert json.loads(path.read_text(encoding="utf-8"))["schema_version"] == 1
    rep = dynscope.load(path)
    assert rep.graphs and all(g.lowering is None for g in rep.graphs)
    assert list(rep.kernels()) == []


# -- live ------------------------------------------------------------------------------------

FAST = TimingOptions(end_to_end=False, warmup=1, repeats=5, min_time_s=0.02, min_sample_ms=2.0)


class _Mlp(nn.Module):
    """Big enough on CPU that kernels, not wrapper code, take the time."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(256, 512)
        self.fc2 = nn.Linear(512, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


@pytest.fixture(scope="module")
def timed() -> Report:
    torch.manual_seed(0)
    model = _Mlp()

    def train_step(x: torch.Tensor) -> torch.Tensor:
        return model(x).square().mean()

    return dynscope.report(train_step, torch.randn(512, 256), timing=True, timing_options=FAST)


def _lowered(rep: Report) -> list[Graph]:
    return [g for g in rep.graphs if g.timing is not None and not g.timing.failed]


@pytest.mark.slow
def test_timed_training_graph_has_timed_forward_and_backward(timed: Report) -> None:
    graphs = _lowered(timed)
    assert graphs, "a graph was timed"
    for g in graphs:
        low = g.lowering
        assert low is not None and low.source == "timing" and low.notes == ()
        assert low.forward is not None and low.backward is not None
        assert low.saved_for_backward is not None and low.saved_for_backward.bytes > 0
        assert {k.graph for k in low.kernels} == {"forward", "backward"}
        assert low.mapped_share >= 0.95
        assert all(k.time_ms is not None and k.share is not None for k in low.kernels)
        assert low.profiled_ms is not None and low.kernel_ms is not None
        # Kernel times are parts of the profiled graph time. How large a part is
        # a timing (a loaded 2-core CI machine gave 2.9 of 8.0 ms), not asserted.
        assert 0 < low.kernel_ms <= low.profiled_ms * (1 + 1e-6)
        assert sum(k.share for k in low.kernels if k.share is not None) <= 1 + 1e-6
    assert timed.top_kernels(3) and all(ms > 0 for _, _, ms in timed.top_kernels(3))


@pytest.mark.slow
def test_timed_report_round_trips(timed: Report, tmp_path: Path) -> None:
    assert dynscope.load(timed.save(tmp_path / "r.json")) == timed


def _small_mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.ReLU(), nn.Linear(32, 8))


def _untimed(rep: Report) -> None:
    assert rep.graphs
    for g in rep.graphs:
        low = g.lowering
        assert low is not None and low.source == "trace"
        assert g.timing is None and low.profiled_ms is None
        assert low.kernels and all(k.time_ms is None for k in low.kernels)
        assert {k.kind for k in low.kernels} >= {"extern", "cpp"}
        assert low.mapped_share >= 0.95 and low.notes == ()


@pytest.mark.slow
def test_capture_of_users_inductor_compile_reads_lowering() -> None:
    # nn.Sequential's inference graph logs no user stack traces: kernels are tied through
    # the node mapping alone (a regression: this used to raise KeyError in build_lowering).
    # provenance=True: Inductor's provenance tracking ties kernels to nodes (off by default:
    # it is part of the FX graph cache key, tests/capture/test_capture_cache.py).
    model, x = _small_mlp(), torch.randn(4, 16)
    with torch.no_grad(), dynscope.capture(provenance=True) as cap:
        torch.compile(model)(x)
    _untimed(cap.report)


@pytest.mark.slow
def test_capture_leaves_provenance_off_and_says_so() -> None:
    import torch._inductor.config as inductor_config

    torch._dynamo.reset()  # nn.Sequential's forward is cached by earlier tests' compiles
    model, x = _small_mlp(), torch.randn(4, 16)
    before = inductor_config.trace.provenance_tracking_level
    with torch.no_grad(), dynscope.capture() as cap:
        assert inductor_config.trace.provenance_tracking_level == before
        torch.compile(model)(x)
    rep = cap.report
    assert rep.graphs and all(g.lowering is not None for g in rep.graphs)
    assert any("provenance tracking off" in n for n in rep.notes)


@pytest.mark.slow
def test_report_inner_inductor_reads_lowering() -> None:
    with torch.no_grad():
        rep = dynscope.report(_small_mlp(), torch.randn(4, 16), inner="inductor")
    _untimed(rep)


def test_eager_inner_logs_no_lowering() -> None:
    model, x = _small_mlp(), torch.randn(4, 16)
    with dynscope.capture() as cap:
        cap_compiled = torch.compile(model, backend=cap.backend)
        cap_compiled(x)
    rep = cap.report
    assert rep.graphs and all(g.lowering is None for g in rep.graphs)
    assert list(rep.kernels()) == []
    # Without Inductor nothing below Dynamo is logged: the lowering watch keeps only
    # Dynamo's own compile steps, beyond what a capture always kept.
    kept = {e.name for e in cap._collector.snapshot()}
    assert kept - (KEPT_EVENTS | KEPT_ARTIFACTS) <= {"chromium_event"}
    rep_eager = dynscope.report(_small_mlp(), x)
    assert all(g.lowering is None for g in rep_eager.graphs)
