"""The report's "Compile caches" part (issue 47): every lookup in AOTAutograd's and Inductor's
FX graph caches, built once (sections.compile_caches) and shown by the summary and the page
alike, on runs recorded with a shared cache folder (tests/traces/cache/torch-2.13, recorded by
scripts/record_cache_runs.py: `cold` filled the cache, `unchanged` read it, `freezing` could
not use AOTAutograd's)."""

from __future__ import annotations

import html
from dataclasses import replace
from pathlib import Path

import dynscope
from dynscope._render.sections import LOOKUPS_SHOWN, compile_caches

RUNS = Path(__file__).resolve().parents[1] / "traces" / "cache" / "torch-2.13"


def _run(name: str) -> dynscope.Report:
    rep = dynscope.load_trace(RUNS / name)
    assert isinstance(rep, dynscope.Report)
    return rep


def test_a_warm_run_says_each_hit_and_the_seconds_it_saved() -> None:
    rep = _run("unchanged")
    hits = [lk for lk in rep.cache_lookups if lk.result == "hit"]
    assert hits and len(hits) == len(rep.cache_lookups)
    section = compile_caches(rep)
    assert section is not None
    # The AOTAutograd hit's seconds hold the Inductor compile inside it: each compile once.
    per: dict[str, float] = {}
    for lk in hits:
        per[lk.compile_id] = max(per.get(lk.compile_id, 0.0), lk.seconds or 0.0)
    saved = sum(per.values())
    assert saved < sum(lk.seconds or 0.0 for lk in hits)
    assert section.lead.startswith(f"{len(hits)} lookups: {len(hits)} hit ({saved:.2f} s of compiling saved), 0 missed")
    text, page = rep.summary(), html.unescape(rep.to_html(pictures=False))
    assert "Compile caches" in text and "<h2>Compile caches</h2>" in page
    for lk in hits:
        assert lk.key and lk.key in page, "the page shows every key"
        assert f"saved {lk.seconds:.2f} s" in text and f"saved {lk.seconds:.2f} s" in page


def test_a_cold_run_and_a_bypass_come_first_with_their_reasons() -> None:
    cold = compile_caches(_run("cold"))
    assert cold is not None and "0 hit" in cold.lead
    frozen = _run("freezing")
    section = compile_caches(frozen)
    assert section is not None
    (table,) = section.blocks
    bypassed = [lk for lk in frozen.cache_lookups if lk.result == "bypass"]
    assert bypassed and table.rows[0][3] == "bypass", "the bypasses first"
    assert table.rows[0][5] == bypassed[0].bypass_reason and "freezing" in table.rows[0][5]
    assert f"{len(bypassed)} bypassed" in section.lead


def test_a_long_list_is_cut_in_the_summary_and_says_so_and_whole_on_the_page() -> None:
    rep = _run("unchanged")
    many = (*rep.cache_lookups,) * (LOOKUPS_SHOWN + 1)
    big = replace(rep, cache_lookups=many)
    text, page = big.summary(), big.to_html(pictures=False)
    more = len(many) - LOOKUPS_SHOWN
    assert f"... {more} more lookups (the page, Report.cache_lookups)" in text
    assert page.count(f"<code>{rep.cache_lookups[0].key}</code>") == LOOKUPS_SHOWN + 1


def test_no_lookups_no_part() -> None:
    stored = dynscope.load(Path(__file__).resolve().parents[1] / "golden" / "reports" / "mlp.json")
    assert not stored.cache_lookups and compile_caches(stored) is None
    assert "Compile caches" not in stored.summary()


def test_the_part_and_cache_diff_say_the_same_seconds_saved() -> None:
    # One figure for one concept: the report's part and cache_diff count each compile once.
    d = dynscope.cache_diff(RUNS / "cold", RUNS / "unchanged")
    section = compile_caches(_run("unchanged"))
    assert section is not None and f"({d.seconds_saved_b:.2f} s of compiling saved)" in section.lead
    assert f"B's hits saved {d.seconds_saved_b:.2f} s of compiling" in d.summary()
