"""Issue 14's front: "What each fix buys" in the summary and the page, `dynscope advise`, and
the break categories' fix text checked against trials of the remedies it recommends.

The renderer tests put hand-made Trial values on a report recorded from a real compile
(renderers are pure functions of plain data); the CLI and consistency tests run the engine
(dynscope.advise) on corpus programs.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import dynscope
from dynscope import Outcome, Target, Trial
from dynscope._model.codec import report_from_dict
from dynscope._render.text import advice_section
from dynscope._render.words import advice_title
from tests.corpus.pytorch_says import logger_methods_reorder

if TYPE_CHECKING:
    from collections.abc import Callable

STORED = Path(__file__).parents[1] / "golden" / "reports"

BEFORE = Outcome(graphs=2, breaks=1, break_sites=1, recompiles=0, coverage=0.8)
HELPED = Trial(
    "reorderable_logging_functions",
    "torch._dynamo.config.reorderable_logging_functions.add(print)",
    (Target(site="programs.py:62"),),
    BEFORE,
    Outcome(graphs=1, breaks=0, break_sites=0, recompiles=0, coverage=1.0),
    helped=True,
)
NO_HELP = Trial(
    "capture_scalar_outputs",
    "torch._dynamo.config.capture_scalar_outputs = True",
    (Target(site="programs.py:62"),),
    BEFORE,
    BEFORE,
    note="no break it targets went away",
)
BY_HAND = Trial(
    "is_compiling() guard",
    "if not torch.compiler.is_compiling():\n    print(...)",
    (Target(site="programs.py:62"),),
    BEFORE,
    None,
    tried=False,
)
CHANGED = Trial(
    "dynamic=True",
    "torch.compile(model, dynamic=True)",
    (),
    BEFORE,
    BEFORE,
    outputs_match=False,
    error="changed outputs: max abs err 1.00e+00",
)
TRIALS = (HELPED, NO_HELP, BY_HAND, CHANGED)


def _advised() -> dynscope.Report:
    """A report recorded from a real compile, with the hand-made trials on it."""
    return dataclasses.replace(dynscope.load(STORED / "print_model.json"), trials=TRIALS)


def test_advice_section_shows_before_after_and_verdicts() -> None:
    text = advice_section(TRIALS)
    rows = text.splitlines()[2:6]
    assert rows[0].split()[:2] == ["1", "reorderable_logging_functions"]
    assert "2 -> 1" in rows[0] and "1 -> 0" in rows[0] and "80% -> 100%" in rows[0] and rows[0].endswith("yes")
    # A remedy that changed nothing shows the unchanged counts and says "no".
    assert "->" not in rows[1] and rows[1].endswith("no")
    assert rows[2].endswith("change your code")
    assert rows[3].endswith("failed")
    # Each remedy's code, whole, to copy; the error and notes in words.
    assert "    torch._dynamo.config.reorderable_logging_functions.add(print)" in text
    assert "    if not torch.compiler.is_compiling():\n        print(...)" in text
    assert "error: changed outputs: max abs err 1.00e+00" in text
    assert "note: no break it targets went away" in text
    assert advice_title(TRIALS) == "What each fix buys (3 remedies tried, 1 helped; 1 code change to make by hand)"


def test_speedup_column_only_when_timed() -> None:
    assert "speedup" not in advice_section(TRIALS)
    timed = dataclasses.replace(
        HELPED,
        before=dataclasses.replace(BEFORE, speedup=1.1),
        after=dataclasses.replace(HELPED.after, speedup=1.4),  # type: ignore[arg-type]
    )
    text = advice_section((timed, NO_HELP))
    assert "speedup" in text.splitlines()[0]
    assert "1.10 -> 1.40x" in text.splitlines()[2]


def test_summary_has_the_section_only_with_trials() -> None:
    rep = _advised()
    assert "What each fix buys" in rep.summary()
    assert advice_section(TRIALS) in rep.summary()
    assert "What each fix buys" not in dataclasses.replace(rep, trials=()).summary()


def test_html_table_best_first_with_failures_shown() -> None:
    page = _advised().to_html()
    start = page.index('<section id="advice">')
    section = page[start : page.index("</section>", start)]
    assert "What each fix buys (3 remedies tried, 1 helped" in section
    order = [section.index(t.remedy) for t in TRIALS]
    assert order == sorted(order), "trials in the report's order: best first"
    assert "<td>2 -&gt; 1</td><td>1 -&gt; 0</td>" in section
    assert '<span class="warn">no</span>' in section and '<span class="warn">failed</span>' in section
    assert "<td>change your code</td>" in section
    assert "changed outputs: max abs err 1.00e+00" in section
    assert 'id="advice"' not in dataclasses.replace(_advised(), trials=()).to_html()


def test_html_escapes_trial_text() -> None:
    hostile = dataclasses.replace(NO_HELP, code="<script>alert(1)</script>", note="<img src=x onerror=alert(1)>")
    page = dataclasses.replace(_advised(), trials=(hostile,)).to_html()
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<img src=x" not in page


def test_trials_survive_json() -> None:
    rep = _advised()
    assert report_from_dict(json.loads(rep.to_json())).trials == TRIALS


# -- the categories' fix text, checked against trials of the remedies it recommends --------

#: Remedies the engine tries (Trial.remedy), each found in a fix text by its own name.
KNOWN_REMEDIES = (
    "capture_scalar_outputs",
    "capture_dynamic_output_shape_ops",
    "trace_autograd_ops",
    "reorderable_logging_functions",
    "mark_dynamic",
    "dynamic=True",
)

#: Category -> the remedies its fix text recommends. Kept by hand so that a new mention of
#: a remedy in _lexicon/break_categories.py fails test_recommendations_are_listed until it is checked here.
RECOMMENDS: dict[str, tuple[str, ...]] = {
    ".item()/scalar output": ("capture_scalar_outputs",),
    "data-dependent guard/shape": ("capture_dynamic_output_shape_ops",),
    "logging/print side effect": ("reorderable_logging_functions",),
    "backward() in compiled code": ("trace_autograd_ops",),
}

#: Categories whose recommended remedy is checked on a program of their own elsewhere (no
#: corpus program breaks in that category only): where.
CHECKED_ELSEWHERE: dict[str, str] = {
    "backward() in compiled code": "tests/capture/test_advice_real.py::test_trace_autograd_ops_removes_the_backward_break",
}

#: Named in a fix text without being recommended ("Drop mark_dynamic").
MENTIONED_ONLY: dict[str, tuple[str, ...]] = {"dynamic-shape constraint violation": ("mark_dynamic",)}

#: (corpus program, remedy) that a trial shows does not help, with the words of the fix
#: text that say so. Each is checked both ways: the trial must still not help (else the
#: caveat is stale) and the category's fix text must carry the caveat.
CAVEATS: dict[tuple[str, str], str] = {
    # PyTorch 2.14 and older reorder plain functions and builtins only: a Logger's method
    # still breaks there (2.15 reorders it; the caveat is checked only where PyTorch says so).
    ("logger_break", "reorderable_logging_functions"): "for a logging.Logger's methods (`log.info(...)`) only on newer PyTorch",
}

#: Caveats that hold only on some releases: (program, remedy) -> PyTorch's own answer to
#: "does the remedy help here?", asked without dynscope.
CAVEAT_HOLDS_UNLESS: dict[tuple[str, str], Callable[[], bool]] = {
    ("logger_break", "reorderable_logging_functions"): logger_methods_reorder,
}


def _category_programs() -> list[tuple[str, str, str]]:
    """(category, corpus program, remedy): every program whose breaks are all of a category
    whose fix text recommends a remedy, with each such remedy."""
    from tests.corpus.markers import markers
    from tests.corpus.programs import PROGRAMS

    out = []
    for p in PROGRAMS:
        cats = {cat for cat, _ in markers(p.code).values()} if p.code else set()
        if len(cats) == 1 and (cat := cats.pop()) in RECOMMENDS:
            out.extend((cat, p.name, remedy) for remedy in RECOMMENDS[cat])
    return out


def test_recommendations_are_listed() -> None:
    from dynscope._lexicon.break_categories import CATEGORIES

    for c in CATEGORIES:
        named = tuple(r for r in KNOWN_REMEDIES if r in c.fix)
        assert named == RECOMMENDS.get(c.name, ()) + MENTIONED_ONLY.get(c.name, ()), c.name
    # Each category with a recommended remedy has corpus programs to try it on.
    assert {cat for cat, _, _ in _category_programs()} | set(CHECKED_ELSEWHERE) == set(RECOMMENDS)


_ADVICE: dict[str, dynscope.Advice] = {}


def _advise(name: str) -> dynscope.Advice:
    """dynscope.advise on a corpus program, once per program for the whole module."""
    from tests.corpus.programs import PROGRAMS

    if name not in _ADVICE:
        program = next(p for p in PROGRAMS if p.name == name)
        model, calls = program.make()
        _ADVICE[name] = dynscope.advise(model, calls=calls)
    return _ADVICE[name]


@pytest.mark.heavy
@pytest.mark.parametrize(("category", "program", "remedy"), _category_programs())
def test_recommended_fix_helps_or_says_it_may_not(category: str, program: str, remedy: str) -> None:
    from dynscope._lexicon.break_categories import fix_for

    advice = _advise(program)
    trials = [t for t in advice.trials if t.remedy == remedy]
    assert trials, f"{remedy} was not tried on {program}: {[t.remedy for t in advice.trials]}"
    t = trials[0]
    assert t.tried and t.after is not None and not t.error, (program, t)
    caveat = CAVEATS.get((program, remedy))
    assert caveat is None or caveat in fix_for(category), f"{category}'s fix text must say {remedy} may not help: {caveat!r}"
    helps_here = CAVEAT_HOLDS_UNLESS.get((program, remedy))
    if caveat is None or (helps_here is not None and helps_here()):
        assert t.helped, f"{category}: the fix text recommends {remedy}, but on {program} it did not help: {t}"
        assert t.after.breaks < t.before.breaks
    else:
        assert not t.helped, f"{remedy} now helps on {program}: drop the caveat {caveat!r} from the fix text"


@pytest.mark.heavy
@pytest.mark.parametrize("program", ["recompile_shape", "recompile_scalar"])
def test_recompile_fix_text_names_remedies_that_help(program: str) -> None:
    """The recompile groups' fix text (mark_dynamic, dynamic=True) is checked the same way."""
    advice = _advise(program)
    named = {r for g in advice.report.recompile_groups() for r in KNOWN_REMEDIES if g.fix and r in g.fix.words}
    assert named, f"{program}: no recompile fix names a remedy: {[g.fix.words for g in advice.report.recompile_groups() if g.fix]}"
    for remedy in named:
        t = next(t for t in advice.trials if t.remedy == remedy)
        assert t.helped and t.after is not None and t.after.recompiles < t.before.recompiles, t


