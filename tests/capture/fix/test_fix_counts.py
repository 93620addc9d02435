"""Counts and optional masks (issue "Fix what we have never seen"): ``bincount`` at a known
size as a scatter (fix/rewrites.py), a count read back as an int only to divide by kept a
tensor (fix/host.py), and ``if mask is not None and <tensor test>`` split into Python's
``if`` around a ``torch.where`` (fix/branches.py). Each on source text, where it applies
and where it must refuse, in the fast tier; each live on tests/corpus/fix_counts.py in the
heavy tier, verified where outputs and gradients equal the unpatched eager run's."""

from __future__ import annotations

from pathlib import Path

import pytest

import dynscope
from dynscope._capture.fix import checks, host, numbers, sizes, topk
from dynscope._capture.fix.branches import ELEMENTWISE, WHERE
from dynscope._capture.fix.rewrites import COUNT, GUARD, PLACED, RANDINT, TENSOR, TENSOR_0D, candidates
from dynscope._lexicon.break_categories import BRANCH, DYNAMIC_SHAPE, OTHER, SCALAR
from tests.corpus import fix_counts as fc

HEAD = "import torch\n\n\n"


def _made(body: str, line: int, category: str) -> dict[str, str]:
    found, _ = candidates(HEAD + body, line + HEAD.count("\n"), category)
    return {rw.name: "".join(rw.replacement) for rw in found}


def test_bincount_at_a_known_size_is_a_scatter_of_ones() -> None:
    body = "def deg(col, n):\n    d = torch.bincount(col, minlength=n)\n    return d\n"
    assert _made(body, 2, DYNAMIC_SHAPE)[COUNT] == (
        "    d = torch.zeros(n, dtype=torch.long, device=col.device).scatter_add(0, col, torch.ones_like(col))\n")
    method = body.replace("torch.bincount(col, minlength=n)", "col.bincount(minlength=n)")
    assert "scatter_add(0, col, torch.ones_like(col))" in _made(method, 2, DYNAMIC_SHAPE)[COUNT]
    # No minlength: the size is the largest value's; weights: another dtype. Neither is rewritten.
    assert COUNT not in _made(body.replace(", minlength=n", ""), 2, DYNAMIC_SHAPE)
    assert COUNT not in _made(body.replace("minlength=n", "weights=w, minlength=n"), 2, DYNAMIC_SHAPE)


AVERAGED = """\
def loss(losses, targets, pad):
    n = int((targets != pad).sum())  # tokens
    total = losses.sum()
    return total / max(n, 1)
"""


def test_a_count_only_bounded_and_divided_by_stays_a_tensor() -> None:
    assert _made(AVERAGED, 2, SCALAR)[host.COUNT_KEPT] == (
        "    n = (targets != pad).sum().detach()\n"
        "    total = losses.sum()\n"
        "    return total / n.clamp(min=1)\n")
    item = AVERAGED.replace("int((targets != pad).sum())", "(targets != pad).sum().item()")
    assert "    return total / n.clamp(min=1)\n" in _made(item, 2, SCALAR)[host.COUNT_KEPT]
    assert "n.clamp(max=8)" in _made(AVERAGED.replace("max(n, 1)", "min(8, n)"), 2, SCALAR)[host.COUNT_KEPT]


@pytest.mark.parametrize(("old", "new"), [
    ("    return total / max(n, 1)\n", "    return total / n\n"),  # nothing bounds it: the plain rewrite's case
    ("    return total / max(n, 1)\n", "    for _ in range(max(n, 1)):\n        total = total * 2\n    return total\n"),
    ("int((targets != pad).sum())", "int(targets.shape[0])"),  # not a count of a tensor
])
def test_a_count_used_otherwise_is_not_kept_a_tensor_this_way(old: str, new: str) -> None:
    assert host.COUNT_KEPT not in _made(AVERAGED.replace(old, new), 2, SCALAR)


def test_a_count_read_past_its_block_stays_a_number() -> None:
    # Returned after the block that divides by it: the caller may want the int.
    body = ("def loss(losses, targets, pad):\n    if pad:\n        n = int((targets != pad).sum())\n"
            "        total = losses.sum() / max(n, 1)\n    return total, n\n")
    assert host.COUNT_KEPT not in _made(body, 3, SCALAR)
    assert host.COUNT_KEPT in _made(body.replace("return total, n", "return total"), 3, SCALAR)


