"""The fix corpus measured (tests/corpus/fix_programs.py): per break category, sites found,
patched, verified and removed; verified patches checked again on inputs fix never saw.
Used by tests/test_fix.py (heavy tier) and benchmarks/fix_corpus.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

import dynscope
from dynscope._capture.fix.source import line_map
from dynscope._capture.fix.verify import compare, counterpart, patched_module, run_compiled, run_eager
from tests.corpus import fix_programs as fp

SOURCE = Path(fp.__file__).read_text(encoding="utf-8").splitlines()


def expected(lineno: int) -> str:
    """The rewrite the corpus marks at a line (``# SITE: ...``)."""
    found = re.search(r"# SITE: (.*)$", SOURCE[lineno - 1])
    if not found:
        raise AssertionError(f"fix_programs.py:{lineno} carries no SITE marker")
    return found.group(1).strip()


def measure() -> dict[str, Any]:
    """Run fix over every corpus program: per category, sites found in user code, patched,
    verified, removed; every patch's rewrite against the SITE marker; verified patches that
    change an output on a second, unseen input; the sites PyTorch breaks at on purpose apart."""
    per: dict[str, dict[str, int]] = {}
    mismatched, changed, on_purpose = [], [], []
    for build in fp.PROGRAMS.values():
        model, inputs = build()
        res = dynscope.fix(model, inputs)
        for p in res.patches:
            row = per.setdefault(p.category, {"found": 0, "patched": 0, "verified": 0, "removed": 0})
            row["found"] += 1
            row["patched"] += 1
            row["verified"] += p.verified
            row["removed"] += p.verified and p.breaks_after == 0
            want, first = expected(p.lineno), p.rewrite.split(", then ")[0]
            if (p.verified or want != "none") and not want.startswith(first):
                mismatched.append((p.site, p.rewrite, want))
            if not p.verified and not p.why_not:
                mismatched.append((p.site, p.rewrite, "an unverified patch that does not say why"))
            if not p.assumes:
                mismatched.append((p.site, p.rewrite, "a patch that names no assumption"))
            if p.verified and not _same_on_new_input(build, p):
                changed.append(p.site)
        for u in res.unpatched:
            want = expected(int(u.site.rsplit(":", 1)[1]))
            if want == "on purpose":  # torch.optim's own breaks: no change in user code removes them
                on_purpose.append(u.site)
                continue
            row = per.setdefault(u.category, {"found": 0, "patched": 0, "verified": 0, "removed": 0})
            row["found"] += 1
            if want != "none":
                mismatched.append((u.site, "no patch", want))
    return {"per": per, "mismatched": mismatched, "changed": changed, "on_purpose": on_purpose}


def _same_on_new_input(build: Any, p: dynscope.Patch) -> bool:
    """The patched program compiled, on inputs of another draw, against the unpatched eager one."""
    model, inputs = build()
    args = inputs if isinstance(inputs, tuple) else (inputs,)
    fresh = tuple(a + torch.randn_like(a) * 0.5 if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                  for a in args)
    calls = [(fresh, {})]
    new = apply_diff(Path(p.filename).read_text(encoding="utf-8"), p.diff)
    with patched_module(p.filename, new) as module:
        # Found by its code, as fix finds it: the lines of its definitions in the patched text.
        patched, why = counterpart(model, p.filename, module, line_map(diff_spans(p.diff)))
        assert patched is not None, why
        return compare(run_eager(model, calls), run_compiled(patched, calls)).outputs_matched


def diff_spans(diff: str) -> list[tuple[int, int, int]]:
    """The changes of a unified diff as ``line_map`` takes them: (first old line, last old
    line, lines put in their place), one per run of removed and added lines."""
    spans: list[tuple[int, int, int]] = []
    for hunk in re.finditer(r"@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@\n(.*?)(?=^@@|\Z)", diff, re.S | re.M):
        line = int(hunk.group(1))
        first, removed, added = 0, 0, 0
        for ln in [*hunk.group(2).splitlines(), " "]:
            if ln.startswith("-"):
                first = first or line
                removed += 1
                line += 1
            elif ln.startswith("+"):
                first = first or line
                added += 1
            else:
                if first:
                    spans.append((first, first + removed - 1, added))
                first, removed, added = 0, 0, 0
                line += 1
    return spans


def apply_diff(old: str, diff: str) -> str:
    """A unified diff as fix writes it, applied to ``old``."""
    lines = old.splitlines(keepends=True)
    out: list[str] = []
    i = 0
    for hunk in re.finditer(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@\n(.*?)(?=^@@|\Z)", diff, re.S | re.M):
        start = int(hunk.group(1)) - 1
        out += lines[i:start]
        i = start
        for ln in hunk.group(3).splitlines(keepends=True):
            if ln.startswith("+"):
                out.append(ln[1:])
            elif ln.startswith("-"):
                i += 1
            else:
                out.append(lines[i])
                i += 1
    return "".join(out + lines[i:])
