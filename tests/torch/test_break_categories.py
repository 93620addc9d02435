"""The break categories' one home (dynscope/_lexicon/break_categories.py), held to real messages."""

from __future__ import annotations

import ast
import json
import re
from functools import cache
from pathlib import Path

import torch

import dynscope
from dynscope._errors import CaptureError
from dynscope._lexicon.break_categories import (
    CATEGORIES,
    CATEGORY_NAMES,
    CONSTRAINT,
    EXPLICIT,
    LIBRARY_BREAK,
    OBSERVED_EXCEPTION,
    OTHER,
    PROXY,
    category_named,
    classify,
    fix_for,
)
from dynscope._read.break_sites import fold_breaks
from dynscope._torch.break_report import parse_break
from dynscope._torch.registry import graph_break_registry

ROOT = Path(__file__).resolve().parents[2]
LEXICON = ROOT / "dynscope" / "_lexicon" / "break_categories.py"
TRACES = Path(__file__).parents[1] / "traces"

#: Categories no recorded trace selects, and where else a real message is held to them.
NOT_RECORDED: dict[str, str] = {
    OTHER: "the fallback: no words select it",
    LIBRARY_BREAK: "where the break was raised selects it: "
    "tests/capture/test_advice_real.py::test_graph_break_inside_a_library_is_the_librarys (live)",
    OBSERVED_EXCEPTION: "test_observed_exception_is_selected_on_a_live_run (below)",
    PROXY: "test_torch_registry_selects_the_proxy_category (torch's own graph-break registry)",
    # torch 2.11 .. 2.15 raise ConstraintViolationError for a specialised dynamic dimension
    # (an error, not a break): kept for releases that report it as a break.
    CONSTRAINT: "no release recorded here reports it as a graph break",
}


def _string_literals(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [(n.lineno, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def test_each_category_name_is_written_once_in_the_lexicon() -> None:
    # "other" is excluded: op categories and tensor kinds use the same word for their own.
    names = set(CATEGORY_NAMES) - {OTHER}
    outside = [
        f"{path.relative_to(ROOT)}:{line} {value!r}"
        for path in sorted((ROOT / "dynscope").rglob("*.py"))
        if path != LEXICON
        for line, value in _string_literals(path)
        if value in names
    ]
    assert outside == [], "a break category's name written outside dynscope/_lexicon/break_categories.py: " + "; ".join(outside)
    # In the lexicon each name is one module constant's value (a word that equals a name,
    # "deepcopy", is PyTorch's word, not the name).
    tree = ast.parse(LEXICON.read_text(encoding="utf-8"))
    assigned = [
        n.value.value for n in tree.body
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and n.value.value in CATEGORY_NAMES
    ]
    assert sorted(assigned) == sorted(CATEGORY_NAMES)


def test_the_scan_sees_a_name_written_twice(tmp_path: Path) -> None:
    copy = tmp_path / "copy.py"
    copy.write_text('SCALAR = ".item()/scalar output"\n', encoding="utf-8")
    assert (1, ".item()/scalar output") in _string_literals(copy)


def test_every_category_has_its_own_fix_text() -> None:
    assert len(set(CATEGORY_NAMES)) == len(CATEGORIES)
    fixes = [c.fix for c in CATEGORIES]
    assert all(f.strip() and f == f.strip() for f in fixes)
    assert len(set(fixes)) == len(fixes)
    assert fix_for("a name no dynscope release wrote") == fix_for(OTHER)
    assert category_named("a name no dynscope release wrote").actionable


def test_only_the_on_purpose_categories_are_not_actionable() -> None:
    assert {c.name for c in CATEGORIES if not c.actionable} == {c.name for c in CATEGORIES if c.on_purpose}
    assert {c.name for c in CATEGORIES if c.on_purpose} == {"torch.optim (on purpose)", LIBRARY_BREAK}
    # Every category is reached: by its words, by where it was raised, or as the fallback.
    assert all(c.words or c.raised_in or c.name == OTHER for c in CATEGORIES)


@cache
def _recorded_categories() -> dict[str, list[str]]:
    """Category -> the recorded traces (torch release/program) whose breaks fall in it."""
    found: dict[str, list[str]] = {}
    for path in sorted(TRACES.glob("torch-*/*.jsonl")):
        items = []
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record["metadata"].get("artifact", {}).get("name") == "dynamo_graph_break_reason":
                parsed = parse_break(record["payload"])
                assert parsed is not None, path
                items.append(("0/0", parsed))
        sites, _ = fold_breaks(items)
        for site in sites:
            found.setdefault(site.category, []).append(f"{path.parent.name}/{path.stem}")
    return found


def test_the_rules_select_every_category_from_a_recorded_message() -> None:
    recorded = _recorded_categories()
    missing = set(CATEGORY_NAMES) - set(recorded) - set(NOT_RECORDED)
    assert not missing, f"no recorded PyTorch message selects {sorted(missing)}"
    stale = set(recorded) & set(NOT_RECORDED)
    assert not stale, f"recorded now (drop from NOT_RECORDED): {sorted(stale)}"
    assert set(recorded) <= set(CATEGORY_NAMES)
    # Recorded under more than one release, so a rule is not held to one release's wording only.
    assert len({w.split("/")[0] for where in recorded.values() for w in where}) > 1


def test_observed_exception_is_selected_on_a_live_run() -> None:
    def raises(x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        raise KeyError(f"{y.shape}")

    try:
        dynscope.report(raises, torch.randn(4))
    except CaptureError as err:
        assert err.report is not None
        categories = [b.category for b in err.report.breaks]
    else:
        raise AssertionError("the program raised nothing")
    assert categories == [OBSERVED_EXCEPTION]


def test_torch_registry_selects_the_proxy_category() -> None:
    # PyTorch's own registry of its graph breaks (torch/_dynamo/graph_break_registry.json):
    # real types and explanations, though no recorded program breaks in this category.
    registry = graph_break_registry()
    assert registry, "torch's graph-break registry was not found"
    selected = {
        gb_id for gb_id, e in registry.items()
        if classify(e.get("Gb_type", ""), f"{e.get('Context', '')} {e.get('Explanation', '')}") == PROXY
    }
    assert selected, "no graph break in torch's registry selects the proxy/return conversion category"


def test_the_docs_list_every_category() -> None:
    text = (ROOT / "docs" / "report-model.md").read_text(encoding="utf-8")
    listed = re.search(r"^Categories: (.*?)\.\n\n", text, re.S | re.M)
    assert listed is not None
    assert sorted(" ".join(listed.group(1).split()).split(", ")) == sorted(CATEGORY_NAMES)


def test_what_fix_leaves_alone_is_on_the_category_table() -> None:
    # dynscope.fix reads why it proposes no patch from the category (Category.unpatched):
    # every break made on purpose says why, and the user's own graph_break() too.
    for c in CATEGORIES:
        if c.on_purpose:
            assert c.unpatched, c.name
    left_alone = {c.name for c in CATEGORIES if c.unpatched}
    assert left_alone == {c.name for c in CATEGORIES if c.on_purpose} | {EXPLICIT}
    assert category_named("no such category").unpatched == ""  # "other": fix tries its rewrites
