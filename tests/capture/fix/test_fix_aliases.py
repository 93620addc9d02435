"""A file that imports torch under another name (``import torch as th``): fix's rewrites are
made with the alias read as torch and written back with the file's own name
(dynscope/_capture/fix/aliases.py). On source text in the fast tier; live on
tests/corpus/fix_aliased.py in the heavy tier."""

from __future__ import annotations

import pytest

import dynscope
from dynscope._capture.fix import aliases
from dynscope._capture.fix.branches import CONDITIONAL
from dynscope._capture.fix.rewrites import TENSOR, candidates
from dynscope._lexicon.break_categories import BRANCH, SCALAR
from tests.corpus import fix_aliased as fa

ALIASED = (
    "import torch as th\n"
    "import torch.nn.functional as F\n"
    "\n"
    "\n"
    "def f(x, m, cfg):\n"
    "    n = int(m.sum())  # the count\n"
    "    note = 'torch.where is spelled th.where here'  # a string and this comment stay: torch\n"
    "    y = cfg.th * x.sum() / n\n"
    "    return th.where(x > 0, y, F.relu(x)) if n > 0 else x\n"
)


def _made(source: str, line: int, category: str) -> dict[str, str]:
    found, why = candidates(source, line, category)
    assert found, why
    return {rw.name: rw.source for rw in found}


def test_rewrites_in_a_file_that_imports_torch_as_th_write_th() -> None:
    assert aliases.torch_alias(ALIASED) == "th"
    kept = _made(ALIASED, 6, SCALAR)[TENSOR]
    assert "    n = m.sum().detach().long()  # the count\n" in kept
    assert kept.replace("    n = m.sum().detach().long()  # the count\n", "    n = int(m.sum())  # the count\n") == ALIASED
    where = _made(ALIASED, 9, BRANCH)[CONDITIONAL]
    assert "    return th.where(n > 0, th.where(x > 0, y, F.relu(x)), x)\n" in where, where
    # Only the rewritten line changed: strings, comments and attributes named th are the file's.
    changed = [ln for ln, old in zip(where.splitlines(), ALIASED.splitlines(), strict=True) if ln != old]
    assert len(changed) == 1 and "torch" not in changed[0]


@pytest.mark.parametrize("source", [
    ALIASED.replace("import torch as th\n", "import torch as th\nimport torch\n"),  # torch by its own name too
    ALIASED.replace("import torch as th\n", "import torch as th\nimport torch as pt\n"),  # two aliases
    ALIASED.replace("th.where(x > 0", "torch.where(x > 0"),  # torch read where the file never binds it
])
def test_no_alias_is_read_where_the_file_names_torch_otherwise(source: str) -> None:
    assert aliases.torch_alias(source) is None


@pytest.mark.heavy
def test_an_aliased_file_is_patched_live_and_verified() -> None:
    model, inputs = fa.PROGRAMS["denoise_step"]()
    res = dynscope.fix(model, inputs)
    (p,) = res.patches
    assert p.verified and p.breaks_after == 0 and p.gradients_matched, p.why_not
    assert "+        alpha_prev = th.where(prev_t >= 0," in p.diff and "torch." not in p.diff.replace("torch.where, then", "")
    assert res.breaks_after == 0
