"""Reports built from traces recorded under several torch releases (no compiling here).

The traces come from scripts/record_payloads.py (small programs) and scripts/record_corpus.py
(the corpus, ``corpus-<program>.jsonl``); tests/traces/README.md has the commands.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from dynscope._read.assemble import build_report
from dynscope._torch.trace import TraceEvent, event_from
from tests.corpus.markers import markers
from tests.corpus.programs import CORPUS_OVERRIDES, PROGRAMS, Program

if TYPE_CHECKING:
    from dynscope._model import Report

TRACES = Path(__file__).parents[1] / "traces"
VERSIONS = sorted(p.name for p in TRACES.glob("torch-*"))

#: program -> (graphs, break events, break sites, recompiles, break categories)
EXPECTED: dict[str, tuple[int, int, int, int, tuple[str, ...]]] = {
    "a_loop_break": (0, 1, 1, 0, ("logging/print side effect",)),
    "b1_generator_sum": (1, 0, 0, 0, ()),
    "b2_generator_print": (0, 1, 1, 0, ("logging/print side effect",)),
    "b3_generator_loop_break": (0, 1, 1, 0, ("logging/print side effect",)),
    "c_item": (2, 1, 1, 0, (".item()/scalar output",)),
    "d_kwargs_recompile": (2, 0, 0, 1, ()),
    "e_recompile_limit": (2, 0, 0, 2, ()),
    "f_backward": (2, 1, 1, 0, ("backward() in compiled code",)),
    "g_print_break": (2, 1, 1, 0, ("logging/print side effect",)),
    # The helper breaks once inlined into f, then again in its own frame, where Dynamo gives
    # up ("Failed to handle graph break gracefully"): two records, two events, one site.
    "h_inlined_loop_break": (2, 2, 1, 0, ("logging/print side effect",)),
    "i_user_context_manager": (0, 1, 1, 0, ("logging/print side effect",)),
    # A print in a helper breaks once per nesting level (f, then the helper's own frame).
    "j_nested_print": (4, 2, 1, 0, ("logging/print side effect",)),
}


def _events(path: Path) -> list[TraceEvent]:
    events = []
    for line in path.read_text(encoding="utf-8").splitlines():
        event = event_from(**json.loads(line))
        assert event is not None, f"{path.name}: a stored record dynscope does not keep"
        events.append(event)
    return events


def _report(version: str, program: str) -> Report:
    path = TRACES / version / f"{program}.jsonl"
    return build_report(_events(path), [], ignore_backend_mismatch=False, title=program)


def _corpus_expected(version: str, prog: Program) -> dict[str, object]:
    """What the corpus pins for 2.13 (counts in PROGRAMS, sites in the BREAK markers)."""
    sites = markers(prog.code)
    expected: dict[str, object] = {
        "graphs": prog.graphs,
        "breaks": prog.breaks,
        "sites": len(sites),
        "recompiles": prog.recompiles,
        # (file name, category, events there): line numbers would churn on corpus edits.
        "categories": sorted((os.path.basename(f), cat, n) for (f, _), (cat, n) in sites.items()),
    }
    expected.update(CORPUS_OVERRIDES.get((version, prog.name), {}))
    return expected


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("prog", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_corpus_counts_from_recorded_trace(
    version: str, prog: Program
) -> None:
    path = TRACES / version / f"corpus-{prog.name}.jsonl"
    assert path.is_file(), f"{path} missing: run scripts/record_corpus.py under {version}"
    rep = build_report(_events(path), [], ignore_backend_mismatch=True, title=prog.name)
    got = {
        "graphs": rep.graph_count,
        "breaks": rep.break_count,
        "sites": len(rep.breaks),
        "recompiles": rep.recompile_count,
        "categories": sorted((os.path.basename(b.filename), b.category, b.count) for b in rep.breaks),
    }
    assert got == _corpus_expected(version, prog)
    assert rep.unparsed == 0, "every stored payload is one dynscope reads"


@pytest.mark.parametrize("version", VERSIONS)
def test_a_recorded_trace_says_what_it_was_given(version: str) -> None:
    # Assembly never asks the running process: the rank, world size and torch version are
    # what the caller passed (a stored trace names none: rank 0 of 1, version unknown).
    events = _events(TRACES / version / "a_loop_break.jsonl")
    plain = build_report(events, [], ignore_backend_mismatch=False)
    assert (plain.rank, plain.world_size, plain.torch_version) == (0, 1, "")
    given = build_report(events, [], ignore_backend_mismatch=False, rank=3, world_size=8,
                         torch_version=version.removeprefix("torch-"))
    assert (given.rank, given.world_size, given.torch_version) == (3, 8, version.removeprefix("torch-"))
    assert given.graphs == plain.graphs and given.breaks == plain.breaks


def test_three_releases_are_stored() -> None:
    assert {"torch-2.11", "torch-2.13", "torch-2.14"} <= set(VERSIONS)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("program", sorted(EXPECTED))
def test_counts_from_recorded_trace(version: str, program: str) -> None:
    rep = _report(version, program)
    got = (
        rep.graph_count,
        rep.break_count,
        len(rep.breaks),
        rep.recompile_count,
        tuple(b.category for b in rep.breaks),
    )
    assert got == EXPECTED[program]
    assert rep.unparsed == 0, "every stored payload is one dynscope reads"


@pytest.mark.parametrize("version", VERSIONS)
def test_gave_up_payload_is_an_event_of_its_own(version: str) -> None:
    # One event per dynamo_graph_break_reason record, as PyTorch's own tests count them
    # (test_error_messages.py NestedGraphBreakLoggingTests): the inlined break in f's frame,
    # then the helper's own frame, where Dynamo gave up.
    events = _events(TRACES / version / "h_inlined_loop_break.jsonl")
    payloads = [e for e in events if e.name == "dynamo_graph_break_reason"]
    assert len(payloads) == 2
    assert "Failed to handle graph break gracefully" in payloads[1].payload
    assert payloads[0].compile_id.split("/")[0] != payloads[1].compile_id.split("/")[0]  # two frames
    rep = _report(version, "h_inlined_loop_break")
    assert rep.break_count == 2 == len(rep.break_events)
    (site,) = rep.breaks
    assert (site.count, site.gave_up) == (2, 1)
    assert [e.gave_up for e in rep.break_events] == [False, True]
    assert len({e.compile_id for e in rep.break_events}) == 2


@pytest.mark.parametrize("version", VERSIONS)
def test_recompile_limit_and_kwargs_reason_in_words(version: str) -> None:
    limit = _report(version, "e_recompile_limit")
    assert any("recompile limit hit" in n for n in limit.notes)
    assert any(f.status == "failed" for f in limit.frames)
    kwargs = _report(version, "d_kwargs_recompile")
    (recompile,) = kwargs.recompiles
    assert recompile.explained == ("input kw['x'] changed size in dim 1: compiled for 4, called with 6",)


def test_every_kept_event_kind_has_a_handler() -> None:
    # Assembly is a table from trace-event name to handler (tlparse's one parser per
    # artifact): a kind the collector keeps and no handler reads would be lost silently.
    from dynscope._read.assemble import _HANDLERS
    from dynscope._torch import records

    # DDP's pieces, read before the handlers run (a graph needs them all)
    read_in_a_pass_of_its_own = {records.OPTIMIZE_DDP_SPLIT_CHILD}
    kept = records.KEPT_EVENTS | records.KEPT_ARTIFACTS | records.LOWERING_KINDS
    assert kept - read_in_a_pass_of_its_own == set(_HANDLERS)