def test_an_optional_mask_keeps_its_none_test_and_the_tensor_test_becomes_a_where() -> None:
    body = ("def attend(scores, mask):\n    if mask is not None and not mask.all():\n"
            "        scores = scores.masked_fill(~mask, -1e9)\n    return scores\n")
    (rw,) = candidates(HEAD + body, 2 + HEAD.count("\n"), BRANCH)[0]
    assert rw.name == WHERE and "".join(rw.replacement) == (
        "    if mask is not None:\n"
        "        scores = torch.where(torch.logical_not(mask.all()), scores.masked_fill(~mask, -1e9), scores)\n")
    assert rw.note.endswith("the Python test before `and` stays an `if` around it")


def test_a_python_test_and_a_tensor_test_with_an_else_keep_the_else_for_the_python_test() -> None:
    body = ("def head(self, y):\n    if self.cfg.mode is Mode.TRAIN and y.mean() > 0:\n        y = y * 2\n"
            "    else:\n        y = y - 1  # the other branch\n    return y\n")
    (rw,) = candidates(HEAD + body, 2 + HEAD.count("\n"), BRANCH)[0]
    assert rw.name == WHERE and "".join(rw.replacement) == (
        "    if self.cfg.mode is Mode.TRAIN:\n"
        "        y = torch.where(y.mean() > 0, y * 2, y - 1)\n"
        "    else:\n"
        "        y = y - 1  # the other branch\n")
    assert "the else branch is also kept whole" in rw.note
    # An elif chain is not an else to repeat: no split.
    chain = body.replace("    else:\n        y = y - 1", "    elif y.sum() > 1:\n        y = y - 1\n    else:\n        y = y + 1")
    assert all("if self.cfg.mode is Mode.TRAIN:\n" not in "".join(r.replacement)
               for r in candidates(HEAD + chain, 2 + HEAD.count("\n"), BRANCH)[0])


def test_a_check_that_warns_then_fixes_keeps_its_warning_eager_and_fixes_by_where() -> None:
    body = ("def scale(x, warnings):\n    s = x.std(0)\n    if (s < 1e-2).any():\n"
            "        warnings.warn(\"constant\")\n        s = s.clamp(min=1e-2)\n    return x / s\n")
    assert _made(body, 3, BRANCH)[checks.GUARD_CHECK] == (
        "    if not torch.compiler.is_compiling():\n"
        "        if (s < 1e-2).any():\n"
        "            warnings.warn(\"constant\")\n"
        "    s = torch.where((s < 0.01).any(), s.clamp(min=1e-2), s)\n")
    # A body that assigns before it reports, or does something else, is not this shape.
    assert checks.GUARD_CHECK not in _made(body.replace("        warnings.warn(\"constant\")\n", "")
                                           .replace("    return", "        warnings.warn(\"c\")\n    return"), 3, BRANCH)


LOOP = """\
def targets(q, done, r):
    for i in range(len(done)):
        if done[i]:
            q[i] = r[i] * 0.5
    return q
"""


def test_an_if_per_element_becomes_one_where_over_the_rows_in_place() -> None:
    assert _made(LOOP, 3, BRANCH)[ELEMENTWISE] == (
        "    q.copy_(torch.where((done).reshape((-1,) + (1,) * (q.dim() - 1)), r * 0.5, q))\n")
    for old, new in [("q[i] = r[i] * 0.5", "q[i] = r[i - 1]"),  # another row read
                     ("q[i] = r[i] * 0.5", "q[i] = r[i] * i"),  # the index as a number
                     ("if done[i]:", "if done[i]:\n            print(i)"),  # more in the body
                     ("range(len(done))", "done")]:  # not a range
        assert ELEMENTWISE not in _made(LOOP.replace(old, new), 3, BRANCH), old


PRESENT = """\
def weights(label, n_classes):
    count = torch.bincount(label)
    count = count[count.nonzero()].squeeze()
    sizes = torch.zeros(n_classes).long()
    sizes[torch.unique(label)] = count
    return sizes
"""


