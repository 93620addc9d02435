"""JSON round trip of the report model (property-based) and of real reports."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dynscope
from dynscope._model import (
    SCHEMA_VERSION,
    BreakEvent,
    Cause,
    CompileTime,
    Coverage,
    Frame,
    Graph,
    GraphBreak,
    Guard,
    GuardFailure,
    ModeTiming,
    Node,
    Recompile,
    RecompileFix,
    Report,
    StackFrame,
    StateChange,
    TensorMeta,
    Timing,
)
from dynscope._model.codec import report_from_dict
from tests.corpus.programs import PrintModel, _x

text = st.text(max_size=12)
small = st.integers(min_value=0, max_value=10_000)
seconds = st.floats(min_value=0, max_value=1e4, allow_nan=False)
dims = st.tuples() | st.lists(st.one_of(small, st.sampled_from(["s0", "s77"])), max_size=4).map(tuple)

metas = st.builds(TensorMeta, kind=st.sampled_from(["tensor", "symint", "int"]), shape=dims,
                  dtype=text, device=text, stride=dims, requires_grad=st.booleans(), value=text)
nodes = st.builds(Node, name=text, op=text, target=text, args=st.lists(text, max_size=3).map(tuple),
                  outputs=st.lists(metas, max_size=2).map(tuple),
                  module_stack=st.lists(st.tuples(text, text), max_size=2).map(tuple),
                  filename=text, lineno=small, source=text)
timings = st.builds(Timing, mode=text, device=text, eager_ms=seconds, compiled_ms=seconds,
                    compile_s=seconds, max_abs_err=seconds, max_rel_err=seconds, kernels=small,
                    eager_samples_ms=st.lists(seconds, max_size=3).map(tuple),
                    compiled_samples_ms=st.lists(seconds, max_size=3).map(tuple),
                    error=text, noisy=st.booleans())
graphs = st.builds(Graph, id=small, compile_id=text, frame=text, filename=text, lineno=small,
                   node_count=small, op_count=small,
                   op_counts=st.lists(st.tuples(text, small), max_size=3).map(tuple),
                   inputs=st.lists(metas, max_size=3).map(tuple), nodes=st.lists(nodes, max_size=3).map(tuple),
                   code=text, origin=st.sampled_from(["backend", "trace"]),
                   timings=st.lists(timings, max_size=2).map(tuple))
frames_st = st.builds(StackFrame, filename=text, lineno=small, function=text, line=text)
breaks = st.builds(GraphBreak, filename=text, lineno=small, function=text, source=text, reason=text,
                   category=text, explanation=text, hints=st.lists(text, max_size=2).map(tuple),
                   gb_type=text, gb_id=text, doc_url=text, user_stack=st.lists(frames_st, max_size=2).map(tuple),
                   count=small, compile_ids=st.lists(text, max_size=2).map(tuple))
causes = st.builds(Cause, kind=text, name=text, dim=text, then=text, now=text, guard=text, code=text, at=text,
                   checked=st.booleans(), said=text,
                   states=st.lists(st.builds(StateChange, state=text, then=text, now=text), max_size=2).map(tuple))
recompile_fixes = st.builds(RecompileFix, kind=text, change=causes, name=text, dim=text, size=text, value=text, at=text,
                            code=text, via=text, compile_id=text, library=text, function=text, said=text)
failures = st.builds(GuardFailure, entry=text, guard=text, cause=st.none() | causes, then=text, now=text, source=text)
times = st.builds(CompileTime, total_s=seconds, dynamo_s=seconds, backend_s=seconds, inductor_s=seconds)
reports = st.builds(
    Report,
    graphs=st.lists(graphs, max_size=2).map(tuple),
    breaks=st.lists(breaks, max_size=2).map(tuple),
    break_events=st.lists(st.builds(BreakEvent, compile_id=text, filename=text, lineno=small,
                                    reported_filename=text, reported_lineno=small), max_size=2).map(tuple),
    recompiles=st.lists(st.builds(Recompile, compile_id=text, frame=text,
                                  raw_reasons=st.lists(text, max_size=2).map(tuple),
                                  causes=st.lists(causes, max_size=2).map(tuple),
                                  fixes=st.lists(recompile_fixes, max_size=2).map(tuple),
                                  failures=st.lists(failures, max_size=2).map(tuple)), max_size=2).map(tuple),
    guards=st.lists(st.builds(Guard, compile_id=text, kind=text, source=text, detail=text, user_line=text),
                    max_size=3).map(tuple),
    frames=st.lists(st.builds(Frame, compile_id=text, function=text, filename=text, lineno=small,
                              graph_ids=st.lists(small, max_size=2).map(tuple), guard_count=small,
                              op_count=small, compile_time=times, restarts=small, status=text,
                              fail_reason=text), max_size=2).map(tuple),
    compile_time=times,
    coverage=st.none() | st.builds(Coverage, ops_in_graphs=small, ops_eager=small,
                                   eager_sites=st.lists(st.tuples(text, small), max_size=2).map(tuple)),
    timing=st.lists(st.builds(ModeTiming, mode=text, device=text, eager_ms=seconds, compiled_ms=seconds,
                              first_call_s=seconds, in_graphs_ms=seconds), max_size=2).map(tuple),
    calls=small, torch_version=text, title=text,
)


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(reports)
def test_round_trip_property(rep: Report) -> None:
    back = report_from_dict(json.loads(rep.to_json()))
    assert back == rep
    assert back.to_json() == rep.to_json()


def test_real_report_round_trip(tmp_path) -> None:
    rep = dynscope.report(PrintModel(), calls=[_x(4, 8), _x(6, 8)])
    path = rep.save(tmp_path / "run.json")
    back = dynscope.load(path)
    assert back == rep
    assert back.graphs[0].module is None and rep.graphs[0].module is not None
    assert (back.graph_count, back.break_count, back.recompile_count) == (
        rep.graph_count, rep.break_count, rep.recompile_count)
    assert str(back) == str(rep)
    data = json.loads(path.read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    assert "_module" not in data["graphs"][0]


def test_loading_a_big_report_works_out_type_hints_once_per_type(tmp_path, monkeypatch) -> None:
    # load() of a 100 MB report took minutes when typing.get_type_hints ran per object
    # (benchmarks/load_speed.py times it); the decoders are now built once per type.
    import dataclasses
    import typing

    from dynscope._model import codec as _codec

    stored = dynscope.load(Path(__file__).parents[1] / "golden" / "reports" / "print_model.json")
    big = dataclasses.replace(stored, graphs=stored.graphs * 100)
    path = big.save(tmp_path / "big.json")
    _codec._decoder.cache_clear()
    calls: list[object] = []
    real = typing.get_type_hints
    monkeypatch.setattr(typing, "get_type_hints", lambda cls, *a, **k: calls.append(cls) or real(cls, *a, **k))
    assert dynscope.load(path) == big
    # Once per model type at most: the model's dataclasses, however many graphs.
    import dynscope._model as _model

    types = sum(1 for n in _model.__all__ if dataclasses.is_dataclass(getattr(_model, n)))
    assert len(calls) == len(set(calls)) <= types, f"{len(calls)} type-hint look-ups for {len(big.graphs)} graphs"


def test_a_lowering_saved_with_a_cache_key_of_two_words_reads_as_cache_graph_and_result() -> None:
    # Schema 7 and before: ("fx_graph forward", "hit"); 8: ("fx_graph", "forward", "hit").
    from dynscope._model.codec import from_plain
    from dynscope._model.graph import Lowering

    old = {"mode": "default", "cache": [["aot_autograd", "miss"], ["fx_graph forward", "hit"],
                                        ["fx_graph backward", "bypass"]]}
    low = from_plain(Lowering, old)
    assert low.cache == (("aot_autograd", "", "miss"), ("fx_graph", "forward", "hit"),
                         ("fx_graph", "backward", "bypass"))
    assert from_plain(Lowering, {"cache": [list(c) for c in low.cache]}).cache == low.cache, "this layout as it is"


def test_a_kernel_saved_with_source_lines_as_words_reads_them_as_path_and_line() -> None:
    # Schema 7 and before: "path/file.py:LINE"; 8: [path, line].
    from dynscope._model.codec import from_plain
    from dynscope._model.graph import Kernel

    old = {"name": "cpp_fused_0", "kind": "cpp", "source_lines": ["/src/app/model.py:12", "C:\\w\\m.py:3", "odd"]}
    k = from_plain(Kernel, old)
    assert k.source_lines == (("/src/app/model.py", 12), ("C:\\w\\m.py", 3), ("odd", 0))
    assert from_plain(Kernel, {**old, "source_lines": [list(x) for x in k.source_lines]}) == k


def test_a_break_saved_with_its_advice_words_reads_its_category_s_advice() -> None:
    # Schema 8 and before kept each break's advice ("fix") as words; 9 keeps the category only.
    from dynscope._lexicon.break_categories import category_named

    path = Path(__file__).parent.parent / "golden" / "reports" / "advised.json"
    saved = json.loads(path.read_text(encoding="utf-8"))
    assert saved["schema_version"] < 9 and all("fix" in b for b in saved["breaks"]), "a report saved with words"
    rep = dynscope.load(path)
    assert rep.breaks and all(b.fix == category_named(b.category).fix for b in rep.breaks)
    assert all("fix" not in b for b in json.loads(rep.to_json())["breaks"]), "words are made where shown"


def test_a_trial_saved_with_target_words_reads_them_as_fields() -> None:
    # Schema 8 and before kept a trial's targets as words; 9 keeps fields the renderers word.
    from dynscope._model.advice import Target
    from dynscope._render.causes import target_words

    assert Target._from_words("programs.py:62") == Target(site="programs.py:62")
    assert Target._from_words("m.py:7: data-dependent branch") == Target(site="m.py:7", category="data-dependent branch")
    said = "MLP.forward: size of input x changed (dim 0)"
    assert Target._from_words(said) == Target(said=said)
    for words in ("programs.py:62", "m.py:7: data-dependent branch", said, "the program", "layers.0"):
        assert target_words(Target._from_words(words)) == words, "an older report shows the words it saved"
    path = Path(__file__).parent.parent / "golden" / "reports" / "advised.json"
    saved = json.loads(path.read_text(encoding="utf-8"))
    old = [w for t in saved["trials"] for w in t["target"]]
    rep = dynscope.load(path)
    assert old and [target_words(x) for t in rep.trials for x in t.target] == old
    again = json.loads(rep.to_json())
    assert all(type(x) is dict for t in again["trials"] for x in t["target"]), "saved as fields now"
