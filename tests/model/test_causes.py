"""Causes are fields (kind, name, values); their words are made in one place (dynscope._render.causes).

What decides something from a cause (advise's remedies, the fixes that name the user's line,
recompile groups) reads the fields, so rewording the render function changes no decision;
a report saved when causes were words loads with the same words.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import dynscope
from dynscope._capture.advise.plans import plans_for
from dynscope._model import causes as kinds
from dynscope._render import causes as said
from dynscope._torch.guard_text import causes_of, global_state_cause, reason_cause

STORED = Path(__file__).parents[1] / "golden" / "reports"


def scale_by(x: torch.Tensor, n: int) -> torch.Tensor:
    return x * n  # an int argument: a recompile per value


def _decisions(rep: dynscope.Report) -> list[tuple[object, ...]]:
    calls = [((torch.ones(3), n), {}) for n in (2, 3, 4)]
    return [(p.remedy, p.code, p.as_tensor, p.marks, p.dynamic, p.tried) for p in plans_for(rep, scale_by, calls, False)]


def test_rewording_the_causes_cannot_change_what_advise_proposes(monkeypatch: pytest.MonkeyPatch) -> None:
    rep = dynscope.report(scale_by, calls=[(torch.ones(3), 2), (torch.ones(3), 3), (torch.ones(3), 4)])
    assert rep.recompiles and any(c.kind == kinds.VALUE and c.name == "n" for r in rep.recompiles for c in r.causes)
    assert "Python value n changed" in rep.recompiles[0].cause_words
    before = _decisions(rep)
    assert ("value as tensor", "n = torch.tensor(n)  # pass n as a 0-d tensor", (1,), (), None, True) in before
    assert any(d[0] == "dynamic=True" for d in before)
    monkeypatch.setattr(said, "what_changed", lambda c: "something else happened")
    monkeypatch.setattr(said, "explained", lambda c: "said otherwise")
    assert rep.recompiles[0].cause_words[0] == "something else happened"  # the words did change
    assert _decisions(rep) == before


def test_every_cause_read_from_pytorchs_words_has_a_known_kind() -> None:
    reasons = [
        "tensor 'x' size mismatch at index 0. expected 4, actual 6",
        "tensor 'x' stride mismatch at index 1. expected 1, actual 8",
        "x.stride()[0] == x.size()[1]",
        "tensor 'x' dtype mismatch. expected Float, actual Double",
        "tensor 'x' device mismatch. expected cpu, actual cuda:0",
        "tensor 'x' requires_grad mismatch. expected requires_grad=1",
        "tensor 'x' rank mismatch. expected 2, actual 3",
        "L['n'] == 2", "len(L['xs']) == 2", "len(kwargs) == 1", "not kwargs",
        "___check_type_id(L['m'], 94)", "___check_obj_id(L['f'], 1234)",
        "GLOBAL_STATE changed: grad_mode autocast(cpu)_enabled", "___stack0 <= 0.0  # if y > 0:  # t.py:9 in f",
    ]
    for reason in reasons:
        fixes = causes_of(reason)
        found = [reason_cause(reason), *(f.change for f in fixes)]
        assert all(c.kind in kinds.CAUSE_KINDS for c in found), (reason, found)
        assert all(said.explained(c) and said.what_changed(c) for c in found), (reason, found)
        assert all(f.kind in kinds.FIX_KINDS and said.fix_words(f) for f in fixes), (reason, fixes)
    assert causes_of("len(kwargs) == 1")[0].change.kind == kinds.KWARGS
    assert [f.change.name for f in causes_of(reasons[-2])] == ["grad_mode", "autocast(cpu)_enabled"]


def test_global_state_values_are_fields_and_said_as_before() -> None:
    reason = "GLOBAL_STATE changed: grad_mode autocast(cpu)_enabled"
    before = {"grad_mode": True, "autocast_state": {"enabled": [False]}}
    after = {"grad_mode": False, "autocast_state": {"enabled": [True]}}
    cause = global_state_cause(reason, before, after)
    assert cause is not None and [(s.state, s.then, s.now) for s in cause.states] == [
        ("grad_mode", "true", "false"), ("autocast(cpu)_enabled", "false", "true")]
    assert cause.explained == "global state changed: grad mode enabled -> disabled (no_grad); autocast on cpu off -> on"
    unknown = global_state_cause(reason, {}, after)
    assert unknown is not None and unknown.explained == "global state changed: grad mode changed; autocast on cpu changed"
    assert global_state_cause("L['n'] == 2", before, after) is None


@pytest.mark.parametrize("name", ["many_graphs.json", "print_model.json"])
def test_a_report_saved_with_words_loads_with_the_same_words(name: str) -> None:
    raw = json.loads((STORED / name).read_text(encoding="utf-8"))
    rep = dynscope.load(STORED / name)
    assert raw["recompiles"] and len(rep.recompiles) == len(raw["recompiles"])
    for r, saved in zip(rep.recompiles, raw["recompiles"], strict=True):
        assert r.explained == tuple(saved.get("explained", ()))
        assert r.cause_words == tuple(saved.get("causes", ()))
        assert tuple(f.words for f in r.fixes) == tuple(saved.get("fixes", ()))  # old prose fixes, as saved
        assert all(c.kind == kinds.SAID for c in (*r.causes, *r.changes))
        assert all(f.kind == kinds.FIX_SAID for f in r.fixes)
        for f, was in zip(r.failures, saved.get("failures", ()), strict=True):
            assert f.explained == was["explained"] and f.cause is not None and f.cause.kind == kinds.SAID


def test_a_report_with_causes_round_trips(tmp_path: Path) -> None:
    rep = dynscope.report(scale_by, calls=[(torch.ones(3), 2), (torch.ones(3), 3)])
    back = dynscope.load(rep.save(tmp_path / "r.json"))
    assert back == rep and back.recompiles[0].causes[0].kind == kinds.VALUE
    assert back.recompiles[0].explained == rep.recompiles[0].explained
    assert [g.cause for g in back.recompile_groups()] == [g.cause for g in rep.recompile_groups()]


def test_a_report_saved_with_prose_fixes_and_why_loads_into_one_tuple_of_causes() -> None:
    # Schema 6 (tests/golden/reports/schema6_recompiles.json, saved by dynscope before fixes were
    # records: ``dynscope.report(f, calls=[...])`` of a function called with other sizes and a
    # dtype): "why" held the failed guards' causes, "causes" what changed, "fixes" words.
    raw = json.loads((STORED / "schema6_recompiles.json").read_text(encoding="utf-8"))
    assert raw["schema_version"] == 6
    rep = dynscope.load(STORED / "schema6_recompiles.json")
    for r, saved in zip(rep.recompiles, raw["recompiles"], strict=True):
        assert r.raw_reasons == tuple(saved["reasons"])
        assert [c.kind for c in r.causes] == [c["kind"] for c in saved["why"]]
        assert [c.kind for c in r.changes] == [c["kind"] for c in saved["causes"]]
        assert tuple(f.words for f in r.fixes) == tuple(saved["fixes"])
    groups = [(said.what_changed(g.cause), g.fix.words if g.fix else "") for g in rep.recompile_groups()]
    assert groups[0] == ("size of input x changed (dim 0)", "sizes that change between calls: mark the dimension "
                         "dynamic before the first call (torch._dynamo.mark_dynamic(x, 0)) or compile with "
                         "torch.compile(..., dynamic=True)")
    assert groups[2] == ("dtype of input x changed", "cast the input to one dtype before the call")


def test_fixes_are_records_worded_in_one_place(monkeypatch: pytest.MonkeyPatch) -> None:
    rep = dynscope.report(scale_by, calls=[(torch.ones(3), 2), (torch.ones(3), 3)])
    (fix,) = rep.recompiles[0].fixes
    assert fix.kind == kinds.SCALAR_AS_TENSOR and fix.change == kinds.Cause(kinds.VALUE, name="n")
    assert fix.words.startswith("avoid Python scalars that change between calls")
    assert "avoid Python scalars" in rep.summary(color=False)
    monkeypatch.setitem(said._FIXES, kinds.SCALAR_AS_TENSOR, lambda f: "said otherwise")
    assert "said otherwise" in rep.summary(color=False)  # every output says a fix through fix_words's table
    assert "said otherwise" in rep.to_html(pictures=False)