def test_the_counts_of_present_values_placed_back_are_the_counts_of_every_value() -> None:
    assert _made(PRESENT, 2, DYNAMIC_SHAPE)[PLACED] == (
        "    sizes = torch.zeros(n_classes).long()\n"
        "    sizes = sizes.scatter_add(0, label, torch.ones_like(label, dtype=sizes.dtype))\n")
    also = PRESENT.replace("count[count.nonzero()].squeeze()", "count[count > 0]").replace("torch.unique(label)", "label.unique()")
    assert PLACED in _made(also, 2, DYNAMIC_SHAPE)


@pytest.mark.parametrize(("old", "new"), [
    ("    return sizes\n", "    return sizes, count\n"),  # the present counts are read after
    ("torch.zeros(n_classes).long()", "torch.ones(n_classes).long()"),  # not zeros: the absent classes keep their value
    ("sizes[torch.unique(label)]", "sizes[torch.unique(label[1:])]"),  # placed at another tensor's values
    ("count = count[count.nonzero()].squeeze()", "count = count[count > 1]"),  # not the nonzero entries
    ("    sizes = torch.zeros(n_classes).long()\n", "    sizes = torch.zeros(n_classes).long()\n    print(sizes)\n"),
])
def test_counts_placed_back_are_refused_where_they_are_not_every_value_s_count(old: str, new: str) -> None:
    assert PLACED not in _made(PRESENT.replace(old, new), 2, DYNAMIC_SHAPE), old


def _fix(name: str) -> dynscope.FixResult:
    model, inputs = fc.PROGRAMS[name]()
    return dynscope.fix(model, inputs if isinstance(inputs, tuple) else (inputs,))


@pytest.mark.heavy
@pytest.mark.parametrize(("name", "rewrite"), [
    ("mean_aggregation", COUNT), ("token_averaged_loss", host.COUNT_KEPT), ("optional_mask_attention", WHERE),
    ("mask_count_loss", TENSOR_0D), ("accepted_step", WHERE), ("node_class_weights", PLACED),
])
def test_counts_and_optional_masks_are_verified_live(name: str, rewrite: str) -> None:
    res = _fix(name)
    (p,) = res.patches
    assert p.rewrite == rewrite and p.verified and p.breaks_after == 0 and p.outputs_matched, p.why_not
    assert p.gradients_matched is True and res.breaks_after == 0


@pytest.mark.heavy
def test_a_warning_that_fixes_is_proposed_and_a_loop_per_row_verified_live() -> None:
    res = _fix("scaled_features")
    # The floor is a where on the test; the warning, which the run issued, would be dropped under
    # compile: the patch keeps the outputs but is proposed, for that reason.
    # The warning's own break gets its guard, proposed for the same reason.
    lines = Path(fc.__file__).read_text(encoding="utf-8").splitlines()
    test = next(i for i, ln in enumerate(lines, 1) if "if (scale < 1e-2).any():" in ln)
    assert [(p.lineno, p.rewrite) for p in res.patches] == [(test, checks.GUARD_CHECK), (test + 1, GUARD)]
    for p in res.patches:
        assert not p.verified
        assert p.why_not.startswith(f"the warning at line {test + 1} was issued in the run: under torch.compile it never is")
    (p,) = _fix("bootstrapped_targets").patches
    assert p.rewrite == ELEMENTWISE and p.verified and p.breaks_after == 0 and p.outputs_matched


@pytest.mark.heavy
def test_a_count_that_sizes_a_range_is_not_verified() -> None:
    (p,) = _fix("counted_range").patches
    assert not p.verified and "the break is still there" in p.why_not


@pytest.mark.parametrize("use", [
    "    return x.view(4, n, -1)\n", "    return torch.arange(n)\n", "    return x[:n]\n",
    "    return [x[i] for i in range(n)]\n", "    return x.new_zeros(n + 1, 3)\n",
])
def test_a_number_read_later_as_a_size_is_not_kept_a_tensor(use: str) -> None:
    body = "def f(x, t):\n    n = t.sum().item() - 2\n" + use
    found, why = candidates(HEAD + body, 2 + HEAD.count("\n"), SCALAR)
    assert TENSOR not in {rw.name for rw in found}
    assert "`n` is read as a size at line" in why and "the break would move to that line" in why, why


