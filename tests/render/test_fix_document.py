"""``dynscope.fix``'s result drawn from one document (dynscope/_render/fix.py, issue 46): the
parts built once as sections, in order, and the text and the page each showing every one of
them with the same words. On results made as plain data (the fix itself is tested live in
tests/capture/fix)."""

from __future__ import annotations

import html

from dynscope import FixResult, Patch, Unpatched
from dynscope._render.blocks import Group, Table
from dynscope._render.fix import fix_document, fix_html, fix_text

DIFF = "--- a/m.py\n+++ b/m.py\n@@ -3 +3 @@\n-    print(x)\n+    if not torch.compiler.is_compiling():\n+        print(x)\n"

VERIFIED = Patch(site="m.py:3", filename="/p/m.py", lineno=3, category="logging/print side effect",
                 rewrite="guard side effect", diff=DIFF, verified=True, assumes="the print has no effect the program needs",
                 breaks_before=1, breaks_after=0, program_breaks_before=2, program_breaks_after=1, graphs_before=3,
                 graphs_after=2, coverage_before=0.5, coverage_after=0.75, outputs_matched=True)
PROPOSED = Patch(site="m.py:9", filename="/p/m.py", lineno=9, category="data-dependent branch",
                 rewrite="branch to torch.where", diff=DIFF.replace("@@ -3", "@@ -9"), verified=False,
                 why_not="the outputs differ <b>from</b> eager", instead="compile the step instead")
LEFT = Unpatched(site="lib.py:40", category=".item()/scalar output", owner="transformers",
                 why="no patch: a library's code & not yours")
RESULT = FixResult(title="Net", patches=(PROPOSED, VERIFIED), unpatched=(LEFT,), breaks_before=4, breaks_after=3,
                   written=("/p/m.py",), backups=("/p/m.py.dynscope-backup",), note="wrote 1 file",
                   blocked="torch.compile fails at m.py:12 (KeyError)")


def test_the_parts_are_built_once_in_order() -> None:
    doc = fix_document(RESULT)
    assert [s.key for s in doc] == ["head", "blocked", "patches", "left", "written", "note"]
    assert doc[0].title == "dynscope fix: Net"
    assert doc[0].lead == ("3 break sites, 4 break events; 1 verified patch, 1 proposed only; "
                           "with every verified patch: 3 break events")
    assert doc[1].tone == "bad"
    groups = [b for b in doc[2].blocks if isinstance(b, Group)]
    assert [g.title for g in groups] == ["m.py:3  logging/print side effect  [guard side effect]",
                                        "m.py:9  data-dependent branch  [branch to torch.where]"], "verified first"
    (table,) = [b for b in doc[3].blocks if isinstance(b, Table)]
    assert table.rows == (("lib.py:40", ".item()/scalar output", "transformers", "no patch: a library's code & not yours"),)
    empty = fix_document(FixResult(title=""))
    assert [s.key for s in empty] == ["head"] and empty[0].title == "dynscope fix: program"


def test_text_and_page_say_every_part_with_the_same_words() -> None:
    text, page = fix_text(RESULT), fix_html(RESULT)
    unescaped = html.unescape(page)
    assert text.startswith("dynscope fix: Net\n3 break sites, 4 break events")
    for words in ("Blocked: torch.compile fails at m.py:12 (KeyError)", "Written: /p/m.py (backups: /p/m.py.dynscope-backup)",
                  "Note: wrote 1 file", "lib.py:40  .item()/scalar output  (transformers): no patch: a library's code",
                  "    assumes: the print has no effect the program needs", "    instead: compile the step instead",
                  "    proposed, not verified: the outputs differ <b>from</b> eager", "    +        print(x)"):
        assert words in text, words
    for words in ("torch.compile fails at m.py:12 (KeyError)", "/p/m.py (backups: /p/m.py.dynscope-backup)",
                  "wrote 1 file", "no patch: a library's code & not yours", "the print has no effect the program needs",
                  "compile the step instead", "proposed, not verified: the outputs differ <b>from</b> eager",
                  "+        print(x)", "breaks at the site 1 -> 0; program 2 -> 1 breaks, 3 -> 2 graphs, coverage 50% -> 75%"):
        assert words in unescaped, words
        assert words in text or words.replace("\n", " ") in text, words
    # Hostile words from a program are escaped on the page, never markup.
    assert "<b>from</b>" not in page and "&lt;b&gt;from&lt;/b&gt;" in page
    assert page.count("<h2>") == 5 and page.index("<h2>Blocked</h2>") < page.index("<h2>Patches</h2>")
    # Nothing proposed, nothing left: the text is the head alone.
    assert fix_text(FixResult(title="t", breaks_before=0)) == (
        "dynscope fix: t\n0 break sites, 0 break events; 0 verified patches, 0 proposed only\n")
