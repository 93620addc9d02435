"""A watch verdict's remedy and a note's reason are kinds in the model and words here."""

from __future__ import annotations

from dynscope._model.ranks import Divergence
from dynscope._model.watch import BLOCKED, LIVE_KINDS, NO_COLLECTIVE, Verdict, goes_on_why, remedy_for
from dynscope._render.divergences import REMEDY_WORDS, verdict_text


def test_every_remedy_the_watch_names_has_words() -> None:
    assert set(REMEDY_WORDS) == {*LIVE_KINDS, BLOCKED}


def test_a_note_says_why_the_job_goes_on_and_the_hooks_it_runs_in() -> None:
    found = (Divergence("cache", (1,), "a"), Divergence("guards", (1,), "b"))
    assert remedy_for(found) == "guards", "the first kind a compile decides leads"
    v = Verdict(found_by=0, world_size=2, frame="step", where="train.py:3", compile_id="0/0", line="",
                divergences=found, remedy=remedy_for(found), waited_s=1.0, stops=False,
                why=goes_on_why(0, complete=True), hooks="DDP's hooks")
    assert v.why == NO_COLLECTIVE and Verdict.from_dict(v.to_dict()) == v
    lines = verdict_text(v).splitlines()
    assert lines[-2] == f"  remedy: {REMEDY_WORDS['guards']}"
    assert lines[-1] == ("  not stopped: the ranks compiled it differently, but its graphs issue no collective: the "
                         "job goes on; it runs inside DDP's hooks, whose collectives every rank issues alike")


def test_a_graph_fact_says_its_shown_ops_and_inputs_by_count_and_reads_the_older_bar() -> None:
    from dynscope._model.ranks import Fact
    from dynscope._render.divergences import detail

    now = Fact("made_graph_ref", (0,), ("Mlp.forward", True, 3, 2, "linear", "relu", "f32[8, 512]"))
    older = Fact("made_graph_ref", (0,), ("Mlp.forward", True, 3, "linear", "relu", "|", "f32[8, 512]"))
    said = [detail(Divergence("graph_structure", (1,), facts=(f,))) for f in (now, older)]
    assert said[0] == said[1] == "rank 0 as Mlp.forward [DDP bucket split]: linear, relu, +1 on f32[8, 512]", said
    # an op named like the old marker is an op, not the inputs' start
    odd = Fact("made_graph_ref", (0,), ("f", False, 1, 1, "|", "f32[2]"))
    assert detail(Divergence("graph_structure", (1,), facts=(odd,))) == "rank 0 as f: | on f32[2]"


def test_a_cache_fact_says_each_lookup_and_reads_the_older_pairs() -> None:
    from dynscope._model.ranks import Fact
    from dynscope._render.divergences import detail

    now = Fact("cache_ref", (0,), (2, "aot_autograd", "", "miss", "fx_graph", "forward", "hit"))
    older = Fact("cache_ref", (0,), ("aot_autograd", "miss", "fx_graph forward", "hit"))
    said = [detail(Divergence("cache", (1,), facts=(f,))) for f in (now, older)]
    assert said[0] == said[1] == "rank 0 aot_autograd miss, fx_graph forward hit", said