def test_a_number_read_later_only_in_arithmetic_is_kept_a_tensor() -> None:
    body = "def f(x, t):\n    n = t.sum().item() - 2\n    return x * n + x.view(4, -1).sum()\n"
    assert _made(body, 2, SCALAR)[TENSOR] == "    n = t.sum().detach() - 2\n"


def test_random_into_a_fresh_tensor_is_randint() -> None:
    body = "def f(ws):\n    c = torch.empty([], dtype=torch.int64, device=ws.device).random_(1, ws.shape[1])\n    return c\n"
    assert _made(body, 2, OTHER)[RANDINT] == (
        "    c = torch.randint(1, ws.shape[1], [], dtype=torch.int64, device=ws.device)\n")
    assert _made(body.replace("random_(1, ws.shape[1])", "random_(5)"), 2, OTHER)[RANDINT].startswith(
        "    c = torch.randint(0, 5, [],")
    # a float tensor's random_ draws floats (randint's default dtype would not); a tensor of the
    # program's own keeps its other values: neither is rewritten
    for other in ("torch.empty([], device=ws.device)", "ws"):
        assert RANDINT not in _made(body.replace("torch.empty([], dtype=torch.int64, device=ws.device)", other), 2, OTHER)


def test_a_write_past_a_tensor_cutoff_is_a_where_over_the_positions() -> None:
    body = "def f(ws, new, c):\n    ws[:, c:] = new[:, c:]\n    return ws\n"
    assert _made(body, 2, SCALAR)[numbers.SLICED] == (
        "    ws.copy_(torch.where(torch.arange(ws.shape[1], device=ws.device).view(-1, *[1] * (ws.dim() - 2)) >= c, "
        "new, ws))\n")
    upto = _made("def f(x, c):\n    x[:c] = 0.0\n    return x\n", 2, SCALAR)[numbers.SLICED]
    assert "torch.arange(x.shape[0], device=x.device).view(-1, *[1] * (x.dim() - 1)) < c, 0.0, x" in upto
    for other in ("ws[:, c:] = new[:, :c]", "ws[:, c:] = new", "ws[:, -c:] = new[:, -c:]", "ws[:, c:2] = new[:, c:2]",
                  "ws[:, 1:] = new[:, 1:]", "ws[c:, c:] = new[c:, c:]"):
        assert numbers.SLICED not in _made(body.replace("ws[:, c:] = new[:, c:]", other), 2, SCALAR), other


@pytest.mark.heavy
def test_a_drawn_cutoff_and_the_write_past_it_are_verified_live() -> None:
    res = _fix("style_mixing")
    assert sorted(p.rewrite for p in res.patches) == sorted([RANDINT, numbers.SLICED]), res.patches
    assert all(p.verified and p.breaks_after == 0 and p.gradients_matched for p in res.patches), res.patches
    assert res.breaks_after == 0 and res.outputs_matched_after


def test_a_list_of_tensors_indexed_by_a_tensor_is_stacked_and_gathered() -> None:
    body = ("def f(label, losses):\n    perms = [label[..., [1, 0]], label]\n"
            "    best = losses.argmin()\n    return perms[best]\n")
    assert _made(body, 4, SCALAR)[numbers.INDEX] == "    return torch.stack(perms)[best.reshape(1)][0]\n"
    assert _made(body.replace("    perms = [label[..., [1, 0]], label]\n", "    perms = make(label)\n"), 4, SCALAR)[
        numbers.INDEX] == "    return perms[best.reshape(1)][0]\n", "a value not known to be a list: gathered as a tensor"


@pytest.mark.heavy
def test_the_labels_of_the_best_permutation_are_gathered_live() -> None:
    (p,) = _fix("pit_labels").patches
    assert p.rewrite == numbers.INDEX and p.verified and p.breaks_after == 0 and p.gradients_matched, p