# -- the command line ---------------------------------------------------------------------

PROGRAM = '''
import torch


def scaled(x):
    scale = x.abs().max().item()
    print("scaled")
    return x / scale


def build():
    return scaled, torch.randn(4, 8)
'''


def test_cli_advise_prints_saves_and_renders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dynscope._cli import main

    src = tmp_path / "prog.py"
    src.write_text(PROGRAM, encoding="utf-8")
    js, out = tmp_path / "advised.json", tmp_path / "page"
    assert main(["advise", f"{src}:build", "--json", str(js), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    saved = dynscope.load(js)
    # Exactly what print(advice) shows (Advice.summary()), after the program's own prints.
    summary = dynscope.Advice(report=saved, trials=saved.trials).summary()
    assert f"scaled\n{summary}\nsaved {js}\n" in text
    assert "torch._dynamo.config.capture_scalar_outputs = True" in text
    assert "torch._dynamo.config.reorderable_logging_functions.add(print)" in text
    assert "change your code" in text  # the is_compiling() guard, shown, not run
    assert {t.remedy for t in saved.trials if t.helped} == {"capture_scalar_outputs", "reorderable_logging_functions"}
    assert all(t.after is not None and t.after.breaks < t.before.breaks for t in saved.trials if t.helped)
    assert 'id="advice"' in (out / "index.html").read_text(encoding="utf-8")
    # `dynscope show` prints the trials of the saved report again.
    assert main(["show", str(js)]) == 0
    assert advice_section(saved.trials) in capsys.readouterr().out


def test_cli_advise_bad_target_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from dynscope._cli import main

    assert main(["advise", "no_such_file.py:build"]) == 2
    err = capsys.readouterr().err
    assert err == "dynscope: error: advise: no such file: no_such_file.py\n"


def test_advised_summary_golden(golden) -> None:
    """A report advised on a real compile (scripts/record_golden_reports.py "advised": the
    corpus's .item() break and print break): the summary with "What each fix buys"."""
    from tests.conftest import normalise

    rep = dynscope.load(STORED / "advised.json")
    text = normalise(rep.summary())
    section = text[text.index("What each fix buys (2 remedies tried, 2 helped; 1 code change to make by hand)") :]
    assert "capture_scalar_outputs         programs.py:69  4 -> 3    4 -> 2" in section
    assert [t.remedy for t in rep.trials] == ["capture_scalar_outputs", "reorderable_logging_functions", "is_compiling guard"]
    golden.check("advised_summary.txt", text)