def test_a_sum_per_element_of_a_prefix_is_the_prefix_sums_gathered() -> None:
    body = "def f(w, counts, k):\n    return torch.Tensor([w[: min(int(n), k)].sum() for n in counts])\n"
    assert _made(body, 2, SCALAR)[numbers.PREFIX] == (
        "    return torch.cat([w.new_zeros(1), w.cumsum(0)])[counts.long().clamp(max=k)]\n")
    for other in ("w[: min(int(n), k)].mean()", "w[1: int(n)].sum()", "w[: g(n)].sum()", "w[n][: k].sum()"):
        assert numbers.PREFIX not in _made(body.replace("w[: min(int(n), k)].sum()", other), 2, SCALAR), other


@pytest.mark.heavy
def test_the_ideal_dcg_is_gathered_from_prefix_sums_live() -> None:
    (p,) = [p for p in _fix("ideal_dcg").patches if p.verified]
    assert p.rewrite == numbers.PREFIX and p.breaks_after == 0, p


HARDEST = """\
def balanced(loss, positive, ratio):
    n_pos = int(positive.sum())
    n_neg = min(int((~positive).sum()), int(n_pos * ratio))
    # the hardest negatives
    hardest, _ = torch.topk((loss * ~positive).flatten(), n_neg)
    return ((loss * positive).sum() + hardest.sum()) / (n_pos + n_neg + 1e-6)
"""


def test_a_top_k_by_a_count_whose_values_are_summed_is_a_zeroed_sort() -> None:
    at_topk = HARDEST.replace("int(n_pos * ratio))\n", "n_pos * 3)\n").replace(
        "torch.topk((loss * ~positive).flatten(), n_neg)", "torch.topk((loss * ~positive).flatten(), int(n_neg))")
    assert _made(at_topk, 5, SCALAR)[topk.TOPK_PREFIX] == (
        "    hardest = torch.sort((loss * ~positive).flatten(), dim=-1, descending=True).values\n"
        "    hardest = torch.where(torch.arange(hardest.shape[-1], device=hardest.device) < "
        "torch.as_tensor(n_neg).detach().long(), hardest, torch.zeros_like(hardest))\n")
    # At the count: the count kept a tensor (min as torch.minimum) through to the topk, the comment kept.
    assert _made(HARDEST, 3, SCALAR)[topk.TOPK_PREFIX] == (
        "    n_neg = torch.minimum((~positive).sum().detach().long(), torch.as_tensor(n_pos * ratio).detach().long())\n"
        "    # the hardest negatives\n"
        "    hardest = torch.sort((loss * ~positive).flatten(), dim=-1, descending=True).values\n"
        "    hardest = torch.where(torch.arange(hardest.shape[-1], device=hardest.device) < n_neg, hardest, "
        "torch.zeros_like(hardest))\n")
    smallest = HARDEST.replace("flatten(), n_neg)", "flatten(), n_neg, largest=False)")
    assert "descending=False" in _made(smallest, 3, SCALAR)[topk.TOPK_PREFIX]
    values = HARDEST.replace("hardest, _ = torch.topk((loss * ~positive).flatten(), n_neg)",
                             "hardest = (loss * ~positive).flatten().topk(n_neg).values")
    assert "hardest = torch.sort((loss * ~positive).flatten()" in _made(values, 3, SCALAR)[topk.TOPK_PREFIX]


@pytest.mark.parametrize(("old", "new"), [
    ("hardest.sum()) /", "hardest.mean()) /"),  # a mean is over k values: not the zeroed sort's
    ("hardest.sum()) /", "hardest[0]) /"),
    ("hardest, _ = torch", "hardest, where = torch"),  # the indices are read later
    ("flatten(), n_neg)", "flatten(), n_neg, dim=0)"),
    ("flatten(), n_neg)", "flatten(), 8)"),  # a literal k reads nothing from the data
])
def test_a_top_k_read_otherwise_is_not_a_zeroed_sort(old: str, new: str) -> None:
    changed = HARDEST.replace(old, new)
    if "where" in new:
        changed = changed.replace("(n_pos + n_neg + 1e-6)", "(n_pos + n_neg + 1e-6), where")
    assert topk.TOPK_PREFIX not in _made(changed, 3, SCALAR), new
    assert topk.TOPK_PREFIX not in _made(changed, 5, SCALAR), new


@pytest.mark.heavy
def test_hard_negatives_by_a_count_are_verified_live_the_count_on_top_of_the_topk() -> None:
    res = _fix("hard_negative_loss")
    by_rewrite = {p.rewrite: p for p in res.patches}
    assert set(by_rewrite) == {TENSOR, topk.TOPK_PREFIX}, res.patches
    assert all(p.verified and p.breaks_after == 0 and p.gradients_matched for p in res.patches), res.patches
    # Alone the count kept a tensor moves its break to the topk's line: it is verified with that patch, said so.
    assert "verified applied with the patch at fix_counts.py:" in by_rewrite[TENSOR].assumes
    assert res.breaks_after == 0 and res.outputs_matched_after is True


def test_an_arange_over_sizes_read_back_is_a_range() -> None:
    body = "def axes(x):\n    ax: list[int] = torch.arange(2, len(x.shape)).tolist()\n    return ax\n"
    assert _made(body, 2, SCALAR)[sizes.RANGE] == "    ax: list[int] = list(range(2, len(x.shape)))\n"
    assert _made(body.replace("2, len(x.shape)", "x.dim()"), 2, SCALAR)[sizes.RANGE] == (
        "    ax: list[int] = list(range(x.dim()))\n")
    # A tensor op among the arguments, a dtype, or no tolist(): a tensor's values, not sizes.
    for other in ("torch.arange(2, int(x.sum())).tolist()", "torch.arange(2, 5, dtype=torch.float).tolist()",
                  "torch.arange(2, len(x.shape))"):
        assert sizes.RANGE not in _made(body.replace("torch.arange(2, len(x.shape)).tolist()", other), 2, SCALAR), other


def test_the_ends_of_runs_of_equal_crop_sizes_are_computed_in_python() -> None:
    body = ("def f(crops):\n    ends = torch.cumsum(torch.unique_consecutive(torch.tensor([c.shape[-1] for c in crops]), "
            "return_counts=True)[1], 0)\n    return ends\n")
    assert _made(body, 2, DYNAMIC_SHAPE)[sizes.RUN_ENDS] == (
        "    _sizes = [c.shape[-1] for c in crops]\n"
        "    ends = [i + 1 for i in range(len(_sizes)) if i + 1 == len(_sizes) or _sizes[i + 1] != _sizes[i]]\n")
    # Values of a tensor are not sizes; nor is a cumulative sum along another dimension.
    for old, new in (("c.shape[-1]", "c.sum()"), ("[1], 0)", "[1], 1)"), ("return_counts=True", "return_inverse=True")):
        assert sizes.RUN_ENDS not in _made(body.replace(old, new), 2, DYNAMIC_SHAPE), new


@pytest.mark.heavy
@pytest.mark.parametrize(("name", "rewrite"), [("spatial_dice", sizes.RANGE), ("multi_crop", sizes.RUN_ENDS)])
def test_torch_over_python_sizes_is_computed_in_python_live(name: str, rewrite: str) -> None:
    res = _fix(name)
    (p,) = res.patches
    assert p.rewrite == rewrite and p.verified and p.breaks_after == 0 and p.gradients_matched, p.why_not
    # The multi-crop loop's slices at the ends broke only because the ends were a tensor's.
    assert all(u.gone_with == (p.site,) for u in res.unpatched) and res.breaks_after == 0


@pytest.mark.heavy
def test_a_break_the_first_one_hid_is_followed_into_one_patch_live() -> None:
    # The first sampling loop's .item() hides the second loop from torch.compile: alone, its fix
    # leaves the program breaking as often (the second loop breaks now). The chain - the index
    # kept a 0-dim tensor, its use gathered, then the second loop the same way - is one patch.
    res = _fix("sampled_negatives")
    (p,) = res.patches
    assert p.rewrite == f"{TENSOR_0D}, then {numbers.INDEX}", p.rewrite
    assert p.verified and p.breaks_after == 0 and p.gradients_matched, p.why_not
    assert p.program_breaks_before == 1 and p.program_breaks_after == 0
    # Both loops rewritten, each use of the drawn index gathered.
    assert p.diff.count(".detach().reshape(())") == 2 and p.diff.count("[pick.reshape(1)][0]") == 2, p.diff
    # Each rewrite's assumption said once.
    assert p.assumes.count("a negative one counts from the end as before") == 1, p.assumes
